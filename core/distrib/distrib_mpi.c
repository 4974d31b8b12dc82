/* distrib_mpi.c — distrib.h over MPI (built when CMake finds MPI; distrib_none.c otherwise).
 *
 * Scheduling: rank 0 runs jobs itself, and a second thread of rank 0 answers the other ranks.
 * A worker sends "done with job j, here is its result (or its error); what next?" and gets back
 * the next job number, or -1.  That thread polls with MPI_Iprobe and sleeps 1 ms between polls:
 * a blocking receive would spin a core that rank 0's own job needs.  Only that thread calls MPI
 * while jobs run, so MPI_THREAD_SERIALIZED is enough. */
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
};

enum { TAG_UP = 1, TAG_DOWN = 2 };           /* worker -> rank 0, rank 0 -> worker */
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
    MPI_Comm node;
    int local = 1;
    if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) == MPI_SUCCESS) {
        MPI_Comm_size(node, &local);
        MPI_Comm_free(&node);
    }
    set_blas_threads(local);
    *out = d;
    return 0;
}

/* Waits for every rank at a barrier without spinning: Open MPI's blocking calls poll at full
 * speed, and a rank waiting for rank 0's reference pass would take a core from it. */
static void barrier_quietly(void)
{
    MPI_Request rq;
    if (MPI_Ibarrier(MPI_COMM_WORLD, &rq) != MPI_SUCCESS) return;
    const struct timespec nap = {0, 1000000};
    for (int done = 0; MPI_Test(&rq, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && !done;) nanosleep(&nap, NULL);
}

int lmp_dist_end(lmp_dist *d, int code)
{
    if (!d) return code;
    barrier_quietly(); /* rank 0 may still be writing, or searching (analyze) */
    int all = code;
    MPI_Allreduce(&code, &all, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Finalize();
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
    barrier_quietly();
    int rc = MPI_Allgather(&st, 1, MPI_INT, all, 1, MPI_INT, MPI_COMM_WORLD);
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
    MPI_Bcast(msg, sizeof msg, MPI_CHAR, who, MPI_COMM_WORLD);
    if (d->rank != who) lmp_fail(first, "%s", msg);
    return first;
}

int lmp_dist_bcast(lmp_dist *d, void *buf, int64_t bytes)
{
    if (!d) return 0;
    const int64_t piece = (int64_t)1 << 30;
    barrier_quietly(); /* rank 0 may be computing what it sends */
    for (int64_t at = 0; at < bytes; at += piece) {
        int n = (int)(bytes - at < piece ? bytes - at : piece);
        int rc = MPI_Bcast((char *)buf + at, n, MPI_BYTE, 0, MPI_COMM_WORLD);
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
    int active = b->d->size - 1;
    const struct timespec nap = {0, 1000000};
    while (active > 0) {
        int flag = 0, bytes = 0;
        MPI_Status s;
        if (MPI_Iprobe(MPI_ANY_SOURCE, TAG_UP, MPI_COMM_WORLD, &flag, &s) != MPI_SUCCESS)
            MPI_Abort(MPI_COMM_WORLD, 1); /* the workers wait for this thread: nothing else ends the job */
        if (!flag) {
            nanosleep(&nap, NULL);
            continue;
        }
        MPI_Get_count(&s, MPI_BYTE, &bytes);
        char *m = malloc((size_t)bytes + 1);
        if (!m || bytes < (int)sizeof(up_header)) { /* cannot happen short of memory: stop the run */
            MPI_Abort(MPI_COMM_WORLD, 1);
            return NULL;
        }
        MPI_Recv(m, bytes, MPI_BYTE, s.MPI_SOURCE, TAG_UP, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
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
        MPI_Send(&j, 1, MPI_INT, s.MPI_SOURCE, TAG_DOWN, MPI_COMM_WORLD);
        if (j < 0) active--;
    }
    return NULL;
}

static int send_up(int kind, int job, int st, const char *msg, const void *res, size_t bytes)
{
    up_header h = {kind, job, st, msg ? (int32_t)strlen(msg) + 1 : 0};
    size_t n = sizeof h + (size_t)h.msg_len + bytes;
    if (n > (size_t)1 << 30) return lmp_fail(LMP_EINVAL, "MPI: job %d's result is %zu bytes, over 1 GiB", job, n);
    char *m = malloc(n);
    if (!m) return lmp_fail(LMP_ENOMEM, "out of memory");
    memcpy(m, &h, sizeof h);
    if (h.msg_len) memcpy(m + sizeof h, msg, (size_t)h.msg_len);
    if (bytes) memcpy(m + sizeof h + h.msg_len, res, bytes);
    int rc = MPI_Send(m, (int)n, MPI_BYTE, 0, TAG_UP, MPI_COMM_WORLD);
    free(m);
    return rc == MPI_SUCCESS ? 0 : mpi_fail(rc, "MPI_Send");
}

static int work(const lmp_dist_jobs *J)
{
    int kind = UP_ASK, job = -1, st = 0;
    char msg[MSG_MAX] = "";
    void *res = NULL;
    size_t bytes = 0;
    for (;;) {
        int rc = send_up(kind, job, st, kind == UP_FAILED ? msg : NULL, res, bytes);
        free(res);
        res = NULL;
        bytes = 0;
        if (!rc) rc = MPI_Recv(&job, 1, MPI_INT, 0, TAG_DOWN, MPI_COMM_WORLD, MPI_STATUS_IGNORE) == MPI_SUCCESS
                          ? 0 : lmp_fail(LMP_EIO, "MPI: no answer from rank 0");
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
        if ((st = work(J))) lmp_fail_prefix(st, "rank %d", d->rank);
    }
    if (st && (!d || d->rank == 0)) lmp_fail(st, "%s", b.msg);
    return lmp_dist_agree(d, st); /* rank 0's verdict first: it names the failed rank and job */
}
