/* gguf_write.c — see export.h: a variant as a GGUF v3 file llama.cpp loads, under the model's
 * llama.cpp architecture (core/arch: general.architecture = llama, qwen2, qwen3, gemma, gemma2,
 * gemma3, phi3, chatglm, glm4, ernie4_5 or gpt2, and the hyper-parameters under that prefix, as
 * llama.cpp's convert_hf_to_gguf.py writes them).
 *
 * Order of work: a first pass over the blocks (read one at a time from the block source) checks
 * everything that can be refused (check_linear: every code) and plans every tensor's type, size
 * and offset, so the header is built whole in memory; a second pass writes the tensors one by
 * one, each encoded row by row, into a temporary file beside PATH that is fsync'd and renamed
 * over PATH only when complete.
 *
 * Tensors (llama.cpp's names; ne[0] is the input dimension, so a [out, in] weight has
 * ne = {in, out}): token_embd, output_norm, output (left out when the head is the embedding),
 * and per block N the norms blk.N.{attn_norm, ffn_norm, attn_q_norm, attn_k_norm,
 * post_attention_norm, post_ffw_norm} the architecture has (with GPT-2's LayerNorm biases), and
 * the linears blk.N.{attn_q, attn_k, attn_v, attn_output, ffn_gate, ffn_up, ffn_down}.weight
 * with their .bias where the linear has one.  llama.cpp fuses some (desc->gguf_fused_*): q, k, v
 * into attn_qkv (Phi-3, GPT-2), gate and up into one ffn_up of twice the width (GLM, GLM-4,
 * Phi-3); their parts' rows follow one another, and the parts must be stored alike.  GPT-2 adds
 * position_embd and output_norm.bias; Llama 3's RoPE rope_freqs.weight, Phi-3's LongRoPE
 * rope_factors_short / _long.weight (F32, one divisor per rotated pair).  Norms and biases are
 * F32; the embedding and head as asked (export.h), by default the source GGUF's own types when
 * they read back exactly, else F32.  A linear on a GGUF grid is stored in that type from the codes grid_codes.h
 * recovers (checked to give back every weight bit for bit); any other linear is F32, exactly the
 * weights lmpress evaluated.
 *
 * q and k rows: lmpress turns adjacent pairs (model.h), which is llama.cpp's order for "llama",
 * chatglm, glm4 and ernie4_5 (its NORM rope); its other architectures (desc->gguf_rope_halves)
 * turn rotate-half pairs (NEOX), so the rows of attn_q / attn_k (or attn_qkv's q and k parts),
 * their biases and the q/k norm weights are written back in that order (lmp_rope_halves_row), a
 * row at a time, codes and scales with their row.  Gemma's norms are held as 1 + w, which is
 * what its GGUF stores; its embedding scale is implied by the architecture.  Gemma 2 and 3: the
 * window, and attention.sliding_window_pattern (one bool a layer) when the model's sliding
 * layers are not llama.cpp's default for the architecture (every 2nd / 6th layer global). */
#include "export/export.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/outfile.h"
#include "base/tmpname.h"
#include "base/error.h"
#include "base/log.h"
#include "base/textfile.h"
#include "export/gguf_kquants.h"
#include "export/gguf_meta.h"
#include "export/gguf_tokenizer.h"
#include "export/st_write.h"
#include "formats/gguf.h"
#include "model/block_source.h"
#include "model/tensor_names.h"
#include "model/grid_codes.h"

#define ALIGNMENT 32

/* llama.cpp's llama_ftype values for general.file_type. */
enum { FTYPE_ALL_F32 = 0, FTYPE_MOSTLY_Q4_0 = 2, FTYPE_MOSTLY_Q4_1 = 3, FTYPE_MOSTLY_Q8_0 = 7, FTYPE_MOSTLY_Q5_0 = 8,
       FTYPE_MOSTLY_Q5_1 = 9, FTYPE_MOSTLY_Q2_K = 10, FTYPE_MOSTLY_Q3_K_S = 11, FTYPE_MOSTLY_Q4_K_S = 14,
       FTYPE_MOSTLY_Q5_K_S = 16, FTYPE_MOSTLY_Q6_K = 18, FTYPE_MOSTLY_IQ4_NL = 25, FTYPE_MOSTLY_MXFP4_MOE = 38,
       FTYPE_MOSTLY_NVFP4 = 39, FTYPE_MOSTLY_Q1_0 = 40, FTYPE_MOSTLY_Q2_0 = 41 };

/* ---- what each linear becomes ------------------------------------------------------------- */

/* The ggml type of a linear: its GGUF grid's, else F32 (no grid, or an int grid GGUF has no
 * type for). */
static lmp_ggml_type linear_type(const lmp_linear *l)
{
    if (!l->grid) return LMP_GGML_F32;
    switch (l->grid->spec.format) {
    case LMP_WFORMAT_GGUF_Q8_0: return LMP_GGML_Q8_0;
    case LMP_WFORMAT_GGUF_Q4_0: return LMP_GGML_Q4_0;
    case LMP_WFORMAT_GGUF_Q4_1: return LMP_GGML_Q4_1;
    case LMP_WFORMAT_GGUF_Q5_0: return LMP_GGML_Q5_0;
    case LMP_WFORMAT_GGUF_Q5_1: return LMP_GGML_Q5_1;
    case LMP_WFORMAT_GGUF_IQ4_NL: return LMP_GGML_IQ4_NL;
    case LMP_WFORMAT_GGUF_Q2_K: return LMP_GGML_Q2_K;
    case LMP_WFORMAT_GGUF_Q3_K: return LMP_GGML_Q3_K;
    case LMP_WFORMAT_GGUF_Q4_K: return LMP_GGML_Q4_K;
    case LMP_WFORMAT_GGUF_Q5_K: return LMP_GGML_Q5_K;
    case LMP_WFORMAT_GGUF_Q6_K: return LMP_GGML_Q6_K;
    case LMP_WFORMAT_NF4: /* no GGUF type */
    case LMP_WFORMAT_GGUF_MXFP4: return LMP_GGML_MXFP4;
    case LMP_WFORMAT_GGUF_NVFP4: return LMP_GGML_NVFP4;
    case LMP_WFORMAT_GGUF_Q1_0: return LMP_GGML_Q1_0;
    case LMP_WFORMAT_GGUF_Q2_0: return LMP_GGML_Q2_0;
    case LMP_WFORMAT_FP8_E4M3: /* no GGUF type: the writer stores the dequantized weights */
    case LMP_WFORMAT_FP8_E5M2:
    case LMP_WFORMAT_NVFP4: /* compressed-tensors' roundings, not ggml's MXFP4 / NVFP4 blocks */
    case LMP_WFORMAT_MXFP4:
    case LMP_WFORMAT_MXFP8:
    case LMP_WFORMAT_INT: break;
    }
    return LMP_GGML_F32;
}

/* Bytes of one block (lmp_ggml_type_block's weights) of ggml's block_q8_0, _q4_0, _q4_1, _q5_0,
 * _q5_1, _iq4_nl (32 weights), block_mxfp4 (32), block_nvfp4 (64), block_q1_0 (128), block_q2_0
 * (64). */
static int block_bytes(lmp_ggml_type t)
{
    switch (t) {
    case LMP_GGML_MXFP4: return 17;
    case LMP_GGML_NVFP4: return 36;
    case LMP_GGML_Q1_0: case LMP_GGML_Q2_0: return 18;
    case LMP_GGML_Q8_0: return 34;
    case LMP_GGML_Q4_0: case LMP_GGML_IQ4_NL: return 18;
    case LMP_GGML_Q4_1: return 20;
    case LMP_GGML_Q5_0: return 22;
    case LMP_GGML_Q5_1: return 24;
    default: return 0;
    }
}

/* The grid format of a GGUF block type (linear_type's inverse); LMP_WFORMAT_INT for F32, F16 and
 * the types lmpress does not write. */
static lmp_wformat type_format(lmp_ggml_type t)
{
    for (int f = 1; f < LMP_WFORMAT_NF4; f++) {
        const lmp_wgrid g = {.spec = {.format = (lmp_wformat)f}};
        const lmp_linear l = {.grid = (lmp_wgrid *)&g};
        if (linear_type(&l) == t) return (lmp_wformat)f;
    }
    return LMP_WFORMAT_INT;
}

/* The GGUF type a config or option names ("f32", "f16", "q8_0", ... "q6_k"), for a tensor whose rows
 * are `cols` wide: a k-quant they do not fit becomes llama-quantize's fallback, and a block type
 * whose blocks do not divide them F32 (llama-quantize: F16).  -1 for an unknown name. */
static int named_type(const char *name, int64_t cols, lmp_ggml_type *out)
{
    if (!name || !strcmp(name, "f32")) return *out = LMP_GGML_F32, 0;
    if (!strcmp(name, "f16")) return *out = LMP_GGML_F16, 0;
    for (int f = 1; f < LMP_WFORMAT_NF4; f++) {
        if (strcmp(lmp_wformat_name((lmp_wformat)f), name) != 0) continue;
        const lmp_wformat g = lmp_wformat_fallback((lmp_wformat)f, cols);
        const lmp_wgrid grid = {.spec = {.format = g}};
        const lmp_linear l = {.grid = (lmp_wgrid *)&grid};
        *out = cols % lmp_wformat_span(g) ? LMP_GGML_F32 : linear_type(&l);
        return 0;
    }
    return -1;
}

/* One row of codes into ggml's blocks: d (and Q4_1's or Q5_1's m) as IEEE halves of the recorded
 * f32 scale and min; Q5_0 and Q5_1 then qh, bit j the fifth bit of code j (little-endian
 * uint32); then the codes: Q8_0 one int8 each; the others code j's low four bits in the low
 * nibble of qs[j] and code j + 16's in its high nibble. */
/* ggml's MXFP4, NVFP4, Q1_0 and Q2_0 blocks (ggml-common.h): MXFP4 its E8M0 byte (recovered
 * from d = 2^(e-128), exact), then code j in the low nibble of qs[j] and j + 16 in the high one;
 * NVFP4 four UE4M3 bytes (of 2 d, exact), then each sub-block of 16 as 8 bytes, code j low and
 * j + 8 high; Q1_0 an fp16 d and bit j of byte j / 8; Q2_0 an fp16 d and code j in bits 2 (j % 4)
 * of byte j / 4. */
static void pack_row_new(const lmp_linear *l, int64_t r, const int32_t *codes, lmp_ggml_type t, unsigned char *out)
{
    const lmp_wgrid *g = l->grid;
    const int bw = lmp_ggml_type_block(t), bb = block_bytes(t);
    for (int64_t k = 0; k < l->in / bw; k++) {
        const int32_t *q = codes + k * bw;
        unsigned char *p = out + k * bb;
        memset(p, 0, (size_t)bb);
        if (t == LMP_GGML_MXFP4) {
            int e2 = 0;
            (void)frexpf(g->scales[lmp_wgrid_slice(g, l->in, r, k * bw)], &e2);
            p[0] = (unsigned char)(e2 - 1 + 128);
            for (int j = 0; j < 16; j++) p[1 + j] = (unsigned char)((q[j] & 15) | (q[j + 16] & 15) << 4);
        } else if (t == LMP_GGML_NVFP4) {
            for (int sb = 0; sb < 4; sb++) {
                p[sb] = lmp_ue4m3_encode(2.0f * g->scales[lmp_wgrid_slice(g, l->in, r, k * bw + 16 * sb)]);
                for (int j = 0; j < 8; j++)
                    p[4 + 8 * sb + j] = (unsigned char)((q[16 * sb + j] & 15) | (q[16 * sb + j + 8] & 15) << 4);
            }
        } else {
            const uint16_t d = lmp_stw_f16(g->scales[lmp_wgrid_slice(g, l->in, r, k * bw)], NULL);
            p[0] = (unsigned char)d;
            p[1] = (unsigned char)(d >> 8);
            for (int j = 0; j < bw; j++)
                p[2 + (t == LMP_GGML_Q1_0 ? j / 8 : j / 4)] |=
                    (unsigned char)(t == LMP_GGML_Q1_0 ? (q[j] & 1) << (j % 8) : (q[j] & 3) << ((j % 4) * 2));
        }
    }
}

static void pack_row(const lmp_linear *l, int64_t r, const int32_t *codes, lmp_ggml_type t, unsigned char *out)
{
    const lmp_wgrid *g = l->grid;
    const int bb = block_bytes(t);
    if (t == LMP_GGML_MXFP4 || t == LMP_GGML_NVFP4 || t == LMP_GGML_Q1_0 || t == LMP_GGML_Q2_0) {
        pack_row_new(l, r, codes, t, out);
        return;
    }
    for (int64_t k = 0; k < l->in / LMP_WFORMAT_BLOCK; k++) {
        const int64_t s = lmp_wgrid_slice(g, l->in, r, k * LMP_WFORMAT_BLOCK);
        const int32_t *q = codes + k * LMP_WFORMAT_BLOCK;
        unsigned char *p = out + k * bb;
        const uint16_t d = lmp_stw_f16(g->scales[s], NULL);
        p[0] = (unsigned char)d;
        p[1] = (unsigned char)(d >> 8);
        p += 2;
        if (t == LMP_GGML_Q4_1 || t == LMP_GGML_Q5_1) {
            const uint16_t m = lmp_stw_f16(g->zeros[s], NULL);
            p[0] = (unsigned char)m;
            p[1] = (unsigned char)(m >> 8);
            p += 2;
        }
        if (t == LMP_GGML_Q5_0 || t == LMP_GGML_Q5_1) {
            uint32_t qh = 0;
            for (int j = 0; j < 32; j++) qh |= (uint32_t)(q[j] >> 4 & 1) << j;
            for (int b = 0; b < 4; b++) p[b] = (unsigned char)(qh >> 8 * b);
            p += 4;
        }
        if (t == LMP_GGML_Q8_0)
            for (int j = 0; j < 32; j++) p[j] = (unsigned char)(int8_t)q[j];
        else
            for (int j = 0; j < 16; j++) p[j] = (unsigned char)((q[j] & 15) | (q[j + 16] & 15) << 4);
    }
}

/* ---- what is refused, before anything is written -------------------------------------------- */

/* A GGUF grid the writer can store: a known block format, rows in whole blocks, no g_idx, the
 * scales (and mins) it needs.  Each scale is stored as the half lmp_stw_f16 encodes from
 * lmp_fp16_round, the value the weights were verified with, so the two agree by construction. */
static int check_gguf_grid(const lmp_linear *l)
{
    const lmp_wgrid *g = l->grid;
    if (g->g_idx)
        return lmp_fail(LMP_EINVAL,
                        "%s: its %s grid has act-order groups (g_idx), which GGUF's consecutive blocks cannot hold: "
                        "use gptq with act_order = false or static_groups = true", l->name,
                        lmp_wformat_name(g->spec.format));
    if (!lmp_wspec_format_ok(&g->spec) || l->in % lmp_wformat_span(g->spec.format) ||
        g->n_scales != lmp_wspec_n_scales(&g->spec, l->out, l->in) || (!g->spec.sym && !g->zeros))
        return lmp_fail(LMP_EINVAL, "%s: its recorded %s grid does not describe %lld x %lld weights in blocks of %lld",
                        l->name, lmp_wformat_name(g->spec.format), (long long)l->out, (long long)l->in,
                        (long long)lmp_wformat_span(g->spec.format));
    return 0;
}

/* Counts one linear warned about, keeping the first one's name (its block is freed after
 * planning). */
static int count_warned(int *n, char **first, const char *name)
{
    return (*n)++ == 0 && !(*first = strdup(name)) ? lmp_fail(LMP_ENOMEM, "out of memory") : 0;
}

/* One linear is something the file can hold exactly (every code checked); counts what is only
 * warned about: linears on int grids (stored F32) and linears with activation quantization. */
static int check_linear(const lmp_linear *l, int32_t *codes, unsigned char *kblocks, int *n_int, char **int_name,
                        int *n_act, char **act_name)
{
    if (l->in_shift || l->in_scale || l->shift_bias)
        return lmp_fail(LMP_EINVAL,
                        "%s has an input affine (x - z) / s from Shift or SmoothQuant with all_linears = true, "
                        "which llama.cpp cannot run: export a variant without it (smoothquant with "
                        "all_linears = false, no shift stage)", l->name);
    int st = l->act.mode != LMP_ACT_NONE ? count_warned(n_act, act_name, l->name) : 0;
    if (st || !l->grid) return st;
    if (linear_type(l) == LMP_GGML_F32) /* an int (or NF4) grid GGUF has no type for */
        return count_warned(n_int, int_name, l->name);
    st = check_gguf_grid(l);
    for (int64_t r = 0; r < l->out && !st; r++) {
        st = lmp_grid_codes_row(l, r, codes);
        if (!st && lmp_wformat_is_k(l->grid->spec.format)) /* its scales split into d and integers */
            st = lmp_gguf_pack_k_row(l, r, codes, kblocks);
    }
    return st;
}

/* ---- the plan: every tensor's name, type, shape and place ------------------------------------ */

/* T_K_B / T_V_B: MLA's kv_b (linear `index`) split as llama.cpp's converter splits it, F32 */
typedef enum { T_MODEL, T_NORM, T_NORM_BIAS, T_WEIGHT, T_BIAS, T_K_B, T_V_B } tensor_kind;

/* A block tensor's rows come from one linear, or from two or three when llama.cpp fuses them
 * (attn_qkv: q, k, v; ffn_up of twice the width: gate, up), one after another in that order. */
enum { MAX_PARTS = 3 };

typedef struct tensor_plan {
    char name[64];
    int n_dims;
    int64_t ne[3];
    lmp_ggml_type type;
    uint64_t offset, nbytes;   /* offset from the start of the data section */
    tensor_kind kind;
    const float *f32;          /* T_MODEL: the values ([ne1, ne0]) */
    int64_t block;             /* the others: the block, and its norm `index` or its linears part[] */
    int index;
    int n_parts;
    int part[MAX_PARTS];
    unsigned char part_halves[MAX_PARTS]; /* part k (q or k) goes back to rotate-half order */
    int64_t halves_hd, n_rot;  /* rows (or a vector's values) go back to rotate-half order in heads
                                * of halves_hd, over the first n_rot of each; 0: as they are */
    /* llama.cpp's 3-D ffn_{gate,up,down}_exps (ne = {in, out, experts}): the `role` linear of each
     * routed expert, one after the other (n_parts and part[] unused) */
    int experts;
    lmp_role role;
} tensor_plan;

typedef struct plan_list {
    tensor_plan *t;
    int n;
    uint64_t data_bytes;
    int n_int, n_act;          /* warned about: linears on int grids, with activation quantization */
    char *int_name, *act_name; /* the first of each (owned) */
    int64_t halves_hd, n_rot;  /* the architecture's q/k order (tensor_plan), 0 for llama */
    float rope_freqs[LMP_ROPE_MAX_PAIRS]; /* Llama 3's divisors, when written */
    float factors_short[LMP_ROPE_MAX_PAIRS], factors_long[LMP_ROPE_MAX_PAIRS]; /* LongRoPE's */
} plan_list;

/* The bytes of a tensor of t's type and shape; a quantized weight's, of its linear l. */
static uint64_t tensor_bytes(const tensor_plan *t, const lmp_linear *l)
{
    const uint64_t ne0 = (uint64_t)t->ne[0], ne1 = (uint64_t)t->ne[1] * (uint64_t)(t->n_dims == 3 ? t->ne[2] : 1);
    if (t->type == LMP_GGML_F32) return 4u * ne0 * ne1;
    if (t->type == LMP_GGML_F16) return 2u * ne0 * ne1;
    const lmp_wformat f = l ? l->grid->spec.format : type_format(t->type);
    if (lmp_wformat_is_k(f)) return (uint64_t)lmp_gguf_kblock_bytes(f) * (ne0 / LMP_WFORMAT_KBLOCK) * ne1;
    return (uint64_t)block_bytes(t->type) * (ne0 / (uint64_t)lmp_ggml_type_block(t->type)) * ne1;
}

/* A tensor of ne0 x ne1 (ne1 0: 1-D) in type; block b's norm or linear `index` (b -1: the
 * model's own, f32 its values); l: the linear a quantized weight's size is read from. */
static void add_tensor(plan_list *p, const char *name, tensor_kind kind, int64_t b, int index, const float *f32,
                       int64_t ne0, int64_t ne1, lmp_ggml_type type, const lmp_linear *l)
{
    tensor_plan *t = &p->t[p->n++];
    *t = (tensor_plan){.n_dims = ne1 ? 2 : 1, .ne = {ne0, ne1 ? ne1 : 1}, .type = type, .kind = kind, .f32 = f32,
                       .block = b, .index = index};
    snprintf(t->name, sizeof t->name, "%s", name);
    t->nbytes = tensor_bytes(t, type != LMP_GGML_F32 ? l : NULL);
}

/* Whether llama.cpp's architecture of a has biases on the router and the routed experts
 * (gpt-oss: ffn_gate_inp.bias, ffn_{gate,up,down}_exps.bias). */
static int moe_biases(const lmp_arch *a) { return a->desc && a->desc->moe && a->desc->moe->hf_gpt_oss; }

/* A sparse block's routed experts: one 3-D tensor per role, every expert stored alike (one ggml
 * type, as the tensor has). */
static int plan_experts(plan_list *p, const lmp_arch *a, int64_t b, const lmp_block *blk)
{
    static const lmp_role roles[3] = {LMP_ROLE_GATE, LMP_ROLE_UP, LMP_ROLE_DOWN};
    const int biased = moe_biases(a);
    char name[64];
    for (int r = 0; r < 3; r++) {
        const int i0 = lmp_block_find_expert(blk, roles[r], LMP_EXPERT_ROUTED, 0);
        if (i0 < 0) return lmp_fail(LMP_EINVAL, "block %lld: no expert 0 of role %d", (long long)b, (int)roles[r]);
        const lmp_linear *l0 = &blk->linears[i0];
        const char *stem = lmp_gguf_moe_stem(l0); /* ffn_{gate,up,down}_exps (model/tensor_names.h) */
        for (int e = 0; e < blk->n_experts; e++) {
            const int i = lmp_block_find_expert(blk, roles[r], LMP_EXPERT_ROUTED, e);
            const lmp_linear *l = i < 0 ? NULL : &blk->linears[i];
            if (!l || l->out != l0->out || l->in != l0->in)
                return lmp_fail(LMP_EINVAL, "block %lld: expert %d's %s is missing or of another shape", (long long)b,
                                e, stem);
            if ((l->b != NULL) != (l0->b != NULL) || (l->b && !biased))
                return lmp_fail(LMP_EINVAL, "%s has a bias, which llama.cpp's %s has no tensor for (a shift stage's?)",
                                l->b ? l->name : l0->name, stem);
            if (linear_type(l) != linear_type(l0))
                return lmp_fail(LMP_EINVAL, "%s is stored as %s but %s as %s, and llama.cpp holds every expert's in one "
                                "tensor (blk.%lld.%s): quantize the experts alike", l->name,
                                lmp_ggml_type_name(linear_type(l)), l0->name, lmp_ggml_type_name(linear_type(l0)),
                                (long long)b, stem);
        }
        snprintf(name, sizeof name, "blk.%lld.%s.weight", (long long)b, stem);
        add_tensor(p, name, T_WEIGHT, b, 0, NULL, l0->in, l0->out, linear_type(l0), NULL);
        tensor_plan *t = &p->t[p->n - 1];
        t->n_dims = 3;
        t->ne[2] = blk->n_experts;
        t->experts = blk->n_experts;
        t->role = roles[r];
        /* every expert's bytes alike: the first's type and shape, n_experts times */
        const tensor_plan one = {.n_dims = 2, .ne = {l0->in, l0->out, 1}, .type = t->type};
        t->nbytes = tensor_bytes(&one, t->type != LMP_GGML_F32 ? l0 : NULL) * (uint64_t)blk->n_experts;
        if (l0->b) { /* gpt-oss: ffn_{gate,up,down}_exps.bias, F32 [out, E] (ne {out, experts}) */
            snprintf(name, sizeof name, "blk.%lld.%s.bias", (long long)b, stem);
            add_tensor(p, name, T_BIAS, b, 0, NULL, l0->out, blk->n_experts, LMP_GGML_F32, NULL);
            p->t[p->n - 1].experts = blk->n_experts;
            p->t[p->n - 1].role = roles[r];
        }
    }
    return 0;
}

/* The linears of blk that tensor of linear i gathers, in row order (one, or a fused tensor's
 * parts: q, k, v or gate, up), and its stem; 0 parts when linear i is a later part of a fused
 * tensor (written with the first), or a routed expert's (plan_experts). */
static int tensor_parts(const lmp_arch *a, const lmp_block *blk, int i, int *part, const char **stem)
{
    const lmp_arch_desc *d = a->desc;
    if (blk->linears[i].expert_kind == LMP_EXPERT_ROUTED) return 0;
    if (blk->n_experts > 0 && lmp_gguf_moe_stem(&blk->linears[i])) { /* router, shared expert (model/tensor_names.h) */
        part[0] = i;
        *stem = lmp_gguf_moe_stem(&blk->linears[i]);
        return 1;
    }
    int64_t r0, rows;
    const int fused = d ? lmp_fused_rows(a, &blk->linears[i], d->gguf_fused_qkv, d->gguf_fused_gate_up, &r0, &rows)
                        : LMP_FUSED_NONE;
    if (fused == LMP_FUSED_NONE) {
        part[0] = i;
        *stem = lmp_gguf_linear_stem(a->family, blk->linears[i].role);
        return 1;
    }
    if (r0 != 0) return 0;
    static const lmp_role qkv[] = {LMP_ROLE_Q, LMP_ROLE_K, LMP_ROLE_V}, gate_up[] = {LMP_ROLE_GATE, LMP_ROLE_UP};
    const lmp_role *roles = fused == LMP_FUSED_QKV ? qkv : gate_up;
    const int n = fused == LMP_FUSED_QKV ? 3 : 2;
    for (int k = 0; k < n; k++)
        if ((part[k] = lmp_block_find(blk, roles[k])) < 0) return 0;
    *stem = lmp_gguf_fused_stem(fused);
    return n;
}

/* Whether a LayerNorm's weight is all 1 and its bias all 0 (b NULL: none): what a norm without
 * parameters (OLMo's) must still be to be written as one, since no tensor holds it. */
static int norm_is_identity(const float *w, const float *b, int64_t n)
{
    for (int64_t j = 0; j < n; j++)
        if (w[j] != 1.0f || (b && b[j] != 0.0f)) return 0;
    return 1;
}

/* A norm without parameters in the file (desc LMP_ARCH_NORM_NO_PARAMS) that a stage changed
 * (SmoothQuant's folded scale, Shift's folded shift): refused by name. */
static int check_no_params_norm(const lmp_arch *a, const char *name, const float *w, const float *b, int64_t n)
{
    if (norm_is_identity(w, b, n)) return 0;
    return lmp_fail(LMP_EUNSUPPORTED, "%s: a %s LayerNorm has no weight or bias in the file (llama.cpp's %s and "
                    "transformers hold none), but this variant changed it (a scale or shift folded into it, as "
                    "SmoothQuant and Shift do): export a variant without such a stage", name, a->desc->name,
                    a->desc->gguf_arch ? a->desc->gguf_arch : a->desc->name);
}

/* A LayerNorm whose file has no bias (Cohere's, LMP_ARCH_NORM_NO_BIAS): its bias must still be 0
 * (a stage's folded shift would be lost), else refused by name. */
static int check_no_bias_norm(const lmp_arch *a, const char *name, const float *b, int64_t n)
{
    for (int64_t j = 0; b && j < n; j++)
        if (b[j] != 0.0f)
            return lmp_fail(LMP_EUNSUPPORTED, "%s: a %s LayerNorm has no bias in the file, but this variant gave it "
                            "one (a shift folded into it, as Shift does): export a variant without such a stage",
                            name, a->desc->name);
    return 0;
}

/* MLA's kv_b [H (nope + v), kv_lora] as llama.cpp's converter splits it for its absorbed
 * attention (model_gguf.c reads it back): attn_k_b, ne = {nope, kv_lora, H}, each head's k rows
 * transposed, and attn_v_b, ne = {kv_lora, v, H}; both F32 (k_b's rows cut across a
 * quantized kv_b's blocks), the weights kv_b holds, so the file reads back exactly. */
static int plan_kv_b(plan_list *p, const lmp_arch *a, int64_t b, const lmp_block *blk, int i)
{
    const lmp_linear *l = &blk->linears[i];
    const int64_t H = a->n_heads, nope = a->mla_nope, v = a->head_dim, kv = a->mla_kv_lora;
    if (l->b) return lmp_fail(LMP_EINVAL, "%s has a bias, which llama.cpp's deepseek2 has no tensor for", l->name);
    if (l->out != H * (nope + v) || l->in != kv)
        return lmp_fail(LMP_EINVAL, "%s is [%lld, %lld], not MLA's kv_b [%lld, %lld]", l->name, (long long)l->out,
                        (long long)l->in, (long long)(H * (nope + v)), (long long)kv);
    const int64_t ne[2][3] = {{nope, kv, H}, {kv, v, H}};
    for (int k = 0; k < 2; k++) {
        char name[64];
        snprintf(name, sizeof name, "blk.%lld.%s.weight", (long long)b, k ? "attn_v_b" : "attn_k_b");
        add_tensor(p, name, k ? T_V_B : T_K_B, b, i, NULL, ne[k][0], ne[k][1] * ne[k][2], LMP_GGML_F32, NULL);
        tensor_plan *t = &p->t[p->n - 1];
        t->n_dims = 3;
        t->ne[1] = ne[k][1];
        t->ne[2] = ne[k][2];
    }
    return 0;
}

/* Block b's tensors, each of its linears checked first. */
static int plan_block(plan_list *p, const lmp_arch *a, int64_t b, const lmp_block *blk, int32_t *codes,
                      unsigned char *kblocks)
{
    char name[64];
    /* LayerNorms with a bias (GPT-2's, the long tail's): llama.cpp requires it */
    const int gpt2 = a->family == LMP_FAMILY_GPT2 || a->layer_norm;
    const int no_params = a->desc && (a->desc->flags & LMP_ARCH_NORM_NO_PARAMS);
    const int no_bias = a->desc && (a->desc->flags & LMP_ARCH_NORM_NO_BIAS);
    for (int i = 0; i < blk->n_norms; i++) {
        const char *nn = lmp_gguf_norm_name(a, i);
        if (no_params) { /* OLMo: no tensor (llama.cpp's olmo runs them without parameters) */
            const int st = check_no_params_norm(a, blk->norms[i].name, blk->norms[i].w, blk->norms[i].b,
                                                blk->norms[i].dim);
            if (st) return st;
            continue;
        }
        if (blk->norms[i].b && !gpt2)
            return lmp_fail(LMP_EINVAL,
                            "%s has a bias after its RMSNorm (Shift's fold_norm_shift), which llama.cpp's "
                            "RMS norms do not have: export a variant without a shift or shift_smoothquant stage",
                            blk->norms[i].name);
        if (!nn) return lmp_fail(LMP_EINVAL, "%s: a norm GGUF has no name for here", blk->norms[i].name);
        snprintf(name, sizeof name, "blk.%lld.%s.weight", (long long)b, nn);
        add_tensor(p, name, T_NORM, b, i, NULL, blk->norms[i].dim, 0, LMP_GGML_F32, NULL);
        if (i == lmp_norm_index(a, LMP_NORM_Q) || i == lmp_norm_index(a, LMP_NORM_K)) {
            /* q/k norms act on each head before RoPE: their values follow q/k's rows */
            p->t[p->n - 1].halves_hd = p->halves_hd;
            p->t[p->n - 1].n_rot = p->n_rot;
        }
        if (gpt2 && no_bias) { /* command-r: weight only */
            const int st = check_no_bias_norm(a, blk->norms[i].name, blk->norms[i].b, blk->norms[i].dim);
            if (st) return st;
        } else if (gpt2) { /* LayerNorm: its bias (llama.cpp requires it) */
            if (!blk->norms[i].b) return lmp_fail(LMP_EINVAL, "%s: a LayerNorm without its bias", blk->norms[i].name);
            snprintf(name, sizeof name, "blk.%lld.%s.bias", (long long)b, nn);
            add_tensor(p, name, T_NORM_BIAS, b, i, NULL, blk->norms[i].dim, 0, LMP_GGML_F32, NULL);
        }
    }
    for (int i = 0; i < blk->n_linears; i++) {
        int st = check_linear(&blk->linears[i], codes, kblocks, &p->n_int, &p->int_name, &p->n_act, &p->act_name);
        if (st) return st;
    }
    for (int i = 0; i < blk->n_linears; i++) {
        int part[MAX_PARTS];
        const char *stem = NULL;
        if (blk->linears[i].role == LMP_ROLE_KV_B) { /* MLA: attn_k_b, attn_v_b (plan_kv_b) */
            const int st = plan_kv_b(p, a, b, blk, i);
            if (st) return st;
            continue;
        }
        const int n = tensor_parts(a, blk, i, part, &stem);
        if (!n) continue;
        if (!stem) return lmp_fail(LMP_EINVAL, "%s: llama.cpp has no tensor for this linear", blk->linears[i].name);
        const lmp_linear *l0 = &blk->linears[part[0]];
        int64_t rows = 0;
        int n_bias = 0;
        for (int k = 0; k < n; k++) {
            const lmp_linear *l = &blk->linears[part[k]];
            rows += l->out;
            n_bias += l->b != NULL;
            if (k && (linear_type(l) != linear_type(l0) || l->in != l0->in))
                return lmp_fail(LMP_EINVAL, "%s is stored as %s but %s as %s, and llama.cpp's %s holds them in one "
                                "tensor (blk.%lld.%s): quantize them alike", l->name,
                                lmp_ggml_type_name(linear_type(l)), l0->name, lmp_ggml_type_name(linear_type(l0)),
                                a->desc ? a->desc->gguf_arch : "llama", (long long)b, stem);
        }
        if (n_bias && n_bias != n)
            return lmp_fail(LMP_EINVAL, "%s: some of the linears llama.cpp fuses into blk.%lld.%s have a bias and "
                            "some do not (a shift stage's bias?), which one tensor cannot say", l0->name, (long long)b,
                            stem);
        unsigned char halves[MAX_PARTS] = {0};
        for (int k = 0; k < n; k++) {
            const lmp_role r = blk->linears[part[k]].role;
            halves[k] = p->halves_hd && (r == LMP_ROLE_Q || r == LMP_ROLE_K);
        }
        for (int bias = 0; bias < 1 + (n_bias > 0); bias++) {
            /* DeepSeek-V3's selection bias: llama.cpp's exp_probs_b */
            const int selection = bias && l0->role == LMP_ROLE_ROUTER && a->route == LMP_ROUTE_SIGMOID_BIAS;
            snprintf(name, sizeof name, "blk.%lld.%s.%s", (long long)b, selection ? "exp_probs_b" : stem,
                     bias ? "bias" : "weight");
            if (blk->n_experts > 0 && bias && lmp_gguf_moe_stem(l0) && !selection &&
                !(moe_biases(a) && l0->role == LMP_ROLE_ROUTER))
                return lmp_fail(LMP_EINVAL, "%s has a bias, which llama.cpp's %s has no tensor for (a shift stage's?)",
                                l0->name, stem);
            if (bias) add_tensor(p, name, T_BIAS, b, 0, NULL, rows, 0, LMP_GGML_F32, NULL);
            else add_tensor(p, name, T_WEIGHT, b, 0, NULL, l0->in, rows, linear_type(l0), l0);
            tensor_plan *t = &p->t[p->n - 1];
            t->n_parts = n;
            memcpy(t->part, part, sizeof part);
            memcpy(t->part_halves, halves, sizeof halves);
            t->halves_hd = p->halves_hd;
            t->n_rot = p->n_rot;
        }
    }
    return blk->n_experts > 0 ? plan_experts(p, a, b, blk) : 0;
}

/* Per-pair divisors of the plain frequencies theta^(-2i/n_rot) that give `target` back, as GGUF
 * stores Llama 3's table (rope_freqs.weight) and LongRoPE's (rope_factors_short / _long.weight).
 * The reader divides (model_gguf.c, lmp_rope_with_factors: the f32 quotient of f / divisor), so
 * each divisor is searched among the floats next to f / target for the one whose quotient is
 * target bit for bit.  A frequency the quotient cannot reach exactly (a Hugging Face LongRoPE
 * table rounded once from double, where the quotient rounds twice) takes the divisor whose
 * quotient is nearest, if it is within one ulp (a relative 6e-8 on that frequency); anything
 * further is refused. */
static int exact_divisors(const lmp_rope *r, const float *target, float *out, const char *what, const char *table)
{
    lmp_rope plain;
    lmp_rope_default(&plain, r->theta, r->n_rot, r->n_rot);
    for (int64_t i = 0; i < r->n_rot / 2; i++) {
        const double f = plain.inv_freq[i];
        float d = (float)(f / (double)target[i]), best = d;
        for (int k = 0; k < 4; k++) d = nextafterf(d, 0.0f);
        double best_err = INFINITY;
        for (int k = 0; k < 9 && best_err > 0; k++, d = nextafterf(d, INFINITY)) {
            const double err = fabs((double)(float)(f / (double)d) - (double)target[i]);
            if (err < best_err) best_err = err, best = d;
        }
        const float t = target[i];
        if (!(best_err <= (double)(nextafterf(t, INFINITY) - t)))
            return lmp_fail(LMP_EINVAL, "%s: RoPE frequency %lld (%g) has no %s divisor that gives it back within an "
                            "ulp", what, (long long)i, (double)target[i], table);
        out[i] = best;
    }
    return 0;
}

/* Every tensor, the blocks read from src one at a time; then their offsets. */
static int plan_tensors(lmp_ctx *ctx, const lmp_model *m, const lmp_block_source *src, lmp_ggml_type emb_type,
                        lmp_ggml_type out_type, plan_list *p)
{
    const lmp_arch *a = &m->arch;
    int64_t widest = a->dim > a->hidden ? a->dim : a->hidden;
    if (a->mla_q_lora > widest) widest = a->mla_q_lora; /* MLA's q_b and kv_b read the latents */
    if (a->mla_kv_lora > widest) widest = a->mla_kv_lora;
    if (a->n_heads * a->head_dim > widest) widest = a->n_heads * a->head_dim; /* o's input */
    int32_t *codes = malloc((size_t)widest * sizeof *codes);
    unsigned char *kblocks = malloc((size_t)(widest / LMP_WFORMAT_KBLOCK + 1) * 256); /* a k-quant row */
    int st = codes && kblocks ? 0 : lmp_fail(LMP_ENOMEM, "out of memory");
    if (!st) add_tensor(p, "token_embd.weight", T_MODEL, -1, 0, m->tok_emb, a->dim, a->vocab, emb_type, NULL);
    if (!st && m->embed_norm_w) { /* Bloom's LayerNorm on the embeddings (llama.cpp's token_embd_norm) */
        if (!m->embed_norm_b)
            st = lmp_fail(LMP_EINVAL, "%s: the embeddings' LayerNorm has no bias, which llama.cpp's %s requires",
                          m->path, a->desc ? a->desc->gguf_arch : "llama");
        else {
            add_tensor(p, "token_embd_norm.weight", T_MODEL, -1, 0, m->embed_norm_w, a->dim, 0, LMP_GGML_F32, NULL);
            add_tensor(p, "token_embd_norm.bias", T_MODEL, -1, 0, m->embed_norm_b, a->dim, 0, LMP_GGML_F32, NULL);
        }
    }
    for (int64_t b = 0; b < a->n_layers && !st; b++) {
        lmp_progress(ctx, "checking the blocks", b, a->n_layers);
        lmp_block blk;
        if ((st = src->get(src->self, b, &blk))) break;
        st = plan_block(p, a, b, &blk, codes, kblocks);
        lmp_block_free(&blk);
    }
    free(codes);
    free(kblocks);
    if (st) return st;
    const int layer_norm = a->family == LMP_FAMILY_GPT2 || a->layer_norm;
    if (a->desc && (a->desc->flags & LMP_ARCH_NORM_NO_PARAMS)) { /* OLMo: no output_norm tensors */
        if ((st = check_no_params_norm(a, "output_norm", m->final_norm_w, m->final_norm_b, a->dim))) return st;
    } else {
        add_tensor(p, "output_norm.weight", T_MODEL, -1, 0, m->final_norm_w, a->dim, 0, LMP_GGML_F32, NULL);
        if (layer_norm && !m->final_norm_b)
            return lmp_fail(LMP_EINVAL, "%s: a model with LayerNorms without its final LayerNorm's bias", m->path);
        if (layer_norm && a->desc && (a->desc->flags & LMP_ARCH_NORM_NO_BIAS)) { /* command-r: weight only */
            if ((st = check_no_bias_norm(a, "output_norm", m->final_norm_b, a->dim))) return st;
        } else if (layer_norm) {
            add_tensor(p, "output_norm.bias", T_MODEL, -1, 0, m->final_norm_b, a->dim, 0, LMP_GGML_F32, NULL);
        }
    }
    if (a->family == LMP_FAMILY_GPT2) { /* the learned positions */
        if (!m->pos_emb) return lmp_fail(LMP_EINVAL, "%s: a GPT-2 model without its positions", m->path);
        add_tensor(p, "position_embd.weight", T_MODEL, -1, 0, m->pos_emb, a->dim, a->seq_len, LMP_GGML_F32, NULL);
    }
    if (a->rope.n_rot > 0 && !a->rope.plain && !strcmp(a->rope.type, "longrope")) {
        /* Phi-3's LongRoPE: the short table, and the long one for a context past
         * original_context_length (the short one again when the model never takes it) */
        const float *lng = a->rope.long_after ? a->rope.inv_freq_long : a->rope.inv_freq;
        if ((st = exact_divisors(&a->rope, a->rope.inv_freq, p->factors_short, m->path, "rope_factors_short")) ||
            (st = exact_divisors(&a->rope, lng, p->factors_long, m->path, "rope_factors_long")))
            return st;
        add_tensor(p, "rope_factors_long.weight", T_MODEL, -1, 0, p->factors_long, a->rope.n_rot / 2, 0, LMP_GGML_F32,
                   NULL);
        add_tensor(p, "rope_factors_short.weight", T_MODEL, -1, 0, p->factors_short, a->rope.n_rot / 2, 0,
                   LMP_GGML_F32, NULL);
    }
    if (m->lm_head != m->tok_emb)
        add_tensor(p, "output.weight", T_MODEL, -1, 0, m->lm_head, a->dim, a->vocab, out_type, NULL);
    if (m->lm_head_b) /* Phi-2's head bias (LMP_ARCH_HEAD_BIAS) */
        add_tensor(p, "output.bias", T_MODEL, -1, 0, m->lm_head_b, a->vocab, 0, LMP_GGML_F32, NULL);
    if (a->rope.n_rot > 0 && !a->rope.plain && !strcmp(a->rope.type, "llama3")) {
        if ((st = exact_divisors(&a->rope, a->rope.inv_freq, p->rope_freqs, m->path, "rope_freqs"))) return st;
        add_tensor(p, "rope_freqs.weight", T_MODEL, -1, 0, p->rope_freqs, a->rope.n_rot / 2, 0, LMP_GGML_F32, NULL);
    }
    uint64_t off = 0;
    for (int i = 0; i < p->n; i++) {
        p->t[i].offset = off;
        off += (p->t[i].nbytes + ALIGNMENT - 1) / ALIGNMENT * ALIGNMENT;
    }
    p->data_bytes = off;
    return 0;
}

/* general.file_type: the type holding most of the blocks' linear weights. */
static uint32_t file_type(const plan_list *p)
{
    static const lmp_ggml_type types[] = {LMP_GGML_F32,  LMP_GGML_Q4_0, LMP_GGML_Q4_1,   LMP_GGML_Q8_0,
                                          LMP_GGML_Q5_0, LMP_GGML_Q5_1, LMP_GGML_IQ4_NL, LMP_GGML_Q2_K,
                                          LMP_GGML_Q3_K, LMP_GGML_Q4_K, LMP_GGML_Q5_K,   LMP_GGML_Q6_K,
                                          LMP_GGML_MXFP4, LMP_GGML_NVFP4, LMP_GGML_Q1_0,  LMP_GGML_Q2_0};
    /* a file mostly of one k-quant is that k-quant's _S (llama.cpp's name for the plain recipe) */
    static const uint32_t ftype[] = {FTYPE_ALL_F32,       FTYPE_MOSTLY_Q4_0,   FTYPE_MOSTLY_Q4_1,   FTYPE_MOSTLY_Q8_0,
                                     FTYPE_MOSTLY_Q5_0,   FTYPE_MOSTLY_Q5_1,   FTYPE_MOSTLY_IQ4_NL, FTYPE_MOSTLY_Q2_K,
                                     FTYPE_MOSTLY_Q3_K_S, FTYPE_MOSTLY_Q4_K_S, FTYPE_MOSTLY_Q5_K_S, FTYPE_MOSTLY_Q6_K,
                                     /* llama.cpp has one MXFP4 file type, named for the MoE models it came with */
                                     FTYPE_MOSTLY_MXFP4_MOE, FTYPE_MOSTLY_NVFP4, FTYPE_MOSTLY_Q1_0, FTYPE_MOSTLY_Q2_0};
    enum { N = sizeof types / sizeof *types };
    uint64_t n[N] = {0};
    for (int i = 0; i < p->n; i++) {
        const tensor_plan *t = &p->t[i];
        if (strncmp(t->name, "blk.", 4) != 0 || t->n_dims != 2) continue;
        for (int k = 0; k < N; k++) n[k] += t->type == types[k] ? (uint64_t)t->ne[0] * (uint64_t)t->ne[1] : 0;
    }
    int best = 0;
    for (int k = 1; k < N; k++)
        if (n[k] > n[best]) best = k;
    return ftype[best];
}

/* ---- the header ------------------------------------------------------------------------------ */

static void put_metadata(lmp_gguf_meta *kv, const lmp_model *m, const plan_list *p, const lmp_export_opts *o)
{
    const lmp_arch *a = &m->arch;
    const char *name = o->variant && *o->variant ? o->variant : lmp_basename(o->path);
    int quantized = 0;
    for (int i = 0; i < p->n; i++) quantized |= p->t[i].type != LMP_GGML_F32;
    const char *P = a->desc ? a->desc->gguf_arch : "llama";
    char key[128];
#define K(suffix) (snprintf(key, sizeof key, "%s.%s", P, suffix), key)
    lmp_gguf_kv_str(kv, "general.architecture", P, strlen(P));
    lmp_gguf_kv_str(kv, "general.name", name, strlen(name));
    lmp_gguf_kv_u32(kv, "general.alignment", ALIGNMENT);
    lmp_gguf_kv_u32(kv, "general.file_type", file_type(p));
    if (quantized) lmp_gguf_kv_u32(kv, "general.quantization_version", 2); /* ggml's QK layouts of today */
    const lmp_rope *r = &a->rope;
    const lmp_arch_desc *d = a->desc;
    lmp_gguf_kv_u32(kv, K("vocab_size"), (uint32_t)a->vocab);
    lmp_gguf_kv_u32(kv, K("context_length"), (uint32_t)a->seq_len);
    lmp_gguf_kv_u32(kv, K("embedding_length"), (uint32_t)a->dim);
    lmp_gguf_kv_u32(kv, K("block_count"), (uint32_t)a->n_layers);
    /* Mixtral's feed_forward_length is its experts' width (it has no other MLP) */
    const int mixtral = a->n_experts > 0 && d && d->moe && !d->moe->hf_sparse_step && !d->moe->hf_deepseek;
    lmp_gguf_kv_u32(kv, K("feed_forward_length"), (uint32_t)(mixtral ? a->expert_hidden : a->hidden));
    if (a->n_experts > 0) { /* as convert_hf_to_gguf.py writes them */
        lmp_gguf_kv_u32(kv, K("expert_count"), (uint32_t)a->n_experts);
        lmp_gguf_kv_u32(kv, K("expert_used_count"), (uint32_t)a->n_experts_used);
        /* (gpt-oss's converter writes both, and llama.cpp's gpt-oss reads this one) */
        if (!mixtral || d->moe->hf_gpt_oss)
            lmp_gguf_kv_u32(kv, K("expert_feed_forward_length"), (uint32_t)a->expert_hidden);
        if (a->shared_hidden && !a->mla)
            lmp_gguf_kv_u32(kv, K("expert_shared_feed_forward_length"), (uint32_t)a->shared_hidden);
    }
    if (a->mla && a->n_experts > 0) { /* deepseek2's routing (model_gguf.c read_deepseek2 reads it back) */
        int64_t dense = 0;
        while (dense < a->n_layers && !lmp_arch_moe_layer(a, dense)) dense++;
        lmp_gguf_kv_u32(kv, K("leading_dense_block_count"), (uint32_t)dense);
        lmp_gguf_kv_u32(kv, K("expert_shared_count"), (uint32_t)(a->shared_hidden / a->expert_hidden));
        lmp_gguf_kv_u32(kv, K("expert_gating_func"), a->route == LMP_ROUTE_SIGMOID_BIAS ? 2 : 1); /* sigmoid, softmax */
        lmp_gguf_kv_f32(kv, K("expert_weights_scale"), a->routed_scale > 0 ? a->routed_scale : 1.0f);
        if (a->norm_topk) lmp_gguf_kv_bool(kv, K("expert_weights_norm"), 1);
        if (a->n_group > 1 && a->topk_group < a->n_group) {
            lmp_gguf_kv_u32(kv, K("expert_group_count"), (uint32_t)a->n_group);
            lmp_gguf_kv_u32(kv, K("expert_group_used_count"), (uint32_t)a->topk_group);
        }
    }
    lmp_gguf_kv_u32(kv, K("attention.head_count"), (uint32_t)a->n_heads);
    if (a->family == LMP_FAMILY_GPT2) { /* LayerNorm, learned positions: no RoPE, no GQA keys */
        lmp_gguf_kv_f32(kv, K("attention.layer_norm_epsilon"), a->norm_eps);
        goto done;
    }
    if (a->alibi) { /* Bloom: no RoPE keys, the head size llama.cpp's default (as its converter writes) */
        lmp_gguf_kv_u32(kv, K("attention.head_count_kv"), (uint32_t)a->n_kv_heads);
        lmp_gguf_kv_f32(kv, K("attention.layer_norm_epsilon"), a->norm_eps);
        goto done;
    }
    if (d && d->hf_falcon) { /* as llama.cpp's converter writes falcon: no RoPE keys (llama.cpp's default
                                 * full-head rotary of base 10000, which export.c checks), q, k, v as
                                 * [q; k; v] ("jploski") */
        lmp_gguf_kv_u32(kv, K("attention.head_count_kv"), (uint32_t)a->n_kv_heads);
        lmp_gguf_kv_f32(kv, K("attention.layer_norm_epsilon"), a->norm_eps);
        lmp_gguf_kv_str(kv, K("tensor_data_layout"), "jploski", strlen("jploski"));
        goto done;
    }
    if (a->mla) { /* deepseek2: multi-query attention over the latent, the heads' sizes in *_mla */
        lmp_gguf_kv_u32(kv, K("attention.head_count_kv"), 1);
        lmp_gguf_kv_u32(kv, K("attention.key_length"), (uint32_t)(a->mla_kv_lora + a->mla_rope));
        lmp_gguf_kv_u32(kv, K("attention.value_length"), (uint32_t)a->mla_kv_lora);
        lmp_gguf_kv_u32(kv, K("attention.key_length_mla"), (uint32_t)(a->mla_nope + a->mla_rope));
        lmp_gguf_kv_u32(kv, K("attention.value_length_mla"), (uint32_t)a->head_dim);
        lmp_gguf_kv_u32(kv, K("attention.kv_lora_rank"), (uint32_t)a->mla_kv_lora);
        if (a->mla_q_lora) lmp_gguf_kv_u32(kv, K("attention.q_lora_rank"), (uint32_t)a->mla_q_lora);
        /* YaRN's mscale_all_dim, as the converter's 0.1 m (export.c checked that cos and sin are
         * then times 1): the scores times (0.1 m ln factor + 1)^2 */
        const float q_scale = a->mla_q_scale ? a->mla_q_scale : 1.0f;
        if (!r->plain && !strcmp(r->type, "yarn")) { /* llama.cpp's defaults, as the converter writes them */
            lmp_gguf_kv_f32(kv, K("rope.scaling.yarn_beta_fast"), 32.0f);
            lmp_gguf_kv_f32(kv, K("rope.scaling.yarn_beta_slow"), 1.0f);
        }
        if (!r->plain && !strcmp(r->type, "yarn") && a->rope.mscale == 1.0f && r->factor > 1)
            lmp_gguf_kv_f32(kv, K("rope.scaling.yarn_log_multiplier"),
                            (float)((sqrt((double)q_scale) - 1.0) / log(r->factor)));
    } else {
        if (!d || !d->gguf_no_kv_heads) /* (gptneox: no such key; export.c refuses kv heads != heads) */
            lmp_gguf_kv_u32(kv, K("attention.head_count_kv"), (uint32_t)a->n_kv_heads);
        /* the head size (llama.cpp's default is embedding_length / head_count; Qwen3's differs) */
        lmp_gguf_kv_u32(kv, K("attention.key_length"), (uint32_t)a->head_dim);
        lmp_gguf_kv_u32(kv, K("attention.value_length"), (uint32_t)a->head_dim);
    }
    lmp_gguf_kv_f32(kv, K(a->layer_norm ? "attention.layer_norm_epsilon" : "attention.layer_norm_rms_epsilon"),
                    a->norm_eps);
    /* a family whose config says whether the residual is parallel (GPT-NeoX: parallel unless
     * use_parallel_residual false; StableLM: sequential unless true; Phi-2 always is): the key
     * llama.cpp's converter writes (model_gguf.c reads it, and StableLM's missing ffn_norm) */
    if (d && !(d->flags & LMP_ARCH_PARALLEL) != !(d->flags & LMP_ARCH_SHARED_NORM))
        lmp_gguf_kv_bool(kv, K("use_parallel_residual"), a->parallel != 0);
    lmp_gguf_kv_f32(kv, K("rope.freq_base"), r->n_rot > 0 ? r->theta : a->rope_theta);
    lmp_gguf_kv_u32(kv, K("rope.dimension_count"), (uint32_t)(r->n_rot > 0 ? r->n_rot : a->head_dim));
    if (r->n_rot > 0 && !r->plain && (!strcmp(r->type, "linear") || !strcmp(r->type, "yarn"))) {
        /* as convert_hf_to_gguf.py writes them (llama3 is rope_freqs.weight; dynamic is the plain
         * table within the context, which context_length keeps) */
        lmp_gguf_kv_str(kv, K("rope.scaling.type"), r->type, strlen(r->type));
        lmp_gguf_kv_f32(kv, K("rope.scaling.factor"), (float)r->factor);
        if (!strcmp(r->type, "yarn"))
            lmp_gguf_kv_u32(kv, K("rope.scaling.original_context_length"), (uint32_t)r->orig_ctx);
    }
    if (r->n_rot > 0 && !r->plain && !strcmp(r->type, "longrope")) { /* Phi-3: with the factor tensors */
        lmp_gguf_kv_f32(kv, K("rope.scaling.attn_factor"), r->mscale);
        lmp_gguf_kv_u32(kv, K("rope.scaling.original_context_length"),
                        (uint32_t)(r->long_after ? r->long_after : a->seq_len));
    }
    if (d && !strcmp(d->gguf_arch, "phi3")) /* the converter's "none" (lmp_export_check_arch refuses a window) */
        lmp_gguf_kv_u32(kv, K("attention.sliding_window"), 0);
    if (d && d->gguf_swa_pattern) { /* Gemma 2 and 3: the window and, unless llama.cpp's default, which layers */
        int64_t window = a->window && a->window < a->seq_len ? a->window : a->seq_len;
        int differs = 0;
        unsigned char slides[LMP_MAX_LAYERS];
        for (int64_t l = 0; l < a->n_layers && l < LMP_MAX_LAYERS; l++) {
            slides[l] = lmp_arch_window(a, l) > 0 && lmp_arch_window(a, l) < a->seq_len;
            differs |= slides[l] != ((l + 1) % d->gguf_swa_pattern != 0);
        }
        lmp_gguf_kv_u32(kv, K("attention.sliding_window"), (uint32_t)window);
        if (differs) lmp_gguf_kv_bools(kv, K("attention.sliding_window_pattern"), (uint64_t)a->n_layers, slides);
        if (a->rope_local.n_rot > 0) lmp_gguf_kv_f32(kv, K("rope.freq_base_swa"), a->rope_local.theta);
    }
    if (d && d->hf_logit_scale_default) /* command-r: the logits' scale */
        lmp_gguf_kv_f32(kv, K("logit_scale"), a->logit_scale ? a->logit_scale : 1.0f);
    if (a->attn_softcap) lmp_gguf_kv_f32(kv, K("attn_logit_softcapping"), a->attn_softcap);
    if (a->final_softcap) lmp_gguf_kv_f32(kv, K("final_logit_softcapping"), a->final_softcap);
done:
#undef K
    lmp_gguf_kv_str(kv, "lmpress.version", LMP_VERSION, strlen(LMP_VERSION));
    lmp_gguf_kv_str(kv, "lmpress.variant", name, strlen(name));
    if (o->pipeline) lmp_gguf_kv_str(kv, "lmpress.pipeline", o->pipeline, strlen(o->pipeline));
    if (o->config_path) {
        const char *base = lmp_basename(o->config_path);
        lmp_gguf_kv_str(kv, "lmpress.config", base, strlen(base));
    }
    /* the config itself, so that the file says how to make it again (lmpress quantize
     * --print-config prints the same text) */
    if (o->config_text) lmp_gguf_kv_str(kv, "lmpress.config_text", o->config_text, strlen(o->config_text));
}

/* magic, version, counts, the metadata, the tensor infos, padding to the data section. */
static int build_header(lmp_gguf_meta *h, const lmp_gguf_meta *kv, const plan_list *p)
{
    lmp_gguf_put_bytes(h, "GGUF", 4);
    lmp_gguf_put_u32(h, 3);
    lmp_gguf_put_u64(h, (uint64_t)p->n);
    lmp_gguf_put_u64(h, kv->n);
    lmp_gguf_put_bytes(h, kv->data, kv->len);
    for (int i = 0; i < p->n; i++) {
        const tensor_plan *t = &p->t[i];
        lmp_gguf_put_str(h, t->name, strlen(t->name));
        lmp_gguf_put_u32(h, (uint32_t)t->n_dims);
        for (int d = 0; d < t->n_dims; d++) lmp_gguf_put_u64(h, (uint64_t)t->ne[d]);
        lmp_gguf_put_u32(h, (uint32_t)t->type);
        lmp_gguf_put_u64(h, t->offset);
    }
    static const unsigned char zeros[ALIGNMENT];
    lmp_gguf_put_bytes(h, zeros, (ALIGNMENT - h->len % ALIGNMENT) % ALIGNMENT);
    return lmp_gguf_meta_status(h, "export");
}

/* ---- the data ------------------------------------------------------------------------------- */

/* F32 values as little-endian bytes, through a small buffer (the weights may be a read-only
 * mapping, and the file's byte order is fixed whatever the host's). */
static int write_f32(FILE *f, const float *v, uint64_t n)
{
    unsigned char buf[16384];
    while (n) {
        const size_t k = n < sizeof buf / 4 ? (size_t)n : sizeof buf / 4;
        for (size_t i = 0; i < k; i++) {
            uint32_t u;
            memcpy(&u, &v[i], 4);
            buf[4 * i] = (unsigned char)u;
            buf[4 * i + 1] = (unsigned char)(u >> 8);
            buf[4 * i + 2] = (unsigned char)(u >> 16);
            buf[4 * i + 3] = (unsigned char)(u >> 24);
        }
        if (fwrite(buf, 4, k, f) != k) return -1;
        v += k;
        n -= k;
    }
    return 0;
}

/* One row of f32 values into a GGUF type's bytes, as ggml's reference quantizers do (llama-quantize
 * without an importance matrix: plugin.h's grids, lmp_wgrid_fit_block / lmp_wgrid_fit_kblock),
 * packed as the linears are; F16 as halves (round to nearest even). */
typedef struct row_encoder {
    lmp_ggml_type type;
    lmp_wformat fmt;
    lmp_wspec spec;
    int64_t n, n_slices;
    size_t row_bytes;
    float *scales, *zeros;
    int32_t *codes;
    lmp_wgrid g;
    lmp_linear l;
} row_encoder;

static void encoder_free(row_encoder *e)
{
    free(e->scales);
    free(e->zeros);
    free(e->codes);
}

static int encoder_init(row_encoder *e, lmp_ggml_type type, int64_t n, size_t row_bytes, const char *name)
{
    memset(e, 0, sizeof *e);
    e->type = type, e->n = n, e->row_bytes = row_bytes;
    e->fmt = type_format(type);
    e->spec = lmp_wspec_for_format(e->fmt, 1.0f);
    e->n_slices = e->fmt == LMP_WFORMAT_INT ? 1 : n / e->spec.group;
    e->scales = malloc((size_t)e->n_slices * sizeof *e->scales);
    e->zeros = calloc((size_t)e->n_slices, sizeof *e->zeros);
    e->codes = malloc((size_t)n * sizeof *e->codes);
    if (!e->scales || !e->zeros || !e->codes) {
        encoder_free(e);
        return lmp_fail(LMP_ENOMEM, "%s: out of memory", name);
    }
    e->g = (lmp_wgrid){.spec = e->spec, .n_scales = e->n_slices, .scales = e->scales, .zeros = e->spec.sym ? NULL : e->zeros};
    e->l = (lmp_linear){.name = name, .in = n, .out = 1};
    e->l.grid = &e->g;
    return 0;
}

static int encoder_row(row_encoder *e, const float *x, unsigned char *row)
{
    const lmp_wspec *s = &e->spec;
    if (e->type == LMP_GGML_F16) {
        for (int64_t j = 0; j < e->n; j++) {
            const uint16_t h = lmp_stw_f16(x[j], NULL);
            row[2 * j] = (unsigned char)h;
            row[2 * j + 1] = (unsigned char)(h >> 8);
        }
        return 0;
    }
    if (lmp_wformat_is_k(e->fmt)) {
        const int64_t nsub = LMP_WFORMAT_KBLOCK / s->group;
        for (int64_t c = 0, k = 0; c < e->n; c += LMP_WFORMAT_KBLOCK, k += nsub)
            lmp_wgrid_fit_kblock(s, x + c, NULL, e->scales + k, s->sym ? NULL : e->zeros + k);
    } else {
        for (int64_t k = 0; k < e->n_slices; k++) lmp_wgrid_fit_block(s, x + k * s->group, s->group, &e->scales[k], &e->zeros[k]);
    }
    for (int64_t j = 0; j < e->n; j++) {
        const int64_t k = j / s->group;
        e->codes[j] = lmp_wgrid_code_i32(lmp_wgrid_code(s, x[j], e->scales[k], s->sym ? 0.0f : e->zeros[k]));
    }
    if (lmp_wformat_is_k(e->fmt)) return lmp_gguf_pack_k_row(&e->l, 0, e->codes, row);
    pack_row(&e->l, 0, e->codes, e->type, row);
    return 0;
}

/* The embedding or head in the type asked for (--embedding-type, the config's export section,
 * lmpress quantize's preset, the source's own), a row at a time. */
static int write_converted(FILE *f, const tensor_plan *t)
{
    const size_t row_bytes = (size_t)(t->nbytes / (uint64_t)t->ne[1]);
    unsigned char *row = malloc(row_bytes);
    row_encoder e;
    int st = row ? encoder_init(&e, t->type, t->ne[0], row_bytes, t->name) : lmp_fail(LMP_ENOMEM, "%s: out of memory", t->name);
    if (st) {
        free(row);
        return st;
    }
    for (int64_t r = 0; r < t->ne[1] && !st; r++) {
        st = encoder_row(&e, t->f32 + r * t->ne[0], row);
        if (!st && fwrite(row, 1, row_bytes, f) != row_bytes) st = LMP_EIO;
    }
    encoder_free(&e);
    free(row);
    return st;
}

/* Whether every row of x[rows, n] stored as `type` reads back as itself, bit for bit (ggml's
 * dequantization, formats/gguf.h): then the source's own type loses nothing. */
static int reads_back(const float *x, int64_t n, int64_t rows, lmp_ggml_type type, const char *name)
{
    const int qk = lmp_ggml_type_block(type);
    if (qk <= 0 || n % qk) return 0;
    row_encoder e;
    const size_t row_bytes = type == LMP_GGML_F16 ? 2u * (size_t)n
                             : (size_t)(n / qk) * (size_t)(lmp_wformat_is_k(type_format(type)) ? lmp_gguf_kblock_bytes(type_format(type))
                                                                                                : block_bytes(type));
    unsigned char *row = malloc(row_bytes);
    float *back = malloc((size_t)n * sizeof *back);
    int same = row && back && encoder_init(&e, type, n, row_bytes, name) == 0;
    if (same) {
        for (int64_t r = 0; r < rows && same; r++) {
            const float *v = x + r * n;
            if (encoder_row(&e, v, row)) {
                same = 0;
                break;
            }
            const lmp_gguf_tensor t = {.name = (char *)name, .n_dims = 1, .ne = {n, 1, 1, 1}, .type = type, .data = row,
                                       .nbytes = row_bytes};
            if (lmp_gguf_dequantize(&t, 0, n, back)) {
                same = 0;
                break;
            }
            for (int64_t j = 0; j < n && same; j++) same = back[j] == v[j];
        }
        encoder_free(&e);
    }
    free(row);
    free(back);
    lmp_clear_error();
    return same;
}

/* The type the source GGUF stores `name` in, when this writer writes that type and it gives the
 * model's values back exactly; else F32. */
static lmp_ggml_type source_type(lmp_ctx *ctx, const lmp_model *m, const char *name, const float *x)
{
    lmp_gguf *g = NULL;
    if (!lmp_export_is_gguf(m->path) || lmp_gguf_open(m->path, &g)) {
        lmp_clear_error();
        return LMP_GGML_F32;
    }
    const lmp_gguf_tensor *t = lmp_gguf_find_tensor(g, name);
    lmp_ggml_type type = t && (t->type == LMP_GGML_F16 || type_format(t->type) != LMP_WFORMAT_INT) ? t->type : LMP_GGML_F32;
    lmp_gguf_close(g);
    if (type != LMP_GGML_F32 && !reads_back(x, m->arch.dim, m->arch.vocab, type, name)) {
        lmp_log(ctx, LMP_LOG_INFO, "%s: the source's %s does not give its values back when written again: F32", name,
                lmp_ggml_type_name(type));
        type = LMP_GGML_F32;
    }
    return type;
}

/* A quantized linear's rows (all of a tensor, or one part of a fused one), one row's codes and
 * blocks in memory at a time; halves: in rotate-half order (tensor_plan). */
static int write_quantized(FILE *f, const tensor_plan *t, const lmp_linear *l, int halves)
{
    const size_t row_bytes = (size_t)(t->nbytes / (uint64_t)(t->ne[1] * (t->n_dims == 3 ? t->ne[2] : 1)));
    int32_t *codes = malloc((size_t)l->in * sizeof *codes);
    unsigned char *row = malloc(row_bytes);
    int st = codes && row ? 0 : lmp_fail(LMP_ENOMEM, "%s: out of memory", l->name);
    for (int64_t i = 0; i < l->out && !st; i++) {
        const int64_t r = halves ? lmp_rope_halves_row(i, t->halves_hd, t->n_rot) : i;
        if ((st = lmp_grid_codes_row(l, r, codes))) break;
        if (lmp_wformat_is_k(l->grid->spec.format)) st = lmp_gguf_pack_k_row(l, r, codes, row);
        else pack_row(l, r, codes, t->type, row);
        if (fwrite(row, 1, row_bytes, f) != row_bytes) st = LMP_EIO; /* errno says why: the caller reports it */
    }
    free(codes);
    free(row);
    return st;
}

/* n values v (a bias, a norm), gathered back to rotate-half order when halves, then written. */
static int write_vector(FILE *f, const tensor_plan *t, const float *v, int64_t n, int halves)
{
    if (!halves) return write_f32(f, v, (uint64_t)n) ? LMP_EIO : 0;
    float *g = malloc((size_t)n * sizeof *g);
    if (!g) return lmp_fail(LMP_ENOMEM, "%s: out of memory", t->name);
    for (int64_t j = 0; j < n; j++) g[j] = v[lmp_rope_halves_row(j, t->halves_hd, t->n_rot)];
    const int st = write_f32(f, g, (uint64_t)n) ? LMP_EIO : 0;
    free(g);
    return st;
}

/* One part of a block's linear tensor: its weight rows or its bias. */
static int write_part(FILE *f, const tensor_plan *t, const lmp_linear *l, int halves)
{
    if (t->kind == T_BIAS) return write_vector(f, t, l->b, l->out, halves);
    if (t->type != LMP_GGML_F32) return write_quantized(f, t, l, halves);
    if (!halves) return write_f32(f, l->w, (uint64_t)l->out * (uint64_t)l->in) ? LMP_EIO : 0;
    for (int64_t r = 0; r < l->out; r++) /* an F32 q or k weight, row by row in rotate-half order */
        if (write_f32(f, l->w + lmp_rope_halves_row(r, t->halves_hd, t->n_rot) * l->in, (uint64_t)l->in))
            return LMP_EIO;
    return 0;
}

/* kv_b's rows as attn_k_b (k_b[h][c][j] = kv_b[h (nope + v) + j][c]) or attn_v_b
 * (v_b[h][j][c] = kv_b[h (nope + v) + nope + j][c]). */
static int write_kv_b(FILE *f, const tensor_plan *t, const lmp_linear *l, int64_t H, int64_t nope, int64_t v)
{
    const int64_t kv = l->in;
    if (t->kind == T_V_B) {
        for (int64_t h = 0; h < H; h++)
            if (write_f32(f, l->w + (h * (nope + v) + nope) * kv, (uint64_t)(v * kv))) return LMP_EIO;
        return 0;
    }
    float *row = malloc((size_t)nope * sizeof *row);
    if (!row) return lmp_fail(LMP_ENOMEM, "%s: out of memory", t->name);
    int st = 0;
    for (int64_t h = 0; h < H && !st; h++)
        for (int64_t c = 0; c < kv && !st; c++) {
            for (int64_t j = 0; j < nope; j++) row[j] = l->w[(h * (nope + v) + j) * kv + c];
            if (write_f32(f, row, (uint64_t)nope)) st = LMP_EIO;
        }
    free(row);
    return st;
}

/* One tensor's data: a model tensor from the model, a block's from the block cursor holds. */
static int write_tensor(FILE *f, const tensor_plan *t, lmp_block_cursor *cur)
{
    if (t->kind == T_K_B || t->kind == T_V_B) {
        const lmp_block *blk = lmp_block_cursor_at(cur, t->block);
        if (!blk) return LMP_EIO;
        const lmp_linear *l = &blk->linears[t->index];
        const int64_t H = t->ne[2], per_head = l->out / H; /* nope + v rows a head */
        const int64_t nope = t->kind == T_K_B ? t->ne[0] : per_head - t->ne[1];
        return write_kv_b(f, t, l, H, nope, per_head - nope);
    }
    if (t->kind == T_MODEL) {
        if (t->type != LMP_GGML_F32) return write_converted(f, t);
        return write_f32(f, t->f32, (uint64_t)t->ne[0] * (uint64_t)t->ne[1]) ? LMP_EIO : 0;
    }
    const lmp_block *blk = lmp_block_cursor_at(cur, t->block);
    if (!blk) return LMP_EIO; /* the source said why */
    if (t->kind == T_NORM || t->kind == T_NORM_BIAS) {
        const lmp_norm *nm = &blk->norms[t->index];
        return write_vector(f, t, t->kind == T_NORM ? nm->w : nm->b, t->ne[0], t->halves_hd != 0);
    }
    int st = 0;
    for (int e = 0; e < t->experts && !st; e++) /* a 3-D experts tensor: expert after expert */
        st = write_part(f, t, &blk->linears[lmp_block_find_expert(blk, t->role, LMP_EXPERT_ROUTED, e)], 0);
    for (int k = 0; k < t->n_parts && !st; k++) st = write_part(f, t, &blk->linears[t->part[k]], t->part_halves[k]);
    return st;
}

/* Header, then every tensor padded to the alignment.  LMP_EIO: a write failed (errno). */
static int write_all(lmp_ctx *ctx, FILE *f, const lmp_gguf_meta *header, const plan_list *p,
                     const lmp_block_source *src, const char *what)
{
    static const unsigned char zeros[ALIGNMENT];
    if (fwrite(header->data, 1, header->len, f) != header->len) return LMP_EIO;
    lmp_block_cursor cur;
    lmp_block_cursor_init(&cur, src);
    int st = 0;
    for (int i = 0; i < p->n && !st; i++) {
        if ((st = lmp_host_stop_if_interrupted(ctx))) break;
        lmp_progress(ctx, what, i, p->n);
        const tensor_plan *t = &p->t[i];
        if ((st = write_tensor(f, t, &cur))) break;
        const size_t pad = (size_t)((ALIGNMENT - t->nbytes % ALIGNMENT) % ALIGNMENT);
        if (fwrite(zeros, 1, pad, f) != pad) st = LMP_EIO;
    }
    lmp_block_cursor_free(&cur);
    if (!st) lmp_progress(ctx, what, p->n, p->n);
    return st;
}

/* Into a temporary file beside path, renamed over it when every byte is on disk. */
static int write_file(lmp_ctx *ctx, const char *path, const lmp_gguf_meta *header, const plan_list *p,
                      const lmp_block_source *src)
{
    char tmp[4200], what[300];
    snprintf(what, sizeof what, "writing %s", lmp_basename(path));
    lmp_tmpname_sweep(path); /* what killed runs left beside it (base/tmpname.h) */
    const int fd = lmp_tmpname_create(path, "tmp", 0, tmp, sizeof tmp);
    if (fd < 0) return lmp_fail(LMP_EIO, "%s: cannot create a temporary file beside it: %s", path, strerror(errno));
    FILE *f = fdopen(fd, "wb");
    if (!f) {
        const int e = errno;
        close(fd);
        unlink(tmp);
        return lmp_fail(LMP_EIO, "%s: %s", path, strerror(e));
    }
    setvbuf(f, NULL, _IOFBF, 1 << 20);
    int st = write_all(ctx, f, header, p, src, what);
    int e = errno, io = st == LMP_EIO && ferror(f); /* else a block source's failure, already said */
    if (!st && (fflush(f) != 0 || ferror(f))) st = LMP_EIO, e = errno, io = 1;
    if (!st && fsync(fd) != 0) st = LMP_EIO, e = errno, io = 1;
    if (!st) { /* mkstemp makes the file 0600; a model is an ordinary file */
        const mode_t mask = umask(0);
        umask(mask);
        fchmod(fd, 0666 & ~mask);
    }
    if (fclose(f) != 0 && !st) st = LMP_EIO, e = errno, io = 1;
    if (!st && lmp_outfile_check_kind(path, "export")) { /* put there since the check: not replaced */
        unlink(tmp);
        return LMP_EINVAL;
    }
    if (!st && rename(tmp, path) != 0) st = LMP_EIO, e = errno, io = 1;
    if (st) {
        unlink(tmp);
        if (io) return lmp_fail(LMP_EIO, "%s: write failed: %s", path, strerror(e));
        return lmp_fail_prefix(st, "%s", path);
    }
    return 0;
}

int lmp_export_gguf(lmp_ctx *ctx, const lmp_model *m, const lmp_block_source *blocks, const lmp_export_opts *o)
{
    int st = lmp_export_check_arch(m, o->path);
    if (st) return st;
    /* the token embedding's and the head's types: as asked (NULL: F32, exact), each fitted to the
     * rows as llama-quantize fits them (a k-quant falls back on rows it does not divide) */
    lmp_ggml_type emb_type, out_type;
    const char *emb_name = o->embedding_type, *out_name = o->output_type ? o->output_type : o->embedding_type;
    if (named_type(emb_name, m->arch.dim, &emb_type) || named_type(out_name, m->arch.dim, &out_type))
        return lmp_fail(LMP_EINVAL, "%s: embedding type '%s': expected f32, f16, q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl or "
                        "q2_k .. q6_k", o->path, named_type(emb_name, 256, &emb_type) ? emb_name : out_name);
    const int tied = m->lm_head == m->tok_emb;
    /* neither asked: the source's own types, which lose nothing (llama-quantize keeps them too
     * when told --token-embedding-type / --output-tensor-type of the source) */
    const int from_source = !emb_name && !o->output_type;
    if (from_source) {
        emb_type = source_type(ctx, m, "token_embd.weight", m->tok_emb);
        out_type = tied ? emb_type : source_type(ctx, m, "output.weight", m->lm_head);
        if (emb_type != LMP_GGML_F32 || (!tied && out_type != LMP_GGML_F32))
            lmp_log(ctx, LMP_LOG_INFO, "%s: the token embedding%s stored as the source's %s%s%s (exact: it reads back "
                    "as the evaluated values)", o->path, tied ? " (and tied head) is" : " and head are",
                    lmp_ggml_type_name(emb_type), tied ? "" : " and ", tied ? "" : lmp_ggml_type_name(out_type));
    }
    if (!from_source && (emb_type != LMP_GGML_F32 || (!tied && out_type != LMP_GGML_F32)))
        lmp_log(ctx, LMP_LOG_WARN,
                "%s: the token embedding%s stored as %s%s%s: the file's model differs there from the one lmpress "
                "evaluated (its block linears are exact)", o->path, tied ? " (and tied head) is" : " and head are",
                lmp_ggml_type_name(emb_type), tied ? "" : " and ", tied ? "" : lmp_ggml_type_name(out_type));
    plan_list p = {0};
    lmp_gguf_meta kv = {0}, header = {0};
    p.t = calloc((size_t)(14 + m->arch.n_layers * (2 * LMP_NORM_KINDS + 2 * LMP_ROLE_COUNT)), sizeof *p.t);
    if (!p.t) return lmp_fail(LMP_ENOMEM, "%s: out of memory", o->path);
    if (m->arch.desc && m->arch.desc->gguf_rope_halves) {
        p.halves_hd = m->arch.head_dim;
        p.n_rot = m->arch.rope.n_rot > 0 ? m->arch.rope.n_rot : m->arch.head_dim;
    }
    if (!(st = plan_tensors(ctx, m, blocks, emb_type, out_type, &p))) {
        put_metadata(&kv, m, &p, o);
        st = lmp_gguf_meta_tokenizer(ctx, m, o->tokenizer_path, &kv);
    }
    if (!st) st = lmp_gguf_meta_status(&kv, "export");
    if (!st) st = build_header(&header, &kv, &p);
    if (st) {
        st = lmp_fail_prefix(st, "%s: not exported", o->path);
    } else { /* what the file does not carry, said once the export is sure to be attempted */
        if (p.n_int)
            lmp_log(ctx, LMP_LOG_WARN,
                    "%s: %d linear%s on an int or nf4 grid (%s%s), which GGUF has no type for: written as F32, exact "
                    "and uncompressed (format = q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl or q2_k .. q6_k quantizes onto "
                    "GGUF's own blocks)",
                    o->path, p.n_int, p.n_int == 1 ? " is" : "s are", p.int_name, p.n_int > 1 ? ", ..." : "");
        if (p.n_act)
            lmp_log(ctx, LMP_LOG_WARN,
                    "%s: %d linear%s activations (%s%s): llama.cpp does its own activation handling, so only the "
                    "weights are stored", o->path, p.n_act, p.n_act == 1 ? " quantizes its" : "s quantize their",
                    p.act_name, p.n_act > 1 ? ", ..." : "");
        st = write_file(ctx, o->path, &header, &p, blocks);
        if (!st) {
            uint64_t bytes = 0, weights = 0;
            for (int i = 0; i < p.n; i++)
                bytes += p.t[i].nbytes,
                    weights += (uint64_t)p.t[i].ne[0] * (uint64_t)p.t[i].ne[1] * (uint64_t)(p.t[i].n_dims == 3 ? p.t[i].ne[2] : 1);
            lmp_export_log_size(ctx, o->path, (uint64_t)header.len + p.data_bytes, bytes, weights);
        }
    }
    free(p.int_name);
    free(p.act_name);
    lmp_gguf_meta_free(&kv);
    lmp_gguf_meta_free(&header);
    free(p.t);
    return st;
}
