/* imatrix_map.h — which entry of a llama.cpp importance matrix (formats/imatrix.h) belongs to
 * which block linear, and the check, before anything is compressed, that every linear a stage
 * quantizes with it (its needs() has LMP_STAT_IMATRIX) has one that fits.
 *
 * llama-imatrix names each entry after the weight's GGUF tensor (model/tensor_names.h):
 * model.layers.3.self_attn.q_proj is blk.3.attn_q.weight; GPT-2's q, k and v, one fused attn_qkv
 * in llama.cpp, all take blk.N.attn_qkv.weight, which measured the input they share. */
#ifndef LMP_CORE_IMATRIX_MAP_H
#define LMP_CORE_IMATRIX_MAP_H

#include "base/ctx.h"
#include "config/config.h"
#include "model/model.h"

/* The importance vector [l->in] of linear l of block `block` in a model of `family`: its entry's
 * values (owned by im).  An error names the file, the entry and the linear when the entry is
 * missing, is a MoE weight's (several rows), has another length than l's inputs, or saw no
 * token (count 0). */
int lmp_imatrix_for_linear(const lmp_imatrix *im, lmp_family family, int64_t block, const lmp_linear *l,
                           const float **values);

/* Every linear of every block of m that a stage of v asks LMP_STAT_IMATRIX for (selves[s]: the
 * stage instances, as lmp_compress creates them) has its vector in v->imatrix; otherwise an
 * error naming the stage ("pipeline[0] (rtn)") and the linear, and either the file and entry
 * or, when v has no imatrix, the setting to add.  Only m's header is used. */
int lmp_imatrix_check_stages(const lmp_model *m, const lmp_variant *v, void *const *selves);

/* (A whole variant is checked before its run by lmp_compress_check_variant, pipeline.h.) */

#endif
