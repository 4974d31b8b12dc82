/* config_inputs.c — see config_inputs.h. */
#include "config/config_inputs.h"

int lmp_config_inputs_max(const lmp_run_config *c) { return 6 + c->n_eval_texts + 2 * c->n_variants; }

int lmp_config_inputs(const lmp_run_config *c, lmp_named_path *out, int max)
{
    int n = 0;
#define ADD(p, w)                                                                                                      \
    do {                                                                                                               \
        if ((p) && n < max) out[n++] = (lmp_named_path){(p), (w)};                                                     \
    } while (0)
    ADD(c->path, "the config");
    ADD(c->model_path, "the model");
    ADD(c->tokenizer_path, "the tokenizer");
    ADD(c->calib_text, "the calibration text");
    ADD(c->lambada, "the LAMBADA file");
    ADD(c->imatrix_path, "the importance matrix");
    for (int i = 0; i < c->n_eval_texts; i++) ADD(c->eval_texts[i], "an evaluation text");
    for (int i = 0; i < c->n_variants; i++) {
        ADD(c->variants[i].model_path, "a variant's model");
        ADD(c->variants[i].imatrix_path, "a variant's importance matrix");
    }
#undef ADD
    return n;
}
