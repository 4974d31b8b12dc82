/* hf_tensors.c — the safetensors shards of a Hugging Face export: each tensor of hf_plan.h
 * encoded row by row (only a row, or a linear's zero points, in memory at a time) and streamed
 * after the shard's header.  Every byte is written little-endian whatever the host. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/log.h"
#include "export/hf_plan.h"
#include "export/st_write.h"
#include "model/grid_codes.h"

/* The row of the weight (or bias) that HF row r is: q and k rows go back from adjacent pairs
 * (2i, 2i+1) to rotate-half order (i, i + n_rot/2) within each head (hf_plan.h). */
static int64_t src_row(const hf_linear *h, int64_t r)
{
    if (!h || !h->head_dim) return r;
    return lmp_rope_halves_row(r, h->head_dim, h->n_rot);
}

/* The linear of blk that HF row r of h is, and its row there in *sr: the linear itself, or for a
 * fused module the part whose rows r falls in. */
static const lmp_linear *row_source(const hf_linear *h, const lmp_block *blk, int64_t r, int64_t *sr)
{
    if (!h->n_members) {
        *sr = src_row(h, r);
        return &blk->linears[h->index];
    }
    if (h->per_head) { /* [groups][q heads of the group, k, v][per_head] (hf_plan.h) */
        const int64_t hd = h->per_head, qpg = h->q_per_group > 0 ? h->q_per_group : 1, width = qpg + 2;
        const int64_t g = r / (hd * width), j = (r / hd) % width, i = r % hd;
        /* part k (q, k, v) and its row: the group's j-th q head, or the group's k or v head */
        const int k = j < qpg ? 0 : (int)(j - qpg + 1);
        const int64_t row = (j < qpg ? g * qpg + j : g) * hd + i;
        const lmp_linear *l = &blk->linears[h->members[k]];
        const int qk = l->role == LMP_ROLE_Q || l->role == LMP_ROLE_K;
        *sr = qk && h->head_dim ? lmp_rope_halves_row(row, h->head_dim, h->n_rot) : row;
        return l;
    }
    for (int k = 0; k < h->n_members; k++) {
        const lmp_linear *l = &blk->linears[h->members[k]];
        if (r < l->out || k == h->n_members - 1) {
            const int qk = l->role == LMP_ROLE_Q || l->role == LMP_ROLE_K;
            *sr = qk && h->head_dim ? lmp_rope_halves_row(r, h->head_dim, h->n_rot) : r;
            return l;
        }
        r -= l->out;
    }
    return NULL; /* not reached: a fused entry has members */
}

/* A block norm's or the final norm's values as the file holds them: Gemma's 1 + w less 1, Qwen3's
 * q/k norms back in rotate-half order; into out[n]. */
static void norm_values(const hf_tensor *t, const float *w, int64_t n, float *out)
{
    for (int64_t j = 0; j < n; j++) {
        const float v = w[t->halves_hd ? lmp_rope_halves_row(j, t->halves_hd, t->n_rot) : j];
        out[j] = t->minus_one ? v - 1.0f : v;
    }
}

static void put16(unsigned char *b, uint16_t v)
{
    b[0] = (unsigned char)v;
    b[1] = (unsigned char)(v >> 8);
}

static void put32(unsigned char *b, uint32_t v)
{
    for (int i = 0; i < 4; i++) b[i] = (unsigned char)(v >> (8 * i));
}

static void put64(unsigned char *b, uint64_t v)
{
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)(v >> (8 * i));
}

static uint32_t f32_bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

/* x[0..n) in dtype into out; *rounded counts the values the dtype changed.  An f16 overflow is an
 * error naming the tensor (it would load as infinity). */
static int encode_floats(const hf_tensor *t, const float *x, int64_t n, unsigned char *out, int64_t *rounded)
{
    for (int64_t i = 0; i < n; i++) {
        int changed = 0;
        if (t->dtype == LMP_ST_F32) {
            put32(out + 4 * i, f32_bits(x[i]));
            continue;
        }
        if (t->dtype == LMP_ST_BF16) {
            put16(out + 2 * i, lmp_stw_bf16(x[i], &changed));
        } else {
            const uint16_t h = lmp_stw_f16(x[i], &changed);
            if ((h & 0x7FFFu) == 0x7C00u && isfinite(x[i]))
                return lmp_fail(LMP_EINVAL, "%s: value %g overflows float16 (every grid's scales are f16, so the "
                                            "model is); use scale_dtype bf16 or f32", t->name, (double)x[i]);
            put16(out + 2 * i, h);
        }
        *rounded += changed;
    }
    return 0;
}

/* A scale exactly as its grid rounded it; one that is not (a grid recorded with scale_type f16
 * or bf16 but scales it did not round) is an error rather than a silently different file. */
static int encode_scale(const hf_tensor *t, float s, unsigned char *out)
{
    int changed = 0;
    if (t->dtype == LMP_ST_F8_E4M3 || t->dtype == LMP_ST_U8) { /* NVFP4's E4M3, MXFP4's E8M0 exponent */
        int e2 = 0;
        (void)frexpf(s, &e2);
        const uint32_t b = t->dtype == LMP_ST_F8_E4M3 ? lmp_minifloat_encode(&LMP_MF_E4M3, s) : (uint32_t)(e2 - 1 + 127);
        const float back = t->dtype == LMP_ST_F8_E4M3 ? lmp_minifloat_decode(&LMP_MF_E4M3, b) : ldexpf(1.0f, (int)b - 127);
        if (!(s > 0.0f) || b > 255 || back != s)
            return lmp_fail(LMP_EINVAL, "%s: scale %g is not a positive %s value; the grid was recorded with scales "
                            "its type does not hold", t->name, (double)s, lmp_st_dtype_name(t->dtype));
        out[0] = (unsigned char)b;
        return 0;
    }
    if (t->dtype == LMP_ST_F32) put32(out, f32_bits(s));
    else put16(out, t->dtype == LMP_ST_BF16 ? lmp_stw_bf16(s, &changed) : lmp_stw_f16(s, &changed));
    if (changed || !isfinite(s) || s == 0.0f)
        return lmp_fail(LMP_EINVAL, "%s: scale %g is not a finite non-zero %s value; the grid was recorded with "
                                    "scales its type does not hold", t->name, (double)s, lmp_st_dtype_name(t->dtype));
    return 0;
}

/* The zero point z of a slice in compressed-tensors' numbering, z - 2^(b-1), checked to be one
 * of the grid's levels. */
static int zero_point(const hf_tensor *t, const hf_scheme *sc, float z, int *out)
{
    const int maxq = (1 << sc->bits) - 1;
    if (!(z >= 0.0f && z <= (float)maxq && z == floorf(z)))
        return lmp_fail(LMP_EINVAL, "%s: zero point %g is not an integer in 0..%d", t->name, (double)z, maxq);
    *out = (int)z - (1 << (sc->bits - 1));
    return 0;
}

/* b-bit unsigned values v[0..n) packed into words[0..ceil(n*b/32)): value i at bit (i*b) % 32 of
 * word (i*b) / 32 (b divides 32, so none straddles two words). */
static void pack_bits(const uint32_t *v, int64_t n, int b, uint32_t *words)
{
    const int64_t nw = (n * b + 31) / 32;
    memset(words, 0, (size_t)nw * sizeof *words);
    for (int64_t i = 0; i < n; i++) words[(i * b) / 32] |= v[i] << ((i * b) % 32);
}

typedef struct enc {
    unsigned char *buf;        /* one row of output */
    int32_t *codes;
    uint32_t *u, *words;
} enc;

static int write_tensor(const hf_plan *p, const hf_tensor *t, FILE *f, lmp_block_cursor *cur, int64_t *rounded)
{
    const hf_linear *h = t->lin;
    const int64_t block = h ? h->block : t->block;
    const lmp_block *blk = NULL;
    if (block >= 0 && t->kind != HF_T_SHAPE && !(blk = lmp_block_cursor_at(cur, block))) return LMP_EIO;
    const lmp_linear *l = h && blk ? &blk->linears[h->index] : NULL;
    const float *dense = t->block < 0 || t->kind == HF_T_KV_SCALE ? t->src
                         : t->norm_bias                        ? blk->norms[t->norm].b
                                                               : blk->norms[t->norm].w;
    const hf_scheme *sc = h && h->scheme >= 0 ? &p->schemes[h->scheme] : NULL;
    /* (a 1-D tensor, and a per-head KV scale [H, 1, 1], is one row of shape[0] values) */
    const int64_t rows = t->ndim == 2 ? t->shape[0] : 1, cols = t->ndim == 2 ? t->shape[1] : t->shape[0];
    const size_t row_bytes = (size_t)(t->nbytes / (uint64_t)rows);
    const int64_t width = l ? (h->in > h->out ? h->in : h->out) : cols;
    enc e = {malloc(row_bytes + 8), NULL, NULL, NULL};
    if (l) {
        e.codes = malloc((size_t)width * sizeof *e.codes);
        e.u = malloc((size_t)width * sizeof *e.u);
        e.words = malloc((size_t)width * sizeof *e.words);
    }
    int st = !e.buf || (l && (!e.codes || !e.u || !e.words)) ? lmp_fail(LMP_ENOMEM, "%s: out of memory", t->name) : 0;
    int32_t *zp = NULL;
    if (!st && t->kind == HF_T_ZERO) {
        /* the zero points of every slice, in HF row order, checked once */
        const int64_t zr = sc->gran == LMP_GRAN_TENSOR ? 1 : h->out, zc = sc->gran == LMP_GRAN_GROUP ? h->in / sc->group : 1;
        if (!(zp = malloc((size_t)(zr * zc) * sizeof *zp))) st = lmp_fail(LMP_ENOMEM, "%s: out of memory", t->name);
        for (int64_t r = 0; r < zr && !st; r++) {
            int64_t zs;
            const lmp_linear *ml = row_source(h, blk, r, &zs);
            for (int64_t c = 0; c < zc && !st; c++) st = zero_point(t, sc, ml->grid->zeros[zs * zc + c], &zp[r * zc + c]);
        }
    }
    for (int64_t r = 0; r < rows && !st; r++) {
        int64_t sr = r;
        /* a bias is one row, and a Conv1D weight's row an input column: both per element */
        if (l && t->kind != HF_T_BIAS && !(t->kind == HF_T_WEIGHT && h->conv1d)) l = row_source(h, blk, r, &sr);
        const lmp_wgrid *g = l ? l->grid : NULL;
        switch (t->kind) {
        case HF_T_DENSE:
            if (t->minus_one || t->halves_hd) { /* a norm (one row) */
                float *v = malloc((size_t)cols * sizeof *v);
                if (!v) {
                    st = lmp_fail(LMP_ENOMEM, "%s: out of memory", t->name);
                    break;
                }
                norm_values(t, dense, cols, v);
                st = encode_floats(t, v, cols, e.buf, rounded);
                free(v);
            } else {
                st = encode_floats(t, dense + r * cols, cols, e.buf, rounded);
            }
            break;
        case HF_T_WEIGHT:
            if (h->conv1d) { /* file row r is input column r: element c of it is output row c's */
                for (int64_t c = 0; c < cols && !st; c++) {
                    int64_t cs;
                    const lmp_linear *cl = row_source(h, blk, c, &cs);
                    st = encode_floats(t, &cl->w[cs * cl->in + r], 1,
                                       e.buf + c * (int64_t)lmp_st_dtype_size(t->dtype), rounded);
                }
            } else {
                st = encode_floats(t, l->w + sr * l->in, l->in, e.buf, rounded);
            }
            break;
        case HF_T_BIAS:
            for (int64_t c = 0; c < cols && !st; c++) {
                int64_t bs;
                const lmp_linear *bl = row_source(h, blk, c, &bs);
                const float b = bl->b ? bl->b[bs] : 0.0f; /* a 1-D bias is one row of out values */
                st = encode_floats(t, &b, 1, e.buf + c * (int64_t)lmp_st_dtype_size(t->dtype), rounded);
            }
            break;
        case HF_T_PACKED:
            if ((st = lmp_grid_codes_row(l, sr, e.codes))) break;
            /* stored unsigned: code + 2^(b-1) (sym), and for asym the code itself (hf_plan.h) */
            for (int64_t c = 0; c < l->in; c++) e.u[c] = (uint32_t)(e.codes[c] + (sc->sym ? 1 << (sc->bits - 1) : 0));
            pack_bits(e.u, l->in, sc->bits, e.words);
            for (int64_t w = 0; w < cols; w++) put32(e.buf + 4 * w, e.words[w]);
            break;
        case HF_T_QWEIGHT:
            if ((st = lmp_grid_codes_row(l, sr, e.codes))) break;
            for (int64_t c = 0; c < l->in; c++)
                e.buf[c] = (unsigned char)(int8_t)(e.codes[c] - (sc->sym ? 0 : 1 << (sc->bits - 1)));
            break;
        case HF_T_SCALE: {
            /* a block grid's row r is tile row r (whole heads: hf_write.c), whatever order its rows take */
            const int64_t base = sc->gran == LMP_GRAN_TENSOR ? 0 : sc->gran == LMP_GRAN_BLOCK ? r * cols : sr * cols;
            const size_t es = lmp_st_dtype_size(t->dtype);
            for (int64_t c = 0; c < cols && !st; c++) st = encode_scale(t, g->scales[base + c], e.buf + es * (size_t)c);
            break;
        }
        case HF_T_ZERO:
            if (t->dtype == LMP_ST_I8) {
                for (int64_t c = 0; c < cols; c++) e.buf[c] = (unsigned char)(int8_t)zp[r * cols + c];
            } else { /* packed down the columns: word row r holds HF rows r*32/b .. */
                const int per = 32 / sc->bits, base = r * per;
                for (int64_t c = 0; c < cols; c++) {
                    uint32_t w = 0;
                    for (int k = 0; k < per && base + k < h->out; k++)
                        w |= (uint32_t)(zp[(base + k) * cols + c] + (1 << (sc->bits - 1))) << (k * sc->bits);
                    put32(e.buf + 4 * c, w);
                }
            }
            break;
        case HF_T_SHAPE: /* the only tensor of a linear that needs none of its block */
            put64(e.buf, (uint64_t)h->out);
            put64(e.buf + 8, (uint64_t)h->in);
            break;
        case HF_T_GIDX:
            for (int64_t c = 0; c < cols; c++) put32(e.buf + 4 * c, (uint32_t)g->g_idx[c]);
            break;
        case HF_T_INPUT_SCALE: put32(e.buf, f32_bits(l->act.scale)); break;
        case HF_T_FP8W: /* the E4M3 bit patterns are the codes */
            if ((st = lmp_grid_codes_row(l, sr, e.codes))) break;
            for (int64_t c = 0; c < l->in; c++) e.buf[c] = (unsigned char)e.codes[c];
            break;
        case HF_T_FP4PACK: /* E2M1 nibbles, column 2k low, 2k + 1 high */
            if ((st = lmp_grid_codes_row(l, sr, e.codes))) break;
            for (int64_t c = 0; c < cols; c++) e.buf[c] = (unsigned char)((e.codes[2 * c] & 15) | (e.codes[2 * c + 1] & 15) << 4);
            break;
        case HF_T_GLOBAL_SCALE: put32(e.buf, f32_bits(g->spec.global_scale)); break;
        case HF_T_KV_SCALE:
            for (int64_t c = 0; c < cols; c++) put32(e.buf + 4 * c, f32_bits((t->norm ? blk->kv.v_scale : blk->kv.k_scale)[c]));
            break;
        }
        if (!st && fwrite(e.buf, 1, row_bytes, f) != row_bytes) break; /* reported when the file is closed */
    }
    free(zp);
    free(e.buf);
    free(e.codes);
    free(e.u);
    free(e.words);
    return st;
}

int hf_write_shard(lmp_ctx *ctx, const hf_plan *p, int s, FILE *f, lmp_block_cursor *cur, size_t *done,
                   int64_t *rounded)
{
    /* The shard's tensors by element size, 8 bytes first (stable otherwise): the data section
     * starts 8-aligned, so each tensor then starts aligned to its element size, as the
     * safetensors package orders them, and a reader may map it in place. */
    size_t n = 0;
    for (size_t i = 0; i < p->n_tensors; i++) n += p->tensors[i].shard == s;
    const hf_tensor **order = malloc((n ? n : 1) * sizeof *order);
    lmp_stw_tensor *list = malloc((n ? n : 1) * sizeof *list);
    int st = !order || !list ? lmp_fail(LMP_ENOMEM, "out of memory") : 0;
    n = 0;
    for (size_t es = 8; es >= 1 && !st; es /= 2)
        for (size_t i = 0; i < p->n_tensors; i++) {
            const hf_tensor *t = &p->tensors[i];
            if (t->shard != s || lmp_st_dtype_size(t->dtype) != es) continue;
            order[n] = t;
            list[n++] = (lmp_stw_tensor){.name = t->name, .dtype = t->dtype, .ndim = t->ndim,
                                         .shape = {t->shape[0], t->shape[1], t->shape[2]}};
        }
    if (!st && lmp_stw_header(f, list, n)) st = lmp_fail(LMP_ENOMEM, "out of memory for a safetensors header");
    for (size_t i = 0; i < n && !st; i++) {
        if (lmp_host_interrupted(ctx)) {
            st = lmp_fail(LMP_EABORTED, "%s: export interrupted", p->o->path);
            break;
        }
        st = write_tensor(p, order[i], f, cur, rounded);
        lmp_progress(ctx, "export", (int64_t)++*done, (int64_t)p->n_tensors);
    }
    free(order);
    free(list);
    return st;
}
