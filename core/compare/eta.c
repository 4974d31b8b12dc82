/* eta.c — see eta.h. */
#include "compare/eta.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static double mean_of(const lmp_eta_mean *m) { return m->count > 0 ? m->seconds / m->count : NAN; }

static void add_to(lmp_eta_mean *m, double seconds, double count)
{
    if (!(count > 0) || !isfinite(seconds) || seconds < 0) return;
    m->seconds += seconds;
    m->count += count;
}

static lmp_eta_entry *find(lmp_eta_entry *t, int n, uint64_t key)
{
    for (int i = 0; i < n; i++)
        if (t[i].key == key) return &t[i];
    return NULL;
}

/* The entry of key, added when there is room (a run of more distinct stages than that just
 * stops learning new ones: their costs stay guesses). */
static lmp_eta_entry *find_or_add(lmp_eta_entry *t, int *n, uint64_t key)
{
    lmp_eta_entry *x = find(t, *n, key);
    if (x || *n >= LMP_ETA_MAX_KEYS) return x;
    t[*n] = (lmp_eta_entry){.key = key};
    return &t[(*n)++];
}

void lmp_eta_init(lmp_eta *e, int64_t n_blocks, double calib_tokens, double eval_tokens)
{
    memset(e, 0, sizeof *e);
    e->n_blocks = n_blocks > 0 ? n_blocks : 1;
    e->calib_per_eval_token = eval_tokens > 0 ? calib_tokens / eval_tokens : 0;
}

void lmp_eta_reference(lmp_eta *e, double blocks_s, double tail_s)
{
    add_to(&e->eval_blocks, blocks_s, 1);
    add_to(&e->eval_tail, tail_s, 1);
    e->have_reference = 1;
}

void lmp_eta_learn(lmp_eta *e, const lmp_eta_job *job, const lmp_eta_measured *m)
{
    const double blocks = (double)m->blocks;
    if (job->kind != LMP_ETA_UNMODIFIED) {
        add_to(&e->eval_blocks, m->eval_blocks_s, 1);
        add_to(&e->eval_tail, m->eval_tail_s, 1);
        add_to(&e->other, m->other_s, blocks);
    }
    if (job->kind != LMP_ETA_PIPELINE) return;
    const int n = job->n_stages < LMP_ETA_MAX_STAGES ? job->n_stages : LMP_ETA_MAX_STAGES;
    for (int s = 0; s < n; s++) {
        lmp_eta_entry *x = find_or_add(e->stages, &e->n_stage_keys, job->stage_key[s]);
        if (x) add_to(&x->per_block, m->stage_s[s], blocks);
        x = find_or_add(e->strategies, &e->n_strategy_keys, job->strategy_key[s]);
        if (x) add_to(&x->per_block, m->stage_s[s], blocks);
    }
    if (job->calib == LMP_ETA_CALIB_ORIGINAL && e->original_warm) add_to(&e->calib_cached, m->calib_s, blocks);
    else if (job->calib != LMP_ETA_CALIB_NONE) add_to(&e->calib_fwd, m->calib_s, blocks);
    if (job->calib == LMP_ETA_CALIB_ORIGINAL) e->original_warm = 1;
}

/* The calibration forward's seconds per block: learned, else the reference's blocks scaled by
 * the tokens (a block forward costs about the same per token on either text). */
static double calib_fwd(const lmp_eta *e)
{
    double learned = mean_of(&e->calib_fwd);
    if (isfinite(learned)) return learned;
    return mean_of(&e->eval_blocks) / (double)e->n_blocks * e->calib_per_eval_token;
}

static double or_zero(double x) { return isfinite(x) ? x : 0; }

static double eval_cost(const lmp_eta *e) { return mean_of(&e->eval_blocks) + or_zero(mean_of(&e->eval_tail)); }

/* Seconds per block of the job's compression. */
static double compress_per_block(const lmp_eta *e, const lmp_eta_job *job, int warm, int *guessed)
{
    double calib = 0;
    if (job->calib == LMP_ETA_CALIB_COMPRESSED || (job->calib == LMP_ETA_CALIB_ORIGINAL && !warm)) calib = calib_fwd(e);
    else if (job->calib == LMP_ETA_CALIB_ORIGINAL) calib = or_zero(mean_of(&e->calib_cached));
    double per_block = calib + or_zero(mean_of(&e->other));
    const int n = job->n_stages < LMP_ETA_MAX_STAGES ? job->n_stages : LMP_ETA_MAX_STAGES;
    for (int s = 0; s < n; s++) {
        const lmp_eta_entry *x = find((lmp_eta_entry *)e->stages, e->n_stage_keys, job->stage_key[s]);
        if (!x) x = find((lmp_eta_entry *)e->strategies, e->n_strategy_keys, job->strategy_key[s]);
        if (x) {
            per_block += mean_of(&x->per_block);
            continue;
        }
        /* never run: a stage that reads statistics runs a forward over the windows to collect them */
        if (guessed) *guessed = 1;
        per_block += s < 32 && (job->observing >> s & 1u) ? calib_fwd(e) : 0;
    }
    return per_block;
}

double lmp_eta_cost(const lmp_eta *e, const lmp_eta_job *job, int warm, int *guessed)
{
    if (!e->have_reference) return NAN;
    if (job->kind == LMP_ETA_UNMODIFIED) return 0;
    const double L = (double)e->n_blocks;
    if (job->kind == LMP_ETA_EXTERNAL) return L * or_zero(mean_of(&e->other)) + eval_cost(e);
    return L * compress_per_block(e, job, warm, guessed) + eval_cost(e);
}

double lmp_eta_left(const lmp_eta *e, const lmp_eta_job *jobs, int n, int cur, double elapsed, int64_t blocks_done,
                    int *guessed)
{
    if (!e->have_reference) return NAN;
    int warm = e->original_warm;
    double left = 0;
    if (cur >= 0 && cur < n) {
        const lmp_eta_job *job = &jobs[cur];
        int guess = 0;
        const double expected = lmp_eta_cost(e, job, warm, &guess);
        const double tail = job->kind == LMP_ETA_UNMODIFIED ? 0 : or_zero(mean_of(&e->eval_tail));
        const double per_blocks = fmax(expected - tail, 0); /* compression and the blocks' evaluation */
        const double f = blocks_done <= 0 ? 0 : blocks_done >= e->n_blocks ? 1 : (double)blocks_done / (double)e->n_blocks;
        double mine = per_blocks * (1 - f);
        if (f > 0 && f < 1) {
            /* its own pace so far, trusted more as blocks finish (at once where the model guessed) */
            const double pace = elapsed / f * (1 - f), w = guess ? fmin(1, 4 * f) : f;
            mine = (1 - w) * mine + w * pace;
            if (w < 1 && guessed) *guessed |= guess;
        } else if (f == 0 && guessed) {
            *guessed |= guess;
        }
        left += mine + tail;
        warm |= job->calib == LMP_ETA_CALIB_ORIGINAL;
    }
    for (int j = cur + 1; j < n; j++) {
        left += lmp_eta_cost(e, &jobs[j], warm, guessed);
        warm |= jobs[j].calib == LMP_ETA_CALIB_ORIGINAL && jobs[j].kind == LMP_ETA_PIPELINE;
    }
    return left;
}

void lmp_eta_format(double seconds, int guessed, char *out, size_t n)
{
    if (!n) return;
    out[0] = 0;
    if (!isfinite(seconds)) return;
    if (seconds < 0) seconds = 0;
    const char *note = guessed ? " (a guess until every strategy has run)" : "";
    if (seconds >= 90) snprintf(out, n, "run ~%.0f min left%s", seconds / 60.0, note);
    else snprintf(out, n, "run ~%.0f s left%s", seconds, note);
}
