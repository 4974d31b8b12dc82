/* eval.c — see eval.h. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/error.h"
#include "eval/eval.h"
#include "model/forward.h"
#include "plugin/host.h"

static int64_t argmax(const float *x, int64_t n)
{
    int64_t best = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

void lmp_score_window(const float *ref, const float *var, const int32_t *tok, int64_t L, int64_t V,
                      lmp_score *s)
{
    for (int64_t t = 0; t + 1 < L; t++) {
        const float *r = ref + t * V, *q = var + t * V;
        s->nll_sum -= q[tok[t + 1]];
        if (r != q) {
            double kl = 0;
            for (int64_t v = 0; v < V; v++) kl += exp((double)r[v]) * ((double)r[v] - (double)q[v]);
            s->kld_sum += kl;
            s->top1_hits += argmax(r, V) == argmax(q, V);
        } else {
            s->top1_hits++;
        }
        s->scored++;
    }
    s->windows++;
}

int lmp_ref_logprobs_init(lmp_ctx *ctx, lmp_ref_logprobs *c, int64_t n_windows, int64_t window_floats)
{
    memset(c, 0, sizeof *c);
    c->fd = -1;
    c->n_windows = n_windows;
    c->window_floats = window_floats;
    c->have = calloc((size_t)n_windows + 1, 1);
    if (!c->have) return lmp_fail(LMP_ENOMEM, "out of memory");
    int64_t bytes = n_windows * window_floats * (int64_t)sizeof(float);
    if (bytes <= LMP_REF_MEMORY_BUDGET) {
        c->mem = malloc((size_t)bytes + 1);
        if (!c->mem) return lmp_fail(LMP_ENOMEM, "out of memory for the reference log-probabilities");
        return 0;
    }
    const char *dir = getenv("TMPDIR");
    char path[4096];
    snprintf(path, sizeof path, "%s/lmpress-ref-XXXXXX", dir && *dir ? dir : "/tmp");
    c->fd = mkstemp(path);
    if (c->fd < 0)
        return lmp_fail(LMP_EIO, "%s: cannot create a file for %.0f MB of reference log-probabilities: %s",
                        path, (double)bytes / 1e6, strerror(errno));
    unlink(path); /* gone with the process, whatever way it ends */
    lmp_log(ctx, LMP_LOG_DEBUG, "reference log-probabilities: %.0f MB in an unlinked file in %s",
            (double)bytes / 1e6, dir && *dir ? dir : "/tmp");
    return 0;
}

void lmp_ref_logprobs_free(lmp_ref_logprobs *c)
{
    free(c->have);
    free(c->mem);
    if (c->fd >= 0) close(c->fd);
    memset(c, 0, sizeof *c);
    c->fd = -1;
}

/* Whole-buffer pread/pwrite: both may move fewer bytes than asked. */
static int file_io(int fd, int writing, float *buf, int64_t n_floats, int64_t offset)
{
    char *p = (char *)buf;
    size_t left = (size_t)n_floats * sizeof *buf;
    off_t off = (off_t)offset;
    while (left) {
        ssize_t k = writing ? pwrite(fd, p, left, off) : pread(fd, p, left, off);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0)
            return lmp_fail(LMP_EIO, "the reference log-probabilities' temporary file: %s",
                            k < 0 ? strerror(errno) : "short read");
        p += k;
        left -= (size_t)k;
        off += k;
    }
    return 0;
}

int lmp_ref_window(const lmp_backend *be, const lmp_model *m, const lmp_block *ref_blocks,
                            lmp_ref_logprobs *c, int64_t w, const int32_t *tok, int64_t L, float *ref)
{
    if (c && c->have[w]) {
        if (c->mem) {
            memcpy(ref, c->mem + w * c->window_floats, (size_t)c->window_floats * sizeof *ref);
            return 0;
        }
        return file_io(c->fd, 0, ref, c->window_floats, w * c->window_floats * (int64_t)sizeof *ref);
    }
    int st = lmp_forward(be, m, ref_blocks, tok, L, 1, ref);
    if (st || !c) return st;
    if (c->mem) memcpy(c->mem + w * c->window_floats, ref, (size_t)c->window_floats * sizeof *ref);
    else if ((st = file_io(c->fd, 1, ref, c->window_floats, w * c->window_floats * (int64_t)sizeof *ref))) return st;
    c->have[w] = 1;
    return 0;
}

int64_t lmp_eval_windows(int64_t n_ids, int64_t L, int64_t max_windows)
{
    int64_t n_win = n_ids / L;
    return max_windows > 0 && n_win > max_windows ? max_windows : n_win;
}

int lmp_eval_text(lmp_ctx *ctx, const lmp_backend *be, const lmp_model *m, const lmp_block *ref_blocks,
                  const lmp_model *vm, const lmp_block *var_blocks, lmp_ref_logprobs *cache, const int32_t *ids,
                  int64_t n_ids, int64_t L, int64_t max_windows, const char *what, lmp_score *out)
{
    const int64_t V = m->arch.vocab;
    int64_t n_win = lmp_eval_windows(n_ids, L, max_windows);
    if (n_win == 0)
        return lmp_fail(LMP_EINVAL, "%s: %lld tokens, too short for one evaluation window of %lld",
                        what, (long long)n_ids, (long long)L);
    if (vm->arch.vocab != V)
        return lmp_fail(LMP_EINVAL, "%s: the variant's model %s has %lld tokens, the reference %s %lld", what,
                        vm->path, (long long)vm->arch.vocab, m->path, (long long)V);
    memset(out, 0, sizeof *out);
    const int same = var_blocks == ref_blocks && vm == m;
    float *ref = malloc((size_t)(L * V) * sizeof *ref), *var = same ? NULL : malloc((size_t)(L * V) * sizeof *var);
    int st = ref && (same || var) ? 0 : lmp_fail(LMP_ENOMEM, "out of memory for %lld x %lld log-probabilities", (long long)L, (long long)V);
    char label[512];
    snprintf(label, sizeof label, "eval %s: window", what);
    for (int64_t w = 0; w < n_win && !st; w++) {
        lmp_progress(ctx, label, w, n_win);
        if (lmp_host_interrupted(ctx)) {
            st = lmp_fail(LMP_EABORTED, "interrupted");
            break;
        }
        const int32_t *tok = ids + w * L;
        st = lmp_ref_window(be, m, ref_blocks, cache, w, tok, L, ref);
        if (!st && !same) st = lmp_forward(be, vm, var_blocks, tok, L, 1, var);
        if (!st) lmp_score_window(ref, same ? ref : var, tok, L, V, out);
    }
    if (!st) lmp_progress(ctx, label, n_win, n_win);
    free(ref);
    free(var);
    return st;
}
