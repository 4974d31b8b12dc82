/* cmd_quantize.c — see cmd_quantize.h.
 *
 * A preset is a config: quantize reads MODEL's header (names and shapes of its linears, no
 * weights), writes the config the preset stands for on that model, and runs it as `lmpress run
 * CONFIG --output OUT` would.  --print-config prints that config instead, so a one-liner grows
 * into a config (the same text goes into the output's metadata: GGUF lmpress.config_text,
 * config.json's lmpress.config_text).
 *
 * The llama.cpp presets follow llama-quantize's llama_tensor_get_type (llama.cpp
 * src/llama-quant.cpp) for the Llama block's families (no experts, no fused qkv): a base type,
 * bumps of attn_v / attn_output / ffn_down on some layers (use_more_bits: the first and last
 * eighth and every third layer between), the head (or a tied embedding) at Q6_K (Q8_0 for
 * Q8_0), an untied embedding at the base type; rows a k-quant does not divide fall back as
 * llama-quantize's do (lmp_wformat_fallback, in the plugins and the writer), and a linear whose
 * rows no block of its type divides stays unquantized (llama-quantize: F16; here F32). */
#include "cmd_quantize.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "base/error.h"
#include "base/suggest.h"
#include "export/export.h"
#include "model/model.h"

const char *const lmp_usage_quantize =
    "usage: lmpress quantize MODEL OUT PRESET [--method rtn|gptq|autoround] [--calib TEXT [--samples N]]\n"
    "                        [--imatrix FILE] [--eval TEXT] [--tokenizer FILE] [--backend NAME]\n"
    "                        [--print-config] [--allow-plugin DIR]... [--plugin-path DIR]...\n"
    "\n"
    "Compresses MODEL with PRESET and writes OUT: a GGUF file when OUT ends in .gguf (the llama.cpp\n"
    "presets), otherwise a Hugging Face folder with a compressed-tensors quantization_config (vLLM).\n"
    "It is `lmpress run` on the config the preset stands for on MODEL: --print-config prints that\n"
    "config and stops (`lmpress run CONFIG -o OUT` with it writes the same file; edit it to grow the\n"
    "one-liner, or add its variant to a compare).  The config is also stored in OUT (GGUF key\n"
    "lmpress.config_text; config.json's lmpress.config_text).  Every constraint of OUT is checked\n"
    "before the first block.  The export ends with the file's size and bits per weight.\n"
    "\n"
    "presets (case does not matter):\n"
    "  llama.cpp types and mixes, with llama-quantize's per-tensor recipe (attn_v, attn_output and\n"
    "  ffn_down bumped on the layers it bumps; the head at Q6_K, an untied embedding at the base\n"
    "  type; rows a k-quant does not divide fall back as llama-quantize's do): OUT is a .gguf\n"
    "    Q8_0  Q6_K  Q5_K_M  Q4_K_M  Q4_0  IQ4_NL  Q3_K_M  Q2_K\n"
    "  compressed-tensors schemes: OUT is a folder\n"
    "    W4A16       int4 weights, symmetric (all 16 levels: sym_scale full), groups of 128 (64 or\n"
    "                32 when 128 does not divide every linear's width: said), bf16 scales\n"
    "    W4A16-asym  the same with a zero point (asymmetric min-max)\n"
    "    W8A8        int8 weights per channel (symmetric, full) and int8 activations, dynamic per token\n"
    "    FP8         FP8 E4M3 weights per channel (bf16 scales), FP8 activations dynamic per token\n"
    "                (llm-compressor's FP8_DYNAMIC; also spelled W8A8-FP8, FP8-dynamic)\n"
    "    W4AFP8      int4 weights in groups of 128 (as W4A16) and FP8 activations dynamic per token\n"
    "    NVFP4A16    NVFP4 weights (E2M1, groups of 16, E4M3 scales, a global scale per tensor)\n"
    "    NVFP4       NVFP4 weights and activations (W4A4; the inputs' global scales need --calib)\n"
    "    MXFP4A16    MXFP4 weights (E2M1, groups of 32, E8M0 scales)\n"
    "    MXFP4       MXFP4 weights and activations (dynamic)\n"
    "  not yet: MXFP8, and FP8_BLOCK (issue 38): its inputs are FP8 per group of 128, which lmpress\n"
    "  does not simulate; FP8 weights in 128x128 blocks alone are a config's stage\n"
    "  (format = \"fp8_e4m3\"; granularity = \"block\"; group_size = 128;)\n"
    "\n"
    "--method: rtn, gptq or autoround (awq: not yet, issue 39).  Default: gptq when --calib is\n"
    "given, else rtn.  Why (docs/results.md, SmolLM2-135M): with calibration text GPTQ (act-order,\n"
    "static groups, and for GGUF types llama-quantize's importance search on the calibration's\n"
    "statistics) gave the lowest KL divergence at every GGUF size measured, below llama-quantize's\n"
    "own imatrix files (Q4_K_M's recipe 0.0240 against 0.0357; IQ4_NL 0.080 against 0.100), and\n"
    "W4 g128 0.225 against RTN's 0.411; AutoRound is lower still at W4 g128 (0.203) but took about\n"
    "20x GPTQ's time, so it is asked for by name.  Without text there are no statistics: RTN, which\n"
    "on a GGUF type is llama-quantize's own quantizer (byte for byte for Q8_0 and IQ4_NL).\n"
    "--calib TEXT: calibration text, cut into --samples windows (default 16) of 512 tokens (or the\n"
    "model's context).  --imatrix FILE: llama.cpp's importance matrix (llama-imatrix) for the GGUF\n"
    "types' scale search, as llama-quantize --imatrix uses it (no calibration run with rtn).\n"
    "--eval TEXT: also measure the result against MODEL on TEXT (perplexity, KL divergence, top-1);\n"
    "by default nothing is evaluated.  --tokenizer FILE: for a llama2.c MODEL.  --backend NAME: the\n"
    "compute backend (default cpu).  docs/quantize.md has the recipes and the measured sizes.\n";

/* ---- presets ----------------------------------------------------------------------------------- */

typedef enum { P_Q8_0, P_Q6_K, P_Q5_K_M, P_Q4_K_M, P_Q4_0, P_IQ4_NL, P_Q3_K_M, P_Q2_K, P_W8A8, P_W4A16, P_W4A16_ASYM,
               P_FP8, P_W4AFP8, P_NVFP4A16, P_NVFP4, P_MXFP4A16, P_MXFP4, P_COUNT } preset_id;

static const char *const preset_names[P_COUNT] = {"Q8_0",   "Q6_K",   "Q5_K_M",   "Q4_K_M", "Q4_0",     "IQ4_NL",
                                                  "Q3_K_M", "Q2_K",   "W8A8",     "W4A16",  "W4A16-asym", "FP8",
                                                  "W4AFP8", "NVFP4A16", "NVFP4",  "MXFP4A16", "MXFP4"};
/* the llama.cpp presets' base type; NULL for the compressed-tensors ones */
static const char *const preset_base[P_COUNT] = {"q8_0", "q6_k", "q5_k", "q4_k", "q4_0", "iq4_nl", "q3_k", "q2_k",
                                                 NULL,   NULL,   NULL,   NULL,   NULL,   NULL,     NULL,   NULL, NULL};
/* other spellings of a preset (llm-compressor's and the names) */
static const struct { const char *name; preset_id p; } aliases[] = {
    {"W8A8-FP8", P_FP8}, {"FP8-dynamic", P_FP8}, {"FP8_DYNAMIC", P_FP8}, {"W4A4", P_NVFP4}, {NULL, P_COUNT}};
/* named by users, refused with the issue that will bring them */
static const char *const later_names[] = {"MXFP8", "FP8-block", "FP8_BLOCK", NULL};

/* The floating-point grid a compressed-tensors preset puts the weights on, and the input's
 * mode; NULL / NULL for the int ones. */
static const char *preset_format(preset_id p)
{
    return p == P_FP8 ? "fp8_e4m3" : p == P_NVFP4A16 || p == P_NVFP4 ? "nvfp4" : p == P_MXFP4A16 || p == P_MXFP4 ? "mxfp4" : NULL;
}

static const char *preset_act(preset_id p)
{
    return p == P_W8A8 ? "dynamic_token" : p == P_FP8 || p == P_W4AFP8 ? "fp8_dynamic_token" : p == P_NVFP4 ? "nvfp4"
           : p == P_MXFP4 ? "mxfp4" : NULL;
}

static int is_gguf_preset(preset_id p) { return preset_base[p] != NULL; }

/* llama.cpp's use_more_bits: the first and last eighth of the layers, and every third between. */
static int more_bits(int64_t i, int64_t n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

/* The type llama-quantize's recipe gives linear `role` of layer i of n (before the fallback for
 * rows a k-quant does not divide).  n_gqa: query heads per key/value head; imat: an importance
 * matrix (or lmpress's calibration statistics) is used. */
static const char *recipe_type(preset_id p, lmp_role role, int64_t i, int64_t n, int64_t n_gqa, int imat)
{
    const char *base = preset_base[p];
    switch (p) {
    case P_Q5_K_M:
    case P_Q4_K_M:
        if ((role == LMP_ROLE_V || role == LMP_ROLE_DOWN) && more_bits(i, n)) return "q6_k";
        return base;
    case P_Q4_0:
        return role == LMP_ROLE_DOWN && imat && i < n / 8 ? "q4_1" : base;
    case P_IQ4_NL:
        if (role == LMP_ROLE_V && n_gqa >= 4) return "q5_k";
        if (role == LMP_ROLE_DOWN && !imat && i < n / 8) return "q5_k";
        return base;
    case P_Q3_K_M:
        if (role == LMP_ROLE_V) return i < 2 ? "q5_k" : "q4_k";
        if (role == LMP_ROLE_DOWN) return i < n / 16 ? "q5_k" : "q4_k";
        if (role == LMP_ROLE_O) return "q4_k";
        return base;
    case P_Q2_K:
        if (role == LMP_ROLE_V) return n_gqa >= 4 ? "q4_k" : "q3_k";
        if (role == LMP_ROLE_DOWN || role == LMP_ROLE_O) return "q3_k";
        return base;
    default:
        return base;
    }
}

/* The GGUF format a format name means, after llama-quantize's fallback on rows `cols` wide;
 * INT (0) when no block of it divides the rows. */
static lmp_wformat fitted_format(const char *name, int64_t cols)
{
    for (int f = 1; f < LMP_WFORMAT_NF4; f++)
        if (strcmp(lmp_wformat_name((lmp_wformat)f), name) == 0) {
            const lmp_wformat g = lmp_wformat_fallback((lmp_wformat)f, cols);
            return cols % lmp_wformat_span(g) ? LMP_WFORMAT_INT : g;
        }
    return LMP_WFORMAT_INT;
}

/* ---- the config text --------------------------------------------------------------------------- */

typedef struct text {
    char *s;
    size_t len, cap;
    int oom;
} text;

static void add(text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add(text *t, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || t->oom) return;
    if (t->len + (size_t)n + 1 > t->cap) {
        size_t cap = (t->cap ? t->cap * 2 : 4096) + (size_t)n;
        char *s = realloc(t->s, cap);
        if (!s) {
            t->oom = 1;
            return;
        }
        t->s = s, t->cap = cap;
    }
    va_start(ap, fmt);
    vsnprintf(t->s + t->len, t->cap - t->len, fmt, ap);
    va_end(ap);
    t->len += (size_t)n;
}

/* A libconfig string: quotes and backslashes escaped. */
static void add_string(text *t, const char *s)
{
    add(t, "\"");
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') add(t, "\\%c", *s);
        else if ((unsigned char)*s < 0x20) add(t, "\\x%02x", (unsigned char)*s);
        else add(t, "%c", *s);
    }
    add(t, "\"");
}

/* A file's absolute path (the config may be read from anywhere), or the path as given. */
static void add_path(text *t, const char *path)
{
    char abs[PATH_MAX];
    add_string(t, realpath(path, abs) ? abs : path);
}

/* One linear of the model: its name, layer and the format the recipe gives it. */
typedef struct lin {
    char name[128];
    int64_t layer, in;
    lmp_wformat format; /* INT: left unquantized (no block of its type divides its rows) */
} lin;

/* A regex character class for a name's punctuation, so no backslash goes through libconfig. */
static void add_regex_literal(text *t, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const char c = s[i];
        if (isalnum((unsigned char)c) || c == '_' || c == '-') add(t, "%c", c);
        else add(t, "[%c]", c);
    }
}

/* "re:^model[.]layers[.](0|1|2)[.](self_attn[.]v_proj|mlp[.]down_proj)$": the linears of lins[]
 * picked by pick[], written as layers x tails when they are the same tails on every layer they
 * have, else listed whole. */
static void add_pattern(text *t, const lin *lins, int n, const unsigned char *pick)
{
    /* the common prefix "....layers." and each linear's tail after its layer number */
    const char *first = NULL;
    for (int i = 0; i < n && !first; i++)
        if (pick[i]) first = lins[i].name;
    const char *at = strstr(first, "layers.");
    size_t prefix = at ? (size_t)(at - first) + 7 : 0;
    int same = at != NULL;
    for (int i = 0; i < n && same; i++)
        if (pick[i]) same = strncmp(lins[i].name, first, prefix) == 0 && isdigit((unsigned char)lins[i].name[prefix]);
    add(t, "\"re:^");
    if (!same) { /* whole names */
        add(t, "(");
        for (int i = 0, k = 0; i < n; i++)
            if (pick[i]) {
                add(t, "%s", k++ ? "|" : "");
                add_regex_literal(t, lins[i].name, strlen(lins[i].name));
            }
        add(t, ")$\"");
        return;
    }
    add_regex_literal(t, first, prefix);
    add(t, "(");
    int64_t last = -1;
    for (int i = 0, k = 0; i < n; i++)
        if (pick[i] && lins[i].layer != last) add(t, "%s%lld", k++ ? "|" : "", (long long)(last = lins[i].layer));
    add(t, ")[.](");
    /* distinct tails, in first-seen order */
    for (int i = 0, k = 0; i < n; i++) {
        if (!pick[i]) continue;
        const char *tail = strchr(lins[i].name + prefix, '.');
        tail = tail ? tail + 1 : "";
        int seen = 0;
        for (int j = 0; j < i && !seen; j++) {
            if (!pick[j]) continue;
            const char *u = strchr(lins[j].name + prefix, '.');
            seen = u && strcmp(u + 1, tail) == 0;
        }
        if (seen) continue;
        add(t, "%s", k++ ? "|" : "");
        add_regex_literal(t, tail, strlen(tail));
    }
    add(t, ")$\"");
}

typedef struct quantize_opts {
    const char *model, *out, *tokenizer, *method, *calib, *imatrix, *eval, *backend;
    int64_t samples;
    preset_id preset;
    char **argv_line; /* the command as given, for the config's comment */
    int argc_line;
} quantize_opts;

/* The stage's parameters the method adds: the solver's choices as the measured best (act-order
 * with static groups, which compressed-tensors and GGUF both store without g_idx). */
static void add_method_params(text *t, const quantize_opts *o)
{
    if (!strcmp(o->method, "gptq")) add(t, " act_order = true; static_groups = true;");
}

/* The importance of the GGUF types' scale search, from what the user gave. */
static const char *importance_of(const quantize_opts *o)
{
    if (o->preset == P_Q8_0) return NULL; /* ggml's Q8_0 takes none */
    if (o->imatrix) return "imatrix";
    if (o->calib) return "calibration";
    return NULL;
}

/* Writes the config of the preset on model m into t. */
static int build_config(const quantize_opts *o, const lmp_model *m, text *t)
{
    const lmp_arch *a = &m->arch;
    const int64_t n = a->n_layers, n_gqa = a->n_kv_heads > 0 ? a->n_heads / a->n_kv_heads : 1;
    const int gguf = is_gguf_preset(o->preset), imat = o->imatrix || o->calib;
    int n_lins = 0;
    if (a->n_experts > 0) /* its presets and the exporters do not cover experts yet (issue 37) */
        return lmp_fail(LMP_EUNSUPPORTED, "%s: quantize does not handle a mixture of experts (%lld experts) yet",
                        m->path, (long long)a->n_experts);
    lin *lins = calloc((size_t)(n * LMP_ROLE_COUNT * 2) + 1, sizeof *lins);
    if (!lins) return lmp_fail(LMP_ENOMEM, "out of memory");
    int64_t min_group = 128; /* W4A16: the group every linear's width takes */
    for (int64_t b = 0; b < n; b++) {
        lmp_block blk;
        int st = lmp_block_init(&blk, (int)b, a);
        for (int i = 0; !st && i < blk.n_linears; i++) {
            const lmp_linear *l = &blk.linears[i];
            lin *x = &lins[n_lins++];
            snprintf(x->name, sizeof x->name, "%s", l->name);
            x->layer = b;
            x->in = l->in;
            if (gguf) x->format = fitted_format(recipe_type(o->preset, l->role, b, n, n_gqa, imat), l->in);
            while (!gguf && min_group >= 32 && l->in % min_group) min_group /= 2;
        }
        lmp_block_free_tables(&blk);
        if (st) {
            free(lins);
            return st;
        }
    }
    const int int4 = o->preset == P_W4A16 || o->preset == P_W4A16_ASYM || o->preset == P_W4AFP8;
    const int64_t fp_group = preset_format(o->preset) && strcmp(preset_format(o->preset), "nvfp4") == 0 ? 16
                             : preset_format(o->preset) && strcmp(preset_format(o->preset), "mxfp4") == 0 ? 32 : 1;
    if (o->preset == P_NVFP4 && !o->calib) {
        free(lins);
        return lmp_fail(LMP_EINVAL, "NVFP4 (W4A4): the inputs' global scales come from calibration: give --calib TEXT "
                        "(or use NVFP4A16, weights only)");
    }
    for (int i = 0; i < n_lins; i++)
        if (lins[i].in % fp_group) {
            const int st = lmp_fail(LMP_EUNSUPPORTED, "%s: %s puts every linear in groups of %lld inputs; %s has %lld",
                                    o->model, preset_names[o->preset], (long long)fp_group, lins[i].name,
                                    (long long)lins[i].in);
            free(lins);
            return st;
        }
    if (int4 && min_group < 128 && min_group >= 32)
        fprintf(stderr, "lmpress: note: %s: groups of %lld, not 128: 128 does not divide every linear's width (vLLM "
                "and compressed-tensors take no shorter last group)\n", preset_names[o->preset], (long long)min_group);
    if (int4 && min_group < 32) {
        free(lins);
        return lmp_fail(LMP_EUNSUPPORTED, "%s: %s needs every linear's width to be a multiple of 32 (groups that "
                        "divide it: vLLM takes no shorter last group)", o->model, preset_names[o->preset]);
    }

    add(t, "# lmpress quantize");
    for (int i = 0; i < o->argc_line; i++) /* --print-config left out: the text is the same either way */
        if (strcmp(o->argv_line[i], "--print-config") != 0) add(t, " %s", o->argv_line[i]);
    add(t, "\n# The config of preset %s on this model (lmpress quantize --print-config); `lmpress run THIS\n"
           "# --output %s` writes the same file.\n", preset_names[o->preset], gguf ? "X.gguf" : "DIR");
    if (gguf)
        add(t, "# llama-quantize's %s recipe (llama.cpp src/llama-quant.cpp, llama_tensor_get_type): base type %s;\n"
               "# the overrides are its per-tensor bumps; a k-quant falls back on rows it does not divide.\n",
            preset_names[o->preset], preset_base[o->preset]);
    else if (o->preset == P_W8A8)
        add(t, "# compressed-tensors W8A8 (int8): weights per channel, activations dynamic per token.\n");
    else if (preset_format(o->preset))
        add(t, "# compressed-tensors %s: %s weights%s%s (as compressed-tensors rounds them).\n", preset_names[o->preset],
            preset_format(o->preset), preset_act(o->preset) ? ", inputs " : "", preset_act(o->preset) ? preset_act(o->preset) : "");
    else if (o->preset == P_W4AFP8)
        add(t, "# compressed-tensors W4AFP8: int4 weights in groups of %lld, bf16 scales, FP8 inputs per token.\n",
            (long long)min_group);
    else
        add(t, "# compressed-tensors W4A16%s: int4 weights in groups of %lld, bf16 scales.\n",
            o->preset == P_W4A16_ASYM ? " (asymmetric, zero points)" : " (symmetric)", (long long)min_group);
    add(t, "model = { path = ");
    add_path(t, o->model);
    if (o->tokenizer) {
        add(t, "; tokenizer = ");
        add_path(t, o->tokenizer);
    }
    add(t, "; };\nbackend = { name = ");
    add_string(t, o->backend ? o->backend : "cpu");
    add(t, "; };\n");
    const int64_t seq = a->seq_len < 512 ? a->seq_len : 512;
    if (o->calib) {
        add(t, "calibration = { text = ");
        add_path(t, o->calib);
        add(t, "; samples = %lld; seq_len = %lld; sampling = \"sequential\"; };\n", (long long)o->samples,
            (long long)seq);
    }
    if (o->eval) {
        add(t, "eval = { texts = [ ");
        add_path(t, o->eval);
        add(t, " ]; seq_len = %lld; };\n", (long long)seq);
    }
    if (o->imatrix) {
        add(t, "imatrix = ");
        add_path(t, o->imatrix);
        add(t, ";\n");
    }
    if (gguf) { /* llama-quantize's head: Q6_K (Q8_0 for Q8_0); an untied embedding: the base type */
        const char *head = o->preset == P_Q8_0 ? "q8_0" : "q6_k";
        const int tied = m->lm_head == m->tok_emb;
        add(t, "export = { embedding_type = \"%s\";", tied ? head : preset_base[o->preset]);
        if (!tied) add(t, " output_type = \"%s\";", head);
        add(t, " };\n");
    }
    add(t, "seed = 1234;\n");
    add(t, "variants = (\n  { name = \"%s\";\n    pipeline = ( { strategy = \"%s\";\n                   params = {",
        preset_names[o->preset], o->method);
    const char *const pformat = preset_format(o->preset);
    if (gguf) {
        add(t, " format = \"%s\";", preset_base[o->preset]);
        const char *imp = importance_of(o);
        if (imp) add(t, " importance = \"%s\";", imp);
    } else if (o->preset == P_W8A8) {
        add(t, " bits = 8; sym = true; sym_scale = \"full\"; granularity = \"channel\"; scale_dtype = \"bf16\";");
    } else if (pformat) {
        add(t, " format = \"%s\";", pformat);
        if (o->preset == P_FP8) add(t, " granularity = \"channel\"; scale_dtype = \"bf16\";");
    } else {
        add(t, " bits = 4; sym = %s;%s granularity = \"group\"; group_size = %lld; scale_dtype = \"bf16\";",
            o->preset == P_W4A16_ASYM ? "false" : "true", o->preset == P_W4A16_ASYM ? "" : " sym_scale = \"full\";",
            (long long)min_group);
    }
    if (preset_act(o->preset) && !strcmp(o->method, "rtn")) add(t, " act = \"%s\";", preset_act(o->preset));
    add_method_params(t, o);
    add(t, " };");
    if (gguf) {
        unsigned char *pick = calloc((size_t)n_lins + 1, 1);
        if (!pick) {
            free(lins);
            return lmp_fail(LMP_ENOMEM, "out of memory");
        }
        /* left unquantized: rows no block of their type divides (llama-quantize: F16) */
        int any = 0;
        for (int i = 0; i < n_lins; i++) any |= pick[i] = lins[i].format == LMP_WFORMAT_INT;
        if (any) {
            add(t, "\n                   ignore = [ ");
            add_pattern(t, lins, n_lins, pick);
            add(t, " ];");
        }
        /* the bumps: one override per format other than the base's own (after the fallback, which
         * the stage applies itself: compare a linear's format with what the base becomes there) */
        int n_over = 0;
        for (int f = 1; f < LMP_WFORMAT_NF4; f++) {
            any = 0;
            for (int i = 0; i < n_lins; i++) {
                pick[i] = lins[i].format == (lmp_wformat)f && fitted_format(preset_base[o->preset], lins[i].in) != (lmp_wformat)f;
                any |= pick[i];
            }
            if (!any) continue;
            add(t, "%s{ match = ", n_over++ ? ",\n                                 " : "\n                   overrides = ( ");
            add_pattern(t, lins, n_lins, pick);
            add(t, "; params = { format = \"%s\"; }; }", lmp_wformat_name((lmp_wformat)f));
        }
        if (n_over) add(t, " );");
        free(pick);
    }
    add(t, " }");
    if (preset_act(o->preset) && strcmp(o->method, "rtn") != 0) /* the solver has no activations: rtn adds them */
        add(t, ",\n                 { strategy = \"rtn\"; params = { weights = false; act = \"%s\"; }; }",
            preset_act(o->preset));
    add(t, " );\n  }\n);\n");
    free(lins);
    return t->oom ? lmp_fail(LMP_ENOMEM, "out of memory") : 0;
}

/* ---- the command ------------------------------------------------------------------------------- */

static int usage_error(const char *fmt, const char *arg)
{
    fprintf(stderr, "lmpress: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "; see 'lmpress quantize --help'\n");
    return 2;
}

static const char *const options[] = {"--method", "--calib", "--samples", "--imatrix", "--eval", "--tokenizer",
                                      "--backend", "--print-config", "--allow-plugin", "--plugin-path", "--help",
                                      NULL};

/* The preset named (case-insensitive); -1 after a usage error naming the nearest. */
static int find_preset(const char *name)
{
    for (int p = 0; p < P_COUNT; p++)
        if (!strcasecmp(name, preset_names[p])) return p;
    for (int k = 0; aliases[k].name; k++)
        if (!strcasecmp(name, aliases[k].name)) return aliases[k].p;
    for (int k = 0; later_names[k]; k++)
        if (!strcasecmp(name, later_names[k])) {
            fprintf(stderr, "lmpress: preset %s: not yet (MXFP8, and FP8_BLOCK's FP8 inputs per group of 128: issue 38; "
                            "FP8 weights in 128x128 blocks alone: a config stage with format = \"fp8_e4m3\"; granularity = "
                            "\"block\";); the presets now: "
                            "Q8_0 Q6_K Q5_K_M Q4_K_M Q4_0 IQ4_NL Q3_K_M Q2_K W8A8 W4A16 W4A16-asym FP8 W4AFP8 NVFP4A16 "
                            "NVFP4 MXFP4A16 MXFP4\n", name);
            return -1;
        }
    const char *best = lmp_suggest(name, preset_names, P_COUNT);
    char msg[256];
    snprintf(msg, sizeof msg, "unknown preset %%s%s%s%s (presets: Q8_0 Q6_K Q5_K_M Q4_K_M Q4_0 IQ4_NL Q3_K_M Q2_K W8A8 "
             "W4A16 W4A16-asym FP8 W4AFP8 NVFP4A16 NVFP4 MXFP4A16 MXFP4)", best ? " (did you mean " : "", best ? best : "",
             best ? "?)" : "");
    usage_error(msg, name);
    return -1;
}

/* The config into a temporary folder (TMPDIR or /tmp) as lmpress-quantize.cfg, its name the
 * one the metadata keeps (lmpress.config). */
static int write_temp_config(const text *t, char *dir, size_t dn, char *path, size_t pn)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, dn, "%s/lmpress-quantize-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) return lmp_fail(LMP_EIO, "%s: cannot make a temporary folder: %s", dir, strerror(errno));
    snprintf(path, pn, "%s/lmpress-quantize.cfg", dir);
    FILE *f = fopen(path, "w");
    int st = f ? 0 : lmp_fail(LMP_EIO, "%s: %s", path, strerror(errno));
    if (f && (fwrite(t->s, 1, t->len, f) != t->len || fclose(f) != 0))
        st = lmp_fail(LMP_EIO, "%s: write failed: %s", path, strerror(errno));
    if (st) {
        unlink(path);
        rmdir(dir);
    }
    return st;
}

int lmp_cmd_quantize(lmp_ctx *ctx, int argc, char **argv, int64_t threads, lmp_cli_run_fn run)
{
    quantize_opts o = {.samples = 16, .argv_line = argv, .argc_line = argc};
    const char *pos[3] = {NULL, NULL, NULL};
    int n_pos = 0, print_config = 0;
    enum { MAX_TRUST = 32 };
    char *trust[2 * MAX_TRUST];
    int n_trust = 0;
    for (int i = 0; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(lmp_usage_quantize, stdout);
            return 0;
        }
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        const char **value = !strcmp(a, "--method")      ? &o.method
                             : !strcmp(a, "--calib")     ? &o.calib
                             : !strcmp(a, "--imatrix")   ? &o.imatrix
                             : !strcmp(a, "--eval")      ? &o.eval
                             : !strcmp(a, "--tokenizer") ? &o.tokenizer
                             : !strcmp(a, "--backend")   ? &o.backend
                                                         : NULL;
        const int is_trust = !strcmp(a, "--allow-plugin") || !strcmp(a, "--plugin-path");
        if ((value || is_trust || !strcmp(a, "--samples")) && i + 1 >= argc)
            return usage_error("option %s needs a value", a);
        if (value) *value = argv[++i];
        else if (is_trust) {
            if (n_trust == 2 * MAX_TRUST) return usage_error("more than %s --allow-plugin/--plugin-path", "32");
            trust[n_trust++] = argv[i];
            trust[n_trust++] = argv[++i];
        } else if (!strcmp(a, "--samples")) {
            char *end;
            errno = 0;
            long long v = strtoll(argv[++i], &end, 10);
            if (errno || *end || end == argv[i] || v < 1 || v > (1 << 20))
                return usage_error("--samples wants an integer from 1 to 1048576, not \"%s\"", argv[i]);
            o.samples = v;
        } else if (!strcmp(a, "--print-config")) print_config = 1;
        else if (a[0] == '-' && a[1]) {
            const char *near = lmp_suggest(a, options, sizeof options / sizeof *options - 1);
            char msg[160];
            snprintf(msg, sizeof msg, "unknown option %%s%s%s%s", near ? " (did you mean " : "", near ? near : "",
                     near ? "?)" : "");
            return usage_error(msg, a);
        } else if (n_pos == 3) return usage_error("unexpected argument %s (MODEL OUT PRESET are given)", a);
        else pos[n_pos++] = a;
    }
    if (n_pos < 3) return usage_error("%s", "MODEL, OUT and PRESET are required: lmpress quantize MODEL OUT PRESET");
    o.model = pos[0], o.out = pos[1];
    const int p = find_preset(pos[2]);
    if (p < 0) return 2;
    o.preset = (preset_id)p;
    static const char *const methods[] = {"rtn", "gptq", "autoround", "awq", NULL};
    if (!o.method) o.method = o.calib ? "gptq" : "rtn";
    int known = 0;
    for (int k = 0; methods[k]; k++) known |= !strcmp(o.method, methods[k]);
    if (!known) {
        const char *near = lmp_suggest(o.method, methods, 4);
        char msg[160];
        snprintf(msg, sizeof msg, "--method %%s: expected rtn, gptq or autoround%s%s%s", near ? " (did you mean " : "",
                 near ? near : "", near ? "?)" : "");
        return usage_error(msg, o.method);
    }
    if (!strcmp(o.method, "awq"))
        return usage_error("--method %s: not yet (AWQ comes with issue 39); use gptq (with --calib) or rtn", o.method);
    if (strcmp(o.method, "rtn") != 0 && !o.calib)
        return usage_error("--method %s learns from calibration text: give --calib TEXT", o.method);
    if (o.imatrix && !is_gguf_preset(o.preset))
        return usage_error("--imatrix goes with the GGUF presets (it weights their scale search), not %s",
                           preset_names[o.preset]);
    const int out_gguf = lmp_export_is_gguf(o.out);
    if (is_gguf_preset(o.preset) && !out_gguf)
        return usage_error("%s is a llama.cpp type: OUT must be a .gguf file", preset_names[o.preset]);
    if (!is_gguf_preset(o.preset) && out_gguf)
        return usage_error("%s is a compressed-tensors scheme: OUT must be a folder (not .gguf)", preset_names[o.preset]);

    lmp_model *m = NULL;
    text t = {0};
    int st = lmp_model_load(o.model, &m);
    if (!st) st = build_config(&o, m, &t);
    lmp_model_free(m);
    if (st) {
        free(t.s);
        fprintf(stderr, "lmpress: error: %s\n", lmp_last_error());
        return 1;
    }
    if (print_config) {
        fwrite(t.s, 1, t.len, stdout);
        free(t.s);
        return 0;
    }
    char dir[PATH_MAX], cfg[PATH_MAX + 32];
    if ((st = write_temp_config(&t, dir, sizeof dir, cfg, sizeof cfg))) {
        free(t.s);
        fprintf(stderr, "lmpress: error: %s\n", lmp_last_error());
        return 1;
    }
    free(t.s);
    /* lmpress run CONFIG --output OUT [trust options] */
    char **args = calloc((size_t)n_trust + 4, sizeof *args);
    int rc = 1;
    if (args) {
        int k = 0;
        args[k++] = cfg;
        args[k++] = "--output";
        args[k++] = (char *)o.out;
        for (int i = 0; i < n_trust; i++) args[k++] = trust[i];
        rc = run(ctx, k, args, 1, threads);
    } else {
        fprintf(stderr, "lmpress: error: out of memory\n");
    }
    free(args);
    unlink(cfg);
    rmdir(dir);
    return rc;
}
