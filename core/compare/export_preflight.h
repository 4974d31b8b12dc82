/* export_preflight.h — an export's refusals found before any work (compare/ sits above both the
 * config and the export writers, whose checks this repeats early). */
#ifndef LMP_CORE_EXPORT_PREFLIGHT_H
#define LMP_CORE_EXPORT_PREFLIGHT_H

#include "config/config.h"
#include "model/model.h"

/* Before any work, what the writer for path will refuse in variant v of config c on model m, from
 * the stages' parameters alone: the architecture (lmp_export_check_arch: what the format cannot
 * say of it); for a Hugging Face folder a group size that does not divide a linear's width (vLLM and
 * compressed-tensors take no shorter last group), a GGUF block format or nf4 grid (no
 * compressed-tensors type); for a GGUF nf4.  A block format that does not divide a row is
 * lmp_run_check_model's.  The message names the variant, the linear and what to change. */
int lmp_export_preflight(const lmp_model *m, const lmp_run_config *c, const lmp_variant *v,
                         const char *path);

#endif
