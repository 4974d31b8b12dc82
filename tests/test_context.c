/* test_context.c — two runs in one process do not share state: each lmp_ctx has its own RNG
 * stream (whatever the interleaving), verbosity, error text, backend and interrupt flag; a
 * strategy's failure is reported with the text it gave its own run's context; and compare runs
 * of small stories260K configs on three threads at once (two of the same config, one of another
 * seed) give bit-identical numbers to the same runs done alone.  The configs sample their
 * calibration windows at random, so a shared RNG (or any other shared state that touches the
 * numbers) shows up as different activation scales. */
#include <check.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/ctx.h"
#include "base/error.h"
#include "base/log.h"
#include "compare/compare.h"
#include "compress/pipeline.h"
#include "config/config.h"
#include "plugin/backend.h"
#include "plugin/host_services.h"
#include "plugin/registry.h"

#include "testutil.h"

#define MODEL LMP_SOURCE_DIR "/models/stories260K/stories260K.bin"
#define CALIB LMP_SOURCE_DIR "/models/stories260K/tinystories-synth-calib.txt"
#define EVAL_TEXT LMP_SOURCE_DIR "/models/stories260K/tinystories-synth-eval.txt"
#define LAMBADA LMP_DATA_DIR "/lambada/lambada_test.jsonl"

/* The reference: splitmix64 from state seed ^ 0x9E3779B97F4A7C15, as a run seeds it. */
static uint64_t splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* ---- RNG ------------------------------------------------------------------------------------ */
START_TEST(same_seed_same_stream_whatever_the_interleaving)
{
    enum { N = 64 };
    const lmp_host *h = lmp_host_services();
    lmp_ctx a, b, c;
    lmp_ctx_init(&a);
    lmp_ctx_init(&b);
    lmp_ctx_init(&c);
    lmp_host_seed(&a, 1234);
    lmp_host_seed(&b, 1234);
    lmp_host_seed(&c, 99);
    uint64_t ref[N + 1], ref_c[N], ra[N], rb[N], rc[N], state = 1234 ^ 0x9E3779B97F4A7C15ull;
    for (int i = 0; i <= N; i++) ref[i] = splitmix64(&state);
    state = 99 ^ 0x9E3779B97F4A7C15ull;
    for (int i = 0; i < N; i++) ref_c[i] = splitmix64(&state);
    /* a, b and c draw in an irregular interleaving */
    int ia = 0, ib = 0, ic = 0;
    for (int k = 0; ia < N || ib < N || ic < N; k++) {
        if (ia < N && k % 3 != 2) ra[ia++] = h->rng_u64(&a);
        if (ib < N && k % 5 != 1) rb[ib++] = h->rng_u64(&b);
        if (ic < N && k % 2) rc[ic++] = h->rng_u64(&c);
    }
    for (int i = 0; i < N; i++) {
        ck_assert_msg(ra[i] == ref[i], "context a, draw %d: %016llx, expected %016llx", i, (unsigned long long)ra[i],
                      (unsigned long long)ref[i]);
        ck_assert_msg(rb[i] == ref[i], "context b, draw %d: %016llx, expected %016llx", i, (unsigned long long)rb[i],
                      (unsigned long long)ref[i]);
        ck_assert_msg(rc[i] == ref_c[i], "context c, draw %d", i);
    }
    ck_assert(ref_c[0] != ref[0]); /* another seed, another stream */
    /* A fresh context is seeded with 0, as the process-wide state used to start. */
    lmp_ctx d;
    lmp_ctx_init(&d);
    state = 0 ^ 0x9E3779B97F4A7C15ull;
    ck_assert(h->rng_u64(&d) == splitmix64(&state));
    lmp_ctx_clear(&d);
    /* Reseeding one context restarts its stream only: b goes on where it was. */
    lmp_host_seed(&a, 1234);
    ck_assert(h->rng_u64(&a) == ref[0]);
    ck_assert_msg(h->rng_u64(&b) == ref[N], "context b was disturbed by reseeding a");
    lmp_ctx_clear(&a);
    lmp_ctx_clear(&b);
    lmp_ctx_clear(&c);
}
END_TEST

/* Random calibration windows come from the run's own stream. */
START_TEST(random_windows_follow_their_context)
{
    enum { N_IDS = 1000, T = 8, W = 5 };
    int32_t ids[N_IDS];
    for (int i = 0; i < N_IDS; i++) ids[i] = i;
    lmp_ctx a, b;
    lmp_ctx_init(&a);
    lmp_ctx_init(&b);
    lmp_host_set_verbosity(&a, LMP_LOG_ERROR);
    lmp_host_set_verbosity(&b, LMP_LOG_ERROR);
    lmp_host_seed(&a, 7);
    lmp_host_seed(&b, 7);
    lmp_windows a1, b1, a2, b2;
    ck_assert_int_eq(lmp_windows_cut(&a, ids, N_IDS, W, T, 1, "ids", &a1), 0);
    ck_assert_int_eq(lmp_windows_cut(&b, ids, N_IDS, W, T, 1, "ids", &b1), 0);
    ck_assert_int_eq(lmp_windows_cut(&b, ids, N_IDS, W, T, 1, "ids", &b2), 0);
    ck_assert_int_eq(lmp_windows_cut(&a, ids, N_IDS, W, T, 1, "ids", &a2), 0);
    ck_assert_int_eq(memcmp(a1.tokens, b1.tokens, sizeof(int32_t) * W * T), 0);
    ck_assert_int_eq(memcmp(a2.tokens, b2.tokens, sizeof(int32_t) * W * T), 0);
    ck_assert_int_ne(memcmp(a1.tokens, a2.tokens, sizeof(int32_t) * W * T), 0);
    lmp_windows_free(&a1);
    lmp_windows_free(&b1);
    lmp_windows_free(&a2);
    lmp_windows_free(&b2);
    lmp_ctx_clear(&a);
    lmp_ctx_clear(&b);
}
END_TEST

/* ---- verbosity, errors, backend, interrupt ------------------------------------------------- */

/* Runs fn(arg) with standard error going to a file; returns what was written (malloc'd). */
static char *capture_stderr(void (*fn)(void *), void *arg)
{
    fflush(stderr);
    FILE *f = tmpfile();
    ck_assert_ptr_nonnull(f);
    int saved = dup(STDERR_FILENO);
    ck_assert_int_ge(saved, 0);
    ck_assert_int_ge(dup2(fileno(f), STDERR_FILENO), 0);
    fn(arg);
    fflush(stderr);
    ck_assert_int_ge(dup2(saved, STDERR_FILENO), 0);
    close(saved);
    long n = ftell(f);
    ck_assert_int_ge(n, 0);
    char *text = calloc((size_t)n + 1, 1);
    ck_assert_ptr_nonnull(text);
    rewind(f);
    ck_assert_uint_eq(fread(text, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    return text;
}

typedef struct two_ctx {
    lmp_ctx *quiet, *loud;
} two_ctx;

static void log_on_both(void *arg)
{
    const two_ctx *t = arg;
    const lmp_host *h = lmp_host_services();
    lmp_log(t->quiet, LMP_LOG_INFO, "quiet info");
    lmp_log(t->loud, LMP_LOG_INFO, "loud info");
    lmp_log(t->quiet, LMP_LOG_ERROR, "quiet error");
    h->log(t->quiet, LMP_LOG_WARN, "plugin on quiet: warning");
    h->log(t->loud, LMP_LOG_DEBUG, "plugin on loud: debug");
}

START_TEST(verbosity_is_per_context)
{
    lmp_ctx quiet, loud;
    lmp_ctx_init(&quiet);
    lmp_ctx_init(&loud);
    ck_assert_int_eq(lmp_host_verbosity(&quiet), LMP_LOG_INFO); /* the default */
    lmp_host_set_verbosity(&quiet, LMP_LOG_ERROR);
    lmp_host_set_verbosity(&loud, LMP_LOG_DEBUG);
    ck_assert_int_eq(lmp_host_verbosity(&quiet), LMP_LOG_ERROR);
    ck_assert_int_eq(lmp_host_verbosity(&loud), LMP_LOG_DEBUG);
    two_ctx t = {&quiet, &loud};
    char *out = capture_stderr(log_on_both, &t);
    ck_assert_msg(strstr(out, "lmpress: info: loud info\n"), "%s", out);
    ck_assert_msg(strstr(out, "lmpress: error: quiet error\n"), "%s", out);
    ck_assert_msg(strstr(out, "lmpress: debug: plugin on loud: debug\n"), "%s", out);
    ck_assert_msg(!strstr(out, "quiet info"), "%s", out);
    ck_assert_msg(!strstr(out, "plugin on quiet"), "%s", out);
    free(out);
    lmp_ctx_clear(&quiet);
    lmp_ctx_clear(&loud);
}
END_TEST

START_TEST(errors_backend_and_interrupt_are_per_context)
{
    const lmp_host *h = lmp_host_services();
    lmp_ctx a, b;
    lmp_ctx_init(&a);
    lmp_ctx_init(&b);
    /* set_error: into the context it is given (and the thread's last error), nowhere else */
    lmp_clear_error();
    ck_assert_int_eq(h->set_error(&a, LMP_EINVAL, "a broke at %d", 7), LMP_EINVAL);
    ck_assert_str_eq(lmp_host_error(&a), "a broke at 7");
    ck_assert_str_eq(lmp_host_error(&b), "the plugin gave no reason");
    ck_assert_str_eq(lmp_last_error(), "a broke at 7");
    ck_assert_int_eq(h->set_error(&b, LMP_EIO, "b broke"), LMP_EIO);
    ck_assert_str_eq(lmp_host_error(&a), "a broke at 7");
    ck_assert_str_eq(lmp_host_error(&b), "b broke");
    lmp_host_clear_error(&a);
    ck_assert_str_eq(lmp_host_error(&a), "the plugin gave no reason");
    ck_assert_str_eq(lmp_host_error(&b), "b broke");
    /* the backend host->backend() hands out is the context's */
    lmp_backend be_a;
    memset(&be_a, 0, sizeof be_a);
    lmp_host_set_backend(&a, &be_a);
    void *self = NULL;
    ck_assert_ptr_nonnull(h->backend(&a, &self));
    ck_assert_ptr_eq(self, &be_a);
    self = NULL;
    ck_assert_ptr_null(h->backend(&b, &self));
    ck_assert_ptr_null(self);
    /* the interrupt flag */
    volatile sig_atomic_t flag = 0;
    lmp_host_set_interrupt_flag(&a, &flag);
    ck_assert_int_eq(lmp_host_interrupted(&a), 0);
    flag = SIGINT;
    ck_assert_int_ne(lmp_host_interrupted(&a), 0);
    ck_assert_int_eq(lmp_host_interrupted(&b), 0);
    lmp_host_set_backend(&a, NULL);
    lmp_ctx_clear(&a);
    lmp_ctx_clear(&b);
}
END_TEST

/* A strategy that fails says so in its own run's context, and the core quotes that text. */
START_TEST(strategy_failure_is_reported_from_its_context)
{
    lmp_ctx with, without; /* a run with a backend, and one without */
    lmp_ctx_init(&with);
    lmp_ctx_init(&without);
    lmp_host_set_verbosity(&with, LMP_LOG_ERROR);
    lmp_host_set_verbosity(&without, LMP_LOG_ERROR);
    lmp_registry reg;
    lmp_backend be;
    lmp_model *m = NULL;
    const lmp_plugin *rtn;
    ck_assert_int_eq(lmp_registry_init(&reg, &with, NULL, 0), 0);
    ck_assert_int_eq(lmp_registry_require(&reg, LMP_PLUGIN_STRATEGY, "rtn", &rtn), 0);
    ck_assert_msg(lmp_backend_open(&with, &reg, "cpu", NULL, &be) == 0, "%s", lmp_last_error());
    lmp_host_set_backend(&with, &be);
    ck_assert_msg(lmp_model_load(MODEL, &m) == 0, "%s", lmp_last_error());
    lmp_stage stage = {.plugin = rtn};
    ck_assert_int_eq(lmp_params_defaults(rtn->desc, &stage.params), 0);
    lmp_variant v = {.name = "w", .stages = &stage, .n_stages = 1};
    lmp_windows none = {0};
    lmp_block *out = NULL;
    int st = lmp_compress(&without, &be, m, &v, &none, &out);
    ck_assert_int_ne(st, 0);
    ck_assert_ptr_null(out);
    ck_assert_str_eq(lmp_host_error(&without), "rtn: no backend to quantize with");
    ck_assert_str_eq(lmp_host_error(&with), "the plugin gave no reason");
    ck_assert_str_eq(lmp_last_error(), "variant 'w': strategy 'rtn' on block 0: rtn: no backend to quantize with");
    /* the same variant on the run that has a backend */
    ck_assert_msg(lmp_compress(&with, &be, m, &v, &none, &out) == 0, "%s", lmp_last_error());
    ck_assert_ptr_nonnull(out);
    ck_assert(lmp_compress_times_get(&with)->apply > 0);
    lmp_blocks_free(out, m->arch.n_layers);
    free(stage.params);
    lmp_model_free(m);
    lmp_host_set_backend(&with, NULL);
    lmp_backend_close(&be);
    lmp_registry_free(&reg);
    lmp_ctx_clear(&with);
    lmp_ctx_clear(&without);
}
END_TEST

/* ---- compare runs on threads at once -------------------------------------------------------- */

/* A small two-variant config of stories260K whose calibration windows are drawn at random,
 * written to dir/name; its path goes to path[512]. */
static const char *write_config(char *path, const char *dir, const char *name, int seed)
{
    char *p = path;
    snprintf(p, 512, "%s/%s", dir, name);
    char text[4096];
    snprintf(text, sizeof text,
             "model = { path = \"%s\"; };\n"
             "backend = { name = \"cpu\"; params = { threads = 1; }; };\n"
             "calibration = { text = \"%s\"; samples = 4; seq_len = 64; sampling = \"random\"; };\n"
             "eval = { texts = [ \"%s\" ]; seq_len = 64; max_windows = 6; lambada = \"%s\"; lambada_max = 12; };\n"
             "seed = %d;\n"
             "variants = (\n"
             "  { name = \"w8a8-static\"; pipeline = ( { strategy = \"rtn\"; params = { bits = 8; act = \"static_tensor\"; }; } ); },\n"
             "  { name = \"w4-g32\"; pipeline = ( { strategy = \"rtn\"; params = { bits = 4; granularity = \"group\"; group_size = 32; }; } ); }\n"
             ");\n",
             MODEL, CALIB, EVAL_TEXT, LAMBADA, seed);
    lmp_test_spit(p, text, strlen(text));
    return p;
}

typedef struct job {
    lmp_ctx ctx;
    lmp_run_config *c;
    lmp_report *r;
    int st;
    char err[2048];
    pthread_barrier_t *start; /* NULL: run at once */
} job;

static void job_load(job *j, const char *cfg)
{
    memset(j, 0, sizeof *j);
    lmp_ctx_init(&j->ctx);
    lmp_host_set_verbosity(&j->ctx, LMP_LOG_ERROR);
    /* Loaded here, on the main thread: what runs on the threads is the compare itself. */
    ck_assert_msg(lmp_config_load(&j->ctx, cfg, &j->c) == 0, "%s", lmp_last_error());
}

static void *job_run(void *arg)
{
    job *j = arg;
    if (j->start) pthread_barrier_wait(j->start);
    lmp_compare_opts opts;
    memset(&opts, 0, sizeof opts);
    j->st = lmp_run_compare(&j->ctx, j->c, &opts, &j->r);
    /* the message is the thread's own: copy it before the thread ends */
    if (j->st) snprintf(j->err, sizeof j->err, "%s", lmp_last_error());
    return NULL;
}

static void job_free(job *j)
{
    lmp_report_free(j->r);
    lmp_config_free(j->c);
    lmp_ctx_clear(&j->ctx);
}

static int same_double(double a, double b) { return memcmp(&a, &b, sizeof a) == 0; }

/* Every number of every variant, bit for bit. */
static void expect_same_results(const lmp_report *x, const lmp_report *y, const char *what)
{
    ck_assert_int_eq(x->n_results, y->n_results);
    ck_assert_int_eq(x->n_texts, y->n_texts);
    for (int i = 0; i < x->n_results; i++) {
        const lmp_variant_result *a = &x->results[i], *b = &y->results[i];
        const char *name = a->v->name;
        ck_assert_str_eq(name, b->v->name);
        ck_assert_msg(a->done && b->done, "%s: %s not finished", what, name);
        ck_assert_msg(same_double(a->bits_per_weight, b->bits_per_weight), "%s: %s bits", what, name);
        for (int t = 0; t < x->n_texts; t++) {
            const lmp_score *p = &a->scores[t], *q = &b->scores[t];
            ck_assert_msg(p->windows == q->windows && p->scored == q->scored && p->top1_hits == q->top1_hits &&
                              same_double(p->nll_sum, q->nll_sum) && same_double(p->kld_sum, q->kld_sum),
                          "%s: %s: nll %.17g vs %.17g, kld %.17g vs %.17g, top1 %lld vs %lld", what, name, p->nll_sum,
                          q->nll_sum, p->kld_sum, q->kld_sum, (long long)p->top1_hits, (long long)q->top1_hits);
        }
        ck_assert_msg(a->lambada.passages == b->lambada.passages && a->lambada.correct == b->lambada.correct,
                      "%s: %s LAMBADA %lld/%lld vs %lld/%lld", what, name, (long long)a->lambada.correct,
                      (long long)a->lambada.passages, (long long)b->lambada.correct, (long long)b->lambada.passages);
        ck_assert_int_eq(a->n_linears, b->n_linears);
        for (int k = 0; k < a->n_linears; k++) {
            ck_assert(same_double(a->linears[k].weight_bits, b->linears[k].weight_bits));
            ck_assert_int_eq(memcmp(&a->linears[k].act, &b->linears[k].act, sizeof a->linears[k].act), 0);
        }
    }
}

START_TEST(compare_runs_on_threads_match_runs_alone)
{
    char tmpdir[] = "/tmp/lmpress-context-XXXXXX", path_a[512], path_b[512];
    ck_assert_ptr_nonnull(mkdtemp(tmpdir));
    const char *cfg_a = write_config(path_a, tmpdir, "a.cfg", 1234), *cfg_b = write_config(path_b, tmpdir, "b.cfg", 7);

    /* alone, one after the other */
    job alone_a, alone_b;
    job_load(&alone_a, cfg_a);
    job_run(&alone_a);
    ck_assert_msg(alone_a.st == 0, "%s", alone_a.err);
    job_load(&alone_b, cfg_b);
    job_run(&alone_b);
    ck_assert_msg(alone_b.st == 0, "%s", alone_b.err);
    /* The seed matters (the static activation scales come from the random windows), so a run
     * that drew from another run's stream would not match. */
    const lmp_score *sa = &alone_a.r->results[0].scores[0], *sb = &alone_b.r->results[0].scores[0];
    ck_assert_msg(!same_double(sa->kld_sum, sb->kld_sum), "seeds 1234 and 7 gave the same w8a8-static KL sum %.17g",
                  sa->kld_sum);

    /* at once: a, b and a again, released together */
    enum { N = 3 };
    pthread_barrier_t start;
    ck_assert_int_eq(pthread_barrier_init(&start, NULL, N), 0);
    job jobs[N];
    pthread_t th[N];
    for (int i = 0; i < N; i++) {
        job_load(&jobs[i], i == 1 ? cfg_b : cfg_a);
        jobs[i].start = &start;
    }
    for (int i = 0; i < N; i++) ck_assert_int_eq(pthread_create(&th[i], NULL, job_run, &jobs[i]), 0);
    for (int i = 0; i < N; i++) ck_assert_int_eq(pthread_join(th[i], NULL), 0);
    pthread_barrier_destroy(&start);
    for (int i = 0; i < N; i++) ck_assert_msg(jobs[i].st == 0, "thread %d: %s", i, jobs[i].err);
    expect_same_results(alone_a.r, jobs[0].r, "thread 0 (a)");
    expect_same_results(alone_b.r, jobs[1].r, "thread 1 (b)");
    expect_same_results(alone_a.r, jobs[2].r, "thread 2 (a)");
    for (int i = 0; i < N; i++) {
        /* each run's time went to its own context */
        ck_assert(lmp_compress_times_get(&jobs[i].ctx)->apply > 0);
        job_free(&jobs[i]);
    }
    job_free(&alone_a);
    job_free(&alone_b);
    lmp_test_rmtree(tmpdir);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("context");
    TCase *tc = tcase_create("context");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, same_seed_same_stream_whatever_the_interleaving);
    tcase_add_test(tc, random_windows_follow_their_context);
    tcase_add_test(tc, verbosity_is_per_context);
    tcase_add_test(tc, errors_backend_and_interrupt_are_per_context);
    tcase_add_test(tc, strategy_failure_is_reported_from_its_context);
    suite_add_tcase(s, tc);
    TCase *runs = tcase_create("runs");
    tcase_set_timeout(runs, 300);
    tcase_add_test(runs, compare_runs_on_threads_match_runs_alone);
    suite_add_tcase(s, runs);
    return lmp_test_main(s);
}
