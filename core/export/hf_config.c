/* hf_config.c — config.json of a Hugging Face export (hf_plan.h): the source's own or one made
 * for the family (its class and model_type from core/arch), with torch_dtype, tie_word_embeddings,
 * the family's bias switches, compressed-tensors' quantization_config and lmpress's own record
 * (with an N:M pattern's structure and targets: no sparsity_config, which vLLM 0.24 refuses
 * whatever its format; README "N:M sparsity and vLLM").
 *
 * RoPE in a config made here: top-level rope_theta and rope_scaling (null, or {"rope_type":
 * "linear" | "yarn", ...}), transformers 4's form, which transformers 5 still reads (it moves
 * them into rope_parameters when it loads the config); rope_parameters alone would be ignored by
 * transformers 4.  export.c refuses what this form cannot say (llama3 from a GGUF's rope_freqs,
 * partial rotary).  A source's config.json in transformers 5's form (rope_parameters) is written
 * in the older form too, so that transformers 4 reads it right as well: rope_parameters.rope_theta
 * becomes rope_theta, partial_rotary_factor a top-level key, the rest rope_scaling (null for the
 * default rotation).  Per-layer-type parameters (nested objects) are copied as they are. */
#include <stdio.h>
#include <string.h>

#include "base/error.h"
#include "export/hf_plan.h"
#include "formats/gguf.h"
#include "formats/json_write.h"

/* ",\n  "key": " at nesting depth `depth` (the first member of an object has no comma). */
static void key(FILE *f, int *n, int depth, const char *k)
{
    if ((*n)++) fputc(',', f);
    lmp_jw_indent(f, depth);
    lmp_jw_string(f, k);
    fputs(": ", f);
}

static const char *torch_dtype(lmp_st_dtype d)
{
    return d == LMP_ST_BF16 ? "bfloat16" : d == LMP_ST_F16 ? "float16" : "float32";
}

/* The family's bias switches (hf_write.c's plan_biases): Llama has attention_bias and mlp_bias,
 * Qwen3, Gemma 1-3, GLM and GLM-4 attention_bias, Qwen2, Mistral and ERNIE 4.5 neither. */
static int has_attn_switch(const hf_plan *p)
{
    /* GPT-NeoX's attention_bias, StarCoder2's use_bias (hf_write.c's plan_biases) */
    if (p->desc->bias == LMP_BIAS_NEOX || p->desc->bias == LMP_BIAS_ALL_CONFIG || p->desc->bias == LMP_BIAS_ALL_FLAG)
        return 1; /* (Falcon's bias) */
    /* Phi-3: its modules take no bias; ChatGLM's query_key_value one on add_qkv_bias */
    if (p->desc->hf_fused_qkv && p->desc->bias != LMP_BIAS_QKV_CONFIG) return 0;
    if (!strcmp(p->desc->name, "ernie4_5")) return 0; /* use_bias, false (hf_write.c's plan_biases) */
    return p->desc->bias == LMP_BIAS_CONFIG ? strcmp(p->desc->name, "mistral") != 0
                                            : p->desc->bias == LMP_BIAS_ATTN_CONFIG || p->desc->bias == LMP_BIAS_QKV_CONFIG;
}

static int has_mlp_switch(const hf_plan *p)
{
    return p->desc->bias == LMP_BIAS_CONFIG && strcmp(p->desc->name, "mistral") != 0 &&
           strcmp(p->desc->name, "ernie4_5") != 0 && !(p->desc->flags & LMP_ARCH_GEGLU) && !p->desc->hf_fused_qkv;
}

/* The family's spelling of a Llama config key (arch.h's hf_key_names: StableLM's use_qkv_bias for
 * attention_bias, GPT-NeoX's rotary_pct for partial_rotary_factor), NULL when it has none. */
static const char *family_key(const hf_plan *p, const char *llama_key)
{
    for (int i = 0; p->desc->hf_key_names && p->desc->hf_key_names[i][0]; i++)
        if (!strcmp(p->desc->hf_key_names[i][0], llama_key)) return p->desc->hf_key_names[i][1];
    return NULL;
}

/* The attention's bias switch as the family spells it. */
static const char *attn_switch_key(const hf_plan *p)
{
    const char *k = family_key(p, "attention_bias");
    return k ? k : "attention_bias";
}

/* Members of the source's config.json this writer sets itself. */
static int replaced(const hf_plan *p, const char *k)
{
    static const char *const keys[] = {"quantization_config", "compression_config", "torch_dtype", "dtype",
                                       "tie_word_embeddings", "lmpress"};
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++)
        if (strcmp(k, keys[i]) == 0) return 1;
    return (has_attn_switch(p) && strcmp(k, attn_switch_key(p)) == 0) ||
           (has_mlp_switch(p) && strcmp(k, "mlp_bias") == 0);
}

/* bos and eos of a llama2.c vocabulary (1, 2) or a GGUF's metadata; -1 when unknown. */
static void special_ids(const lmp_model *m, int64_t *bos, int64_t *eos)
{
    *bos = *eos = -1;
    if (strncmp(m->format, "llama2.c", 8) == 0) {
        *bos = 1;
        *eos = 2;
    } else if (strncmp(m->format, "GGUF", 4) == 0) {
        lmp_gguf *g = NULL;
        if (lmp_gguf_open(m->path, &g) == 0) {
            if (lmp_gguf_get_int(g, "tokenizer.ggml.bos_token_id", bos) != 0) *bos = -1;
            if (lmp_gguf_get_int(g, "tokenizer.ggml.eos_token_id", eos) != 0) *eos = -1;
            lmp_gguf_close(g);
        }
        lmp_clear_error(); /* absent ids are not an error: the config just leaves them out */
    }
}

/* bos_token_id and eos_token_id where the source says them. */
static void special_id_keys(const hf_plan *p, FILE *f, int *n)
{
    int64_t bos, eos;
    special_ids(p->m, &bos, &eos);
    if (bos >= 0) {
        key(f, n, 1, "bos_token_id");
        fprintf(f, "%lld", (long long)bos);
    }
    if (eos >= 0) {
        key(f, n, 1, "eos_token_id");
        fprintf(f, "%lld", (long long)eos);
    }
}

/* GPT2Config's names: n_embd, n_head, n_layer, n_positions, n_inner; gelu_new is the tanh GELU
 * lmpress runs (transformers' NewGELUActivation). */
static void synthesized_gpt2(const hf_plan *p, FILE *f, int *n)
{
    const lmp_arch *a = &p->m->arch;
    const struct { const char *k; int64_t v; } ints[] = {
        {"n_embd", a->dim}, {"n_head", a->n_heads}, {"n_layer", a->n_layers}, {"n_positions", a->seq_len},
        {"n_ctx", a->seq_len}, {"n_inner", a->hidden}, {"vocab_size", a->vocab}};
    for (size_t i = 0; i < sizeof ints / sizeof *ints; i++) {
        key(f, n, 1, ints[i].k);
        fprintf(f, "%lld", (long long)ints[i].v);
    }
    key(f, n, 1, "activation_function");
    lmp_jw_string(f, "gelu_new");
    key(f, n, 1, "layer_norm_epsilon");
    lmp_jw_float(f, a->norm_eps);
    static const char *const zero[] = {"attn_pdrop", "embd_pdrop", "resid_pdrop"};
    for (size_t i = 0; i < sizeof zero / sizeof *zero; i++) {
        key(f, n, 1, zero[i]);
        fputs("0.0", f);
    }
    key(f, n, 1, "scale_attn_weights");
    fputs("true", f);
    key(f, n, 1, "use_cache");
    fputs("true", f);
    special_id_keys(p, f, n);
}

static void synthesized(const hf_plan *p, FILE *f, int *n)
{
    const lmp_arch *a = &p->m->arch;
    const lmp_arch_desc *d = p->desc;
    const lmp_rope *r = &a->rope;
    key(f, n, 1, "architectures");
    fputc('[', f);
    lmp_jw_string(f, d->hf_class);
    fputc(']', f);
    key(f, n, 1, "model_type");
    lmp_jw_string(f, d->hf_model_type);
    if (a->family == LMP_FAMILY_GPT2) {
        synthesized_gpt2(p, f, n);
        return;
    }
    const struct { const char *k; int64_t v; } ints[] = {
        {"hidden_size", a->dim},          {"intermediate_size", a->hidden},
        {"num_hidden_layers", a->n_layers}, {"num_attention_heads", a->n_heads},
        {"num_key_value_heads", a->n_kv_heads}, {"head_dim", a->head_dim},
        {"max_position_embeddings", a->seq_len}, {"vocab_size", a->vocab}};
    for (size_t i = 0; i < sizeof ints / sizeof *ints; i++) {
        key(f, n, 1, ints[i].k);
        fprintf(f, "%lld", (long long)ints[i].v);
    }
    const char *act = a->geglu ? "gelu_pytorch_tanh" : "silu";
    key(f, n, 1, "hidden_act");
    lmp_jw_string(f, act);
    if (a->geglu) { /* Gemma: transformers reads hidden_activation first */
        key(f, n, 1, "hidden_activation");
        lmp_jw_string(f, act);
    }
    key(f, n, 1, "rms_norm_eps");
    lmp_jw_float(f, a->norm_eps);
    key(f, n, 1, "rope_theta");
    lmp_jw_float(f, r->n_rot > 0 ? r->theta : a->rope_theta);
    key(f, n, 1, "rope_scaling");
    if (r->n_rot > 0 && !r->plain && (!strcmp(r->type, "linear") || !strcmp(r->type, "yarn"))) {
        int rn = 0;
        fputc('{', f);
        key(f, &rn, 2, "rope_type");
        lmp_jw_string(f, r->type);
        key(f, &rn, 2, "factor");
        lmp_jw_double(f, r->factor);
        if (!strcmp(r->type, "yarn")) { /* max_position_embeddings / this is the factor transformers uses */
            key(f, &rn, 2, "original_max_position_embeddings");
            fprintf(f, "%lld", (long long)r->orig_ctx);
        }
        lmp_jw_indent(f, 1);
        fputc('}', f);
    } else {
        fputs("null", f);
    }
    if (d->sliding == LMP_SLIDING_ALWAYS) { /* Mistral: a GGUF says no window, so there is none */
        key(f, n, 1, "sliding_window");
        fputs("null", f);
    } else if (d->sliding == LMP_SLIDING_FLAG) {
        key(f, n, 1, "use_sliding_window");
        fputs("false", f);
    }
    key(f, n, 1, "attention_dropout");
    fputs("0.0", f);
    key(f, n, 1, "initializer_range");
    fputs("0.02", f);
    if (!strcmp(d->name, "llama")) {
        key(f, n, 1, "pretraining_tp");
        fputs("1", f);
    }
    key(f, n, 1, "use_cache");
    fputs("true", f);
    special_id_keys(p, f, n);
}

/* QuantizationArgs of a weight scheme or of an input scheme. */
static void weight_args(FILE *f, const hf_scheme *sc, int depth)
{
    static const char *const strategy[] = {"tensor", "channel", "group", "block"};
    int n = 0;
    fputc('{', f);
    key(f, &n, depth + 1, "num_bits");
    fprintf(f, "%d", sc->bits);
    key(f, &n, depth + 1, "type");
    fputs(sc->wfmt == LMP_WFORMAT_INT ? "\"int\"" : "\"float\"", f);
    key(f, &n, depth + 1, "symmetric");
    fputs(sc->sym ? "true" : "false", f);
    key(f, &n, depth + 1, "strategy");
    lmp_jw_string(f, sc->wfmt == LMP_WFORMAT_NVFP4 ? "tensor_group" : strategy[sc->gran]);
    if (sc->wfmt == LMP_WFORMAT_NVFP4 || sc->wfmt == LMP_WFORMAT_MXFP4 || sc->wfmt == LMP_WFORMAT_MXFP8) {
        /* the presets NVFP4A16, MXFP4A16 and MXFP8A16 */
        key(f, &n, depth + 1, "scale_dtype");
        fputs(sc->wfmt == LMP_WFORMAT_NVFP4 ? "\"torch.float8_e4m3fn\"" : "\"torch.uint8\"", f);
    }
    key(f, &n, depth + 1, "group_size");
    if (sc->gran == LMP_GRAN_GROUP) fprintf(f, "%lld", (long long)sc->group);
    else fputs("null", f);
    if (sc->gran == LMP_GRAN_BLOCK) { /* FP8 tiles: the preset FP8_BLOCK's [128, 128] */
        key(f, &n, depth + 1, "block_structure");
        fprintf(f, "[%lld, %lld]", (long long)sc->group, (long long)sc->group);
    }
    key(f, &n, depth + 1, "dynamic");
    fputs("false", f);
    key(f, &n, depth + 1, "observer");
    fputs("\"minmax\"", f);
    if (sc->g_idx) {
        key(f, &n, depth + 1, "actorder");
        fputs("\"group\"", f);
    }
    lmp_jw_indent(f, depth);
    fputc('}', f);
}

/* The input's QuantizationArgs: int8 per token or per tensor; FP8 per token (dynamic) or per
 * tensor (static), as the presets FP8_DYNAMIC and FP8 (and W4AFP8) write them; NVFP4 (dynamic
 * local groups of 16) and MXFP4 (dynamic groups of 32), as NVFP4 and MXFP4 do. */
static void input_args(FILE *f, const hf_scheme *sc, int depth)
{
    const int dyn = sc->act == LMP_ACT_DYN_TOKEN || sc->act == LMP_ACT_FP8_DYN_TOKEN;
    const int fp4 = sc->act == LMP_ACT_NVFP4 || sc->act == LMP_ACT_MXFP4, fl = sc->act >= LMP_ACT_FP8_STATIC_TENSOR;
    int n = 0;
    fputc('{', f);
    key(f, &n, depth + 1, "num_bits");
    fputs(fp4 ? "4" : "8", f);
    key(f, &n, depth + 1, "type");
    fputs(fl ? "\"float\"" : "\"int\"", f);
    key(f, &n, depth + 1, "symmetric");
    fputs("true", f);
    key(f, &n, depth + 1, "strategy");
    fputs(sc->act == LMP_ACT_NVFP4 ? "\"tensor_group\"" : sc->act == LMP_ACT_MXFP4 ? "\"group\"" : dyn ? "\"token\"" : "\"tensor\"", f);
    key(f, &n, depth + 1, "group_size");
    fputs(sc->act == LMP_ACT_NVFP4 ? "16" : sc->act == LMP_ACT_MXFP4 ? "32" : "null", f);
    key(f, &n, depth + 1, "dynamic");
    fputs(sc->act == LMP_ACT_NVFP4 ? "\"local\"" : dyn || sc->act == LMP_ACT_MXFP4 ? "true" : "false", f);
    if (fp4) {
        key(f, &n, depth + 1, "scale_dtype");
        fputs(sc->act == LMP_ACT_NVFP4 ? "\"torch.float8_e4m3fn\"" : "\"torch.uint8\"", f);
    }
    key(f, &n, depth + 1, "observer");
    fputs(dyn || sc->act == LMP_ACT_MXFP4 ? "null" : fl ? "\"static_minmax\"" : "\"minmax\"", f);
    lmp_jw_indent(f, depth);
    fputc('}', f);
}

static const char *format_name(hf_fmt f)
{
    return f == HF_FMT_PACK    ? "pack-quantized"
           : f == HF_FMT_INT   ? "int-quantized"
           : f == HF_FMT_FLOAT ? "float-quantized"
           : f == HF_FMT_NVFP4 ? "nvfp4-pack-quantized"
           : f == HF_FMT_NAIVE ? "naive-quantized"
           : f == HF_FMT_MXFP8 ? "mxfp8-quantized"
                               : "mxfp4-pack-quantized";
}

static void quantization_config(const hf_plan *p, FILE *f)
{
    int n = 0, mixed = 0, n_dense = 0;
    for (int i = 1; i < p->n_schemes; i++) mixed |= p->schemes[i].fmt != p->schemes[0].fmt;
    fputc('{', f);
    key(f, &n, 2, "quant_method");
    fputs("\"compressed-tensors\"", f);
    key(f, &n, 2, "format");
    lmp_jw_string(f, p->n_schemes == 0 ? "dense" : mixed ? "mixed-precision" : format_name(p->schemes[0].fmt));
    key(f, &n, 2, "quantization_status");
    fputs("\"compressed\"", f);
    key(f, &n, 2, "global_compression_ratio");
    fputs("null", f);
    key(f, &n, 2, "kv_cache_scheme");
    if (p->kv.type == LMP_KV_NONE) {
        fputs("null", f);
    } else { /* as llm-compressor's recipes write it: static per tensor, observed by static_minmax */
        int kn = 0;
        fputc('{', f);
        key(f, &kn, 3, "num_bits");
        fputs(p->kv.type == LMP_KV_INT4 ? "4" : "8", f);
        key(f, &kn, 3, "type");
        fputs(p->kv.type == LMP_KV_FP8_E4M3 ? "\"float\"" : "\"int\"", f);
        key(f, &kn, 3, "symmetric");
        fputs("true", f);
        key(f, &kn, 3, "group_size");
        fputs("null", f);
        key(f, &kn, 3, "strategy");
        fputs(p->kv.per_head ? "\"attn_head\"" : "\"tensor\"", f);
        key(f, &kn, 3, "dynamic");
        fputs("false", f);
        key(f, &kn, 3, "observer");
        fputs("\"static_minmax\"", f);
        lmp_jw_indent(f, 2);
        fputc('}', f);
    }
    key(f, &n, 2, "config_groups");
    fputc('{', f);
    int ng = 0;
    for (int s = 0; s < p->n_schemes; s++) {
        const hf_scheme *sc = &p->schemes[s];
        char name[32];
        snprintf(name, sizeof name, "group_%d", s);
        key(f, &ng, 3, name);
        int gn = 0;
        fputc('{', f);
        key(f, &gn, 4, "targets");
        fputc('[', f);
        int nt = 0;
        for (int i = 0; i < p->n_lins; i++)
            if (p->lins[i].scheme == s && !p->lins[i].merged) {
                if (nt++) fputc(',', f);
                lmp_jw_indent(f, 5);
                lmp_jw_string(f, p->lins[i].name);
            }
        lmp_jw_indent(f, 4);
        fputc(']', f);
        key(f, &gn, 4, "weights");
        weight_args(f, sc, 4);
        key(f, &gn, 4, "input_activations");
        if (sc->act != LMP_ACT_NONE) input_args(f, sc, 4);
        else fputs("null", f);
        key(f, &gn, 4, "output_activations");
        fputs("null", f);
        if (mixed) { /* per-scheme formats are newer than the key itself: written only when needed */
            key(f, &gn, 4, "format");
            lmp_jw_string(f, format_name(sc->fmt));
        }
        lmp_jw_indent(f, 3);
        fputc('}', f);
    }
    if (ng) lmp_jw_indent(f, 2);
    fputc('}', f);
    key(f, &n, 2, "ignore");
    fputc('[', f);
    for (int i = 0; i < p->n_lins && p->n_schemes; i++) /* without groups nothing needs ignoring */
        if (p->lins[i].scheme < 0 && !p->lins[i].merged) {
            if (n_dense++) fputc(',', f);
            lmp_jw_indent(f, 3);
            lmp_jw_string(f, p->lins[i].name);
        }
    if (n_dense++) fputc(',', f);
    lmp_jw_indent(f, 3);
    lmp_jw_string(f, p->desc->hf_head ? p->desc->hf_head : "lm_head"); /* GPT-NeoX's embed_out */
    lmp_jw_indent(f, 2);
    fputc(']', f);
    lmp_jw_indent(f, 1);
    fputc('}', f);
}

/* Whether rope_parameters is one set of parameters (not one per layer type). */
static int flat_rope_parameters(const lmp_json *rp)
{
    if (!rp || rp->type != LMP_JSON_OBJECT) return 0;
    for (size_t i = 0; i < rp->n; i++)
        if (rp->items[i].type == LMP_JSON_OBJECT) return 0;
    return 1;
}

/* rope_parameters written as transformers 4's rope_theta, partial_rotary_factor, rope_scaling.
 * LongRoPE as transformers 4's Phi-3 reads it (and writes it): rope_scaling holds exactly "type",
 * short_factor and long_factor, original_max_position_embeddings is a top-level key. */
static void legacy_rope(const hf_plan *p, FILE *f, int *n, const lmp_json *rp, const lmp_json *cfg)
{
    const lmp_json *type = lmp_json_get(rp, "rope_type");
    const int longrope = type && type->type == LMP_JSON_STRING && !strcmp(type->str, "longrope");
    int others = 0;
    for (size_t i = 0; i < rp->n; i++) {
        const char *k = rp->keys[i];
        if (longrope && !strcmp(k, "original_max_position_embeddings")) {
            if (!lmp_json_get(cfg, k)) { /* (a top-level one wins in transformers 5 too) */
                key(f, n, 1, k);
                lmp_jw_tree(f, &rp->items[i], 1);
            }
            continue;
        }
        if (!strcmp(k, "rope_theta") || !strcmp(k, "partial_rotary_factor")) {
            key(f, n, 1, k);
            lmp_jw_tree(f, &rp->items[i], 1);
            /* and as transformers 4's class of the family reads it (GPT-NeoX: rotary_emb_base,
             * rotary_pct), unless the source says it there itself */
            const char *alias = family_key(p, k);
            if (alias && !lmp_json_get(cfg, alias)) {
                key(f, n, 1, alias);
                lmp_jw_tree(f, &rp->items[i], 1);
            }
        } else if (!strcmp(k, "rope_type") || !strcmp(k, "type")) {
            others += !(rp->items[i].type == LMP_JSON_STRING && !strcmp(rp->items[i].str, "default"));
        } else {
            others++;
        }
    }
    key(f, n, 1, "rope_scaling");
    if (!others) {
        fputs("null", f);
        return;
    }
    int sn = 0;
    fputc('{', f);
    for (size_t i = 0; i < rp->n; i++) {
        const char *k = rp->keys[i];
        if (!strcmp(k, "rope_theta") || !strcmp(k, "partial_rotary_factor")) continue;
        if (longrope && !strcmp(k, "original_max_position_embeddings")) continue;
        key(f, &sn, 2, longrope && !strcmp(k, "rope_type") ? "type" : k);
        lmp_jw_tree(f, &rp->items[i], 2);
    }
    lmp_jw_indent(f, 1);
    fputc('}', f);
}

static void opt_string(FILE *f, const char *s)
{
    if (s) lmp_jw_string(f, s);
    else fputs("null", f);
}

int hf_write_config(const hf_plan *p, FILE *f)
{
    int n = 0;
    fputc('{', f);
    int had_dtype = 0;
    if (p->src_config) {
        const lmp_json *c = p->src_config;
        const lmp_json *rp = lmp_json_get(c, "rope_parameters");
        const int legacy = flat_rope_parameters(rp);
        for (size_t i = 0; i < c->n; i++) {
            had_dtype |= strcmp(c->keys[i], "dtype") == 0;
            if (replaced(p, c->keys[i])) continue;
            if (legacy && !strcmp(c->keys[i], "rope_parameters")) {
                legacy_rope(p, f, &n, rp, c);
                continue;
            }
            /* (a top-level partial_rotary_factor beside rope_parameters: the one inside wins) */
            if (legacy && !strcmp(c->keys[i], "partial_rotary_factor") && lmp_json_get(rp, "partial_rotary_factor"))
                continue;
            key(f, &n, 1, c->keys[i]);
            lmp_jw_tree(f, &c->items[i], 1);
        }
    } else {
        synthesized(p, f, &n);
    }
    key(f, &n, 1, "tie_word_embeddings");
    fputs(p->m->lm_head == p->m->tok_emb ? "true" : "false", f);
    if (has_attn_switch(p)) {
        key(f, &n, 1, attn_switch_key(p));
        fputs(p->attn_bias ? "true" : "false", f);
    }
    if (has_mlp_switch(p)) {
        key(f, &n, 1, "mlp_bias");
        fputs(p->mlp_bias ? "true" : "false", f);
    }
    key(f, &n, 1, "torch_dtype");
    lmp_jw_string(f, torch_dtype(p->dtype));
    if (had_dtype) { /* transformers 5 writes "dtype"; keep the two in step */
        key(f, &n, 1, "dtype");
        lmp_jw_string(f, torch_dtype(p->dtype));
    }
    if (p->n_schemes || p->kv.type != LMP_KV_NONE) { /* N:M sparsity alone: no quantization_config (the weights are dense) */
        key(f, &n, 1, "quantization_config");
        quantization_config(p, f);
    }
    int ln = 0;
    key(f, &n, 1, "lmpress");
    fputc('{', f);
    key(f, &ln, 2, "version");
    lmp_jw_string(f, LMP_VERSION);
    key(f, &ln, 2, "variant");
    opt_string(f, p->o->variant);
    key(f, &ln, 2, "pipeline");
    opt_string(f, p->o->pipeline);
    key(f, &ln, 2, "config");
    opt_string(f, p->o->config_path);
    if (p->o->config_text) { /* the config itself: lmpress run reads it back to make this folder again */
        key(f, &ln, 2, "config_text");
        lmp_jw_string(f, p->o->config_text);
    }
    key(f, &ln, 2, "source");
    lmp_jw_string(f, p->m->path);
    key(f, &ln, 2, "source_format");
    lmp_jw_string(f, p->m->format);
    if (p->n_sparse) { /* not compressed-tensors' sparsity_config: README "N:M sparsity and vLLM" */
        int sn = 0;
        key(f, &ln, 2, "sparsity");
        fputc('{', f);
        key(f, &sn, 3, "structure");
        if (p->sparse_mixed) {
            fputs("\"unstructured\"", f);
        } else {
            char s[32];
            snprintf(s, sizeof s, "%d:%d", p->sparse_n, p->sparse_m);
            lmp_jw_string(f, s);
        }
        key(f, &sn, 3, "global_sparsity");
        lmp_jw_double(f, p->global_sparsity);
        key(f, &sn, 3, "targets");
        fputc('[', f);
        int nt = 0;
        for (int i = 0; i < p->n_lins; i++)
            if (p->lins[i].masked && !p->lins[i].merged) {
                if (nt++) fputc(',', f);
                lmp_jw_indent(f, 4);
                lmp_jw_string(f, p->lins[i].name);
            }
        lmp_jw_indent(f, 3);
        fputc(']', f);
        lmp_jw_indent(f, 2);
        fputc('}', f);
    }
    lmp_jw_indent(f, 1);
    fputc('}', f);
    fputs("\n}\n", f);
    return 0;
}
