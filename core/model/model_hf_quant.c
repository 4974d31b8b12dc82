/* model_hf_quant.c — see model_hf_quant.h.  Written from compressed-tensors' description of its
 * formats (its compressors' pack_to_int32 / unpack_from_int32 and dequantize), not from its code. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "model/model_hf_quant.h"

#include <math.h>
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/regex_limit.h"

typedef enum { CT_TENSOR, CT_CHANNEL, CT_GROUP, CT_BLOCK } ct_strategy;
enum { CT_NVFP4 = 1, CT_MXFP4 = 2 }; /* nvfp4-pack-quantized, mxfp4-pack-quantized */

typedef struct ct_scheme {
    char *name;           /* its config_groups key, for messages */
    int packed;           /* pack-quantized (else int8 codes in X.weight) */
    int fp8;              /* float weights: E4M3 codes in X.weight (float- or naive-quantized) */
    int float_format;     /* the group's format is "float-quantized" */
    int fp4;              /* CT_NVFP4 / CT_MXFP4: E2M1 codes two a byte in X.weight_packed (else 0) */
    int has_weights;      /* 0: only its inputs are quantized */
    int bits, sym;
    ct_strategy strategy;
    int64_t group_size;   /* GROUP: columns per group; BLOCK: the tile's width */
    int64_t block_rows;   /* BLOCK: the tile's height (block_structure [block_rows, group_size]) */
    lmp_aspec act;        /* the input's quantization; STATIC_TENSOR reads X.input_scale */
} ct_scheme;

typedef struct ct_pattern {
    char *text;           /* as written ("re:..." included) */
    pcre2_code *re;       /* compiled "re:" pattern, anchored at the start like Python's re.match */
    int scheme;           /* targets: the group it selects */
} ct_pattern;

struct lmp_ct {
    char *what;           /* config.json, for messages */
    ct_scheme *schemes;
    int n_schemes;
    ct_pattern *targets;  /* distinct target strings, in compressed-tensors' priority order */
    int n_targets;
    ct_pattern *ignore;
    int n_ignore;
    lmp_kvspec kv;        /* kv_cache_scheme (type LMP_KV_NONE: none); the scales are each block's */
    int dense_packing;    /* version >= 0.19: pack-quantized codes of 3, 5, 6 or 7 bits straddle words */
};

#define QC "quantization_config"

/* ---- config ------------------------------------------------------------------------------ */
static const lmp_json *get(const lmp_json *o, const char *key)
{
    const lmp_json *v = lmp_json_get(o, key);
    return v && v->type != LMP_JSON_NULL ? v : NULL;
}

static int get_string(const lmp_ct *ct, const lmp_json *o, const char *path, const char *key, const char *def,
                      const char **out)
{
    const lmp_json *v = get(o, key);
    if (!v) {
        *out = def;
        if (def) return 0;
        return lmp_fail(LMP_EINVAL, "%s: %s.%s is missing", ct->what, path, key);
    }
    if (v->type != LMP_JSON_STRING) return lmp_fail(LMP_EINVAL, "%s: %s.%s must be a string", ct->what, path, key);
    *out = v->str;
    return 0;
}

static int get_bool(const lmp_ct *ct, const lmp_json *o, const char *path, const char *key, int def, int *out)
{
    const lmp_json *v = get(o, key);
    if (v && v->type != LMP_JSON_BOOL)
        return lmp_fail(LMP_EINVAL, "%s: %s.%s must be true or false", ct->what, path, key);
    *out = v ? v->boolean : def;
    return 0;
}

/* An integer member; *given says whether it was there (not null). */
static int get_int(const lmp_ct *ct, const lmp_json *o, const char *path, const char *key, int64_t def,
                   int64_t *out, int *given)
{
    const lmp_json *v = get(o, key);
    if (given) *given = v != NULL;
    if (!v) {
        *out = def;
        return 0;
    }
    if (v->type != LMP_JSON_NUMBER || !v->is_integer)
        return lmp_fail(LMP_EINVAL, "%s: %s.%s must be an integer", ct->what, path, key);
    *out = v->integer;
    return 0;
}

static int unsupported(const lmp_ct *ct, const char *path, const char *key, const char *value, const char *why)
{
    return lmp_fail(LMP_EUNSUPPORTED, "%s: %s.%s = %s is not supported (%s)", ct->what, path, key, value, why);
}

/* transform_config (llm-compressor's SpinQuant / QuIP rotations; "{}" when there is none).  A
 * transform at "weight_input" or "weight_output" was fused into the saved weights when it was
 * applied (compressed-tensors 0.20's TransformFactory multiplies it into the weight and drops it
 * unless it is trainable), so there is nothing left to do for it.  Any other location ("input",
 * "output", "q_attn", "k_cache": QuIP's input rotation, SpinQuant's R3 and R4) runs at inference
 * time, which lmpress does not do for a folder it reads: refused, naming the group and location. */
static int check_transforms(const lmp_ct *ct, const lmp_json *tc)
{
    static const char path[] = QC ".transform_config";
    if (!tc) return 0;
    if (tc->type != LMP_JSON_OBJECT) return lmp_fail(LMP_EINVAL, "%s: %s must be an object or null", ct->what, path);
    const lmp_json *groups = get(tc, "config_groups");
    if (!groups) return 0;
    if (groups->type != LMP_JSON_OBJECT)
        return lmp_fail(LMP_EINVAL, "%s: %s.config_groups must be an object", ct->what, path);
    for (size_t g = 0; g < groups->n; g++) {
        const lmp_json *scheme = &groups->items[g];
        char sub[160];
        snprintf(sub, sizeof sub, "%s.config_groups.%.60s", path, groups->keys[g]);
        const lmp_json *apply = scheme->type == LMP_JSON_OBJECT ? get(scheme, "apply") : NULL;
        if (scheme->type != LMP_JSON_OBJECT || !apply || apply->type != LMP_JSON_ARRAY)
            return lmp_fail(LMP_EINVAL, "%s: %s must be an object with an \"apply\" list", ct->what, sub);
        for (size_t i = 0; i < apply->n; i++) {
            char item[192];
            snprintf(item, sizeof item, "%s.apply[%zu]", sub, i);
            const char *loc = NULL;
            if (apply->items[i].type != LMP_JSON_OBJECT)
                return lmp_fail(LMP_EINVAL, "%s: %s must be an object", ct->what, item);
            int st = get_string(ct, &apply->items[i], item, "location", NULL, &loc);
            if (st) return st;
            if (strcmp(loc, "weight_input") != 0 && strcmp(loc, "weight_output") != 0) {
                char q[64];
                snprintf(q, sizeof q, "\"%.40s\"", loc);
                return unsupported(ct, item, "location", q,
                                   "an online transform runs at inference time and lmpress does not apply it; "
                                   "\"weight_input\" and \"weight_output\" ones are fused into the saved weights");
            }
        }
    }
    return 0;
}

/* The strategy as compressed-tensors infers it when absent: group_size > 0 -> group,
 * -1 -> channel, none -> tensor. */
static int parse_strategy(const lmp_ct *ct, const lmp_json *a, const char *path, ct_strategy *out,
                          int64_t *group_size, int64_t *block_rows)
{
    const char *s = "";
    int has_gs = 0;
    int st = get_string(ct, a, path, "strategy", "", &s);
    if (!st) st = get_int(ct, a, path, "group_size", 0, group_size, &has_gs);
    if (st) return st;
    if (!*s) s = !has_gs ? "tensor" : *group_size > 0 ? "group" : "channel";
    char quoted[64];
    snprintf(quoted, sizeof quoted, "\"%.40s\"", s);
    if (strcmp(s, "tensor") == 0) *out = CT_TENSOR;
    else if (strcmp(s, "channel") == 0) *out = CT_CHANNEL;
    else if (strcmp(s, "group") == 0) *out = CT_GROUP;
    else if (strcmp(s, "block") == 0 && block_rows) *out = CT_BLOCK;
    else return unsupported(ct, path, "strategy", quoted, block_rows ? "\"tensor\", \"channel\", \"group\" or \"block\""
                                                                  : "\"tensor\", \"channel\" or \"group\" (\"block\": FP8 weights only)");
    if (*out == CT_BLOCK) { /* block_structure [rows, cols] of each tile */
        const lmp_json *b = get(a, "block_structure");
        if (!b || b->type != LMP_JSON_ARRAY || b->n != 2 || b->items[0].type != LMP_JSON_NUMBER ||
            b->items[1].type != LMP_JSON_NUMBER || !b->items[0].is_integer || !b->items[1].is_integer ||
            b->items[0].integer < 1 || b->items[1].integer < 1 || b->items[0].integer > ((int64_t)1 << 20) ||
            b->items[1].integer > ((int64_t)1 << 20))
            return lmp_fail(LMP_EINVAL, "%s: %s.block_structure must be [rows, cols] of two positive integers (strategy "
                            "\"block\")", ct->what, path);
        *block_rows = b->items[0].integer;
        *group_size = b->items[1].integer;
        return 0;
    }
    if (*out == CT_GROUP && !(*group_size > 0 && *group_size <= ((int64_t)1 << 30)))
        return lmp_fail(LMP_EINVAL, "%s: %s.group_size = %lld: strategy \"group\" needs a positive group size",
                        ct->what, path, (long long)*group_size);
    if (get(a, "block_structure"))
        return unsupported(ct, path, "block_structure", "(given)", "block-wise grids are not read");
    return 0;
}

/* kv_cache_scheme: 8-bit float (E4M3) or int, or 4-bit int; symmetric, static, per tensor or per
 * head (attn_head), which lmpress's KV-cache quantization simulates (model/kv_quant.h) with each
 * attention module's k_scale and v_scale. */
static int parse_kv_scheme(lmp_ct *ct, const lmp_json *a)
{
    static const char *const path = QC ".kv_cache_scheme";
    if (a->type != LMP_JSON_OBJECT) return lmp_fail(LMP_EINVAL, "%s: %s must be an object or null", ct->what, path);
    const char *type = "int", *strategy = "tensor";
    int64_t bits = 8;
    int sym = 1, dynamic = 0;
    int st = get_string(ct, a, path, "type", "int", &type);
    if (!st) st = get_int(ct, a, path, "num_bits", 8, &bits, NULL);
    if (!st) st = get_bool(ct, a, path, "symmetric", 1, &sym);
    if (!st) st = get_string(ct, a, path, "strategy", "tensor", &strategy);
    const lmp_json *dyn = st ? NULL : get(a, "dynamic");
    if (dyn && dyn->type == LMP_JSON_BOOL) dynamic = dyn->boolean;
    else if (dyn) return unsupported(ct, path, "dynamic", "(not a boolean)", "static scales only");
    if (st) return st;
    char q[96];
    snprintf(q, sizeof q, "\"%.80s\"", type);
    if (strcmp(type, "float") != 0 && strcmp(type, "int") != 0)
        return unsupported(ct, path, "type", q, "\"float\" (FP8 E4M3) or \"int\"");
    if (bits != 8 && (bits != 4 || strcmp(type, "int") != 0)) {
        snprintf(q, sizeof q, "%lld", (long long)bits);
        return unsupported(ct, path, "num_bits", q, "8-bit KV caches, or 4-bit int");
    }
    if (!sym) return unsupported(ct, path, "symmetric", "false", "symmetric KV scales only, as vLLM");
    if (dynamic) return unsupported(ct, path, "dynamic", "true", "static k_scale / v_scale only");
    snprintf(q, sizeof q, "\"%.80s\"", strategy);
    if (strcmp(strategy, "tensor") != 0 && strcmp(strategy, "attn_head") != 0)
        return unsupported(ct, path, "strategy", q, "\"tensor\" or \"attn_head\" (k_scale and v_scale per attention module "
                           "or per KV head)");
    ct->kv.type = strcmp(type, "float") == 0 ? LMP_KV_FP8_E4M3 : bits == 4 ? LMP_KV_INT4 : LMP_KV_INT8;
    ct->kv.per_head = strcmp(strategy, "attn_head") == 0;
    return 0;
}

/* 4-bit float input_activations: NVFP4 (tensor_group, groups of 16, dynamic "local": E4M3 scales of
 * each group's abs-max times the static input_global_scale) and MXFP4 (group, 32, dynamic: E8M0
 * scales), as the presets NVFP4 and MXFP4 write them.  compressed-tensors' forward_quantize computes
 * them with compute_dynamic_scales_and_zp (global_scale * amax / 6 rounded to E4M3, 0 -> its eps
 * 0.125; MX: the power of two of generate_mx_scales) and fake_quantize (x / (scale / global_scale)
 * rounded to E2M1, times the same), which is the arithmetic of lmpress's act = "nvfp4" / "mxfp4"
 * (backends/cpu/cpu_ref.c act_quantize_fp, plugin_fpquants.h; tests/test_fpgrid.c holds both to
 * compressed-tensors 0.20.1's forward_quantize with these args, bit for bit). */
static int parse_act_fp4(const lmp_ct *ct, const lmp_json *a, const char *path, lmp_aspec *act)
{
    const char *strat = "", *dyn_text = "";
    int64_t gs = 0;
    int sym = 1, st = get_string(ct, a, path, "strategy", "", &strat);
    if (!st) st = get_int(ct, a, path, "group_size", 0, &gs, NULL);
    if (!st) st = get_bool(ct, a, path, "symmetric", 1, &sym);
    if (st) return st;
    const lmp_json *dyn = get(a, "dynamic");
    if (dyn && dyn->type == LMP_JSON_STRING) dyn_text = dyn->str;
    else if (dyn && dyn->type == LMP_JSON_BOOL) dyn_text = dyn->boolean ? "true" : "false";
    if (!sym) return unsupported(ct, path, "symmetric", "false", "4-bit float activations are symmetric");
    if (strcmp(strat, "tensor_group") == 0 && gs == 16 && strcmp(dyn_text, "local") == 0) act->mode = LMP_ACT_NVFP4;
    else if (strcmp(strat, "group") == 0 && gs == 32 && strcmp(dyn_text, "true") == 0) act->mode = LMP_ACT_MXFP4;
    else {
        char q[160];
        snprintf(q, sizeof q, "strategy \"%.40s\", group_size %lld, dynamic %.20s", strat, (long long)gs,
                 *dyn_text ? dyn_text : "(missing)");
        return lmp_fail(LMP_EUNSUPPORTED, "%s: %s: 4-bit float activations with %s are not supported (NVFP4: strategy "
                        "\"tensor_group\", group_size 16, dynamic \"local\"; MXFP4: \"group\", 32, dynamic true)",
                        ct->what, path, q);
    }
    act->bits = 4;
    act->rounding = LMP_ROUND_HALF_EVEN;
    return 0;
}

/* input_activations: the symmetric integer cases lmpress's activation quantizer simulates. */
static int parse_act(const lmp_ct *ct, const lmp_json *a, const char *path, lmp_aspec *act)
{
    memset(act, 0, sizeof *act);
    if (!a) return 0;
    if (a->type != LMP_JSON_OBJECT) return lmp_fail(LMP_EINVAL, "%s: %s must be an object or null", ct->what, path);
    const char *type = "int";
    int64_t bits = 8, gs = 0;
    int sym = 1, dynamic = 0;
    int st = get_string(ct, a, path, "type", "int", &type);
    const int fp8 = !st && strcmp(type, "float") == 0;
    if (!st && fp8 && !(st = get_int(ct, a, path, "num_bits", 8, &bits, NULL)) && bits == 4)
        return parse_act_fp4(ct, a, path, act);
    if (!st && strcmp(type, "int") != 0 && !fp8) {
        char q[64];
        snprintf(q, sizeof q, "\"%.40s\"", type);
        return unsupported(ct, path, "type", q, "integer, or FP8 (\"float\", 8 bits), activation quantization is simulated");
    }
    if (!st) st = get_int(ct, a, path, "num_bits", 8, &bits, NULL);
    if (!st && fp8 && bits != 8) {
        char q[32];
        snprintf(q, sizeof q, "%lld", (long long)bits);
        return unsupported(ct, path, "num_bits", q, "float activations: 8 bits (FP8 E4M3)");
    }
    if (!st && (bits < 2 || bits > 16)) {
        char q[32];
        snprintf(q, sizeof q, "%lld", (long long)bits);
        return unsupported(ct, path, "num_bits", q, "2 to 16 bits");
    }
    if (!st) st = get_bool(ct, a, path, "symmetric", 1, &sym);
    if (!st && !sym)
        return unsupported(ct, path, "symmetric", "false", "asymmetric activation quantization is not simulated");
    const lmp_json *dyn = get(a, "dynamic");
    if (!st && dyn) {
        if (dyn->type != LMP_JSON_BOOL)
            return unsupported(ct, path, "dynamic", dyn->type == LMP_JSON_STRING ? dyn->str : "(not a bool)",
                               "true or false");
        dynamic = dyn->boolean;
    }
    const char *strat = "";
    int has_gs = 0;
    if (!st) st = get_string(ct, a, path, "strategy", "", &strat);
    if (!st) st = get_int(ct, a, path, "group_size", 0, &gs, &has_gs);
    if (!st) {
        /* compressed-tensors infers "tensor" when neither strategy nor group_size is given */
        if (strcmp(strat, "token") == 0 && dynamic) act->mode = fp8 ? LMP_ACT_FP8_DYN_TOKEN : LMP_ACT_DYN_TOKEN;
        else if ((strcmp(strat, "tensor") == 0 || (!*strat && !has_gs)) && fp8 && dynamic)
            return unsupported(ct, path, "dynamic", "true", "FP8 activations: dynamic per token, or static per tensor");
        else if (strcmp(strat, "tensor") == 0 || (!*strat && !has_gs))
            act->mode = fp8 ? LMP_ACT_FP8_STATIC_TENSOR : dynamic ? LMP_ACT_DYN_TENSOR : LMP_ACT_STATIC_TENSOR;
        else {
            char q[64];
            snprintf(q, sizeof q, "\"%.40s\"", *strat ? strat : has_gs && gs > 0 ? "group" : "channel");
            return unsupported(ct, path, "strategy", q, "activations: dynamic \"token\", or \"tensor\"");
        }
    }
    if (st) return st;
    act->bits = (int)bits;
    act->rounding = LMP_ROUND_HALF_EVEN; /* torch.round */
    return 0;
}

/* The weights of nvfp4-pack-quantized (E2M1, strategy tensor_group, groups of 16, E4M3 scales and a
 * global scale) and mxfp4-pack-quantized (E2M1, group, 32, E8M0 scales): symmetric, static. */
static int parse_fp4_weights(const lmp_ct *ct, const lmp_json *w, const char *sub, ct_scheme *s, int64_t bits)
{
    const char *type = "int", *strat = "";
    int64_t gs = 0;
    int sym = 1, dynamic = 0;
    int st = get_string(ct, w, sub, "type", "int", &type);
    if (!st) st = get_string(ct, w, sub, "strategy", "", &strat);
    if (!st) st = get_int(ct, w, sub, "group_size", 0, &gs, NULL);
    if (!st) st = get_bool(ct, w, sub, "symmetric", 1, &sym);
    if (!st) st = get_bool(ct, w, sub, "dynamic", 0, &dynamic);
    if (st) return st;
    const int nv = s->fp4 == CT_NVFP4;
    char q[96];
    snprintf(q, sizeof q, "\"%.40s\"", type);
    if (strcmp(type, "float") != 0) return unsupported(ct, sub, "type", q, nv ? "nvfp4-pack-quantized: float (E2M1)" : "mxfp4-pack-quantized: float (E2M1)");
    snprintf(q, sizeof q, "%lld", (long long)bits);
    if (bits != 4) return unsupported(ct, sub, "num_bits", q, "4-bit float (E2M1) codes");
    if (!sym) return unsupported(ct, sub, "symmetric", "false", "FP4 weights are symmetric");
    if (dynamic) return unsupported(ct, sub, "dynamic", "true", "weights must carry their scales");
    snprintf(q, sizeof q, "\"%.40s\"", strat);
    if (strcmp(strat, nv ? "tensor_group" : "group") != 0)
        return unsupported(ct, sub, "strategy", q, nv ? "nvfp4-pack-quantized: \"tensor_group\"" : "mxfp4-pack-quantized: \"group\"");
    snprintf(q, sizeof q, "%lld", (long long)gs);
    if (gs != (nv ? 16 : 32)) return unsupported(ct, sub, "group_size", q, nv ? "NVFP4: groups of 16" : "MXFP4: groups of 32");
    s->has_weights = 1;
    s->fp8 = 0;
    s->bits = 4;
    s->sym = 1;
    s->strategy = CT_GROUP;
    s->group_size = gs;
    return 0;
}

static int parse_group(lmp_ct *ct, const char *key, const lmp_json *g, const char *top_format, ct_scheme *s)
{
    char path[512];
    snprintf(path, sizeof path, QC ".config_groups.%.300s", key);
    if (!(s->name = strdup(key))) return lmp_fail(LMP_ENOMEM, "out of memory");
    if (g->type != LMP_JSON_OBJECT)
        return lmp_fail(LMP_EUNSUPPORTED, "%s: %s is not an object with targets and weights (preset names are "
                        "not read)", ct->what, path);
    const char *fmt = top_format;
    int st = get_string(ct, g, path, "format", top_format, &fmt);
    if (st) return st;
    if (!get(g, "format") && strcmp(top_format, "mixed-precision") == 0)
        return lmp_fail(LMP_EINVAL, "%s: %s.format is missing (" QC ".format \"mixed-precision\" needs one per group)",
                        ct->what, path);
    if (strcmp(fmt, "pack-quantized") == 0) s->packed = 1;
    else if (strcmp(fmt, "nvfp4-pack-quantized") == 0) s->fp4 = CT_NVFP4;
    else if (strcmp(fmt, "mxfp4-pack-quantized") == 0) s->fp4 = CT_MXFP4;
    else if (strcmp(fmt, "float-quantized") == 0) s->float_format = 1;
    else if (strcmp(fmt, "int-quantized") != 0 && strcmp(fmt, "naive-quantized") != 0) {
        char q[96];
        snprintf(q, sizeof q, "\"%.80s\"", fmt);
        return get(g, "format") ? unsupported(ct, path, "format", q, "int-quantized, pack-quantized, float-quantized, naive-quantized, nvfp4-pack-quantized or mxfp4-pack-quantized")
                                : unsupported(ct, QC, "format", q, "int-quantized, pack-quantized, float-quantized, naive-quantized, nvfp4-pack-quantized or mxfp4-pack-quantized");
    }
    if (get(g, "output_activations"))
        return unsupported(ct, path, "output_activations", "(given)", "output quantization is not simulated");
    char sub[600];
    snprintf(sub, sizeof sub, "%s.input_activations", path);
    if ((st = parse_act(ct, get(g, "input_activations"), sub, &s->act))) return st;
    const lmp_json *w = get(g, "weights");
    snprintf(sub, sizeof sub, "%s.weights", path);
    if (!w) return 0;
    if (w->type != LMP_JSON_OBJECT) return lmp_fail(LMP_EINVAL, "%s: %s must be an object or null", ct->what, sub);
    s->has_weights = 1;
    const char *type = "int";
    int64_t bits = 8;
    int dynamic = 0;
    if ((st = get_string(ct, w, sub, "type", "int", &type))) return st;
    s->fp8 = strcmp(type, "float") == 0;
    if (strcmp(type, "int") != 0 && !s->fp8) {
        char q[64];
        snprintf(q, sizeof q, "\"%.40s\"", type);
        return unsupported(ct, sub, "type", q, "integer weights, or FP8 (\"float\", 8 bits)");
    }
    if ((st = get_int(ct, w, sub, "num_bits", 8, &bits, NULL))) return st;
    if (s->fp4) return parse_fp4_weights(ct, w, sub, s, bits);
    if (s->fp8 && (bits != 8 || s->packed)) /* 4-bit floats: only in their own formats (parse_fp4_weights) */
        return unsupported(ct, sub, "type", "\"float\"", "float weights are read as FP8 E4M3 (8 bits, float-quantized or "
                           "naive-quantized), or as NVFP4 / MXFP4 from nvfp4-pack-quantized / mxfp4-pack-quantized");
    if (!s->fp8 && s->float_format)
        return unsupported(ct, get(g, "format") ? path : QC, "format", "\"float-quantized\"",
                           "its weights must be type \"float\" (FP8)");
    if (bits < 2 || bits > 8) {
        char q[32];
        snprintf(q, sizeof q, "%lld", (long long)bits);
        return unsupported(ct, sub, "num_bits", q, "2 to 8 bits");
    }
    /* up to 0.17 pack_to_int32 put 32 / bits codes in a word, from 0.19 it packs densely */
    if (s->packed && 32 % bits != 0 && !ct->dense_packing) {
        char q[32];
        snprintf(q, sizeof q, "%lld", (long long)bits);
        return unsupported(ct, sub, "num_bits", q,
                           "3-, 5-, 6- and 7-bit pack-quantized codes are read from compressed-tensors 0.19 on (" QC
                           ".version; before it they were packed differently)");
    }
    s->bits = (int)bits;
    if ((st = get_bool(ct, w, sub, "symmetric", 1, &s->sym)) || (st = get_bool(ct, w, sub, "dynamic", 0, &dynamic)))
        return st;
    if (dynamic) return unsupported(ct, sub, "dynamic", "true", "weights must carry their scales");
    if (s->fp8 && !s->sym) return unsupported(ct, sub, "symmetric", "false", "FP8 weights are symmetric");
    return parse_strategy(ct, w, sub, &s->strategy, &s->group_size, s->fp8 ? &s->block_rows : NULL);
}

/* compressed-tensors sorts targets by ("re:" in target, target): names and class names first,
 * then regexes, each by text (code-point order, which strcmp on UTF-8 keeps). */
static int target_order(const void *a, const void *b)
{
    const ct_pattern *x = a, *y = b;
    int rx = strstr(x->text, "re:") != NULL, ry = strstr(y->text, "re:") != NULL;
    return rx != ry ? rx - ry : strcmp(x->text, y->text);
}

static int add_pattern(lmp_ct *ct, const char *path, const lmp_json *v, ct_pattern *p)
{
    if (v->type != LMP_JSON_STRING) return lmp_fail(LMP_EINVAL, "%s: %s: every entry must be a string", ct->what, path);
    if (!(p->text = strdup(v->str))) return lmp_fail(LMP_ENOMEM, "out of memory");
    if (strncmp(v->str, "re:", 3) != 0) return 0;
    int err;
    PCRE2_SIZE off;
    p->re = pcre2_compile((PCRE2_SPTR)(v->str + 3), PCRE2_ZERO_TERMINATED, PCRE2_ANCHORED, &err, &off, NULL);
    if (!p->re) {
        PCRE2_UCHAR text[256];
        if (pcre2_get_error_message(err, text, sizeof text) < 0) snprintf((char *)text, sizeof text, "error %d", err);
        return lmp_fail(LMP_EINVAL, "%s: %s: \"%s\": %s at offset %zu", ct->what, path, v->str, (const char *)text,
                        (size_t)off);
    }
    return 0;
}

int lmp_ct_parse(const lmp_json *qc, const char *what, lmp_ct **out)
{
    *out = NULL;
    lmp_ct *ct = calloc(1, sizeof *ct);
    if (!ct || !(ct->what = strdup(what))) {
        free(ct);
        return lmp_fail(LMP_ENOMEM, "out of memory");
    }
    const char *method = "", *format = "", *status = "";
    int st = qc->type == LMP_JSON_OBJECT ? 0 : lmp_fail(LMP_EINVAL, "%s: " QC " must be an object", what);
    if (!st) st = get_string(ct, qc, QC, "quant_method", NULL, &method);
    if (!st && strcmp(method, "compressed-tensors") != 0) {
        char q[96];
        snprintf(q, sizeof q, "\"%.80s\"", method);
        st = unsupported(ct, QC, "quant_method", q, "only compressed-tensors checkpoints are read");
    }
    if (!st) st = get_string(ct, qc, QC, "format", NULL, &format);
    const char *version = "";
    if (!st) st = get_string(ct, qc, QC, "version", "", &version);
    int major = 0, minor = 0;
    ct->dense_packing = sscanf(version, "%d.%d", &major, &minor) == 2 && (major > 0 || minor >= 19);
    if (!st) st = get_string(ct, qc, QC, "quantization_status", "compressed", &status);
    if (!st && strcmp(status, "compressed") != 0) {
        char q[96];
        snprintf(q, sizeof q, "\"%.80s\"", status);
        st = unsupported(ct, QC, "quantization_status", q, "only \"compressed\" checkpoints hold the codes read here");
    }
    if (!st && get(qc, "kv_cache_scheme")) st = parse_kv_scheme(ct, get(qc, "kv_cache_scheme"));
    if (!st) st = check_transforms(ct, get(qc, "transform_config"));
    const lmp_json *sp = st ? NULL : get(qc, "sparsity_config");
    if (sp) {
        const char *sf = "dense";
        st = get_string(ct, sp, QC ".sparsity_config", "format", "dense", &sf);
        if (!st && strcmp(sf, "dense") != 0) {
            char q[96];
            snprintf(q, sizeof q, "\"%.80s\"", sf);
            st = unsupported(ct, QC ".sparsity_config", "format", q, "sparse-compressed weights (2:4 bitmask and "
                             "others) are not read; only \"dense\"");
        }
    }
    const lmp_json *groups = st ? NULL : get(qc, "config_groups");
    /* (empty when only the KV cache is quantized) */
    if (!st && (!groups || groups->type != LMP_JSON_OBJECT || (groups->n == 0 && ct->kv.type == LMP_KV_NONE)))
        st = lmp_fail(LMP_EINVAL, "%s: " QC ".config_groups is missing or empty", what);
    if (!st && !(ct->schemes = calloc(groups->n + 1, sizeof *ct->schemes))) st = lmp_fail(LMP_ENOMEM, "out of memory");
    size_t n_targets = 0;
    for (size_t i = 0; !st && i < groups->n; i++) {
        st = parse_group(ct, groups->keys[i], &groups->items[i], format, &ct->schemes[i]);
        ct->n_schemes++;
        const lmp_json *t = st ? NULL : get(&groups->items[i], "targets");
        if (!st && (!t || t->type != LMP_JSON_ARRAY || t->n == 0))
            st = lmp_fail(LMP_EINVAL, "%s: " QC ".config_groups.%s.targets is missing or empty", what, groups->keys[i]);
        if (!st) n_targets += t->n;
    }
    if (!st && !(ct->targets = calloc(n_targets + 1, sizeof *ct->targets))) st = lmp_fail(LMP_ENOMEM, "out of memory");
    /* target -> group, a later group taking a target an earlier one named (a Python dict) */
    for (size_t i = 0; !st && i < groups->n; i++) {
        const lmp_json *t = get(&groups->items[i], "targets");
        char path[512];
        snprintf(path, sizeof path, QC ".config_groups.%.300s.targets", groups->keys[i]);
        for (size_t k = 0; !st && k < t->n; k++) {
            const lmp_json *v = &t->items[k];
            int j = 0;
            while (j < ct->n_targets && !(v->type == LMP_JSON_STRING && strcmp(ct->targets[j].text, v->str) == 0)) j++;
            if (j == ct->n_targets) {
                st = add_pattern(ct, path, v, &ct->targets[j]);
                ct->n_targets++;
            }
            ct->targets[j].scheme = (int)i;
        }
    }
    if (!st) qsort(ct->targets, (size_t)ct->n_targets, sizeof *ct->targets, target_order);
    const lmp_json *ign = st ? NULL : get(qc, "ignore");
    if (ign && ign->type != LMP_JSON_ARRAY) st = lmp_fail(LMP_EINVAL, "%s: " QC ".ignore must be a list", what);
    if (!st && ign && !(ct->ignore = calloc(ign->n + 1, sizeof *ct->ignore))) st = lmp_fail(LMP_ENOMEM, "out of memory");
    for (size_t k = 0; !st && ign && k < ign->n; k++) {
        st = add_pattern(ct, QC ".ignore", &ign->items[k], &ct->ignore[k]);
        ct->n_ignore++;
    }
    if (st) {
        lmp_ct_free(ct);
        return st;
    }
    *out = ct;
    return 0;
}

static void free_patterns(ct_pattern *p, int n)
{
    for (int i = 0; i < n; i++) {
        free(p[i].text);
        pcre2_code_free(p[i].re);
    }
    free(p);
}

void lmp_ct_free(lmp_ct *ct)
{
    if (!ct) return;
    for (int i = 0; i < ct->n_schemes; i++) free(ct->schemes[i].name);
    free(ct->schemes);
    free_patterns(ct->targets, ct->n_targets);
    free_patterns(ct->ignore, ct->n_ignore);
    free(ct->what);
    free(ct);
}

/* ---- matching ---------------------------------------------------------------------------- */
/* 1, 0, or -1 when PCRE2 gave up on the name (regex_limit.h). */
static int name_match(const ct_pattern *p, const char *name)
{
    if (!p->re) return strcmp(p->text, name) == 0;
    return lmp_re_search(p->re, name);
}

/* A class-name target: the module's class or one it derives from (every module is a "Module"). */
static int class_match(const ct_pattern *p, const char *cls)
{
    return !p->re && (strcmp(p->text, cls) == 0 || strcmp(p->text, "Module") == 0);
}

static int gave_up(const lmp_ct *ct, const ct_pattern *p, const char *module)
{
    return lmp_fail(LMP_EINVAL, "%s: pattern \"%s\" gave up on %s: PCRE2's match limit (%d steps) was reached, so "
                    "whether it matches is unknown (a nested repetition such as (.+)+ backtracks exponentially)",
                    ct->what, p->text, module, LMP_RE_MATCH_LIMIT);
}

/* The group quantizing the module into *out, NULL when it is ignored or no target matches it. */
static int scheme_for(const lmp_ct *ct, const char *module, const char *cls, const ct_scheme **out)
{
    *out = NULL;
    for (int i = 0; i < ct->n_ignore; i++) {
        const int r = name_match(&ct->ignore[i], module);
        if (r < 0) return gave_up(ct, &ct->ignore[i], module);
        if (r || class_match(&ct->ignore[i], cls)) return 0;
    }
    for (int i = 0; i < ct->n_targets; i++) {
        const int r = name_match(&ct->targets[i], module);
        if (r < 0) return gave_up(ct, &ct->targets[i], module);
        if (r) {
            *out = &ct->schemes[ct->targets[i].scheme];
            return 0;
        }
    }
    for (int i = 0; i < ct->n_targets; i++)
        if (class_match(&ct->targets[i], cls)) {
            *out = &ct->schemes[ct->targets[i].scheme];
            return 0;
        }
    return 0;
}

/* ---- tensors ----------------------------------------------------------------------------- */
static int is_int(lmp_st_dtype d)
{
    return d == LMP_ST_I8 || d == LMP_ST_U8 || d == LMP_ST_I16 || d == LMP_ST_I32 || d == LMP_ST_I64;
}

static int is_float(lmp_st_dtype d) { return d == LMP_ST_F32 || d == LMP_ST_F16 || d == LMP_ST_BF16; }

/* Element i of an integer tensor (little-endian, possibly unaligned). */
static int64_t int_at(const lmp_st_tensor *t, int64_t i)
{
    const unsigned char *p = (const unsigned char *)t->data + (size_t)i * lmp_st_dtype_size(t->dtype);
    switch (t->dtype) {
    case LMP_ST_U8: return p[0];
    case LMP_ST_I8: return (int8_t)p[0];
    case LMP_ST_I16: return (int16_t)(uint16_t)(p[0] | p[1] << 8);
    case LMP_ST_I32: return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
    default: {
        uint64_t v = 0;
        for (int k = 7; k >= 0; k--) v = v << 8 | p[k];
        return (int64_t)v;
    }
    }
}

static uint32_t word_at(const lmp_st_tensor *t, int64_t i)
{
    const unsigned char *p = (const unsigned char *)t->data + 4 * (size_t)i;
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* The `bits`-bit code at bit `bit` of a stream of 32-bit words, word w at t[base + w * stride]
 * (compressed-tensors' pack_to_int32 packs densely: a 3-bit code may straddle two words). */
static uint32_t code_at(const lmp_st_tensor *t, int64_t base, int64_t stride, int64_t bit, int bits)
{
    const int64_t w = bit / 32, sh = bit % 32;
    uint64_t v = word_at(t, base + w * stride);
    if (sh + bits > 32) v |= (uint64_t)word_at(t, base + (w + 1) * stride) << 32;
    return (uint32_t)(v >> sh) & ((1u << bits) - 1u);
}

static void shape_text(const lmp_st_tensor *t, char *buf, size_t n)
{
    size_t k = (size_t)snprintf(buf, n, "%s [", lmp_st_dtype_name(t->dtype));
    for (int i = 0; i < t->ndim && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? ", " : "", (long long)t->shape[i]);
    if (k < n) snprintf(buf + k, n - k, "]");
}

static int bad_tensor(const lmp_st_tensor *t, const char *expected)
{
    char have[160];
    shape_text(t, have, sizeof have);
    return lmp_fail(LMP_EINVAL, "%s: %s is %s, expected %s", t->file, t->name, have, expected);
}

static int is_2d(const lmp_st_tensor *t, int64_t d0, int64_t d1)
{
    return t->ndim == 2 && t->shape[0] == d0 && t->shape[1] == d1;
}

/* [rows, cols], or for a single column also [rows]; a single value also [] or [1]. */
static int is_grid(const lmp_st_tensor *t, int64_t rows, int64_t cols)
{
    if (is_2d(t, rows, cols)) return 1;
    if (cols == 1 && t->ndim == 1 && t->shape[0] == rows) return 1;
    return rows == 1 && cols == 1 && t->numel == 1 && t->ndim <= 1;
}

static const lmp_st_tensor *tensor(const lmp_safetensors *st, const char *module, const char *leaf)
{
    char name[400];
    snprintf(name, sizeof name, "%s.%s", module, leaf);
    return lmp_st_find(st, name);
}

static int missing(const lmp_ct *ct, const ct_scheme *s, const char *where, const char *module, const char *leaf)
{
    return lmp_fail(LMP_EINVAL, "%s: tensor %s.%s is missing (%s: " QC ".config_groups.%s quantizes %s)", where,
                    module, leaf, ct->what, s->name, module);
}

/* The input scale of a static per-tensor activation grid. */
static int input_scale(const lmp_safetensors *st, const char *where, const char *module, lmp_aspec *act)
{
    const lmp_st_tensor *t = tensor(st, module, "input_scale");
    char name[400];
    snprintf(name, sizeof name, "%s.input_scale", module);
    if (!t) return lmp_fail(LMP_EINVAL, "%s: tensor %s is missing (static input quantization needs it)", where, name);
    if (!is_float(t->dtype) || t->numel != 1) return bad_tensor(t, "one F32, F16 or BF16 value");
    float v;
    int r = lmp_st_to_f32(t, 0, 1, &v);
    if (r) return r;
    if (!(v > 0 && isfinite(v)))
        return lmp_fail(LMP_EINVAL, "%s: %s = %g is not a positive scale", t->file, name, (double)v);
    act->scale = v;
    return 0;
}

/* The weight scales: finite, and not negative (every compressed-tensors scheme computes a scale
 * as a range over a positive number of steps; a negative one is corrupt data, not a mirror). */
static int check_scales(const lmp_st_tensor *t, int64_t n)
{
    float v[256];
    for (int64_t i = 0; i < n; i += 256) {
        const int64_t k = n - i < 256 ? n - i : 256;
        int r = lmp_st_to_f32(t, i, k, v);
        if (r) return r;
        for (int64_t j = 0; j < k; j++)
            if (!isfinite(v[j]) || v[j] < 0)
                return lmp_fail(LMP_EINVAL, "%s: %s[%lld] = %g is not a %s", t->file, t->name, (long long)(i + j),
                                (double)v[j], isfinite(v[j]) ? "scale (negative)" : "finite scale");
    }
    return 0;
}

/* Zero-points stored unpacked: integers within the codes' range, floats finite. */
static int check_zero_points(const lmp_st_tensor *t, int64_t n, int bits)
{
    const int64_t lo = -((int64_t)1 << (bits - 1)), hi = ((int64_t)1 << (bits - 1)) - 1;
    for (int64_t i = 0; i < n; i++) {
        if (is_int(t->dtype)) {
            int64_t v = int_at(t, i);
            if (v < lo || v > hi)
                return lmp_fail(LMP_EINVAL, "%s: %s[%lld] = %lld is not an int%d zero-point (%lld to %lld)", t->file,
                                t->name, (long long)i, (long long)v, bits, (long long)lo, (long long)hi);
        } else {
            float v;
            int r = lmp_st_to_f32(t, i, 1, &v);
            if (r) return r;
            if (!isfinite(v))
                return lmp_fail(LMP_EINVAL, "%s: %s[%lld] = %g is not a finite zero-point", t->file, t->name,
                                (long long)i, (double)v);
        }
    }
    return 0;
}

/* The scales' [rows, cols] of an FP8 scheme over W[out, in]: [1, 1], [out, 1], [out, in/group] or
 * [ceil(out/block_rows), ceil(in/group)] (compressed-tensors pads W to whole tiles). */
static void fp8_scale_shape(const ct_scheme *s, int64_t out, int64_t in, int64_t *rows, int64_t *cols)
{
    *rows = s->strategy == CT_TENSOR ? 1 : s->strategy == CT_BLOCK ? (out + s->block_rows - 1) / s->block_rows : out;
    *cols = s->strategy == CT_GROUP || s->strategy == CT_BLOCK ? (in + s->group_size - 1) / s->group_size : 1;
}

/* FP8 weights (float-quantized / naive-quantized, type float, 8 bits): X.weight F8_E4M3 [out, in]
 * (the codes, E4M3 "fn": 0x7F / 0xFF are NaN, refused), X.weight_scale F32/F16/BF16 in the
 * strategy's shape; no zero-point (symmetric). */
static int find_fp8(const lmp_ct *ct, const ct_scheme *s, const lmp_safetensors *st, const char *where,
                    const char *module, lmp_ct_weight *w)
{
    const int64_t out = w->out, in = w->in;
    char exp[160];
    if (s->strategy == CT_GROUP && in % s->group_size)
        return lmp_fail(LMP_EINVAL, "%s: %s: FP8 groups of %lld do not divide its %lld inputs (compressed-tensors takes "
                        "whole groups)", where, module, (long long)s->group_size, (long long)in);
    if (!(w->codes = tensor(st, module, "weight"))) return missing(ct, s, where, module, "weight");
    snprintf(exp, sizeof exp, "F8_E4M3 [%lld, %lld] (FP8 codes)", (long long)out, (long long)in);
    if (w->codes->dtype != LMP_ST_F8_E4M3 || !is_2d(w->codes, out, in)) return bad_tensor(w->codes, exp);
    const unsigned char *b = w->codes->data;
    for (int64_t i = 0; i < out * in; i++)
        if ((b[i] & 0x7F) == 0x7F)
            return lmp_fail(LMP_EINVAL, "%s: %s[%lld, %lld] is an E4M3 NaN (0x%02X), which no quantizer writes", w->codes->file,
                            w->codes->name, (long long)(i / in), (long long)(i % in), b[i]);
    int64_t rows, cols;
    fp8_scale_shape(s, out, in, &rows, &cols);
    if (!(w->scale = tensor(st, module, "weight_scale"))) return missing(ct, s, where, module, "weight_scale");
    snprintf(exp, sizeof exp, "F32, F16 or BF16 [%lld, %lld]", (long long)rows, (long long)cols);
    if (!is_float(w->scale->dtype) || !is_grid(w->scale, rows, cols)) return bad_tensor(w->scale, exp);
    int r = check_scales(w->scale, rows * cols);
    if (r) return r;
    w->bits = out * in > 0 ? 8.0 * (double)(w->codes->nbytes + w->scale->nbytes) / (double)(out * in) : 0;
    size_t k = (size_t)snprintf(w->kind, sizeof w->kind, "fp8-");
    if (s->strategy == CT_BLOCK)
        k += (size_t)snprintf(w->kind + k, sizeof w->kind - k, "b%lldx%lld", (long long)s->block_rows, (long long)s->group_size);
    else if (s->strategy == CT_GROUP) k += (size_t)snprintf(w->kind + k, sizeof w->kind - k, "g%lld", (long long)s->group_size);
    else k += (size_t)snprintf(w->kind + k, sizeof w->kind - k, "%s", s->strategy == CT_TENSOR ? "tensor" : "channel");
    if (s->act.mode != LMP_ACT_NONE && k < sizeof w->kind)
        snprintf(w->kind + k, sizeof w->kind - k, "-%s", s->act.mode == LMP_ACT_FP8_DYN_TOKEN ? "afp8-token" : "afp8-static");
    return 0;
}

/* w = e4m3(code) * scale in f32: exact for an F16/BF16 scale (4 + 8 or 11 significant bits), one
 * rounding for an F32 scale, as lmpress's FP8 grid computes it (plugin_fpquants.h). */
static int dequantize_fp8(const lmp_ct_weight *q, float *w)
{
    const ct_scheme *s = q->scheme;
    const int64_t out = q->out, in = q->in;
    int64_t rows, cols;
    fp8_scale_shape(s, out, in, &rows, &cols);
    float *scale = malloc((size_t)(rows * cols) * sizeof *scale);
    int st = scale ? lmp_st_to_f32(q->scale, 0, rows * cols, scale) : lmp_fail(LMP_ENOMEM, "out of memory dequantizing %s",
                                                                              q->codes->name);
    const unsigned char *b = q->codes->data;
    for (int64_t o = 0; !st && o < out; o++)
        for (int64_t j = 0; j < in; j++) {
            const int64_t k = s->strategy == CT_TENSOR    ? 0
                              : s->strategy == CT_CHANNEL ? o
                              : s->strategy == CT_GROUP   ? o * cols + j / s->group_size
                                                          : (o / s->block_rows) * cols + j / s->group_size;
            w[o * in + j] = lmp_minifloat_decode(&LMP_MF_E4M3, b[o * in + j]) * scale[k];
        }
    free(scale);
    return st;
}

/* One positive finite F32 value: NVFP4's weight_global_scale and input_global_scale.  F32 only:
 * compressed-tensors divides the E4M3 scale by it in its dtype (bfloat16 / F32 promotes to F32). */
static int global_scale(const lmp_safetensors *st, const char *where, const char *module, const char *leaf, float *v)
{
    const lmp_st_tensor *t = tensor(st, module, leaf);
    if (!t) return lmp_fail(LMP_EINVAL, "%s: tensor %s.%s is missing (NVFP4 needs it)", where, module, leaf);
    if (t->dtype != LMP_ST_F32 || t->numel != 1 || t->ndim > 1) return bad_tensor(t, "one F32 value");
    int r = lmp_st_to_f32(t, 0, 1, v);
    if (!r && !(*v > 0 && isfinite(*v)))
        return lmp_fail(LMP_EINVAL, "%s: %s = %g is not a positive global scale", t->file, t->name, (double)*v);
    return r;
}

/* nvfp4-pack-quantized / mxfp4-pack-quantized: X.weight_packed U8 [out, in/2] (column 2k in the low
 * nibble, 2k+1 in the high; a nibble is sign << 3 | the E2M1 magnitude index), X.weight_scale
 * [out, in/group]: E4M3 (NVFP4) or E8M0 exponents in U8 (MXFP4, 2^(e-127)); NVFP4 also
 * X.weight_global_scale F32 [1]. */
static int find_fp4(const lmp_ct *ct, const ct_scheme *s, const lmp_safetensors *st, const char *where,
                    const char *module, lmp_ct_weight *w)
{
    const int64_t out = w->out, in = w->in, g = s->group_size, cols = in / g;
    const int nv = s->fp4 == CT_NVFP4;
    char exp[160];
    if (in % g)
        return lmp_fail(LMP_EINVAL, "%s: %s: %s groups of %lld do not divide its %lld inputs (compressed-tensors takes "
                        "whole groups)", where, module, nv ? "NVFP4" : "MXFP4", (long long)g, (long long)in);
    if (!(w->codes = tensor(st, module, "weight_packed"))) return missing(ct, s, where, module, "weight_packed");
    snprintf(exp, sizeof exp, "U8 [%lld, %lld] (E2M1 codes of [%lld, %lld], two a byte)", (long long)out,
             (long long)(in / 2), (long long)out, (long long)in);
    if (w->codes->dtype != LMP_ST_U8 || !is_2d(w->codes, out, in / 2)) return bad_tensor(w->codes, exp);
    const lmp_st_tensor *shape = tensor(st, module, "weight_shape"); /* not written by 0.20; checked when there */
    if (shape && (!is_int(shape->dtype) || shape->numel != 2 || int_at(shape, 0) != out || int_at(shape, 1) != in)) {
        snprintf(exp, sizeof exp, "the integers [%lld, %lld]", (long long)out, (long long)in);
        return bad_tensor(shape, exp);
    }
    if (!(w->scale = tensor(st, module, "weight_scale"))) return missing(ct, s, where, module, "weight_scale");
    snprintf(exp, sizeof exp, "%s [%lld, %lld]", nv ? "F8_E4M3" : "U8 (E8M0 exponents)", (long long)out, (long long)cols);
    if (w->scale->dtype != (nv ? LMP_ST_F8_E4M3 : LMP_ST_U8) || !is_2d(w->scale, out, cols)) return bad_tensor(w->scale, exp);
    const unsigned char *b = w->scale->data;
    for (int64_t i = 0; i < out * cols; i++)
        if (nv ? (b[i] & 0x7F) == 0x7F || (b[i] & 0x80) : b[i] == 0xFF)
            return lmp_fail(LMP_EINVAL, "%s: %s[%lld, %lld] = 0x%02X is not a %s", w->scale->file, w->scale->name,
                            (long long)(i / cols), (long long)(i % cols), b[i],
                            nv ? "positive E4M3 scale (NaN or negative)" : "finite E8M0 scale (0xFF is NaN)");
    int r = nv ? global_scale(st, where, module, "weight_global_scale", &w->global_scale) : 0;
    if (r) return r;
    w->bits = out * in > 0 ? 8.0 * (double)(w->codes->nbytes + w->scale->nbytes + (nv ? 4 : 0)) / (double)(out * in) : 0;
    snprintf(w->kind, sizeof w->kind, "%s%s", nv ? "nvfp4-g16" : "mxfp4-g32",
             s->act.mode == LMP_ACT_NVFP4 ? "-anvfp4" : s->act.mode == LMP_ACT_MXFP4 ? "-amxfp4"
             : s->act.mode == LMP_ACT_NONE ? "" : "-a");
    return 0;
}

/* w = e2m1(code) * (e4m3(scale) / global_scale) in f32 (NVFP4), e2m1(code) * 2^(e-127) (MXFP4): the
 * f32 compressed-tensors' _dequantize computes before its bfloat16 result (NVFP4 rounds it to
 * bfloat16 there; MXFP4's products are exact in both) and lmpress's own grid's value
 * (lmp_wgrid_value_fp), so an export reads back as the weights it was made from. */
static int dequantize_fp4(const lmp_ct_weight *q, float *w)
{
    const ct_scheme *s = q->scheme;
    const int64_t out = q->out, in = q->in, g = s->group_size, cols = in / g;
    const unsigned char *c = q->codes->data, *sc = q->scale->data;
    for (int64_t o = 0; o < out; o++)
        for (int64_t k = 0; k < cols; k++) {
            const unsigned char e = sc[o * cols + k];
            const float eff = s->fp4 == CT_NVFP4 ? lmp_minifloat_decode(&LMP_MF_E4M3, e) / q->global_scale
                                                 : ldexpf(1.0f, (int)e - 127);
            for (int64_t j = k * g; j < (k + 1) * g; j++) {
                const unsigned byte = c[o * (in / 2) + j / 2], nib = j % 2 ? byte >> 4 : byte & 0xF;
                w[o * in + j] = lmp_minifloat_decode(&LMP_MF_E2M1, nib) * eff;
            }
        }
    return 0;
}

int lmp_ct_find(const lmp_ct *ct, const lmp_safetensors *st, const char *where, const char *module,
                const char *cls, int64_t out, int64_t in, lmp_ct_weight *w)
{
    memset(w, 0, sizeof *w);
    const ct_scheme *s;
    int sr = scheme_for(ct, module, cls, &s);
    if (sr || !s) return sr;
    w->act = s->act;
    int r = s->act.mode == LMP_ACT_STATIC_TENSOR || s->act.mode == LMP_ACT_FP8_STATIC_TENSOR
                ? input_scale(st, where, module, &w->act)
            : s->act.mode == LMP_ACT_NVFP4 ? global_scale(st, where, module, "input_global_scale", &w->act.scale)
                                           : 0;
    if (r || !s->has_weights) return r;
    w->quantized = 1;
    w->scheme = s;
    w->out = out;
    w->in = in;
    char exp[160];
    if (s->fp8) return find_fp8(ct, s, st, where, module, w);
    if (s->fp4) return find_fp4(ct, s, st, where, module, w);
    /* the codes */
    const int64_t words = (in * s->bits + 31) / 32;
    if (s->packed) {
        if (!(w->codes = tensor(st, module, "weight_packed"))) return missing(ct, s, where, module, "weight_packed");
        snprintf(exp, sizeof exp, "I32 [%lld, %lld] (%d-bit codes of [%lld, %lld], packed)", (long long)out,
                 (long long)words, s->bits, (long long)out, (long long)in);
        if (w->codes->dtype != LMP_ST_I32 || !is_2d(w->codes, out, words)) return bad_tensor(w->codes, exp);
        const lmp_st_tensor *shape = tensor(st, module, "weight_shape");
        if (!shape) return missing(ct, s, where, module, "weight_shape");
        if (!is_int(shape->dtype) || shape->numel != 2 || int_at(shape, 0) != out || int_at(shape, 1) != in) {
            snprintf(exp, sizeof exp, "the integers [%lld, %lld]", (long long)out, (long long)in);
            return bad_tensor(shape, exp);
        }
    } else {
        if (!(w->codes = tensor(st, module, "weight"))) return missing(ct, s, where, module, "weight");
        snprintf(exp, sizeof exp, "I8 [%lld, %lld] (int%d codes)", (long long)out, (long long)in, s->bits);
        if (w->codes->dtype != LMP_ST_I8 || !is_2d(w->codes, out, in)) return bad_tensor(w->codes, exp);
        /* an int8 holds any 8-bit code; narrower codes stored one per byte must fit their width */
        const int64_t lo = -((int64_t)1 << (s->bits - 1)), hi = ((int64_t)1 << (s->bits - 1)) - 1;
        for (int64_t i = 0; s->bits < 8 && i < out * in; i++) {
            int64_t v = int_at(w->codes, i);
            if (v < lo || v > hi)
                return lmp_fail(LMP_EINVAL, "%s: %s[%lld, %lld] = %lld is not an int%d code (%lld to %lld)",
                                w->codes->file, w->codes->name, (long long)(i / in), (long long)(i % in),
                                (long long)v, s->bits, (long long)lo, (long long)hi);
        }
    }
    /* the scales and zero-points: one per tensor, row or group of a row */
    const int64_t rows = s->strategy == CT_TENSOR ? 1 : out;
    const int64_t groups = s->strategy == CT_GROUP ? (in + s->group_size - 1) / s->group_size : 1;
    if (!(w->scale = tensor(st, module, "weight_scale"))) return missing(ct, s, where, module, "weight_scale");
    snprintf(exp, sizeof exp, "F32, F16 or BF16 [%lld, %lld]", (long long)rows, (long long)groups);
    if (!is_float(w->scale->dtype) || !is_grid(w->scale, rows, groups)) return bad_tensor(w->scale, exp);
    if ((r = check_scales(w->scale, rows * groups))) return r;
    w->zero = tensor(st, module, "weight_zero_point");
    if (!w->zero && !s->sym) return missing(ct, s, where, module, "weight_zero_point");
    if (w->zero) {
        const int64_t packed_rows = (out * s->bits + 31) / 32;
        w->zero_packed = s->packed && s->strategy != CT_TENSOR && w->zero->dtype == LMP_ST_I32 &&
                         packed_rows != out && is_2d(w->zero, packed_rows, groups);
        snprintf(exp, sizeof exp, "an integer or float [%lld, %lld]%s", (long long)rows, (long long)groups,
                 s->packed && s->strategy != CT_TENSOR ? ", or I32 packed down the rows" : "");
        if (!w->zero_packed && (!(is_int(w->zero->dtype) || is_float(w->zero->dtype)) || !is_grid(w->zero, rows, groups)))
            return bad_tensor(w->zero, exp);
        if (!w->zero_packed && (r = check_zero_points(w->zero, rows * groups, s->bits))) return r;
    }
    /* GPTQ's activation order: column j belongs to group g_idx[j]; all groups stay full */
    const lmp_st_tensor *g = s->strategy == CT_GROUP ? tensor(st, module, "weight_g_idx") : NULL;
    if (g) {
        snprintf(exp, sizeof exp, "I32 or I64 [%lld]", (long long)in);
        if ((g->dtype != LMP_ST_I32 && g->dtype != LMP_ST_I64) || g->ndim != 1 || g->shape[0] != in)
            return bad_tensor(g, exp);
        /* all -1: no activation order was used (the columns stay in order); a -1 among groups is
         * no group and is refused below like any other value out of range */
        int column_order = 1;
        for (int64_t j = 0; j < in && column_order; j++) column_order = int_at(g, j) == -1;
        if (!column_order) {
            int64_t *count = calloc((size_t)groups, sizeof *count);
            if (!count) return lmp_fail(LMP_ENOMEM, "out of memory");
            int64_t bad = -1;
            for (int64_t j = 0; j < in && bad < 0; j++) {
                int64_t v = int_at(g, j);
                if (v < 0 || v >= groups) bad = j;
                else count[v]++;
            }
            for (int64_t k = 0; k < groups && bad < 0; k++)
                if (count[k] != (k + 1 < groups || in % s->group_size == 0 ? s->group_size : in % s->group_size))
                    bad = in + k;
            free(count);
            if (bad >= in)
                return lmp_fail(LMP_EINVAL, "%s: %s.weight_g_idx gives group %lld another number of columns than "
                                "the group size %lld", g->file, module, (long long)(bad - in), (long long)s->group_size);
            if (bad >= 0)
                return lmp_fail(LMP_EINVAL, "%s: %s.weight_g_idx[%lld] = %lld is not a group (0 to %lld)", g->file,
                                module, (long long)bad, (long long)int_at(g, bad), (long long)groups - 1);
            w->g_idx = g;
        }
    }
    size_t bytes = w->codes->nbytes + w->scale->nbytes + (w->zero ? w->zero->nbytes : 0) + (w->g_idx ? w->g_idx->nbytes : 0);
    w->bits = out * in > 0 ? 8.0 * (double)bytes / (double)(out * in) : 0;
    size_t k = (size_t)snprintf(w->kind, sizeof w->kind, "int%d-", s->bits);
    if (s->strategy == CT_GROUP) k += (size_t)snprintf(w->kind + k, sizeof w->kind - k, "g%lld", (long long)s->group_size);
    else k += (size_t)snprintf(w->kind + k, sizeof w->kind - k, "%s", s->strategy == CT_TENSOR ? "tensor" : "channel");
    if (!s->sym && k < sizeof w->kind) k += (size_t)snprintf(w->kind + k, sizeof w->kind - k, "-asym");
    if (w->g_idx && k < sizeof w->kind) k += (size_t)snprintf(w->kind + k, sizeof w->kind - k, "-actorder");
    if (s->act.mode != LMP_ACT_NONE && k < sizeof w->kind) snprintf(w->kind + k, sizeof w->kind - k, "-a%d", s->act.bits);
    return 0;
}

int lmp_ct_dequantize(const lmp_ct_weight *q, float *w)
{
    const ct_scheme *s = q->scheme;
    if (s->fp8) return dequantize_fp8(q, w);
    if (s->fp4) return dequantize_fp4(q, w);
    const int64_t out = q->out, in = q->in;
    const int64_t rows = s->strategy == CT_TENSOR ? 1 : out;
    const int64_t groups = s->strategy == CT_GROUP ? (in + s->group_size - 1) / s->group_size : 1;
    const int64_t words = (in * s->bits + 31) / 32, offset = (int64_t)1 << (s->bits - 1);
    float *scale = malloc((size_t)(rows * groups) * sizeof *scale), *zero = calloc((size_t)(rows * groups), sizeof *zero);
    int32_t *group = malloc((size_t)in * sizeof *group);
    int st = scale && zero && group ? 0 : lmp_fail(LMP_ENOMEM, "out of memory dequantizing %s", q->codes->name);
    if (!st) st = lmp_st_to_f32(q->scale, 0, rows * groups, scale);
    for (int64_t r = 0; !st && q->zero && r < rows; r++)
        for (int64_t k = 0; k < groups; k++) {
            if (q->zero_packed) { /* down the rows: row r's code at bit r * bits of column k's stream */
                const uint32_t u = code_at(q->zero, k, groups, r * s->bits, s->bits);
                zero[r * groups + k] = (float)((int64_t)u - offset);
            } else if (is_int(q->zero->dtype)) {
                zero[r * groups + k] = (float)int_at(q->zero, r * groups + k);
            } else {
                st = lmp_st_to_f32(q->zero, r * groups + k, 1, &zero[r * groups + k]);
            }
        }
    for (int64_t j = 0; !st && j < in; j++)
        group[j] = (int32_t)(q->g_idx ? int_at(q->g_idx, j) : s->strategy == CT_GROUP ? j / s->group_size : 0);
    for (int64_t o = 0; !st && o < out; o++) {
        const float *sr = scale + (s->strategy == CT_TENSOR ? 0 : o * groups);
        const float *zr = zero + (s->strategy == CT_TENSOR ? 0 : o * groups);
        float *wr = w + o * in;
        for (int64_t j = 0; j < in; j++) {
            int64_t code;
            if (s->packed) {
                code = (int64_t)code_at(q->codes, o * words, 1, j * s->bits, s->bits) - offset;
            } else {
                code = int_at(q->codes, o * in + j);
            }
            /* (q - zp) is a small integer, exact in f32; one rounding in the product */
            wr[j] = ((float)code - zr[group[j]]) * sr[group[j]];
        }
    }
    free(scale);
    free(zero);
    free(group);
    return st;
}

int lmp_ct_kv(const lmp_ct *ct, const lmp_safetensors *st, const char *where, const char *attn, int64_t n_kv_heads,
              lmp_kvspec *kv)
{
    memset(kv, 0, sizeof *kv);
    if (!ct || ct->kv.type == LMP_KV_NONE) return 0;
    *kv = ct->kv;
    const int64_t n = kv->per_head ? n_kv_heads : 1;
    if (n < 1 || n > LMP_KV_MAX_HEADS)
        return lmp_fail(LMP_EINVAL, "%s: per-head KV scales for %lld KV heads, more than the %d lmpress keeps", where,
                        (long long)n_kv_heads, LMP_KV_MAX_HEADS);
    for (int w = 0; w < 2; w++) {
        const char *leaf = w ? "v_scale" : "k_scale";
        const lmp_st_tensor *t = tensor(st, attn, leaf);
        char name[400];
        snprintf(name, sizeof name, "%s.%s", attn, leaf);
        if (!t) return lmp_fail(LMP_EINVAL, "%s: tensor %s is missing (" QC ".kv_cache_scheme needs it)", where, name);
        if (!is_float(t->dtype) || t->numel != n)
            return bad_tensor(t, n == 1 ? "one F32, F16 or BF16 value" : "F32, F16 or BF16 [n_kv_heads, 1, 1]");
        float *v = w ? kv->v_scale : kv->k_scale;
        int r = lmp_st_to_f32(t, 0, n, v);
        if (r) return r;
        for (int64_t h = 0; h < n; h++)
            if (!(v[h] > 0 && isfinite(v[h])))
                return lmp_fail(LMP_EINVAL, "%s: %s[%lld] = %g is not a positive scale", t->file, name, (long long)h,
                                (double)v[h]);
    }
    return 0;
}
