/* distrib_mpi.c — distrib.h over MPI (built when CMake finds MPI; distrib_none.c otherwise).
 *
 * Scheduling: rank 0 runs jobs itself, and a second thread of rank 0 answers the other ranks.
 * A worker sends "done with job j, here is its result (or its error); what next?" and gets back
 * the next job number, or -1.  That thread polls with MPI_Iprobe and sleeps 1 ms between polls:
 * a blocking receive would spin a core that rank 0's own job needs.
 *
 * Heartbeat: a rank that stops answering (SIGSTOP, a hung node, a lost network) must not hang
 * the job forever.  Every rank has a heartbeat thread that sends a small TAG_BEAT message every
 * few seconds (to rank 0; rank 0's to every other rank) whenever no other thread of it is inside
 * MPI.  Every wait polls instead of blocking (a barrier, a worker's wait for its next job, rank
 * 0's wait for the workers) and counts how long each rank it waits on has been silent: no beat
 * and no message.  Past LMP_MPI_TIMEOUT seconds (default 120; 0: wait forever) the waiting rank
 * prints which rank is silent and where, and calls MPI_Abort: the launcher ends every rank.  What
 * is finished is already in the reports (compare and analyze rewrite them after every variant
 * and unit), so --resume continues from there.  A rank that computes (a long reference pass)
 * still beats: its heartbeat thread runs beside the computation.
 *
 * MPI_THREAD_SERIALIZED is enough: every MPI call, from any thread, is made under one mutex. */
#include "distrib/distrib.h"

#include <mpi.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/error.h"

struct lmp_dist {
    int rank, size;
    pthread_mutex_t mpi;       /* held around every MPI call (MPI_THREAD_SERIALIZED) */
    double timeout_s;          /* LMP_MPI_TIMEOUT: silence after which a rank is given up; 0: never */
    pthread_t beater;
    int beating;               /* the heartbeat thread runs */
    volatile int stop_beating;
};

enum { TAG_UP = 1, TAG_DOWN = 2, TAG_BEAT = 3 }; /* worker -> rank 0, rank 0 -> worker, both ways */
#define DEFAULT_TIMEOUT_S 120.0
enum { UP_ASK = 0, UP_RESULT = 1, UP_FAILED = 2 };
#define MSG_MAX 2048                          /* an error message, as error.c keeps it */

/* A worker's message: this header, then msg_len bytes of error text, then the result. */
typedef struct up_header {
    int32_t kind, job, st, msg_len;
} up_header;

static int mpi_fail(int rc, const char *what)
{
    char s[MPI_MAX_ERROR_STRING];
    int n = 0;
    MPI_Error_string(rc, s, &n);
    return lmp_fail(LMP_EIO, "MPI: %s: %.*s", what, n, s);
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* LMP_MPI_TIMEOUT: seconds (> 0), 0 or "off" for none; unset or unreadable: the default. */
static double read_timeout(void)
{
    const char *v = getenv("LMP_MPI_TIMEOUT");
    if (!v || !*v) return DEFAULT_TIMEOUT_S;
    if (strcmp(v, "off") == 0) return 0;
    char *end;
    double t = strtod(v, &end);
    if (*end || !(t >= 0) || t > 1e9) {
        fprintf(stderr, "lmpress: warning: LMP_MPI_TIMEOUT=%s: expected seconds (or 0 / off); using %.0f\n", v,
                DEFAULT_TIMEOUT_S);
        return DEFAULT_TIMEOUT_S;
    }
    return t;
}

/* Seconds between beats: a tenth of the timeout, between 0.2 and 5. */
static double beat_interval(const lmp_dist *d)
{
    double b = d->timeout_s / 10;
    return b < 0.2 ? 0.2 : b > 5 ? 5 : b;
}

static void *beat(void *arg)
{
    lmp_dist *d = arg;
    const double interval = beat_interval(d);
    const struct timespec nap = {0, 50000000};
    double last = 0;
    int one = 1;
    while (!d->stop_beating) {
        if (now_s() - last >= interval && pthread_mutex_trylock(&d->mpi) == 0) {
            /* a beat is never waited for: Isend, and the request let go */
            for (int r = 0; r < d->size; r++) {
                if (r == d->rank || (d->rank != 0 && r != 0)) continue;
                MPI_Request rq;
                if (MPI_Isend(&one, 1, MPI_INT, r, TAG_BEAT, MPI_COMM_WORLD, &rq) == MPI_SUCCESS) MPI_Request_free(&rq);
            }
            pthread_mutex_unlock(&d->mpi);
            last = now_s();
        }
        nanosleep(&nap, NULL);
    }
    return NULL;
}

/* Takes every beat that has arrived; heard[r] = now for each sender (caller holds d->mpi). */
static void drain_beats(lmp_dist *d, double *heard)
{
    for (;;) {
        int flag = 0, v;
        MPI_Status s;
        if (MPI_Iprobe(MPI_ANY_SOURCE, TAG_BEAT, MPI_COMM_WORLD, &flag, &s) != MPI_SUCCESS || !flag) return;
        MPI_Recv(&v, 1, MPI_INT, s.MPI_SOURCE, TAG_BEAT, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        if (heard) heard[s.MPI_SOURCE] = now_s();
    }
}

/* Gives up on a silent rank: one line, then MPI_Abort, which ends every rank. */
static void give_up(const lmp_dist *d, int silent, double for_s, const char *where)
{
    fprintf(stderr, "lmpress: error: MPI: rank %d has not answered for %.0f s (%s; LMP_MPI_TIMEOUT=%.0f): stopping "
                    "the job on every rank; what is finished is kept (compare and analyze reports are written as "
                    "they go: run again with --resume)\n", silent, for_s, where, d->timeout_s);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
    _exit(1); /* not reached */
}

/* The rank that has been silent longest past the timeout among those `watch` marks (NULL: all
 * but this one), or -1. */
static int silent_rank(const lmp_dist *d, const double *heard, const uint8_t *watch, double *for_s)
{
    if (d->timeout_s <= 0) return -1;
    const double now = now_s();
    int who = -1;
    for (int r = 0; r < d->size; r++) {
        if (r == d->rank || (watch && !watch[r])) continue;
        if (now - heard[r] > d->timeout_s && (who < 0 || heard[r] < heard[who])) who = r;
    }
    if (who >= 0) *for_s = now - heard[who];
    return who;
}

/* Polls request rq to completion, draining beats, giving up on a silent rank: rank 0 watches
 * every other rank, the others watch rank 0.  0, or an MPI error status. */
static int wait_watching(lmp_dist *d, MPI_Request *rq, const char *where)
{
    double *heard = malloc((size_t)d->size * sizeof *heard);
    uint8_t *watch = calloc((size_t)d->size, 1);
    if (!heard || !watch) MPI_Abort(MPI_COMM_WORLD, 1);
    const double start = now_s();
    for (int r = 0; r < d->size; r++) heard[r] = start, watch[r] = d->rank == 0 ? r != 0 : r == 0;
    const struct timespec nap = {0, 1000000};
    int rc = MPI_SUCCESS;
    for (int done = 0;;) {
        pthread_mutex_lock(&d->mpi);
        rc = MPI_Test(rq, &done, MPI_STATUS_IGNORE);
        if (rc == MPI_SUCCESS && !done) drain_beats(d, heard);
        pthread_mutex_unlock(&d->mpi);
        if (rc != MPI_SUCCESS || done) break;
        double for_s;
        int who = silent_rank(d, heard, watch, &for_s);
        if (who >= 0) give_up(d, who, for_s, where);
        nanosleep(&nap, NULL);
    }
    free(heard);
    free(watch);
    return rc;
}

/* Cores for this rank's BLAS: those it is bound to, or the node's shared among its ranks. */
static void set_blas_threads(int local_ranks)
{
    if (getenv("OPENBLAS_NUM_THREADS")) return;
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    cpu_set_t set;
    long mine = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : online;
    long n = mine < online ? mine : online / (local_ranks > 0 ? local_ranks : 1);
    char v[32];
    snprintf(v, sizeof v, "%ld", n > 0 ? n : 1);
    setenv("OPENBLAS_NUM_THREADS", v, 0);
}

int lmp_dist_start(int *argc, char ***argv, lmp_dist **out)
{
    *out = NULL;
    if (!lmp_dist_launched()) return 0;
    int provided = 0, rc = MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided);
    if (rc != MPI_SUCCESS) return mpi_fail(rc, "MPI_Init_thread");
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    if (provided < MPI_THREAD_SERIALIZED) {
        MPI_Finalize();
        return lmp_fail(LMP_EINVAL, "MPI: this MPI library gives thread level %d; lmpress needs "
                        "MPI_THREAD_SERIALIZED (%d): rank 0 answers the other ranks from a second thread",
                        provided, MPI_THREAD_SERIALIZED);
    }
    lmp_dist *d = calloc(1, sizeof *d);
    if (!d) return lmp_fail(LMP_ENOMEM, "out of memory");
    MPI_Comm_rank(MPI_COMM_WORLD, &d->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &d->size);
    pthread_mutex_init(&d->mpi, NULL);
    d->timeout_s = read_timeout();
    MPI_Comm node;
    int local = 1;
    if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) == MPI_SUCCESS) {
        MPI_Comm_size(node, &local);
        MPI_Comm_free(&node);
    }
    set_blas_threads(local);
    /* from here every MPI call is made under d->mpi */
    if (d->size > 1 && d->timeout_s > 0) d->beating = pthread_create(&d->beater, NULL, beat, d) == 0;
    *out = d;
    return 0;
}

/* Waits for every rank at a barrier without spinning: Open MPI's blocking calls poll at full
 * speed, and a rank waiting for rank 0's reference pass would take a core from it.  A rank
 * silent past the timeout ends the job (wait_watching). */
static void barrier_quietly(lmp_dist *d, const char *where)
{
    MPI_Request rq;
    pthread_mutex_lock(&d->mpi);
    int rc = MPI_Ibarrier(MPI_COMM_WORLD, &rq);
    pthread_mutex_unlock(&d->mpi);
    if (rc == MPI_SUCCESS) wait_watching(d, &rq, where);
}

int lmp_dist_end(lmp_dist *d, int code)
{
    if (!d) return code;
    barrier_quietly(d, "at the end of the run"); /* rank 0 may still be writing, or searching (analyze) */
    int all = code;
    pthread_mutex_lock(&d->mpi);
    MPI_Allreduce(&code, &all, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    pthread_mutex_unlock(&d->mpi);
    if (d->beating) {
        d->stop_beating = 1;
        pthread_join(d->beater, NULL);
    }
    MPI_Barrier(MPI_COMM_WORLD); /* no rank's beat is still on its way */
    drain_beats(d, NULL);
    MPI_Finalize();
    pthread_mutex_destroy(&d->mpi);
    free(d);
    return all;
}

int lmp_dist_rank(const lmp_dist *d) { return d ? d->rank : 0; }
int lmp_dist_size(const lmp_dist *d) { return d ? d->size : 1; }

int lmp_dist_agree(lmp_dist *d, int st)
{
    if (!d) return st;
    int *all = malloc((size_t)d->size * sizeof *all);
    if (!all) MPI_Abort(MPI_COMM_WORLD, 1); /* the others are at the collective below */
    barrier_quietly(d, "waiting for every rank to agree");
    pthread_mutex_lock(&d->mpi);
    int rc = MPI_Allgather(&st, 1, MPI_INT, all, 1, MPI_INT, MPI_COMM_WORLD);
    pthread_mutex_unlock(&d->mpi);
    if (rc != MPI_SUCCESS) {
        free(all);
        return mpi_fail(rc, "MPI_Allgather");
    }
    int who = -1;
    for (int r = 0; r < d->size && who < 0; r++)
        if (all[r]) who = r;
    int first = who >= 0 ? all[who] : 0;
    free(all);
    if (who < 0) return 0;
    /* the failing rank's message, so that every rank can print the same line */
    char msg[MSG_MAX];
    snprintf(msg, sizeof msg, "%s", d->rank == who ? lmp_last_error() : "");
    pthread_mutex_lock(&d->mpi);
    MPI_Bcast(msg, sizeof msg, MPI_CHAR, who, MPI_COMM_WORLD);
    pthread_mutex_unlock(&d->mpi);
    if (d->rank != who) lmp_fail(first, "%s", msg);
    return first;
}

int lmp_dist_bcast(lmp_dist *d, void *buf, int64_t bytes)
{
    if (!d) return 0;
    const int64_t piece = (int64_t)1 << 30;
    barrier_quietly(d, "waiting for a broadcast from rank 0"); /* rank 0 may be computing what it sends */
    for (int64_t at = 0; at < bytes; at += piece) {
        int n = (int)(bytes - at < piece ? bytes - at : piece);
        MPI_Request rq;
        pthread_mutex_lock(&d->mpi);
        int rc = MPI_Ibcast((char *)buf + at, n, MPI_BYTE, 0, MPI_COMM_WORLD, &rq);
        pthread_mutex_unlock(&d->mpi);
        if (rc == MPI_SUCCESS) rc = wait_watching(d, &rq, "in a broadcast from rank 0");
        if (rc != MPI_SUCCESS) return mpi_fail(rc, "MPI_Bcast");
    }
    return 0;
}

/* ---- the jobs --------------------------------------------------------------------------------- */

/* Rank 0's book: which job goes out next, and the first failure (which stops the handing out). */
typedef struct book {
    lmp_dist *d;
    const lmp_dist_jobs *J;
    pthread_mutex_t mu;
    int next, st;
    char msg[MSG_MAX];
} book;

static int next_job(book *b)
{
    pthread_mutex_lock(&b->mu);
    int j = b->st || b->next >= b->J->n ? -1 : b->next++;
    pthread_mutex_unlock(&b->mu);
    return j;
}

/* Job j's outcome, taken under the book's lock; the first failure is kept with its rank. */
static void take(book *b, int j, int rank, int st, const char *msg, const void *res, size_t bytes)
{
    pthread_mutex_lock(&b->mu);
    int rc = b->J->take(b->J->ud, j, rank, st, msg, res, bytes);
    if (!b->st && st) {
        b->st = st;
        if (b->d) snprintf(b->msg, sizeof b->msg, "rank %d, job %d: %s", rank, j + 1, msg);
        else snprintf(b->msg, sizeof b->msg, "%s", msg);
    } else if (!b->st && rc) {
        b->st = rc;
        snprintf(b->msg, sizeof b->msg, "%s", lmp_last_error());
    }
    pthread_mutex_unlock(&b->mu);
}

/* Rank 0's second thread: answers every worker until each has been told there is no more. */
static void *answer_workers(void *arg)
{
    book *b = arg;
    lmp_dist *d = b->d;
    int active = d->size - 1;
    const struct timespec nap = {0, 1000000};
    /* when each rank was last heard from, and the job it holds (-1: none; it is asking) */
    double *heard = malloc((size_t)d->size * sizeof *heard);
    int *holds = malloc((size_t)d->size * sizeof *holds);
    uint8_t *watch = calloc((size_t)d->size, 1);
    if (!heard || !holds || !watch) MPI_Abort(MPI_COMM_WORLD, 1);
    for (int r = 0; r < d->size; r++) heard[r] = now_s(), holds[r] = -1, watch[r] = r != 0;
    while (active > 0) {
        int flag = 0, bytes = 0;
        MPI_Status s;
        pthread_mutex_lock(&d->mpi);
        drain_beats(d, heard);
        if (MPI_Iprobe(MPI_ANY_SOURCE, TAG_UP, MPI_COMM_WORLD, &flag, &s) != MPI_SUCCESS)
            MPI_Abort(MPI_COMM_WORLD, 1); /* the workers wait for this thread: nothing else ends the job */
        pthread_mutex_unlock(&d->mpi);
        if (!flag) {
            double for_s;
            int who = silent_rank(d, heard, watch, &for_s);
            if (who >= 0) {
                char where[96];
                if (holds[who] >= 0) snprintf(where, sizeof where, "while running job %d", holds[who] + 1);
                else snprintf(where, sizeof where, "before asking for a job");
                give_up(d, who, for_s, where);
            }
            nanosleep(&nap, NULL);
            continue;
        }
        MPI_Get_count(&s, MPI_BYTE, &bytes);
        char *m = malloc((size_t)bytes + 1);
        if (!m || bytes < (int)sizeof(up_header)) { /* cannot happen short of memory: stop the run */
            MPI_Abort(MPI_COMM_WORLD, 1);
            return NULL;
        }
        pthread_mutex_lock(&d->mpi);
        MPI_Recv(m, bytes, MPI_BYTE, s.MPI_SOURCE, TAG_UP, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        pthread_mutex_unlock(&d->mpi);
        heard[s.MPI_SOURCE] = now_s();
        m[bytes] = 0;
        up_header h;
        memcpy(&h, m, sizeof h);
        const char *msg = m + sizeof h;
        const char *res = msg + h.msg_len;
        const int bad = h.kind != UP_ASK && (h.job < 0 || h.job >= b->J->n || h.msg_len < 0 ||
                                             (size_t)h.msg_len > (size_t)bytes - sizeof h);
        if (bad) /* the same build on every rank sends nothing else; stop rather than guess */
            take(b, 0, s.MPI_SOURCE, LMP_EIO, "a malformed message (is every rank the same lmpress build?)", NULL, 0);
        else if (h.kind == UP_RESULT)
            take(b, h.job, s.MPI_SOURCE, 0, "", res, (size_t)bytes - sizeof h - (size_t)h.msg_len);
        else if (h.kind == UP_FAILED)
            take(b, h.job, s.MPI_SOURCE, h.st ? h.st : LMP_EIO, msg, NULL, 0);
        free(m);
        int j = next_job(b);
        MPI_Request rq; /* one int: sent at once, never waits for the worker */
        pthread_mutex_lock(&d->mpi);
        if (MPI_Isend(&j, 1, MPI_INT, s.MPI_SOURCE, TAG_DOWN, MPI_COMM_WORLD, &rq) == MPI_SUCCESS)
            MPI_Wait(&rq, MPI_STATUS_IGNORE);
        pthread_mutex_unlock(&d->mpi);
        holds[s.MPI_SOURCE] = j;
        if (j < 0) active--, watch[s.MPI_SOURCE] = 0; /* done: it waits at the end, watched there */
    }
    free(heard);
    free(holds);
    free(watch);
    return NULL;
}

static int send_up(lmp_dist *d, int kind, int job, int st, const char *msg, const void *res, size_t bytes)
{
    up_header h = {kind, job, st, msg ? (int32_t)strlen(msg) + 1 : 0};
    size_t n = sizeof h + (size_t)h.msg_len + bytes;
    if (n > (size_t)1 << 30) return lmp_fail(LMP_EINVAL, "MPI: job %d's result is %zu bytes, over 1 GiB", job, n);
    char *m = malloc(n);
    if (!m) return lmp_fail(LMP_ENOMEM, "out of memory");
    memcpy(m, &h, sizeof h);
    if (h.msg_len) memcpy(m + sizeof h, msg, (size_t)h.msg_len);
    if (bytes) memcpy(m + sizeof h + h.msg_len, res, bytes);
    MPI_Request rq;
    pthread_mutex_lock(&d->mpi);
    int rc = MPI_Isend(m, (int)n, MPI_BYTE, 0, TAG_UP, MPI_COMM_WORLD, &rq);
    pthread_mutex_unlock(&d->mpi);
    if (rc == MPI_SUCCESS) rc = wait_watching(d, &rq, "sending a result to rank 0");
    free(m);
    return rc == MPI_SUCCESS ? 0 : mpi_fail(rc, "MPI_Send");
}

static int work(lmp_dist *d, const lmp_dist_jobs *J)
{
    int kind = UP_ASK, job = -1, st = 0;
    char msg[MSG_MAX] = "";
    void *res = NULL;
    size_t bytes = 0;
    for (;;) {
        int rc = send_up(d, kind, job, st, kind == UP_FAILED ? msg : NULL, res, bytes);
        free(res);
        res = NULL;
        bytes = 0;
        MPI_Request rq;
        if (!rc) {
            pthread_mutex_lock(&d->mpi);
            rc = MPI_Irecv(&job, 1, MPI_INT, 0, TAG_DOWN, MPI_COMM_WORLD, &rq);
            pthread_mutex_unlock(&d->mpi);
            if (rc == MPI_SUCCESS) rc = wait_watching(d, &rq, "waiting for its next job");
            rc = rc == MPI_SUCCESS ? 0 : lmp_fail(LMP_EIO, "MPI: no answer from rank 0");
        }
        if (rc) return rc;
        if (job < 0) return 0;
        st = J->run(J->ud, job, &res, &bytes);
        kind = st ? UP_FAILED : UP_RESULT;
        if (st) snprintf(msg, sizeof msg, "%s", lmp_last_error());
    }
}

int lmp_dist_run_jobs(lmp_dist *d, const lmp_dist_jobs *J)
{
    book b = {.d = d, .J = J, .mu = PTHREAD_MUTEX_INITIALIZER};
    int st = 0;
    if (!d || d->rank == 0) {
        pthread_t answerer;
        const int workers = d && d->size > 1;
        if (workers && pthread_create(&answerer, NULL, answer_workers, &b)) {
            fprintf(stderr, "lmpress: MPI: cannot start the thread that answers the other ranks\n");
            MPI_Abort(MPI_COMM_WORLD, 1); /* the workers wait for it: nothing else ends the job */
        }
        for (int j; (j = next_job(&b)) >= 0;) {
            void *res = NULL;
            size_t bytes = 0;
            int rc = J->run(J->ud, j, &res, &bytes);
            take(&b, j, 0, rc, rc ? lmp_last_error() : "", res, bytes);
            free(res);
        }
        if (workers) pthread_join(answerer, NULL);
        st = b.st;
    } else {
        if ((st = work(d, J))) lmp_fail_prefix(st, "rank %d", d->rank);
    }
    if (st && (!d || d->rank == 0)) lmp_fail(st, "%s", b.msg);
    return lmp_dist_agree(d, st); /* rank 0's verdict first: it names the failed rank and job */
}
