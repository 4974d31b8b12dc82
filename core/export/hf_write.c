/* hf_write.c — a compressed variant as a Hugging Face folder that transformers and vLLM load
 * through compressed-tensors (export.h): the Llama block's families (Llama, Mistral, Qwen2, Qwen3,
 * Gemma from any source; Phi-3 with its fused qkv_proj / gate_up_proj, Gemma 2/3, GLM (fused
 * gate_up_proj), GLM-4 and ERNIE 4.5 from a Hugging Face source, whose config.json is kept; the
 * mixtures of experts Mixtral, Qwen2/3-MoE and DeepSeek-V2/V3 likewise, each expert's linears
 * under their own names, DeepSeek-V3's selection bias as <router>.e_score_correction_bias;
 * export.c refuses the others by name, gpt-oss among them).
 *
 *   config.json        a Hugging Face source's own, with quantization_config (and torch_dtype,
 *                      the family's attention_bias / mlp_bias) replaced; for a llama2.c or GGUF
 *                      source the family's config made from the architecture (hf_config.c: its
 *                      class and model_type, head_dim, rope_theta + rope_scaling, which
 *                      transformers 4 and 5 both read).  A top-level "lmpress" object
 *                      records the lmpress version, variant, pipeline and source; it also marks
 *                      the folder as an lmpress export, which a later export may replace.
 *   model.safetensors  or model-0000i-of-0000N.safetensors + model.safetensors.index.json above
 *                      o->shard_bytes (default 5 GB); a linear's tensors stay in one shard.
 *   tokenizer files    copied from beside o->tokenizer_path, else from the source folder; else
 *                      tokenizer.json and tokenizer_config.json made from the tokenizer (hf_tokenizer.h).
 *
 * The tensor layout is in hf_plan.h.  What lmpress evaluated is what the folder holds: each
 * quantized weight is written as its code on the recorded grid (checked to dequantize to the
 * weight bit for bit, grid_codes.h) with the grid's own scales in their own type.  The tensors
 * no stage quantized (embedding, norms, head, unquantized linears, biases) are written in F32,
 * exactly, and torch_dtype is "float32" — unless every quantized linear's scales are bf16 (or
 * every one's f16): then the model is that dtype's, as vLLM runs it, and those tensors are
 * rounded to it (a log line says how many values changed; an f16 overflow is an error).
 *
 * Two passes over the blocks, each read from the block source one at a time: the first checks
 * them and plans every tensor and shard (build_plan: the plan keeps names and shapes, not
 * weights), the second writes (a block cursor: each block is read once per element size, the
 * order a shard's tensors are written in).
 *
 * GPT-2 is written as transformers' GPT2LMHeadModel, its Conv1D linears dense (hf_plan.h).
 *
 * Refused before anything is written, each naming the linear or norm and what to change: an
 * input affine (Shift/SmoothQuant's all_linears on o/down); a bias on an RMSNorm; a bias the
 * architecture has no place for; a GGUF grid (q8_0, q4_0, ...: export a .gguf); weights
 * quantized with no recorded grid; 3, 5, 6 or 7 weight bits without activation quantization;
 * a group size that does not divide the row; activation quantization other than 8-bit dynamic
 * per token or static per tensor, or without quantized weights; a destination that is a file,
 * or a non-empty folder that is not an earlier lmpress export. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/error.h"
#include "base/input_file.h"
#include "base/log.h"
#include "export/hf_plan.h"
#include "export/hf_tokenizer.h"
#include "export/out_dir.h"
#include "export/st_write.h"
#include "formats/json_write.h"
#include "model/tensor_names.h"

#define HF_DEFAULT_SHARD_BYTES 5000000000LL /* transformers' "5GB" */

void hf_shard_name(int s, int n, char *buf, size_t size)
{
    if (n == 1) snprintf(buf, size, "model.safetensors");
    else snprintf(buf, size, "model-%05d-of-%05d.safetensors", s + 1, n);
}

/* ---- the source ------------------------------------------------------------------------- */
static char *dir_of(const char *path)
{
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) return strdup(path);
    const char *slash = strrchr(path, '/');
    if (!slash) return strdup(".");
    if (slash == path) return strdup("/");
    return strndup(path, (size_t)(slash - path));
}

static int read_json(const char *path, lmp_json **out)
{
    char *text;
    size_t len;
    int st = lmp_input_read(path, LMP_INPUT_JSON, &text, &len);
    if (st) return st;
    st = lmp_json_parse(text, len, path, out);
    free(text);
    return st;
}

/* A Hugging Face source's folder and config.json (the loader read the same file). */
static int read_source(hf_plan *p)
{
    p->desc = p->m->arch.desc ? p->m->arch.desc : lmp_arch_by_name("llama");
    if (strcmp(p->m->format, "safetensors") != 0) {
        p->arch = p->desc->hf_class;
        return 0;
    }
    if (!(p->src_dir = dir_of(p->m->path))) return lmp_fail(LMP_ENOMEM, "out of memory");
    char path[4200];
    snprintf(path, sizeof path, "%s/config.json", p->src_dir);
    int st = read_json(path, &p->src_config);
    if (st) return st;
    const lmp_json *a = lmp_json_get(p->src_config, "architectures");
    if (!a || a->type != LMP_JSON_ARRAY || a->n < 1 || a->items[0].type != LMP_JSON_STRING)
        return lmp_fail(LMP_EINVAL, "%s: no \"architectures\" list", path);
    p->arch = a->items[0].str;
    return 0;
}

/* ---- checks and the schemes -------------------------------------------------------------- */
static int is_attn(lmp_role r) { return r == LMP_ROLE_Q || r == LMP_ROLE_K || r == LMP_ROLE_V || r == LMP_ROLE_O; }

/* The scheme of a quantized linear, checked; *sc untouched and 0 returned with *none = 1 for a
 * linear written dense. */
/* An activation mode as rtn's `act` spells it. */
static const char *lmp_act_mode_name(lmp_act_mode a)
{
    static const char *const names[] = {"none",  "static_tensor", "dynamic_tensor", "dynamic_token", "fp8_static_tensor",
                                        "fp8_dynamic_token", "nvfp4", "mxfp4"};
    return a >= 0 && a <= LMP_ACT_MXFP4 ? names[a] : "unknown";
}

/* A floating-point grid's scheme (hf_plan.h): FP8 E4M3, NVFP4 and MXFP4 weights, each with the
 * activations compressed-tensors pairs it with or none; E5M2 and MXFP8 are refused by name. */
static int fp_scheme(const lmp_linear *l, hf_scheme *sc)
{
    const lmp_wgrid *g = l->grid;
    const lmp_wspec *s = &g->spec;
    const char *f = lmp_wformat_name(s->format);
    if (s->format == LMP_WFORMAT_FP8_E5M2)
        return lmp_fail(LMP_EUNSUPPORTED, "%s: its weights are on the fp8_e5m2 grid; compressed-tensors' 8-bit float "
                        "weights are E4M3 only: use format fp8_e4m3", l->name);
    if (!lmp_wspec_format_ok(s) || g->n_scales != lmp_wspec_n_scales(s, l->out, l->in) || g->g_idx)
        return lmp_fail(LMP_EINVAL, "%s: the recorded %s grid is inconsistent (%lld scales for [%lld, %lld]%s)", l->name,
                        f, (long long)g->n_scales, (long long)l->out, (long long)l->in, g->g_idx ? ", act-order groups" : "");
    if (s->gran == LMP_GRAN_GROUP && l->in % s->group != 0)
        return lmp_fail(LMP_EUNSUPPORTED, "%s: %s groups of %lld do not divide its %lld inputs (compressed-tensors takes "
                        "whole groups)", l->name, f, (long long)s->group, (long long)l->in);
    const lmp_act_mode a = l->act.mode;
    const int act_ok = a == LMP_ACT_NONE ||
                       (s->format == LMP_WFORMAT_FP8_E4M3 && (a == LMP_ACT_FP8_DYN_TOKEN || a == LMP_ACT_FP8_STATIC_TENSOR)) ||
                       (s->format == LMP_WFORMAT_NVFP4 && a == LMP_ACT_NVFP4) || (s->format == LMP_WFORMAT_MXFP4 && a == LMP_ACT_MXFP4);
    if (!act_ok)
        return lmp_fail(LMP_EUNSUPPORTED, "%s: %s weights with %s activations have no compressed-tensors scheme lmpress "
                        "writes (fp8_e4m3 takes fp8_dynamic_token or fp8_static_tensor inputs, nvfp4 nvfp4, mxfp4 "
                        "mxfp4, mxfp8 none)", l->name, f, lmp_act_mode_name(a));
    *sc = (hf_scheme){.bits = s->bits, .sym = 1, .gran = s->gran,
                      .group = s->gran == LMP_GRAN_GROUP || s->gran == LMP_GRAN_BLOCK ? s->group : 0,
                      .act = a, .wfmt = s->format,
                      .fmt = s->format == LMP_WFORMAT_NVFP4 ? HF_FMT_NVFP4
                             : s->format == LMP_WFORMAT_MXFP4 ? HF_FMT_MXFP4
                             : s->format == LMP_WFORMAT_MXFP8 ? HF_FMT_MXFP8
                             : a != LMP_ACT_NONE              ? HF_FMT_FLOAT
                                                              : HF_FMT_NAIVE};
    return 0;
}

static int linear_scheme(lmp_ctx *ctx, const lmp_linear *l, hf_scheme *sc, int *none)
{
    const lmp_wgrid *g = l->grid;
    *none = 0;
    if (l->in_shift || l->in_scale || l->shift_bias)
        return lmp_fail(LMP_EUNSUPPORTED,
                        "%s: has an input affine x -> (x - shift) / scale (Shift or SmoothQuant with all_linears on "
                        "a linear no norm feeds), which a Hugging Face Llama has no place for; run the variant "
                        "without all_linears to export it", l->name);
    if (!g) {
        if (l->act.mode != LMP_ACT_NONE)
            return lmp_fail(LMP_EUNSUPPORTED,
                            "%s: its input is quantized but its weights are not; compressed-tensors' int8 "
                            "activation schemes come with quantized weights: quantize its weights too", l->name);
        if (l->weight_bits < 32.0)
            return lmp_fail(LMP_EINVAL,
                            "%s: its weights were quantized (%.2f bits per weight) but no grid is recorded for them "
                            "(a later stage edited the weights); the codes cannot be written", l->name, l->weight_bits);
        *none = 1;
        return 0;
    }
    const lmp_wspec *s = &g->spec;
    if (s->format == LMP_WFORMAT_NF4)
        return lmp_fail(LMP_EUNSUPPORTED,
                        "%s: its weights are on the nf4 grid (bitsandbytes'), which compressed-tensors has no type "
                        "for, and lmpress does not write bitsandbytes checkpoints", l->name);
    if (lmp_wformat_is_fp(s->format)) return fp_scheme(l, sc);
    if (s->format != LMP_WFORMAT_INT)
        return lmp_fail(LMP_EUNSUPPORTED,
                        "%s: its weights are on the GGUF %s grid, which compressed-tensors has no type for; export a "
                        ".gguf for that", l->name, lmp_wformat_name(s->format) ? lmp_wformat_name(s->format) : "block");
    if (!lmp_wspec_format_ok(s) || s->bits < 2 || s->bits > 8 || s->gran < LMP_GRAN_TENSOR || s->gran > LMP_GRAN_GROUP ||
        (s->gran == LMP_GRAN_GROUP && s->group < 1) || g->n_scales != lmp_wspec_n_scales(s, l->out, l->in))
        return lmp_fail(LMP_EINVAL, "%s: the recorded grid is inconsistent (%d bits, %lld scales for [%lld, %lld])",
                        l->name, s->bits, (long long)g->n_scales, (long long)l->out, (long long)l->in);
    if (s->gran == LMP_GRAN_GROUP && l->in % s->group != 0)
        return lmp_fail(LMP_EUNSUPPORTED,
                        "%s: group_size %lld does not divide its %lld inputs, and compressed-tensors (and vLLM) "
                        "take no shorter last group; leave it out of that stage or use a group size dividing %lld",
                        l->name, (long long)s->group, (long long)l->in, (long long)l->in);
    *sc = (hf_scheme){.bits = s->bits, .sym = s->sym, .gran = s->gran,
                      .group = s->gran == LMP_GRAN_GROUP ? s->group : 0,
                      .g_idx = s->gran == LMP_GRAN_GROUP && g->g_idx != NULL, .act = LMP_ACT_NONE};
    switch (l->act.mode) {
    case LMP_ACT_NONE: break;
    case LMP_ACT_FP8_DYN_TOKEN: /* W4AFP8 (any int weights): int-quantized */
        sc->act = l->act.mode;
        break;
    case LMP_ACT_DYN_TOKEN:
    case LMP_ACT_STATIC_TENSOR:
        if (l->act.bits == 8) {
            sc->act = l->act.mode;
            break;
        }
        /* fall through */
    default:
        return lmp_fail(LMP_EUNSUPPORTED,
                        "%s: %d-bit %s activation quantization has no compressed-tensors scheme that vLLM runs; "
                        "use 8-bit dynamic_token or static_tensor", l->name, l->act.bits,
                        l->act.mode == LMP_ACT_DYN_TENSOR ? "dynamic per-tensor"
                        : l->act.mode == LMP_ACT_DYN_TOKEN ? "dynamic per-token"
                        : l->act.mode == LMP_ACT_STATIC_TENSOR ? "static per-tensor" : lmp_act_mode_name(l->act.mode));
    }
    if ((sc->act == LMP_ACT_DYN_TOKEN || sc->act == LMP_ACT_STATIC_TENSOR) && l->act.rounding != LMP_ROUND_HALF_EVEN)
        lmp_log(ctx, LMP_LOG_WARN, "%s: its activations were rounded half away from zero; runtimes round them half "
                                   "to even", l->name);
    sc->fmt = sc->act != LMP_ACT_NONE ? HF_FMT_INT : HF_FMT_PACK;
    if (sc->fmt == HF_FMT_PACK && 32 % sc->bits != 0)
        return lmp_fail(LMP_EUNSUPPORTED,
                        "%s: %d-bit weights: compressed-tensors packs %d-bit values differently from one version to "
                        "the next (up to 0.17: %d per int32 word; from 0.19: densely), so no file reads the same everywhere; "
                        "use 2, 4 or 8 bits", l->name, sc->bits, sc->bits, 32 / sc->bits);
    return 0;
}

static int find_scheme(hf_plan *p, const hf_scheme *sc, const char *who)
{
    for (int i = 0; i < p->n_schemes; i++) {
        const hf_scheme *o = &p->schemes[i];
        if (o->bits == sc->bits && o->sym == sc->sym && o->gran == sc->gran && o->group == sc->group &&
            o->g_idx == sc->g_idx && o->act == sc->act && o->fmt == sc->fmt && o->wfmt == sc->wfmt)
            return i;
    }
    if (p->n_schemes == (int)(sizeof p->schemes / sizeof *p->schemes))
        return lmp_fail(LMP_EUNSUPPORTED, "%s: more than %d different quantization schemes in one model", who,
                        p->n_schemes);
    p->schemes[p->n_schemes] = *sc;
    return p->n_schemes++;
}

/* Which linears get a bias tensor, by the family's switches (arch.h's bias rule): Llama has one
 * for q,k,v,o (attention_bias) and one for gate,up,down (mlp_bias), a linear without a bias of its
 * own getting zeros, which change nothing; Qwen3 and Gemma only attention_bias; Qwen2 has q,k,v
 * biases always and no others; Mistral none (its modules take no bias). */
static int plan_biases(hf_plan *p)
{
    /* q, k, v only: Qwen2 always, GLM / GLM-4 with attention_bias */
    const int qwen2 = p->desc->bias == LMP_BIAS_QKV || p->desc->bias == LMP_BIAS_QKV_CONFIG;
    /* none: Mistral; ERNIE 4.5 (its use_bias is false in every released model; not written here) */
    const int mistral = !strcmp(p->desc->name, "mistral") || !strcmp(p->desc->name, "ernie4_5");
    const int no_mlp = p->desc->bias == LMP_BIAS_ATTN_CONFIG || (p->desc->flags & LMP_ARCH_GEGLU);
    lmp_bias_rule rule = p->desc->bias;
    if (rule == LMP_BIAS_ALL_FLAG) rule = LMP_BIAS_ALL_CONFIG; /* Falcon's bias: every linear, one switch */
    if (rule == LMP_BIAS_NEOX || rule == LMP_BIAS_MLP || rule == LMP_BIAS_ALL_CONFIG) {
        /* GPT-NeoX: q,k,v,o on attention_bias, up and down always; GPT-J: up and down only;
         * StarCoder2: every linear on its one switch (use_bias) */
        for (int i = 0; i < p->n_lins; i++) {
            const hf_linear *l = &p->lins[i];
            if (!l->has_b) continue;
            if (rule == LMP_BIAS_MLP && is_attn(l->role))
                return lmp_fail(LMP_EUNSUPPORTED, "%s: has a bias, which %s has no place for", l->name, p->arch);
            if (is_attn(l->role) || rule == LMP_BIAS_ALL_CONFIG) p->attn_bias = 1;
        }
        for (int i = 0; i < p->n_lins; i++) {
            const int attn = is_attn(p->lins[i].role);
            p->lins[i].bias = rule == LMP_BIAS_MLP ? !attn : rule == LMP_BIAS_NEOX && !attn ? 1 : p->attn_bias;
        }
        return 0;
    }
    if (p->desc->bias == LMP_BIAS_ALL) { /* GPT-2: every Conv1D has one; Bloom every linear */
        for (int i = 0; i < p->n_lins; i++) p->lins[i].bias = 1;
        return 0;
    }
    /* Phi-3: none, refused where its parts are fused; ChatGLM's query_key_value has one on add_qkv_bias */
    if (p->desc->hf_fused_qkv && p->desc->bias != LMP_BIAS_QKV_CONFIG) return 0;
    const int selection = p->m->arch.route == LMP_ROUTE_SIGMOID_BIAS; /* DeepSeek-V3's router bias */
    for (int i = 0; i < p->n_lins; i++) {
        const hf_linear *l = &p->lins[i];
        if (!l->has_b || (selection && l->role == LMP_ROLE_ROUTER)) continue;
        const lmp_role r = l->role;
        if (mistral || (qwen2 && !(r == LMP_ROLE_Q || r == LMP_ROLE_K || r == LMP_ROLE_V)) || (no_mlp && !is_attn(r)))
            return lmp_fail(LMP_EUNSUPPORTED, "%s: has a bias, which %s has no place for", l->name, p->arch);
        if (is_attn(r)) p->attn_bias = 1;
        else p->mlp_bias = 1;
    }
    for (int i = 0; i < p->n_lins; i++) {
        const lmp_role r = p->lins[i].role;
        /* Qwen2's q, k, v always; GLM's and StableLM's on their switch */
        p->lins[i].bias = qwen2 ? (r == LMP_ROLE_Q || r == LMP_ROLE_K || r == LMP_ROLE_V) &&
                                      (p->desc->bias == LMP_BIAS_QKV || p->attn_bias)
                                : (is_attn(r) ? p->attn_bias : p->mlp_bias);
        if (r == LMP_ROLE_ROUTER) /* its own module: a bias when it has one (mlp_bias does not reach it) */
            p->lins[i].bias = p->lins[i].has_b;
        if (selection && r == LMP_ROLE_ROUTER && p->lins[i].has_b) p->lins[i].bias = p->lins[i].selection_bias = 1;
    }
    return 0;
}

/* A norm without parameters in the file (OLMo's, LMP_ARCH_NORM_NO_PARAMS) is written by leaving it
 * out, which says weight 1 and bias 0: one a stage changed is refused by name. */
static int hf_check_no_params_norm(const hf_plan *p, const char *name, const float *w, const float *b, int64_t n)
{
    for (int64_t j = 0; j < n; j++)
        if (w[j] != 1.0f || (b && b[j] != 0.0f))
            return lmp_fail(LMP_EUNSUPPORTED, "%s: %s's LayerNorms have no weight or bias in its checkpoint, but this "
                            "variant changed this one (a scale or shift folded into it, as SmoothQuant and Shift "
                            "do): export a variant without such a stage", name, p->arch);
    return 0;
}

/* A LayerNorm whose checkpoint has no bias (Cohere's): a bias a stage gave it is refused by name. */
static int hf_check_no_bias(const hf_plan *p, const char *name, const float *b, int64_t n)
{
    for (int64_t j = 0; b && j < n; j++)
        if (b[j] != 0.0f)
            return lmp_fail(LMP_EUNSUPPORTED, "%s: %s's LayerNorms have no bias in its checkpoint, but this variant "
                            "gave this one a bias (a shift folded into it, as Shift does): export a variant without "
                            "such a stage", name, p->arch);
    return 0;
}

/* ---- the tensors ------------------------------------------------------------------------- */
static int add_tensor(hf_plan *p, size_t *cap, const char *name, const char *suffix, hf_tkind kind,
                      lmp_st_dtype dtype, int ndim, int64_t d0, int64_t d1, const hf_linear *lin, const float *src)
{
    if (p->n_tensors == *cap) {
        size_t c = *cap ? 2 * *cap : 256;
        hf_tensor *t = realloc(p->tensors, c * sizeof *t);
        if (!t) return lmp_fail(LMP_ENOMEM, "out of memory");
        p->tensors = t;
        *cap = c;
    }
    hf_tensor *t = &p->tensors[p->n_tensors];
    memset(t, 0, sizeof *t);
    if ((size_t)snprintf(t->name, sizeof t->name, "%s%s", name, suffix) >= sizeof t->name)
        return lmp_fail(LMP_EINVAL, "%s%s: tensor name too long", name, suffix);
    t->kind = kind;
    t->dtype = dtype;
    t->ndim = ndim;
    t->shape[0] = d0;
    t->shape[1] = ndim == 2 ? d1 : 0;
    t->lin = lin;
    t->src = src;
    t->block = -1;
    lmp_stw_tensor w = {.name = t->name, .dtype = dtype, .ndim = ndim, .shape = {t->shape[0], t->shape[1]}};
    t->nbytes = lmp_stw_nbytes(&w);
    p->n_tensors++;
    return 0;
}

static lmp_st_dtype scale_dtype(lmp_scale_type t)
{
    return t == LMP_SCALE_BF16 ? LMP_ST_BF16 : t == LMP_SCALE_F16 ? LMP_ST_F16 : LMP_ST_F32;
}

static int add_linear(hf_plan *p, size_t *cap, const hf_linear *h)
{
    int st = 0;
    if (h->merged) return 0; /* written with its fused module */
    if (h->scheme < 0) {
        st = add_tensor(p, cap, h->name, ".weight", HF_T_WEIGHT, p->dtype, 2, h->conv1d ? h->in : h->out,
                        h->conv1d ? h->out : h->in, h, NULL);
    } else {
        const hf_scheme *sc = &p->schemes[h->scheme];
        const lmp_st_dtype sd = scale_dtype(h->scale_type);
        const int64_t ncols = sc->gran == LMP_GRAN_GROUP ? h->in / sc->group
                              : sc->gran == LMP_GRAN_BLOCK ? (h->in + sc->group - 1) / sc->group : 1;
        /* FP8 tiles: [ceil(out/group), ceil(in/group)], as compressed-tensors pads to whole tiles */
        const int64_t nrows = sc->gran == LMP_GRAN_BLOCK ? (h->out + sc->group - 1) / sc->group : h->out;
        const int fp = sc->fmt == HF_FMT_FLOAT || sc->fmt == HF_FMT_NVFP4 || sc->fmt == HF_FMT_MXFP4 || sc->fmt == HF_FMT_NAIVE ||
                       sc->fmt == HF_FMT_MXFP8;
        if (fp) { /* its scale here: E4M3 (NVFP4) or E8M0 bytes (MXFP4, MXFP8) */
            if (sc->fmt == HF_FMT_FLOAT || sc->fmt == HF_FMT_NAIVE || sc->fmt == HF_FMT_MXFP8)
                st = add_tensor(p, cap, h->name, ".weight", HF_T_FP8W, LMP_ST_F8_E4M3, 2, h->out, h->in, h, NULL);
            else
                st = add_tensor(p, cap, h->name, ".weight_packed", HF_T_FP4PACK, LMP_ST_U8, 2, h->out, h->in / 2, h, NULL);
            const lmp_st_dtype fsd = sc->fmt == HF_FMT_NVFP4                             ? LMP_ST_F8_E4M3
                                     : sc->fmt == HF_FMT_MXFP4 || sc->fmt == HF_FMT_MXFP8 ? LMP_ST_U8
                                                                                          : sd;
            if (!st && sc->gran == LMP_GRAN_TENSOR)
                st = add_tensor(p, cap, h->name, ".weight_scale", HF_T_SCALE, fsd, 1, 1, 0, h, NULL);
            else if (!st)
                st = add_tensor(p, cap, h->name, ".weight_scale", HF_T_SCALE, fsd, 2, nrows, ncols, h, NULL);
            if (!st && sc->fmt == HF_FMT_NVFP4)
                st = add_tensor(p, cap, h->name, ".weight_global_scale", HF_T_GLOBAL_SCALE, LMP_ST_F32, 1, 1, 0, h, NULL);
            if (!st && sc->act == LMP_ACT_NVFP4) /* the input's static global scale */
                st = add_tensor(p, cap, h->name, ".input_global_scale", HF_T_INPUT_SCALE, LMP_ST_F32, 1, 1, 0, h, NULL);
        } else if (sc->fmt == HF_FMT_PACK) {
            st = add_tensor(p, cap, h->name, ".weight_packed", HF_T_PACKED, LMP_ST_I32, 2, h->out,
                            (h->in * sc->bits + 31) / 32, h, NULL);
        } else {
            st = add_tensor(p, cap, h->name, ".weight", HF_T_QWEIGHT, LMP_ST_I8, 2, h->out, h->in, h, NULL);
        }
        if (!st && !fp) {
            if (sc->gran == LMP_GRAN_TENSOR) st = add_tensor(p, cap, h->name, ".weight_scale", HF_T_SCALE, sd, 1, 1, 0, h, NULL);
            else st = add_tensor(p, cap, h->name, ".weight_scale", HF_T_SCALE, sd, 2, h->out, ncols, h, NULL);
        }
        if (!st && !sc->sym) {
            if (sc->fmt == HF_FMT_PACK && sc->gran != LMP_GRAN_TENSOR)
                st = add_tensor(p, cap, h->name, ".weight_zero_point", HF_T_ZERO, LMP_ST_I32, 2,
                                (h->out * sc->bits + 31) / 32, ncols, h, NULL);
            else if (sc->gran == LMP_GRAN_TENSOR)
                st = add_tensor(p, cap, h->name, ".weight_zero_point", HF_T_ZERO, LMP_ST_I8, 1, 1, 0, h, NULL);
            else
                st = add_tensor(p, cap, h->name, ".weight_zero_point", HF_T_ZERO, LMP_ST_I8, 2, h->out, ncols, h, NULL);
        }
        if (!st && sc->fmt == HF_FMT_PACK)
            st = add_tensor(p, cap, h->name, ".weight_shape", HF_T_SHAPE, LMP_ST_I64, 1, 2, 0, h, NULL);
        if (!st && sc->g_idx) st = add_tensor(p, cap, h->name, ".weight_g_idx", HF_T_GIDX, LMP_ST_I32, 1, h->in, 0, h, NULL);
        if (!st && (sc->act == LMP_ACT_STATIC_TENSOR || sc->act == LMP_ACT_FP8_STATIC_TENSOR))
            st = add_tensor(p, cap, h->name, ".input_scale", HF_T_INPUT_SCALE, LMP_ST_F32, 1, 1, 0, h, NULL);
    }
    if (!st && h->bias) /* DeepSeek-V3's selection bias is kept in f32 by transformers (its own buffer) */
        st = h->selection_bias ? add_tensor(p, cap, h->name, ".e_score_correction_bias", HF_T_BIAS, LMP_ST_F32, 1,
                                            h->out, 0, h, NULL)
                               : add_tensor(p, cap, h->name, ".bias", HF_T_BIAS, p->dtype, 1, h->out, 0, h, NULL);
    return st;
}

/* Every tensor in file order, then shards: whole units (one tensor, or a linear's tensors) go
 * into a shard until the next would pass the limit. */
static int plan_tensors(hf_plan *p)
{
    const lmp_model *m = p->m;
    const lmp_arch *a = &m->arch;
    size_t cap = 0;
    size_t *unit_start = calloc((size_t)p->n_lins + (size_t)p->n_norms + (size_t)a->n_layers + 8, sizeof *unit_start);
    /* (a norm's bias goes in its weight's unit) */
    size_t n_units = 0;
    if (!unit_start) return lmp_fail(LMP_ENOMEM, "out of memory");
    int st = 0;
    const int gpt2 = a->family == LMP_FAMILY_GPT2;
    unit_start[n_units++] = p->n_tensors;
    /* the family's names (arch.h's hf_embed, hf_final_norm, hf_head), else Llama's */
    const lmp_arch_desc *d = p->desc;
    st = add_tensor(p, &cap, gpt2 ? "transformer.wte" : d->hf_embed ? d->hf_embed : "model.embed_tokens", ".weight",
                    HF_T_DENSE, p->dtype, 2, a->vocab, a->dim, NULL, m->tok_emb);
    if (!st && d->hf_embed_norm && m->embed_norm_w) { /* Bloom's word_embeddings_layernorm */
        unit_start[n_units++] = p->n_tensors;
        st = add_tensor(p, &cap, d->hf_embed_norm, ".weight", HF_T_DENSE, p->dtype, 1, a->dim, 0, NULL,
                        m->embed_norm_w);
        if (!st && m->embed_norm_b)
            st = add_tensor(p, &cap, d->hf_embed_norm, ".bias", HF_T_DENSE, p->dtype, 1, a->dim, 0, NULL,
                            m->embed_norm_b);
    }
    if (!st && !gpt2 && d->hf_pos_embed) {
        /* OPT's embed_positions: position t at row t + hf_pos_offset.  model_hf.c keeps the whole
         * table it read and points pos_emb past the offset rows, which are written back as read
         * (transformers never indexes them) */
        if (!m->pos_emb) return lmp_fail(LMP_EINVAL, "%s: a %s model without its learned positions", m->path, p->arch);
        unit_start[n_units++] = p->n_tensors;
        st = add_tensor(p, &cap, d->hf_pos_embed, ".weight", HF_T_DENSE, p->dtype, 2, a->seq_len + d->hf_pos_offset,
                        a->dim, NULL, m->pos_emb - d->hf_pos_offset * a->dim);
    }
    if (!st && gpt2) {
        unit_start[n_units++] = p->n_tensors;
        st = add_tensor(p, &cap, "transformer.wpe", ".weight", HF_T_DENSE, p->dtype, 2, a->seq_len, a->dim, NULL,
                        m->pos_emb);
    }
    int li = 0, ni = 0;
    for (int64_t b = 0; b < a->n_layers && !st; b++) {
        for (; ni < p->n_norms && p->norms[ni].block == b && !st; ni++) {
            const hf_norm *nm = &p->norms[ni];
            unit_start[n_units++] = p->n_tensors;
            st = add_tensor(p, &cap, nm->name, ".weight", HF_T_DENSE, p->dtype, 1, nm->dim, 0, NULL, NULL);
            hf_tensor *t = &p->tensors[p->n_tensors - 1];
            t->block = b;
            t->norm = nm->index;
            t->minus_one = (p->desc->flags & LMP_ARCH_NORM_PLUS_ONE) != 0;
            const int qk = nm->index == lmp_norm_index(a, LMP_NORM_Q) || nm->index == lmp_norm_index(a, LMP_NORM_K);
            if (qk && !p->desc->hf_rope_adjacent) { /* q/k norms follow q/k's rows (hf_plan.h) */
                t->halves_hd = a->head_dim;
                t->n_rot = a->rope.n_rot > 0 ? a->rope.n_rot : a->head_dim;
            }
            if (!st && nm->has_b) {
                st = add_tensor(p, &cap, nm->name, ".bias", HF_T_DENSE, p->dtype, 1, nm->dim, 0, NULL, NULL);
                t = &p->tensors[p->n_tensors - 1];
                t->block = b;
                t->norm = nm->index;
                t->norm_bias = 1;
            }
        }
        const char *o_name = NULL; /* the attention module: o_proj's parent */
        for (; li < p->n_lins && p->lins[li].block == b && !st; li++) {
            unit_start[n_units++] = p->n_tensors;
            st = add_linear(p, &cap, &p->lins[li]);
            if (p->lins[li].role == LMP_ROLE_O) o_name = p->lins[li].name;
        }
        if (!st && p->kv.type != LMP_KV_NONE) { /* <attention>.k_scale and .v_scale, one unit */
            const char *dot = o_name ? strrchr(o_name, '.') : NULL;
            if (!dot) {
                st = lmp_fail(LMP_EINVAL, "block %lld: no o_proj to name the attention module's k_scale by", (long long)b);
                break;
            }
            char attn[256];
            snprintf(attn, sizeof attn, "%.*s", (int)(dot - o_name), o_name);
            unit_start[n_units++] = p->n_tensors;
            const int64_t H = p->kv.per_head ? a->n_kv_heads : 1;
            for (int w = 0; w < 2 && !st; w++) {
                st = add_tensor(p, &cap, attn, w ? ".v_scale" : ".k_scale", HF_T_KV_SCALE, LMP_ST_F32, 1, H, 0, NULL, NULL);
                hf_tensor *t = st ? NULL : &p->tensors[p->n_tensors - 1];
                if (t) t->block = b, t->norm = w;
                if (t && p->kv.per_head) { /* compressed-tensors' attn_head scale: [H, 1, 1] */
                    t->ndim = 3;
                    t->shape[1] = t->shape[2] = 1;
                }
            }
        }
    }
    if (!st && (d->flags & LMP_ARCH_NORM_NO_PARAMS)) /* OLMo: no tensor */
        st = hf_check_no_params_norm(p, d->hf_final_norm ? d->hf_final_norm : "model.norm", m->final_norm_w,
                                     m->final_norm_b, a->dim);
    else if (!st) {
        const char *final = gpt2 ? "transformer.ln_f" : d->hf_final_norm ? d->hf_final_norm : "model.norm";
        unit_start[n_units++] = p->n_tensors;
        st = add_tensor(p, &cap, final, ".weight", HF_T_DENSE, p->dtype, 1, a->dim, 0, NULL, m->final_norm_w);
        if (!st) p->tensors[p->n_tensors - 1].minus_one = (p->desc->flags & LMP_ARCH_NORM_PLUS_ONE) != 0;
        if (!st && m->final_norm_b && (d->flags & LMP_ARCH_NORM_NO_BIAS)) /* Cohere: none */
            st = hf_check_no_bias(p, final, m->final_norm_b, a->dim);
        else if (!st && m->final_norm_b)
            st = add_tensor(p, &cap, final, ".bias", HF_T_DENSE, p->dtype, 1, a->dim, 0, NULL, m->final_norm_b);
    }
    const char *head = d->hf_head ? d->hf_head : "lm_head";
    if (!st && (m->lm_head != m->tok_emb || m->lm_head_b)) unit_start[n_units++] = p->n_tensors;
    if (!st && m->lm_head != m->tok_emb)
        st = add_tensor(p, &cap, head, ".weight", HF_T_DENSE, p->dtype, 2, a->vocab, a->dim, NULL, m->lm_head);
    if (!st && m->lm_head_b) /* Phi-2's, GPT-J's head bias */
        st = add_tensor(p, &cap, head, ".bias", HF_T_DENSE, p->dtype, 1, a->vocab, 0, NULL, m->lm_head_b);
    if (!st) {
        const uint64_t limit = p->o->shard_bytes > 0 ? (uint64_t)p->o->shard_bytes : (uint64_t)HF_DEFAULT_SHARD_BYTES;
        uint64_t in_shard = 0;
        int shard = 0;
        for (size_t u = 0; u < n_units; u++) {
            const size_t end = u + 1 < n_units ? unit_start[u + 1] : p->n_tensors;
            uint64_t bytes = 0;
            for (size_t t = unit_start[u]; t < end; t++) bytes += p->tensors[t].nbytes;
            if (in_shard > 0 && in_shard + bytes > limit) {
                shard++;
                in_shard = 0;
            }
            in_shard += bytes;
            p->total_bytes += bytes;
            for (size_t t = unit_start[u]; t < end; t++) p->tensors[t].shard = shard;
        }
        p->n_shards = shard + 1;
        if (p->n_shards > 99999) st = lmp_fail(LMP_EINVAL, "%s: %d shards: raise the shard size", p->o->path, p->n_shards);
    }
    free(unit_start);
    return st;
}

/* The KV cache's quantization of block b: what compressed-tensors' kv_cache_scheme holds (one
 * static FP8 or int8 scale per tensor for K and V), the same in every block. */
static int plan_kv(hf_plan *p, int64_t b, const lmp_block *blk)
{
    const lmp_kvspec *kv = &blk->kv;
    if (p->m->arch.family == LMP_FAMILY_GPT2)
        return lmp_fail(LMP_EUNSUPPORTED, "block %lld: the KV cache's quantization (kv_cache) is not written for "
                        "GPT-2 (its linears are written dense); export a Llama-family model", (long long)b);
    if (kv->type != LMP_KV_NONE && kv->dynamic)
        return lmp_fail(LMP_EUNSUPPORTED, "block %lld: dynamic KV-cache scales (kv_cache scales = \"dynamic\") are not "
                        "written: vLLM reads static k_scale / v_scale; use scales = \"static\"", (long long)b);
    if (b > 0 && (kv->type != p->kv.type || kv->per_head != p->kv.per_head))
        return lmp_fail(LMP_EINVAL, "block %lld: its KV-cache quantization differs from block 0's: one "
                        "kv_cache_scheme holds every block", (long long)b);
    if (b == 0) p->kv = *kv;
    return 0;
}

/* Block b's norms and linears into the plan: each linear's scheme, what is refused. */
static int plan_block(lmp_ctx *ctx, hf_plan *p, int64_t b, const lmp_block *blk, int *n_quant, int *n_bf16, int *n_f16,
                      int64_t *pruned, int64_t *total)
{
    const int conv1d = p->m->arch.family == LMP_FAMILY_GPT2; /* GPT-2: LayerNorms, Conv1D linears */
    if (blk->kv.type != LMP_KV_NONE || p->kv.type != LMP_KV_NONE) {
        int st = plan_kv(p, b, blk);
        if (st) return st;
    }
    const int no_params = (p->desc->flags & LMP_ARCH_NORM_NO_PARAMS) != 0;
    for (int i = 0; i < blk->n_norms; i++) {
        if (no_params) { /* OLMo: the file has no tensor for them (hf_plan.h) */
            const int st = hf_check_no_params_norm(p, blk->norms[i].name, blk->norms[i].w, blk->norms[i].b,
                                                   blk->norms[i].dim);
            if (st) return st;
            continue;
        }
        const int no_bias = (p->desc->flags & LMP_ARCH_NORM_NO_BIAS) != 0; /* Cohere: weight only */
        if (no_bias && hf_check_no_bias(p, blk->norms[i].name, blk->norms[i].b, blk->norms[i].dim)) return LMP_EUNSUPPORTED;
        if (blk->norms[i].b && !conv1d && !p->m->arch.layer_norm)
            return lmp_fail(LMP_EUNSUPPORTED,
                            "%s: has a bias (Shift's folded shift), which a Hugging Face Llama's RMSNorm has no "
                            "place for; export a variant without shift", blk->norms[i].name);
        hf_norm *nm = &p->norms[p->n_norms++];
        *nm = (hf_norm){.name = strdup(blk->norms[i].name), .dim = blk->norms[i].dim, .block = b, .index = i,
                        .has_b = blk->norms[i].b != NULL && !no_bias};
        if (!nm->name) return lmp_fail(LMP_ENOMEM, "out of memory");
    }
    for (int i = 0; i < blk->n_linears; i++) {
        const lmp_linear *l = &blk->linears[i];
        hf_linear *h = &p->lins[p->n_lins++];
        *h = (hf_linear){.name = strdup(l->name), .role = l->role, .out = l->out, .in = l->in, .block = b, .index = i,
                         .has_b = l->b != NULL, .masked = l->mask != NULL, .scheme = -1, .conv1d = conv1d,
                         /* q/k rows back to rotate-half order, unless the checkpoint turns adjacent
                          * pairs itself (GLM, ERNIE 4.5) */
                         .head_dim = (l->role == LMP_ROLE_Q || l->role == LMP_ROLE_K) && !p->desc->hf_rope_adjacent &&
                                             !conv1d /* GPT-2 turns nothing */ &&
                                             /* nor Bloom (ALiBi) or OPT (learned positions): no RoPE,
                                              * rows as read (model_hf.c) */
                                             !p->m->arch.alibi && !p->m->arch.learned_pos
                                         ? p->m->arch.head_dim : 0,
                         .n_rot = p->m->arch.rope.n_rot > 0 ? p->m->arch.rope.n_rot : p->m->arch.head_dim};
        if (!h->name) return lmp_fail(LMP_ENOMEM, "out of memory");
        if (conv1d) { /* written dense: compressed-tensors has no Conv1D scheme (hf_plan.h) */
            p->n_dense_quantized += l->grid != NULL || l->weight_bits < 32.0;
            p->n_dense_act += l->act.mode != LMP_ACT_NONE;
            if (l->in_shift || l->in_scale || l->shift_bias)
                return lmp_fail(LMP_EUNSUPPORTED, "%s: has an input affine x -> (x - shift) / scale, which "
                                "transformers' GPT-2 has no place for; export a .gguf or a variant without it", l->name);
            continue;
        }
        hf_scheme sc;
        int none, st;
        if ((st = linear_scheme(ctx, l, &sc, &none))) return st;
        /* transformers' Falcon initializes each FalconLinear's .weight at load, which a
         * pack-quantized module has not (weight_packed): the folder would not load */
        if (!none && sc.fmt == HF_FMT_PACK && p->desc->hf_falcon)
            return lmp_fail(LMP_EUNSUPPORTED, "%s: packed %d-bit weights: transformers' FalconForCausalLM reads the "
                            ".weight of every FalconLinear at load (its _init_weights), which compressed-tensors' "
                            "pack-quantized module has not; export 8-bit weights with activations (int-quantized) "
                            "or a GGUF", l->name, sc.bits);
        /* q/k rows are written in rotate-half order within each head: a tile keeps its rows only
         * when it holds whole heads */
        if (!none && sc.gran == LMP_GRAN_BLOCK && h->head_dim && sc.group % h->head_dim != 0)
            return lmp_fail(LMP_EUNSUPPORTED, "%s: its FP8 blocks of %lld rows cut across its heads of %lld rows, whose "
                            "rows the file holds in another order (rotate-half): use a block size that is a multiple "
                            "of %lld", l->name, (long long)sc.group, (long long)h->head_dim, (long long)h->head_dim);
        if (!none) {
            if ((h->scheme = find_scheme(p, &sc, l->name)) < 0) return h->scheme;
            h->scale_type = l->grid->spec.scale_type;
            ++*n_quant;
            *n_bf16 += h->scale_type == LMP_SCALE_BF16;
            *n_f16 += h->scale_type == LMP_SCALE_F16;
            if (sc.g_idx && !p->warned_gidx++)
                lmp_log(ctx, LMP_LOG_WARN,
                        "%s: act-order groups are written as compressed-tensors' actorder \"group\" with "
                        "weight_g_idx, which compressed-tensors 0.19 and later (and the vLLM built on them) no "
                        "longer read (0.17 does); gptq with static_groups = true exports for every version", l->name);
        }
        *total += l->out * l->in;
        if (l->mask) {
            int64_t kept = 0;
            for (int64_t k = 0; k < l->out * l->in; k++) kept += l->mask[k] != 0;
            *pruned += l->out * l->in - kept;
            if (p->n_sparse++ == 0) {
                p->sparse_n = l->sparse_n;
                p->sparse_m = l->sparse_m;
            } else if (l->sparse_n != p->sparse_n || l->sparse_m != p->sparse_m) {
                p->sparse_mixed = 1;
            }
        }
    }
    return 0;
}

/* Phi-3's fused modules: the block's entries for `roles` (in that order) become one entry named
 * model.layers.N.<module> whose rows are theirs one after the other (hf_plan.h).  The parts must
 * be on one scheme whose scales are per row (channel or group), without act-order groups, static
 * input scales or biases: a fused module has one of each. */
static int fuse(hf_plan *p, int first, int64_t b, const char *module, const lmp_role *roles, int n)
{
    /* GPT-2's c_attn has one bias for the three, GPT-NeoX's query_key_value one (attention_bias) */
    const int fused_bias = p->desc->bias == LMP_BIAS_ALL || p->desc->bias == LMP_BIAS_NEOX ||
                           p->desc->bias == LMP_BIAS_ALL_FLAG || /* Falcon's, on its bias switch */
                           (p->desc->bias == LMP_BIAS_QKV_CONFIG && n == 3); /* ChatGLM's, on add_qkv_bias */
    int at[3];
    for (int k = 0; k < n; k++) {
        at[k] = -1;
        for (int i = first; i < p->n_lins; i++)
            if (p->lins[i].role == roles[k]) at[k] = i;
        if (at[k] < 0) return lmp_fail(LMP_EINVAL, "block %lld has no part of its fused %s", (long long)b, module);
    }
    hf_linear *f = &p->lins[at[0]];
    for (int k = 0; k < n; k++) {
        const hf_linear *h = &p->lins[at[k]];
        const hf_scheme *sc = h->scheme >= 0 ? &p->schemes[h->scheme] : NULL;
        if (h->has_b && !fused_bias)
            return lmp_fail(LMP_EUNSUPPORTED, "%s: has a bias, which %s's fused %s has no place for", h->name, p->arch,
                            module);
        if (h->scheme != f->scheme || h->scale_type != f->scale_type)
            return lmp_fail(LMP_EUNSUPPORTED, "%s: is quantized differently from %s, but %s stores them as one module "
                            "(%s): quantize them alike", h->name, f->name, p->arch, module);
        if (sc && (sc->gran == LMP_GRAN_TENSOR || sc->gran == LMP_GRAN_BLOCK || sc->g_idx || sc->act == LMP_ACT_STATIC_TENSOR))
            return lmp_fail(LMP_EUNSUPPORTED, "%s: its %s cannot be joined with the other parts of %s's fused %s (one "
                            "per module): use channel or group scales%s", h->name,
                            sc->gran == LMP_GRAN_TENSOR ? "per-tensor scale" : sc->gran == LMP_GRAN_BLOCK ? "block scales"
                            : sc->g_idx ? "act-order groups" : "static input scale",
                            p->arch, module, sc->g_idx ? " without act_order" : "");
    }
    char name[256];
    snprintf(name, sizeof name, "%s.%lld.%s", lmp_hf_arch_block_prefix(&p->m->arch), (long long)b, module);
    char *fused = strdup(name);
    if (!fused) return lmp_fail(LMP_ENOMEM, "out of memory");
    free(f->name);
    f->name = fused;
    f->n_members = n;
    /* GPT-NeoX's query_key_value: [heads][q, k, v][head_dim] (hf_plan.h) */
    if (n == 3 && p->desc->hf_fused_qkv_per_head) f->per_head = p->m->arch.head_dim;
    /* Falcon's: by kv group, each group's q heads then its k and v (hf_plan.h) */
    if (n == 3 && p->desc->hf_falcon) f->q_per_group = p->m->arch.n_heads / p->m->arch.n_kv_heads;
    for (int k = 0; k < n; k++) {
        f->members[k] = p->lins[at[k]].index;
        f->masked |= p->lins[at[k]].masked;
        if (k) {
            f->out += p->lins[at[k]].out;
            p->lins[at[k]].merged = 1;
        }
    }
    return 0;
}

/* The first pass: every block read once (from p->blocks, one at a time) and planned. */
static int build_plan(lmp_ctx *ctx, hf_plan *p)
{
    const lmp_model *m = p->m;
    const lmp_arch *a = &m->arch;
    int st = read_source(p);
    if (st) return st;
    /* blocks of one model may differ (a mixture of experts' dense first layers): each its own */
    int64_t all_lins = 0, all_norms = 0;
    for (int64_t b = 0; b < a->n_layers && !st; b++) {
        lmp_block shape;
        if ((st = lmp_block_init(&shape, (int)b, a))) return st;
        all_lins += shape.n_linears;
        all_norms += shape.n_norms;
        lmp_block_free_tables(&shape);
    }
    p->lins = calloc((size_t)all_lins + 1, sizeof *p->lins);
    p->norms = calloc((size_t)all_norms + 1, sizeof *p->norms);
    if (!p->lins || !p->norms) return lmp_fail(LMP_ENOMEM, "out of memory");
    int n_quant = 0, n_bf16 = 0, n_f16 = 0;
    int64_t pruned = 0, total = 0;
    for (int64_t b = 0; b < a->n_layers && !st; b++) {
        lmp_progress(ctx, "checking the blocks", b, a->n_layers);
        lmp_block blk;
        if ((st = p->blocks->get(p->blocks->self, b, &blk))) break;
        lmp_block shape;
        if (!(st = lmp_block_init(&shape, (int)b, a))) {
            if (blk.n_linears != shape.n_linears || blk.n_norms != shape.n_norms)
                st = lmp_fail(LMP_EINVAL, "block %lld has %d linears and %d norms, not the architecture's %d and %d",
                              (long long)b, blk.n_linears, blk.n_norms, shape.n_linears, shape.n_norms);
            lmp_block_free_tables(&shape);
        }
        const int first = p->n_lins;
        if (!st) st = plan_block(ctx, p, b, &blk, &n_quant, &n_bf16, &n_f16, &pruned, &total);
        static const lmp_role qkv[3] = {LMP_ROLE_Q, LMP_ROLE_K, LMP_ROLE_V}, gate_up[2] = {LMP_ROLE_GATE, LMP_ROLE_UP};
        const char *fused_qkv = a->family == LMP_FAMILY_GPT2 ? "attn.c_attn" : p->desc->hf_fused_qkv;
        if (!st && fused_qkv) st = fuse(p, first, b, fused_qkv, qkv, 3);
        if (!st && p->desc->hf_fused_gate_up) st = fuse(p, first, b, p->desc->hf_fused_gate_up, gate_up, 2);
        lmp_block_free(&blk);
    }
    if (st) return st;
    if (m->final_norm_b && a->family != LMP_FAMILY_GPT2 && !a->layer_norm)
        return lmp_fail(LMP_EUNSUPPORTED, "model.norm: has a bias, which a Hugging Face Llama's RMSNorm has no place for");
    if (p->sparse_mixed)
        lmp_log(ctx, LMP_LOG_WARN, "%s: the linears are pruned to different N:M patterns; config.json's "
                                   "sparsity_config says \"unstructured\"", p->o->path);
    p->global_sparsity = total ? (double)pruned / (double)total : 0.0;
    p->dtype = n_quant && n_bf16 == n_quant ? LMP_ST_BF16 : n_quant && n_f16 == n_quant ? LMP_ST_F16 : LMP_ST_F32;
    if ((st = plan_biases(p))) return st;
    return plan_tensors(p);
}

static void free_plan(hf_plan *p)
{
    free(p->src_dir);
    lmp_json_free(p->src_config);
    for (int i = 0; i < p->n_lins; i++) free(p->lins[i].name);
    for (int i = 0; i < p->n_norms; i++) free(p->norms[i].name);
    free(p->lins);
    free(p->norms);
    free(p->tensors);
}

/* ---- the destination --------------------------------------------------------------------- */
/* An existing destination may be replaced when it is empty or an earlier lmpress export (its
 * config.json has a top-level "lmpress" object); anything else is the user's and stays. */
static int check_destination(const char *path)
{
    lmp_outdir_state state;
    int st = lmp_outdir_state_of(path, &state);
    if (st) return st;
    if (state == LMP_OUTDIR_OTHER)
        return lmp_fail(LMP_EINVAL, "%s: exists and is not a folder (a file or a link); a Hugging Face export is a "
                                    "folder: give a new path", path);
    if (state != LMP_OUTDIR_FULL) return 0;
    char cfg[4200];
    snprintf(cfg, sizeof cfg, "%s/config.json", path);
    lmp_json *j = NULL;
    int ours = 0;
    struct stat sb;
    if (stat(cfg, &sb) == 0 && S_ISREG(sb.st_mode) && read_json(cfg, &j) == 0) {
        const lmp_json *mark = lmp_json_get(j, "lmpress");
        ours = mark && mark->type == LMP_JSON_OBJECT;
    }
    lmp_json_free(j);
    if (!ours)
        return lmp_fail(LMP_EINVAL, "%s: the folder exists, is not empty and is not an earlier lmpress export (no "
                                    "config.json with an \"lmpress\" entry); not replacing it: give a new or empty "
                                    "folder", path);
    return 0;
}

/* ---- writing ----------------------------------------------------------------------------- */
static int write_index(const hf_plan *p, FILE *f)
{
    char shard[64];
    fprintf(f, "{\n  \"metadata\": {\n    \"total_size\": %llu\n  },\n  \"weight_map\": {",
            (unsigned long long)p->total_bytes);
    for (size_t i = 0; i < p->n_tensors; i++) {
        hf_shard_name(p->tensors[i].shard, p->n_shards, shard, sizeof shard);
        fputs(i ? ",\n    " : "\n    ", f);
        lmp_jw_string(f, p->tensors[i].name);
        fputs(": ", f);
        lmp_jw_string(f, shard);
    }
    fputs("\n  }\n}\n", f);
    return 0;
}

/* The tokenizer files a runtime reads, from beside the run's tokenizer, else the source folder;
 * made from the tokenizer itself when neither has any (a GGUF or llama2.c source). */
static int copy_tokenizer(lmp_ctx *ctx, const hf_plan *p, lmp_outdir *od)
{
    static const char *const names[] = {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                                        "tokenizer.model", "vocab.json", "merges.txt", "added_tokens.json",
                                        "chat_template.jinja", "generation_config.json"};
    char *tok_dir = p->o->tokenizer_path ? dir_of(p->o->tokenizer_path) : NULL;
    const char *dirs[2] = {tok_dir, p->src_dir};
    int st = 0, n_tok = 0;
    for (size_t i = 0; i < sizeof names / sizeof *names && !st; i++)
        for (int d = 0; d < 2; d++) {
            if (!dirs[d]) continue;
            char path[4400];
            struct stat sb;
            snprintf(path, sizeof path, "%s/%s", dirs[d], names[i]);
            if (stat(path, &sb) != 0 || !S_ISREG(sb.st_mode)) continue;
            st = lmp_outdir_copy(od, path, names[i]);
            n_tok += strcmp(names[i], "generation_config.json") != 0;
            break;
        }
    free(tok_dir);
    if (st || n_tok) return st;
    if ((st = lmp_hf_write_tokenizer(ctx, p->m, p->o->tokenizer_path, od, &n_tok))) return st;
    if (!n_tok)
        lmp_log(ctx, LMP_LOG_WARN,
                "%s: add tokenizer.json and tokenizer_config.json before loading it with transformers or vLLM",
                p->o->path);
    return 0;
}

static int write_all(lmp_ctx *ctx, const hf_plan *p, lmp_outdir *od, int64_t *rounded)
{
    FILE *f;
    int st = lmp_outdir_create(od, "config.json", &f);
    if (st) return st;
    st = hf_write_config(p, f);
    int cst = lmp_outdir_close(od, "config.json", f);
    if (st || cst) return st ? st : cst;
    size_t done = 0;
    lmp_block_cursor cur;
    lmp_block_cursor_init(&cur, p->blocks);
    for (int s = 0; s < p->n_shards && !st; s++) {
        char name[64];
        hf_shard_name(s, p->n_shards, name, sizeof name);
        if ((st = lmp_outdir_create(od, name, &f))) break;
        st = hf_write_shard(ctx, p, s, f, &cur, &done, rounded);
        cst = lmp_outdir_close(od, name, f);
        if (!st) st = cst;
    }
    lmp_block_cursor_free(&cur);
    if (st) return st;
    if (p->n_shards > 1) {
        if ((st = lmp_outdir_create(od, "model.safetensors.index.json", &f))) return st;
        st = write_index(p, f);
        cst = lmp_outdir_close(od, "model.safetensors.index.json", f);
        if (st || cst) return st ? st : cst;
    }
    if ((st = copy_tokenizer(ctx, p, od))) return st;
    if (lmp_host_interrupted(ctx)) return lmp_fail(LMP_EABORTED, "%s: export interrupted", p->o->path);
    return 0;
}

int lmp_export_hf(lmp_ctx *ctx, const lmp_model *m, const lmp_block_source *blocks, const lmp_export_opts *o)
{
    int st = lmp_export_check_arch(m, o->path);
    if (!st) st = lmp_export_check_path(o->path, "export");
    if (!st) st = check_destination(o->path);
    if (st) return st;
    hf_plan p = {.m = m, .blocks = blocks, .o = o};
    st = build_plan(ctx, &p);
    lmp_outdir od = {{0}, {0}};
    int64_t rounded = 0;
    if (!st) st = lmp_outdir_begin(&od, o->path);
    if (!st) {
        st = write_all(ctx, &p, &od, &rounded);
        if (!st) st = lmp_outdir_commit(&od);
        else lmp_outdir_abort(&od);
    }
    if (!st) {
        int n_packed = 0, n_int = 0, n_float = 0;
        int n_written = 0;
        for (int i = 0; i < p.n_lins; i++) {
            if (p.lins[i].merged) continue;
            n_written++;
            if (p.lins[i].scheme < 0) continue;
            const hf_fmt f = p.schemes[p.lins[i].scheme].fmt;
            *(f == HF_FMT_PACK ? &n_packed : f == HF_FMT_INT ? &n_int : &n_float) += 1;
        }
        if (p.n_dense_quantized)
            lmp_log(ctx, LMP_LOG_WARN, "%s: GPT-2's %d quantized linears are written dense (their exact values in %s): "
                                       "compressed-tensors quantizes nn.Linear modules, and transformers' GPT-2 has "
                                       "Conv1D; export a .gguf for a smaller file", o->path, p.n_dense_quantized,
                    lmp_st_dtype_name(p.dtype));
        if (p.n_dense_act)
            lmp_log(ctx, LMP_LOG_WARN, "%s: %d linears quantize their activations, which a dense GPT-2 folder does not "
                                       "carry: transformers runs them unquantized", o->path, p.n_dense_act);
        lmp_log(ctx, LMP_LOG_INFO, "%s: %d linears pack-quantized, %d int-quantized, %d on float grids, %d dense; %d "
                                   "shard%s, %.1f MB; unquantized tensors in %s", o->path, n_packed, n_int, n_float,
                n_written - n_packed - n_int - n_float,
                p.n_shards, p.n_shards == 1 ? "" : "s", (double)p.total_bytes / 1e6, lmp_st_dtype_name(p.dtype));
        /* the model's weights (embedding, head, norms, linears), for bits per weight */
        const lmp_arch *a = &m->arch;
        uint64_t weights = (uint64_t)a->vocab * (uint64_t)a->dim * (m->lm_head != m->tok_emb ? 2u : 1u) + (uint64_t)a->dim;
        for (int64_t b = 0; b < a->n_layers; b++) {
            lmp_block blk;
            if (lmp_block_init(&blk, (int)b, a) == 0) {
                for (int i = 0; i < blk.n_linears; i++) weights += (uint64_t)blk.linears[i].in * (uint64_t)blk.linears[i].out;
                for (int i = 0; i < blk.n_norms; i++) weights += (uint64_t)blk.norms[i].dim;
            }
            lmp_block_free_tables(&blk);
        }
        lmp_export_log_size(ctx, o->path, p.total_bytes, p.total_bytes, weights);
        if (p.dtype != LMP_ST_F32)
            lmp_log(ctx, LMP_LOG_INFO, "%s: every grid's scales are %s, so the model is: the embedding, norms, head, "
                                       "biases and unquantized linears were rounded to it (%lld values changed)",
                    o->path, lmp_st_dtype_name(p.dtype), (long long)rounded);
    }
    free_plan(&p);
    return st;
}
