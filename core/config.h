/* config.h — a run described by a libconfig file, validated before any weight is read.
 *
 *   plugins     = { search_path = [...]; strategies = [...]; backends = [...]; };  (optional)
 *   backend     = { name = "cpu"; params = { ... }; };                             (optional)
 *   model       = { path = "..."; tokenizer = "..."; };
 *   calibration = { text = "..."; samples = 32; seq_len = 256; sampling = "sequential"; };
 *   eval        = { texts = [ "...", ... ]; seq_len = 256; max_windows = 0;
 *                   lambada = "lambada_test.jsonl"; lambada_max = 0; };   (lambada optional)
 *   seed        = 1234;
 *   variants    = ( { name = "..."; pipeline = ( stage, ... ); }, ... );
 *   stage       = { strategy = "rtn"; params = { ... }; targets = [...]; ignore = [...];
 *                   overrides = ( { match = "..."; params = { ... }; skip = false; }, ... ); }
 * Relative paths are relative to the config file's folder.  Every error names the file, the
 * line and the setting's path, e.g. "q.cfg:14: variants.[2].pipeline.[0].params.bitz: ...". */
#ifndef LMP_CORE_CONFIG_H
#define LMP_CORE_CONFIG_H

#include <libconfig.h>

#include "registry.h"

typedef struct lmp_override {
    char *match;
    int skip;
    lmp_value *params;       /* the stage's params with this override's keys replaced */
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
} lmp_stage;

typedef struct lmp_variant {
    const char *name;
    lmp_stage *stages;
    int n_stages;
} lmp_variant;

typedef struct lmp_run_config {
    char *path;
    char *model_path, *tokenizer_path;     /* tokenizer NULL: looked up beside the model */
    const char *backend_name;
    lmp_value *backend_params;
    char *calib_text;                      /* NULL: no calibration section */
    int64_t calib_samples, calib_seq_len;
    int calib_random;
    char **eval_texts;
    int n_eval_texts;
    int64_t eval_seq_len, eval_max_windows;
    char *lambada;                         /* NULL: no LAMBADA */
    int64_t lambada_max;                   /* 0: every passage */
    uint64_t seed;
    lmp_variant *variants;
    int n_variants;
    lmp_registry reg;
    config_t cfg;                          /* owns the strings the above point to */
} lmp_run_config;

int lmp_config_load(const char *path, lmp_run_config **out);
void lmp_config_free(lmp_run_config *c);

/* Does a target/ignore/override pattern match a linear's name?  "re:REGEX" is a POSIX extended
 * regular expression searched in the name; anything else is a glob over the whole name, or over
 * its tail after a '.' ("q_proj" matches "model.layers.0.self_attn.q_proj"). */
int lmp_pattern_match(const char *pattern, const char *name);

/* The stage's parameters for this linear (NULL: the stage does not touch it). */
const lmp_value *lmp_stage_params_for(const lmp_stage *s, const char *linear_name);

#endif
