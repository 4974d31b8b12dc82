/* block_store.c — see block_store.h.
 *
 * A block's record in the file, each array only when the block has it, in this order:
 *   per linear  the grid's scales [n_scales] f32, zeros [n_scales] f32, g_idx [in] i32;
 *               W as codes (code - lowest code, 4 or 8 bits, each row starting on a byte) and,
 *               when some weight is -0 where its code gives +0, a bit per weight marking them;
 *               or W as f32 [out, in]; b [out], in_shift [in], in_scale [in] f32; the mask [out, in] in
 *               bits; shift_bias [out] f64
 *   per norm    w [dim], b [dim] f32
 * The tables (names, roles, shapes, the grid's spec, which arrays there are) stay in memory. */
#include "model/block_store.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/error.h"
#include "base/spill.h"
#include "model/grid_codes.h"

enum { HAS_B = 1, HAS_IN_SHIFT = 2, HAS_IN_SCALE = 4, HAS_MASK = 8, HAS_SHIFT_BIAS = 16, HAS_ZEROS = 32, HAS_GIDX = 64,
       HAS_NEG_ZERO = 128 };

typedef struct stored_linear {
    lmp_linear meta;  /* its name (owned) and scalars; every array and the grid NULL */
    unsigned has;     /* HAS_* */
    int has_grid;
    lmp_wspec spec;   /* the grid's, when has_grid */
    int64_t n_scales;
    int code_bits;    /* W as codes of 4 or 8 bits; 0: as f32 */
    float code_lo;    /* the lowest code, stored as 0 */
} stored_linear;

typedef struct stored_norm {
    lmp_norm meta;    /* its name (owned) and dim; w and b NULL */
    int has_b;
} stored_norm;

typedef struct stored_block {
    int stored;
    lmp_block meta;   /* index, n_blocks and the counts */
    stored_linear *lin;
    stored_norm *norm;
    int64_t at;       /* where its record starts in the file */
} stored_block;

struct lmp_block_store {
    int fd;
    const char *what;
    int64_t n, end, f32_bytes;
    stored_block *blocks;
};

int lmp_block_store_open(lmp_ctx *ctx, int64_t n_blocks, const char *what, lmp_block_store **out)
{
    *out = NULL;
    lmp_block_store *s = calloc(1, sizeof *s);
    if (!s || !(s->blocks = calloc((size_t)n_blocks + 1, sizeof *s->blocks))) {
        free(s);
        return lmp_fail(LMP_ENOMEM, "out of memory for %s", what);
    }
    s->n = n_blocks;
    s->what = what;
    if ((s->fd = lmp_spill_tmpfile(ctx, 0, what)) < 0) {
        free(s->blocks);
        free(s);
        return LMP_EIO;
    }
    *out = s;
    return 0;
}

static void free_tables(stored_block *sb)
{
    for (int i = 0; sb->lin && i < sb->meta.n_linears; i++) free((char *)sb->lin[i].meta.name);
    for (int i = 0; sb->norm && i < sb->meta.n_norms; i++) {
        free((char *)sb->norm[i].meta.name);
        free(sb->norm[i].meta.fed);
    }
    free(sb->lin);
    free(sb->norm);
    memset(sb, 0, sizeof *sb);
}

void lmp_block_store_free(lmp_block_store *s)
{
    if (!s) return;
    for (int64_t b = 0; b < s->n; b++) free_tables(&s->blocks[b]);
    free(s->blocks);
    close(s->fd);
    free(s);
}

int64_t lmp_block_store_bytes(const lmp_block_store *s) { return s->end; }
int64_t lmp_block_store_f32_bytes(const lmp_block_store *s) { return s->f32_bytes; }

/* ---- putting a block ------------------------------------------------------------------------ */

static int put(lmp_block_store *s, const void *p, size_t bytes, int64_t as_f32)
{
    s->f32_bytes += as_f32;
    int st = bytes ? lmp_spill_fd_io(s->fd, 1, (void *)p, bytes, s->end, s->what) : 0;
    s->end += (int64_t)bytes;
    return st;
}

static size_t code_row_bytes(int bits, int64_t in) { return bits == 4 ? (size_t)(in + 1) / 2 : (size_t)in; }

/* W's codes into buf (code_row_bytes * out), and in negz a bit for each weight -0 whose code
 * gives +0 (a symmetric grid's code -0: grid_codes.h); *any_negz says whether there is one.
 * Nonzero when a weight is not on the grid, which leaves W to be stored as f32 (the export that
 * reads it then names the weight). */
static int encode_codes(const lmp_linear *l, int bits, float lo, unsigned char *buf, unsigned char *negz, int *any_negz,
                        int32_t *codes)
{
    const size_t rb = code_row_bytes(bits, l->in);
    const lmp_wgrid *g = l->grid;
    memset(buf, 0, rb * (size_t)l->out);
    *any_negz = 0;
    for (int64_t r = 0; r < l->out; r++) {
        if (lmp_grid_codes_row(l, r, codes)) {
            lmp_clear_error();
            return 1;
        }
        unsigned char *row = buf + rb * (size_t)r;
        for (int64_t c = 0; c < l->in; c++) {
            const unsigned v = (unsigned)(codes[c] - (int32_t)lo);
            if (bits == 8) row[c] = (unsigned char)v;
            else row[c / 2] |= (unsigned char)(v << (4 * (c & 1)));
            const int64_t i = r * l->in + c;
            if (l->w[i] == 0.0f && signbit(l->w[i])) {
                const int64_t k = lmp_wgrid_slice(g, l->in, r, c);
                if (!signbit(lmp_wgrid_value(&g->spec, (float)codes[c], g->scales[k], g->zeros ? g->zeros[k] : 0.0f))) {
                    negz[i / 8] |= (unsigned char)(1u << (i % 8));
                    *any_negz = 1;
                }
            }
        }
    }
    return 0;
}

static int put_weights(lmp_block_store *s, stored_linear *sl, const lmp_linear *l)
{
    const int64_t n = l->out * l->in;
    sl->code_bits = 0;
    if (l->grid) {
        float hi;
        lmp_grid_code_range(&l->grid->spec, &sl->code_lo, &hi);
        sl->code_bits = hi - sl->code_lo < 16 ? 4 : hi - sl->code_lo < 256 ? 8 : 0;
    }
    if (sl->code_bits) {
        const size_t bytes = code_row_bytes(sl->code_bits, l->in) * (size_t)l->out;
        unsigned char *buf = malloc(bytes + 1), *negz = calloc((size_t)(n + 7) / 8, 1);
        int32_t *codes = malloc((size_t)l->in * sizeof *codes);
        int any_negz = 0, st = buf && negz && codes ? 0 : lmp_fail(LMP_ENOMEM, "%s: out of memory", l->name);
        if (!st && encode_codes(l, sl->code_bits, sl->code_lo, buf, negz, &any_negz, codes)) {
            sl->code_bits = 0;
        } else if (!st) {
            st = put(s, buf, bytes, n * 4);
            if (!st && any_negz) {
                sl->has |= HAS_NEG_ZERO;
                st = put(s, negz, (size_t)(n + 7) / 8, 0);
            }
        }
        free(buf);
        free(negz);
        free(codes);
        if (st || sl->code_bits) return st;
    }
    return put(s, l->w, (size_t)n * sizeof *l->w, n * 4);
}

static int put_mask(lmp_block_store *s, const lmp_linear *l)
{
    const int64_t n = l->out * l->in;
    unsigned char *bits = calloc((size_t)(n + 7) / 8, 1);
    if (!bits) return lmp_fail(LMP_ENOMEM, "%s: out of memory", l->name);
    for (int64_t k = 0; k < n; k++) bits[k / 8] |= (unsigned char)((l->mask[k] != 0) << (k % 8));
    int st = put(s, bits, (size_t)(n + 7) / 8, n);
    free(bits);
    return st;
}

static int put_linear(lmp_block_store *s, stored_linear *sl, const lmp_linear *l)
{
    sl->meta = *l;
    sl->meta.name = strdup(l->name);
    sl->meta.w = sl->meta.b = sl->meta.in_shift = sl->meta.in_scale = NULL;
    sl->meta.mask = NULL;
    sl->meta.shift_bias = NULL;
    sl->meta.grid = NULL;
    sl->meta.params = NULL;
    sl->meta.stats = NULL;
    if (!sl->meta.name) return lmp_fail(LMP_ENOMEM, "out of memory");
    sl->has = (l->b ? HAS_B : 0) | (l->in_shift ? HAS_IN_SHIFT : 0) | (l->in_scale ? HAS_IN_SCALE : 0) |
              (l->mask ? HAS_MASK : 0) | (l->shift_bias ? HAS_SHIFT_BIAS : 0);
    const lmp_wgrid *g = l->grid;
    int st = 0;
    if ((sl->has_grid = g != NULL)) {
        sl->spec = g->spec;
        sl->n_scales = g->n_scales;
        sl->has |= (g->zeros ? HAS_ZEROS : 0) | (g->g_idx ? HAS_GIDX : 0);
        st = put(s, g->scales, (size_t)g->n_scales * 4, g->n_scales * 4);
        if (!st && g->zeros) st = put(s, g->zeros, (size_t)g->n_scales * 4, g->n_scales * 4);
        if (!st && g->g_idx) st = put(s, g->g_idx, (size_t)l->in * 4, l->in * 4);
    }
    if (!st) st = put_weights(s, sl, l);
    if (!st && l->b) st = put(s, l->b, (size_t)l->out * 4, l->out * 4);
    if (!st && l->in_shift) st = put(s, l->in_shift, (size_t)l->in * 4, l->in * 4);
    if (!st && l->in_scale) st = put(s, l->in_scale, (size_t)l->in * 4, l->in * 4);
    if (!st && l->mask) st = put_mask(s, l);
    if (!st && l->shift_bias) st = put(s, l->shift_bias, (size_t)l->out * 8, l->out * 8);
    return st;
}

int lmp_block_store_put(lmp_block_store *s, const lmp_block *blk)
{
    if (blk->index < 0 || blk->index >= s->n)
        return lmp_fail(LMP_EINVAL, "%s: block %d of a store of %lld", s->what, blk->index, (long long)s->n);
    stored_block *sb = &s->blocks[blk->index];
    free_tables(sb); /* a block stored again: its earlier record stays in the file, unread */
    sb->meta = *blk;
    sb->meta.linears = NULL;
    sb->meta.norms = NULL;
    sb->at = s->end;
    sb->lin = calloc((size_t)blk->n_linears + 1, sizeof *sb->lin);
    sb->norm = calloc((size_t)blk->n_norms + 1, sizeof *sb->norm);
    int st = sb->lin && sb->norm ? 0 : lmp_fail(LMP_ENOMEM, "out of memory");
    for (int i = 0; i < blk->n_linears && !st; i++) st = put_linear(s, &sb->lin[i], &blk->linears[i]);
    for (int i = 0; i < blk->n_norms && !st; i++) {
        const lmp_norm *nm = &blk->norms[i];
        stored_norm *sn = &sb->norm[i];
        sn->meta = *nm;
        sn->meta.w = sn->meta.b = NULL;
        sn->has_b = nm->b != NULL;
        sn->meta.fed = lmp_fed_dup(nm->fed, nm->n_fed);
        if (!(sn->meta.name = strdup(nm->name)) || (nm->n_fed && !sn->meta.fed)) st = lmp_fail(LMP_ENOMEM, "out of memory");
        if (!st) st = put(s, nm->w, (size_t)nm->dim * 4, nm->dim * 4);
        if (!st && nm->b) st = put(s, nm->b, (size_t)nm->dim * 4, nm->dim * 4);
    }
    if (st) free_tables(sb);
    else sb->stored = 1;
    return st;
}

/* ---- getting it back ------------------------------------------------------------------------- */

typedef struct reader {
    const lmp_block_store *s;
    int64_t at;
} reader;

/* A new array of `bytes` read from the record (NULL with the error set). */
static void *take(reader *rd, size_t bytes)
{
    void *p = malloc(bytes + 1);
    if (!p) return lmp_fail(LMP_ENOMEM, "out of memory reading %s", rd->s->what), NULL;
    if (lmp_spill_fd_io(rd->s->fd, 0, p, bytes, rd->at, rd->s->what)) {
        free(p);
        return NULL;
    }
    rd->at += (int64_t)bytes;
    return p;
}

static int get_weights(reader *rd, const stored_linear *sl, lmp_linear *l)
{
    const int64_t n = l->out * l->in;
    if (!sl->code_bits) return (l->w = take(rd, (size_t)n * 4)) ? 0 : LMP_EIO;
    const size_t rb = code_row_bytes(sl->code_bits, l->in);
    unsigned char *buf = take(rd, rb * (size_t)l->out);
    if (!buf || !(l->w = malloc((size_t)n * sizeof *l->w))) {
        free(buf);
        return lmp_fail(LMP_ENOMEM, "out of memory reading %s", rd->s->what);
    }
    const lmp_wgrid *g = l->grid;
    for (int64_t r = 0; r < l->out; r++) {
        const unsigned char *row = buf + rb * (size_t)r;
        for (int64_t c = 0; c < l->in; c++) {
            const unsigned v = sl->code_bits == 8 ? row[c] : (row[c / 2] >> (4 * (c & 1))) & 15u;
            const int64_t k = lmp_wgrid_slice(g, l->in, r, c);
            l->w[r * l->in + c] = lmp_wgrid_value(&g->spec, sl->code_lo + (float)v, g->scales[k], g->zeros ? g->zeros[k] : 0.0f);
        }
    }
    free(buf);
    if (!(sl->has & HAS_NEG_ZERO)) return 0;
    unsigned char *negz = take(rd, (size_t)(n + 7) / 8);
    if (!negz) return LMP_EIO;
    for (int64_t i = 0; i < n; i++)
        if (negz[i / 8] >> (i % 8) & 1u) l->w[i] = -0.0f;
    free(negz);
    return 0;
}

static int get_linear(reader *rd, const stored_linear *sl, lmp_linear *l)
{
    *l = sl->meta;
    if (!(l->name = strdup(sl->meta.name))) return lmp_fail(LMP_ENOMEM, "out of memory");
    if (sl->has_grid) {
        lmp_wgrid *g = l->grid = calloc(1, sizeof *g);
        if (!g) return lmp_fail(LMP_ENOMEM, "out of memory");
        g->spec = sl->spec;
        g->n_scales = sl->n_scales;
        if (!(g->scales = take(rd, (size_t)g->n_scales * 4))) return LMP_EIO;
        if ((sl->has & HAS_ZEROS) && !(g->zeros = take(rd, (size_t)g->n_scales * 4))) return LMP_EIO;
        if ((sl->has & HAS_GIDX) && !(g->g_idx = take(rd, (size_t)l->in * 4))) return LMP_EIO;
    }
    if (get_weights(rd, sl, l)) return LMP_EIO;
    if ((sl->has & HAS_B) && !(l->b = take(rd, (size_t)l->out * 4))) return LMP_EIO;
    if ((sl->has & HAS_IN_SHIFT) && !(l->in_shift = take(rd, (size_t)l->in * 4))) return LMP_EIO;
    if ((sl->has & HAS_IN_SCALE) && !(l->in_scale = take(rd, (size_t)l->in * 4))) return LMP_EIO;
    if (sl->has & HAS_MASK) {
        const int64_t n = l->out * l->in;
        unsigned char *bits = take(rd, (size_t)(n + 7) / 8);
        if (!bits || !(l->mask = malloc((size_t)n))) {
            free(bits);
            return lmp_fail(LMP_ENOMEM, "out of memory reading %s", rd->s->what);
        }
        for (int64_t k = 0; k < n; k++) l->mask[k] = (bits[k / 8] >> (k % 8)) & 1u;
        free(bits);
    }
    if ((sl->has & HAS_SHIFT_BIAS) && !(l->shift_bias = take(rd, (size_t)l->out * 8))) return LMP_EIO;
    return 0;
}

static int store_get(const void *self, int64_t b, lmp_block *out)
{
    const lmp_block_store *s = self;
    memset(out, 0, sizeof *out);
    if (b < 0 || b >= s->n || !s->blocks[b].stored)
        return lmp_fail(LMP_EINVAL, "%s: block %lld was not stored", s->what, (long long)b);
    const stored_block *sb = &s->blocks[b];
    *out = sb->meta;
    out->linears = calloc((size_t)sb->meta.n_linears + 1, sizeof *out->linears);
    out->norms = calloc((size_t)sb->meta.n_norms + 1, sizeof *out->norms);
    /* lmp_block_free frees what was filled so far: counts stay, entries start zeroed */
    int st = out->linears && out->norms ? 0 : lmp_fail(LMP_ENOMEM, "out of memory");
    reader rd = {.s = s, .at = sb->at};
    for (int i = 0; i < sb->meta.n_linears && !st; i++) st = get_linear(&rd, &sb->lin[i], &out->linears[i]);
    for (int i = 0; i < sb->meta.n_norms && !st; i++) {
        const stored_norm *sn = &sb->norm[i];
        lmp_norm *nm = &out->norms[i];
        *nm = sn->meta;
        nm->fed = lmp_fed_dup(sn->meta.fed, sn->meta.n_fed);
        if (!(nm->name = strdup(sn->meta.name)) || (nm->n_fed && !nm->fed)) st = lmp_fail(LMP_ENOMEM, "out of memory");
        else if (!(nm->w = take(&rd, (size_t)nm->dim * 4)) || (sn->has_b && !(nm->b = take(&rd, (size_t)nm->dim * 4))))
            st = LMP_EIO;
    }
    if (st) lmp_block_free(out);
    return st;
}

lmp_block_source lmp_block_store_source(const lmp_block_store *s)
{
    return (lmp_block_source){.n = s->n, .get = store_get, .self = s};
}
