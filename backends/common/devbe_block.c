/* devbe_block.c — a block on the device (plugin.h's lmp_block_job), the host half both device
 * backends share (devbe.h: devbe_block_run).
 *
 * What the per-op path stages on every call (the weights, each op's inputs and outputs) is here
 * copied once: the job's weights, norms and RoPE tables are uploaded when the call starts, the
 * statistics' device copies are initialised from the caller's arrays, and then every window goes
 * through the ops on buffers that live on the device for the whole call ([T, cols] per slot of
 * the block).  Per window only its input comes in and, when the caller wants it, its output goes
 * out; the statistics come back once at the end.  So the bytes moved per block are the weights,
 * the windows' inputs and outputs, and the statistics — nothing per op.
 *
 * The job is checked before anything is allocated: an op kind this file does not run, a backend
 * that lacks one of the block kernels, or a size the backend's int-indexed kernels (norms,
 * activations, reductions, X^T X, attention) cannot take is LMP_EUNSUPPORTED with the reason
 * named, and the core runs the block op by op.  The block kernels themselves (copy, bias, add,
 * RoPE, windowed attention, sqsum) index with 64-bit integers. */
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "devbe.h"

#define FAIL(d, st, ...) DEVBE_FAIL(&(d)->err, st, __VA_ARGS__)

#define DEVBE_STACK_ROWS 2048 /* rows per X^T X update (calib_stats.h's LMP_HESSIAN_ROWS) */

static const char *bop_name(int k)
{
    static const char *const names[LMP_BOP_KINDS] = {
        [LMP_BOP_RMSNORM] = "rmsnorm", [LMP_BOP_LAYERNORM] = "layernorm", [LMP_BOP_LINEAR] = "linear",
        [LMP_BOP_ROPE] = "rope",       [LMP_BOP_SCALE] = "scale",         [LMP_BOP_ATTENTION] = "attention",
        [LMP_BOP_SWIGLU] = "swiglu",   [LMP_BOP_GEGLU] = "geglu",         [LMP_BOP_GELU] = "gelu",
        [LMP_BOP_ADD] = "add",         [LMP_BOP_OBSERVE] = "observe"};
    return k >= 0 && k < LMP_BOP_KINDS ? names[k] : "unknown";
}

/* The device copies of one job: a buffer per slot, per weight array, per statistic array. */
enum { STAT_ARRAYS = 6 }; /* hessian, absmax, min, max, sum, sqsum */
typedef struct block_mem {
    devbe_mem buf[LMP_BJOB_MAX_BUFS];
    devbe_mem *w, *b, *table; /* [n_ops] */
    devbe_mem *stat;          /* [n_stats * STAT_ARRAYS] */
    /* X^T X's rows stacked up to stack_cap rows per SYRK (as the CPU path stacks windows: SYRK
     * on a few hundred rows runs far below its speed on a couple of thousand) */
    devbe_mem *stack;         /* [n_stats] */
    int64_t *stacked;         /* [n_stats]: rows waiting */
    int64_t stack_cap;
    int n_ops, n_stats;
} block_mem;

static float **stat_arrays(lmp_bstat *s, float **a)
{
    a[0] = s->hessian;
    a[1] = s->absmax;
    a[2] = s->min;
    a[3] = s->max;
    a[4] = s->sum;
    a[5] = s->sqsum;
    return a;
}

static int64_t stat_len(const lmp_bstat *s, int k) { return k == 0 ? s->cols * s->cols : s->cols; }

static int fits_int(double v) { return v >= 0 && v <= (double)INT_MAX; }

/* Every reason to decline, before anything is allocated. */
static int check_job(devbe *d, const lmp_block_job *job)
{
    const devbe_dev *v = d->dev;
    if (!v->copy || !v->zero || !v->add_bias || !v->add || !v->mul || !v->scale || !v->rope_part || !v->attention_window ||
        !v->sqsum_cols || !v->sync)
        return FAIL(d, LMP_EUNSUPPORTED, "block path: this backend has no block kernels");
    if (!job || job->struct_size < sizeof(lmp_block_job) || job->n_bufs < 1 || job->n_bufs > LMP_BJOB_MAX_BUFS ||
        job->n_ops < 0 || job->n_stats < 0 || job->n_windows < 0 || job->T < 0 || !job->x ||
        job->x_buf < 0 || job->x_buf >= job->n_bufs || job->y_buf < 0 || job->y_buf >= job->n_bufs)
        return FAIL(d, LMP_EINVAL, "block path: a malformed job");
    const double T = (double)job->T;
    for (int i = 0; i < job->n_bufs; i++)
        if (job->buf_cols[i] < 0 || !fits_int(T * (double)job->buf_cols[i]))
            return FAIL(d, LMP_EUNSUPPORTED, "block path: buffer %d of %lld x %lld exceeds the int range of the "
                        "norm and activation kernels", i, (long long)job->T, (long long)job->buf_cols[i]);
    for (int i = 0; i < job->n_ops; i++) {
        const lmp_bop *o = &job->ops[i];
        if (o->kind < 0 || o->kind >= LMP_BOP_KINDS)
            return FAIL(d, LMP_EUNSUPPORTED, "block path: op %d is of kind %d, which this backend does not run", i,
                        (int)o->kind);
        for (int k = 0; k < 3; k++)
            if (o->in[k] < 0 || o->in[k] >= job->n_bufs) return FAIL(d, LMP_EINVAL, "block path: op %d (%s) reads "
                                                                      "buffer %d", i, bop_name(o->kind), o->in[k]);
        if (o->out < 0 || o->out >= job->n_bufs)
            return FAIL(d, LMP_EINVAL, "block path: op %d (%s) writes buffer %d", i, bop_name(o->kind), o->out);
        if ((o->kind == LMP_BOP_LINEAR || o->kind == LMP_BOP_RMSNORM || o->kind == LMP_BOP_LAYERNORM) && !o->w)
            return FAIL(d, LMP_EINVAL, "block path: op %d (%s) has no weight", i, bop_name(o->kind));
        if (o->kind == LMP_BOP_ROPE && (!o->table || o->n_rot < 0 || o->n_rot > o->head_dim || o->n_rot % 2))
            return FAIL(d, LMP_EINVAL, "block path: op %d (rope) has no table or n_rot %lld", i, (long long)o->n_rot);
        if (o->kind == LMP_BOP_ATTENTION) {
            if (o->kv_heads <= 0 || o->head_dim <= 0 || o->heads % o->kv_heads != 0 || o->window < 0 || o->softcap < 0)
                return FAIL(d, LMP_EINVAL, "block path: op %d (attention) of a bad shape", i);
            if (o->head_dim > d->att_max_hd || job->T > d->att_max_T)
                return FAIL(d, LMP_EUNSUPPORTED, "block path: attention with head_dim %lld over %lld tokens is past "
                            "the kernel's limits", (long long)o->head_dim, (long long)job->T);
        }
        if (o->kind == LMP_BOP_LINEAR &&
            (!fits_int((double)o->n_out) || !fits_int((double)o->cols) || !fits_int(T * (double)o->n_out)))
            return FAIL(d, LMP_EUNSUPPORTED, "block path: a linear [%lld, %lld] exceeds the GEMM's int range",
                        (long long)o->n_out, (long long)o->cols);
        if (o->kind == LMP_BOP_OBSERVE) {
            if (o->stat < 0 || o->stat >= job->n_stats)
                return FAIL(d, LMP_EINVAL, "block path: op %d observes into statistic %d", i, o->stat);
            const lmp_bstat *s = &job->stats[o->stat];
            if (s->cols != o->cols) return FAIL(d, LMP_EINVAL, "block path: statistic %d is of %lld columns, its input "
                                                "%lld", o->stat, (long long)s->cols, (long long)o->cols);
            if (s->hessian && !fits_int((double)s->cols * (double)s->cols))
                return FAIL(d, LMP_EUNSUPPORTED, "block path: a %lld x %lld X^T X exceeds the SYRK's int range",
                            (long long)s->cols, (long long)s->cols);
        }
    }
    return LMP_OK;
}

static int upload(devbe *d, const float *host, int64_t n, devbe_mem *out)
{
    int st = d->dev->alloc(d, (size_t)(n > 0 ? n : 1) * sizeof(float), out);
    if (st || n == 0) return st;
    d->moved[0] += (uint64_t)n * sizeof(float);
    return d->dev->write(d, *out, host, 1, n, n);
}

static int download(devbe *d, devbe_mem m, float *host, int64_t n)
{
    if (n == 0) return LMP_OK;
    d->moved[1] += (uint64_t)n * sizeof(float);
    return d->dev->read(d, m, host, 1, n, n);
}

static void mem_release(devbe *d, block_mem *m)
{
    const lmp_host *h = d->err.host;
    for (int i = 0; i < LMP_BJOB_MAX_BUFS; i++)
        if (m->buf[i]) d->dev->release(d, m->buf[i]);
    for (int i = 0; i < m->n_ops; i++) {
        /* a table or weight shared by two ops is released once: later ops alias the first */
        if (m->w && m->w[i]) d->dev->release(d, m->w[i]);
        if (m->b && m->b[i]) d->dev->release(d, m->b[i]);
        if (m->table && m->table[i]) d->dev->release(d, m->table[i]);
    }
    for (int i = 0; m->stat && i < m->n_stats * STAT_ARRAYS; i++)
        if (m->stat[i]) d->dev->release(d, m->stat[i]);
    for (int i = 0; m->stack && i < m->n_stats; i++)
        if (m->stack[i]) d->dev->release(d, m->stack[i]);
    if (m->stack) h->free(d->err.hctx, m->stack);
    if (m->stacked) h->free(d->err.hctx, m->stacked);
    if (m->w) h->free(d->err.hctx, m->w);
    if (m->b) h->free(d->err.hctx, m->b);
    if (m->table) h->free(d->err.hctx, m->table);
    if (m->stat) h->free(d->err.hctx, m->stat);
}

/* Everything the job needs on the device: slot buffers, weights (each array once), tables,
 * statistics initialised from the caller's arrays. */
static int mem_setup(devbe *d, const lmp_block_job *job, int64_t rows, block_mem *m)
{
    const lmp_host *h = d->err.host;
    m->n_ops = job->n_ops;
    m->n_stats = job->n_stats;
    const size_t ops = (size_t)(job->n_ops > 0 ? job->n_ops : 1), stats = (size_t)(job->n_stats > 0 ? job->n_stats : 1);
    m->w = h->alloc(d->err.hctx, ops * sizeof *m->w);
    m->b = h->alloc(d->err.hctx, ops * sizeof *m->b);
    m->table = h->alloc(d->err.hctx, ops * sizeof *m->table);
    m->stat = h->alloc(d->err.hctx, stats * STAT_ARRAYS * sizeof *m->stat);
    m->stack = h->alloc(d->err.hctx, stats * sizeof *m->stack);
    m->stacked = h->alloc(d->err.hctx, stats * sizeof *m->stacked);
    if (!m->w || !m->b || !m->table || !m->stat || !m->stack || !m->stacked)
        return FAIL(d, LMP_ENOMEM, "block path: out of memory");
    /* whole batches of rows, about DEVBE_STACK_ROWS, within the SYRK's int range */
    m->stack_cap = rows * (rows < DEVBE_STACK_ROWS ? DEVBE_STACK_ROWS / rows : 1);
    int st = LMP_OK;
    for (int i = 0; !st && i < job->n_bufs; i++)
        st = d->dev->alloc(d, (size_t)((rows * job->buf_cols[i]) > 0 ? rows * job->buf_cols[i] : 1) * sizeof(float),
                           &m->buf[i]);
    for (int i = 0; !st && i < job->n_ops; i++) {
        const lmp_bop *o = &job->ops[i];
        int64_t nw = 0, nb = 0;
        if (o->kind == LMP_BOP_LINEAR) nw = o->n_out * o->cols, nb = o->n_out;
        if (o->kind == LMP_BOP_RMSNORM || o->kind == LMP_BOP_LAYERNORM) nw = nb = o->cols;
        if (o->w && nw) st = upload(d, o->w, nw, &m->w[i]);
        if (!st && o->b && nb) st = upload(d, o->b, nb, &m->b[i]);
        if (!st && o->kind == LMP_BOP_ROPE) {
            int shared = -1; /* q and k turn with the same table: one copy */
            for (int j = 0; j < i && shared < 0; j++)
                if (job->ops[j].kind == LMP_BOP_ROPE && job->ops[j].table == o->table && job->ops[j].n_rot == o->n_rot &&
                    m->table[j])
                    shared = j;
            if (shared < 0) st = upload(d, o->table, job->T * o->n_rot, &m->table[i]);
        }
    }
    for (int s = 0; !st && s < job->n_stats; s++) {
        float *a[STAT_ARRAYS];
        stat_arrays(&job->stats[s], a);
        for (int k = 0; !st && k < STAT_ARRAYS; k++) {
            if (!a[k]) continue;
            const int64_t n = stat_len(&job->stats[s], k);
            int64_t nz = 0; /* a fresh sum or X^T X is zeros: made on the device, not copied */
            while (nz < n && a[k][nz] == 0.0f && !signbit(a[k][nz])) nz++;
            if (nz < n) {
                st = upload(d, a[k], n, &m->stat[s * STAT_ARRAYS + k]);
            } else if (!(st = d->dev->alloc(d, (size_t)(n > 0 ? n : 1) * sizeof(float), &m->stat[s * STAT_ARRAYS + k]))) {
                st = d->dev->zero(d, m->stat[s * STAT_ARRAYS + k], n);
            }
        }
        const int64_t C = job->stats[s].cols;
        while (job->stats[s].hessian && m->stack_cap > rows && !fits_int((double)m->stack_cap * (double)C))
            m->stack_cap -= rows;
        if (!st && job->stats[s].hessian && m->stack_cap > rows)
            st = d->dev->alloc(d, (size_t)(m->stack_cap * (C > 0 ? C : 1)) * sizeof(float), &m->stack[s]);
    }
    return st;
}

/* The table op i turns with: its own copy, or the first op's that had the same table. */
static devbe_mem table_of(const lmp_block_job *job, const block_mem *m, int i)
{
    if (m->table[i]) return m->table[i];
    for (int j = 0; j < i; j++)
        if (job->ops[j].kind == LMP_BOP_ROPE && job->ops[j].table == job->ops[i].table && m->table[j]) return m->table[j];
    return NULL;
}

/* X^T X of the rows stacked for statistic i, and the stack emptied. */
static int flush_stack(devbe *d, const lmp_block_job *job, block_mem *m, int i)
{
    int st = LMP_OK;
    if (m->stacked[i] > 0)
        st = d->dev->xtx_accum(d, (int)m->stacked[i], (int)job->stats[i].cols, job->stats[i].alpha, m->stack[i],
                               m->stat[i * STAT_ARRAYS]);
    m->stacked[i] = 0;
    return st;
}

static int observe(devbe *d, const lmp_block_job *job, block_mem *m, const lmp_bop *o, int64_t rows, devbe_mem x)
{
    const lmp_bstat *s = &job->stats[o->stat];
    devbe_mem const *a = &m->stat[o->stat * STAT_ARRAYS];
    const int T = (int)rows, C = (int)o->cols;
    int st = LMP_OK;
    if (s->hessian && !m->stack[o->stat]) {
        st = d->dev->xtx_accum(d, T, C, s->alpha, x, a[0]);
    } else if (s->hessian) { /* stacked, and SYRK'd when another batch would not fit */
        if (m->stacked[o->stat] + rows > m->stack_cap) st = flush_stack(d, job, m, o->stat);
        if (!st) st = d->dev->copy(d, m->stack[o->stat], m->stacked[o->stat] * o->cols, x, rows * o->cols);
        m->stacked[o->stat] += rows;
    }
    if (!st && s->absmax) st = d->dev->reduce_cols(d, LMP_REDUCE_ABSMAX, T, C, x, a[1]);
    if (!st && s->min) st = d->dev->reduce_cols(d, LMP_REDUCE_MIN, T, C, x, a[2]);
    if (!st && s->max) st = d->dev->reduce_cols(d, LMP_REDUCE_MAX, T, C, x, a[3]);
    if (!st && s->sum) st = d->dev->reduce_cols(d, LMP_REDUCE_SUM, T, C, x, a[4]);
    if (!st && s->sqsum) st = d->dev->sqsum_cols(d, rows, o->cols, x, a[5]);
    return st;
}

/* Op i of the job on the buffers of `batch` windows already on the device (T = batch x the job's
 * T rows: every op but RoPE and attention sees the windows as one matrix). */
static int run_op(devbe *d, const lmp_block_job *job, block_mem *m, int i, int64_t batch)
{
    const devbe_dev *v = d->dev;
    const lmp_bop *o = &job->ops[i];
    const int64_t T = batch * job->T;
    devbe_mem in = m->buf[o->in[0]], out = m->buf[o->out];
    const int64_t n = T * (o->kind == LMP_BOP_RMSNORM ? o->rows : 1) * o->cols; /* elements of in[0] */
    int st = LMP_OK;
    switch (o->kind) {
    case LMP_BOP_RMSNORM:
        if (out != in) st = v->copy(d, out, 0, in, n);
        if (!st) st = v->rmsnorm(d, (int)(T * o->rows), (int)o->cols, out, m->w[i], o->eps);
        if (!st && m->b[i]) st = v->add_bias(d, T * o->rows, o->cols, out, m->b[i]);
        return st;
    case LMP_BOP_LAYERNORM:
        if (out != in) st = v->copy(d, out, 0, in, n);
        return st ? st : v->layernorm(d, (int)T, (int)o->cols, out, m->w[i], m->b[i], o->eps);
    case LMP_BOP_LINEAR:
        st = v->gemm(d, 0, 1, (int)T, (int)o->n_out, (int)o->cols, 1.0f, in, (int)o->cols, m->w[i], (int)o->cols, 0.0f,
                     out);
        return st || !m->b[i] ? st : v->add_bias(d, T, o->n_out, out, m->b[i]);
    case LMP_BOP_ROPE:
        return o->n_rot ? v->rope_part(d, batch, job->T, o->rows, o->head_dim, o->n_rot, table_of(job, m, i), in)
                        : LMP_OK;
    case LMP_BOP_SCALE:
        return v->scale(d, n, in, o->scale);
    case LMP_BOP_ATTENTION:
        if (batch == 1 && !o->window && !o->softcap) /* one window: the backend's tuned plain attention */
            return v->attention(d, (int)T, (int)o->heads, (int)o->kv_heads, (int)o->head_dim, in, m->buf[o->in[1]],
                                m->buf[o->in[2]], out);
        if (v->attention_batch && !o->window && !o->softcap)
            return v->attention_batch(d, batch, job->T, o->heads, o->kv_heads, o->head_dim, in, m->buf[o->in[1]],
                                      m->buf[o->in[2]], out);
        return v->attention_window(d, batch, job->T, o->heads, o->kv_heads, o->head_dim, o->window, o->softcap, in,
                                   m->buf[o->in[1]], m->buf[o->in[2]], out);
    case LMP_BOP_SWIGLU:
        if (out != in) st = v->copy(d, out, 0, in, n);
        return st ? st : v->swiglu(d, (int)n, out, m->buf[o->in[1]]);
    case LMP_BOP_GEGLU:
    case LMP_BOP_GELU:
        if (out != in) st = v->copy(d, out, 0, in, n);
        if (!st) st = v->gelu(d, (int)n, out);
        return st || o->kind == LMP_BOP_GELU ? st : v->mul(d, n, out, m->buf[o->in[1]]);
    case LMP_BOP_ADD:
        return v->add(d, n, in, m->buf[o->in[1]], out);
    case LMP_BOP_OBSERVE:
        return observe(d, job, m, o, T, in);
    case LMP_BOP_KINDS:
        break;
    }
    return FAIL(d, LMP_EINVAL, "block path: op %d of unknown kind %d", i, (int)o->kind);
}

int devbe_block_run(void *self, const lmp_block_job *job)
{
    devbe *d = self;
    int st = check_job(d, job);
    if (st) return st;
    if (job->n_windows == 0 || job->T == 0) return LMP_OK;
    /* Windows go through in batches of about d->block_rows rows (as the CPU path stacks rows for
     * X^T X): fewer, larger launches on a GPU; every buffer of a batch stays within the int range
     * the checks above hold one window to. */
    int64_t batch = job->T >= d->block_rows ? 1 : d->block_rows / job->T;
    if (batch > job->n_windows) batch = job->n_windows;
    for (int i = 0; i < job->n_bufs && batch > 1; i++)
        while (batch > 1 && !fits_int((double)batch * (double)job->T * (double)job->buf_cols[i])) batch /= 2;
    for (int i = 0; i < job->n_ops && batch > 1; i++)
        while (batch > 1 && job->ops[i].kind == LMP_BOP_RMSNORM &&
               !fits_int((double)batch * (double)job->T * (double)job->ops[i].rows))
            batch /= 2;
    block_mem m;
    memset(&m, 0, sizeof m);
    st = mem_setup(d, job, batch * job->T, &m);
    if (st == LMP_ENOMEM) /* nothing written yet: the core can still run the block op by op */
        st = FAIL(d, LMP_EUNSUPPORTED, "block path: the block and its buffers do not fit the device's memory");
    const int64_t xw = job->T * job->buf_cols[job->x_buf], yw = job->T * job->buf_cols[job->y_buf];
    for (int64_t w = 0; !st && w < job->n_windows; w += batch) {
        const int64_t b = job->n_windows - w < batch ? job->n_windows - w : batch;
        if (xw) {
            d->moved[0] += (uint64_t)(b * xw) * sizeof(float);
            st = d->dev->write(d, m.buf[job->x_buf], job->x + w * xw, 1, b * xw, b * xw);
        }
        for (int i = 0; !st && i < job->n_ops; i++) st = run_op(d, job, &m, i, b);
        /* the read blocks: these windows' inputs (perhaps the same memory as their outputs) are
         * then no longer needed by the queued write */
        if (!st && job->y) st = download(d, m.buf[job->y_buf], job->y + w * yw, b * yw);
    }
    for (int s = 0; !st && s < job->n_stats; s++) st = flush_stack(d, job, &m, s);
    for (int s = 0; !st && s < job->n_stats; s++) st = flush_stack(d, job, &m, s); /* the rows still stacked */
    for (int s = 0; !st && s < job->n_stats; s++) {
        float *a[STAT_ARRAYS];
        stat_arrays(&job->stats[s], a);
        for (int k = 0; !st && k < STAT_ARRAYS; k++)
            if (a[k]) st = download(d, m.stat[s * STAT_ARRAYS + k], a[k], stat_len(&job->stats[s], k));
        if (!st && a[0]) devbe_mirror_lower(job->stats[s].cols, a[0]); /* SYRK wrote the lower triangle */
    }
    /* every queued copy from host memory has run before the caller may free it */
    int fin = d->dev->sync(d);
    if (!st) st = fin;
    mem_release(d, &m);
    return st;
}

void devbe_bytes_moved(void *self, uint64_t moved[2])
{
    const devbe *d = self;
    moved[0] = d->moved[0];
    moved[1] = d->moved[1];
}
