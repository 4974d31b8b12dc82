/* config.h — a run described by a libconfig file, validated before any weight is read.
 *
 *   plugins     = { search_path = [...]; strategies = [...]; backends = [...]; };  (optional)
 *   backend     = { name = "cpu"; params = { ... }; };                             (optional)
 *   model       = { path = "..."; tokenizer = "..."; };
 *   calibration = { text = "..."; samples = 32; seq_len = 256; sampling = "sequential";
 *                   inputs = "compressed"; };        (inputs: see lmp_calib_inputs)
 *   eval        = { texts = [ "...", ... ]; seq_len = 256; max_windows = 0;
 *                   compute = "f32";   ("f32": the evaluation's forwards in f32 whatever the
 *                                       backend's compute; "backend": at the backend's compute)
 *                   lambada = "lambada_test.jsonl"; lambada_max = 0; };   (lambada optional;
 *                 the whole section optional when the variants are only written: run --output)
 *   export      = { embedding_type = "q6_k"; output_type = "q6_k"; };  (optional: a GGUF
 *                 export's token embedding and head types, f32 f16 q8_0 q4_0 ... q6_k)
 *   seed        = 1234;
 *   imatrix     = "model.imatrix.gguf";   (optional: llama.cpp's importance matrix, see lmp_variant)
 *   variants    = ( { name = "..."; pipeline = ( stage, ... ); }, ... );
 *                 (a pipeline variant may add calibration = { inputs = "original"; }; its own
 *                 imatrix = "..."; and kv_cache = { format = "fp8_e4m3"; granularity = "tensor";
 *                 scales = "static"; }; the KV cache's simulated quantization, see lmp_variant)
 *                 (or { name = "..."; model = "other.gguf"; }: another tool's file, see lmp_variant)
 *   stage       = { strategy = "rtn"; params = { ... }; targets = [...]; ignore = [...];
 *                   overrides = ( { match = "..."; params = { ... }; skip = false; }, ... ); }
 * Relative paths are relative to the config file's folder.  Every error names the file, the
 * line and the setting's path, e.g. "q.cfg:14: variants[2].pipeline[0].params.bitz: ...".
 *
 * Loading checks everything that can be checked without the model's weights, so that a mistake
 * is reported before any work: the settings against the plugins' schemas, every "re:" pattern
 * (compiled once, here), and every file the config names (it exists, can be read and is the
 * right kind: lmp_config_check_files).  Patterns are checked against the model's linears by
 * lmp_config_check_model_patterns once the model is open.
 *
 * Patterns (targets, ignore, overrides' match):
 *   "re:REGEX"   a PCRE2 (Perl/Python-style) regular expression searched in the linear's name,
 *                not anchored: layers\.1\d\. (written "re:layers\\.1\\d\\." in a libconfig
 *                string) matches "model.layers.12.mlp.up_proj".  \d \w \s, non-greedy .*?,
 *                lookahead (?=...) (?!...) work as in Python's re module.
 *   anything else  a glob (fnmatch) over the whole name, or over its tail after a '.'
 *                ("q_proj" matches "model.layers.0.self_attn.q_proj", "mlp.*" every MLP linear).
 *   "optional:"  prefixed to either: the pattern may match no linear of the model (otherwise that
 *                is an error, as it is almost always a typo).  The prefix is not part of the
 *                pattern. */
#ifndef LMP_CORE_CONFIG_H
#define LMP_CORE_CONFIG_H

#include <libconfig.h>

#include "formats/imatrix.h"
#include "model/model.h"
#include "model/rotate.h"
#include "plugin/registry.h"

/* Where a setting was written, for messages made after loading ("q.cfg:12: eval.texts[1]: ..."). */
typedef struct lmp_config_origin {
    int line;                /* 0: not from a config file */
    char *key;               /* the setting's path, e.g. "variants[1].pipeline[0].ignore[0]" (owned) */
} lmp_config_origin;

/* A target, ignore or override pattern as loaded: parsed and compiled once. */
typedef struct lmp_pattern {
    const char *text;        /* as written, e.g. "optional:re:layers\\.3[0-9]\\." */
    const char *expr;        /* the glob or regex: text without "optional:" and "re:" */
    int optional;            /* written with "optional:": may match no linear */
    void *re;                /* pcre2_code * for "re:", NULL for a glob */
    lmp_config_origin at;
} lmp_pattern;

typedef struct lmp_override {
    char *match;
    int skip;
    lmp_value *params;       /* the stage's params with this override's keys replaced */
    lmp_pattern pattern;     /* match, compiled; text NULL in an override built by hand */
} lmp_override;

typedef struct lmp_stage {
    const lmp_plugin *plugin;
    lmp_value *params;
    const char **targets;    /* none: every linear */
    int n_targets;
    const char **ignore;
    int n_ignore;
    lmp_override *overrides; /* first match wins */
    int n_overrides;
    /* targets and ignore compiled, n_targets and n_ignore of them; NULL in a stage built by hand
     * (its strings are then compiled at each match, see lmp_pattern_match) */
    lmp_pattern *target_patterns, *ignore_patterns;
} lmp_stage;

/* Where block b's calibration statistics are measured (calibration.inputs, or a variant's own
 * calibration = { inputs = ...; }).  Block 0 sees the embeddings either way. */
typedef enum {
    /* "compressed": the windows as the already compressed blocks 0..b-1 left them, and a
     * sequential stage's later input groups behind its earlier groups, already rewritten (GPTQ's
     * driver: errors propagate and the next layers compensate for them). */
    LMP_CALIB_INPUTS_COMPRESSED = 0,
    /* "original": the unmodified model's hidden states at block b's input, and every input group
     * of a stage observed on the block as it was when the stage began (the SmoothQuant
     * reference's smoothing statistics and static scales; llm-compressor's static scales, which
     * it calibrates with quantization disabled: each layer sees the unmodified model's inputs).
     * Earlier stages of the same block still rewrite it before a later stage observes it, so that
     * a quantizer's static scales are measured on the model a transform (smoothquant, shift)
     * made, as the SmoothQuant reference measures them on the smoothed FP model. */
    LMP_CALIB_INPUTS_ORIGINAL = 1,
} lmp_calib_inputs;

/* The config's name of a calib_inputs value ("compressed", "original"). */
const char *lmp_calib_inputs_name(lmp_calib_inputs inputs);

typedef struct lmp_variant {
    const char *name;
    lmp_stage *stages;
    int n_stages;
    /* the variant's own calibration.inputs, else the config's (a variant built by hand: 0,
     * "compressed") */
    lmp_calib_inputs calib_inputs;
    /* A mixture of experts (issue 37): calibration.experts = "all" (1: every calibration token
     * through every expert for the statistics, the block's output still routed) or "routed" (0,
     * the default: each expert's statistics from the tokens the router sent it); and
     * calibration.expert_min_tokens: a routed expert that saw fewer tokens gets the declared
     * fallback (its Hessian the identity: RTN on the stage's grid), named in the log and the
     * report.  The variant's own, else the config's (a variant built by hand: 0, 0 = 1 token). */
    int calib_experts_all;
    int64_t expert_min_tokens;
    /* An external variant (`model = "x.gguf";` instead of a pipeline): another tool's compressed
     * file, evaluated against the same base model; NULL for a pipeline variant.  Resolved against
     * the config's folder and checked like the main model (lmp_config_check_files). */
    char *model_path;
    lmp_config_origin model_at;
    /* The importance matrix its stages get when they ask for one (LMP_STAT_IMATRIX: the grid
     * plugins' importance = "imatrix"): the variant's own `imatrix = "file";`, else the config's
     * top-level one; NULL path for none (and always for a variant without a pipeline, which may
     * not set one).  lmp_config_load reads each distinct file once (formats/imatrix.h), owned
     * by the config; a variant built by hand may point imatrix at its own. */
    char *imatrix_path;
    lmp_config_origin imatrix_at;
    const lmp_imatrix *imatrix;
    /* The KV cache's simulated quantization inside attention (issue 38; model/kv_quant.h):
     *   kv_cache = { format = "fp8_e4m3";     (or "int8", "int4")
     *                granularity = "tensor";  (or "head": a scale per KV head; "token": per
     *                                          token and KV head, dynamic only)
     *                scales = "static"; };    (from the calibration's K and V; or "dynamic")
     * on a pipeline variant; kv.type LMP_KV_NONE when unset.  The static scales are filled per
     * block by the compression (lmp_compress_watched), after the variant's stages. */
    lmp_kvspec kv;
    lmp_config_origin kv_at;
} lmp_variant;

typedef struct lmp_run_config {
    char *path;
    char *model_path, *tokenizer_path;     /* tokenizer NULL: looked up beside the model */
    lmp_rotate_opts rotate;                /* model.rotate: applied right after the model loads */
    const char *backend_name;
    lmp_value *backend_params;
    char *calib_text;                      /* NULL: no calibration section */
    int64_t calib_samples, calib_seq_len;
    int calib_random;
    lmp_calib_inputs calib_inputs;         /* calibration.inputs, the variants' default */
    int calib_experts_all;                 /* calibration.experts, the variants' default */
    int64_t expert_min_tokens;             /* calibration.expert_min_tokens (default 16) */
    double expert_group_mb;                /* memory.expert_group_mb: MiB of f32 routed-expert weights
                                            * held at a time (model/expert_pager.h); 0: blocks whole */
    int has_eval;                          /* an eval section (else nothing is measured) */
    char **eval_texts;
    int n_eval_texts;
    int64_t eval_seq_len, eval_max_windows;
    int eval_compute_backend;              /* eval.compute = "backend": the evaluation at the
                                            * backend's compute (else f32, the default) */
    char *lambada;                         /* NULL: no LAMBADA */
    int64_t lambada_max;                   /* 0: every passage */
    uint64_t seed;
    lmp_variant *variants;
    int n_variants;
    /* export.embedding_type / output_type (static strings), NULL: not set */
    const char *export_embedding_type, *export_output_type;
    char *imatrix_path;                    /* the top-level imatrix, the variants' default; NULL: none */
    lmp_imatrix **imatrices;               /* every distinct file the variants use, read once */
    int n_imatrices;
    /* where each file above was named (line 0 / key NULL: not set) */
    lmp_config_origin model_at, tokenizer_at, calib_at, lambada_at, imatrix_at;
    lmp_config_origin *eval_text_at;       /* [n_eval_texts] */
    lmp_registry reg;
    uint64_t text_fnv1a;                   /* FNV-1a 64 of the file's bytes as read (hash.h) */
    config_t cfg;                          /* owns the strings the above point to */
} lmp_run_config;

/* Parses and validates the config, compiles its patterns, checks its files
 * (lmp_config_check_files) and reads the importance matrices its pipeline variants name; nothing
 * of the model is read.  Its registry is made on the run's
 * context ctx (its trusted folders, the hctx of plugin probes), which must outlive the config. */
int lmp_config_load(lmp_ctx *ctx, const char *path, lmp_run_config **out);
void lmp_config_free(lmp_run_config *c);

/* Every file the config names exists, can be read and is the right kind: the model a regular
 * file, or a folder holding config.json (a Hugging Face model); the tokenizer, the calibration
 * text, each evaluation text, the LAMBADA file and every imatrix regular files; an external
 * variant's model as the model.  A FIFO or a device is refused
 * without blocking on it.  "q.cfg:12: eval.texts[1]: /data/x.txt: cannot open: No such file or
 * directory".  lmp_config_load calls it. */
int lmp_config_check_files(const lmp_run_config *c);

/* Every target, ignore and override pattern of every stage of every variant, unless written with
 * "optional:", matches at least one of the names; otherwise an error naming the pattern, the
 * file, the line and the key, with the nearest name as an example. */
int lmp_config_check_patterns(const lmp_run_config *c, const char *const *linear_names, int n_linears);
/* The same against the linears of the model's blocks (only its header is used: call it right
 * after lmp_model_load, before any weight is converted). */
int lmp_config_check_model_patterns(const lmp_run_config *c, const lmp_model *m);

/* Does a target/ignore/override pattern (see the top of this file) match a linear's name?  For
 * patterns not loaded from a config: the regex is compiled at each call (an invalid one matches
 * nothing). */
int lmp_pattern_match(const char *pattern, const char *name);
/* hits[g] <- lmp_pattern_match(pattern, names[g]) for g < n, the pattern compiled once; an error
 * when it does not compile. */
int lmp_pattern_match_all(const char *pattern, const char *const *names, int64_t n, uint8_t *hits);

/* The stage's parameters for this linear (NULL: the stage does not touch it). */
const lmp_value *lmp_stage_params_for(const lmp_stage *s, const char *linear_name);
/* Whether one of s's targets names a router (or a shared expert's gate) of this name: the target
 * matches it and its text holds the name's last component ("gate", "shared_expert_gate").  A
 * router is never quantized through a target that does not name it (no target, "*", "re:.*_proj"):
 * issue 37. */
int lmp_stage_names_router(const lmp_stage *s, const char *linear_name);
/* lmp_stage_params_for with that rule for the routers: what every caller about a block linear
 * uses. */
const lmp_value *lmp_stage_params_for_linear(const lmp_stage *s, const lmp_linear *l);

#endif
