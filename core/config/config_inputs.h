/* config_inputs.h — every file a run of a config reads, named by the key that gave it: what no
 * output of the run may be (base/outfile.h, lmp_outfile_distinct). */
#ifndef LMP_CORE_CONFIG_INPUTS_H
#define LMP_CORE_CONFIG_INPUTS_H

#include "base/outfile.h"
#include "config/config.h"

/* How many entries lmp_config_inputs may fill for c. */
int lmp_config_inputs_max(const lmp_run_config *c);

/* The config file, the model, the tokenizer, the calibration and evaluation texts, LAMBADA, the
 * importance matrices and the variants' own model files, into out[max]; returns the count. */
int lmp_config_inputs(const lmp_run_config *c, lmp_named_path *out, int max);

#endif
