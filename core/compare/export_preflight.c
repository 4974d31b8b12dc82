/* export_preflight.c — see export_preflight.h: what an export will refuse, found from the config
 * before the first block is compressed.
 *
 * The writers check the grids the strategies recorded (hf_write.c's linear_scheme, gguf_write.c's
 * check_linear); that is after the whole compression, which for GPTQ on a real model is minutes
 * to hours.  The stages' parameters already say most of it: a grid plugin's format, bits,
 * granularity and group_size (the schema every weight-quantizing plugin shares, plugins/common/
 * wgrid.h), read here by name as compare.c reads "format".  The writers keep their own checks:
 * this one is an early copy, so a plugin whose parameters say less is still refused at export. */
#include "compare/export_preflight.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "base/error.h"
#include "base/log.h"
#include "config/config.h"
#include "export/export.h"

/* The value of the stage's parameter `name`, or NULL when its plugin has none. */
static const lmp_value *param(const lmp_stage *stage, const lmp_value *p, const char *name)
{
    const lmp_plugin_desc *d = stage->plugin->desc;
    for (uint32_t k = 0; k < d->n_params; k++)
        if (strcmp(d->params[k].name, name) == 0) return &p[k];
    return NULL;
}

static int is_str(const lmp_value *v, const char *s) { return v && v->str && strcmp(v->str, s) == 0; }

/* A Hugging Face folder: the grid stage s gives linear l, as far as its parameters say. */
static int check_hf_linear(const lmp_variant *v, int s, const lmp_linear *l, const lmp_value *p)
{
    const lmp_stage *stage = &v->stages[s];
    const char *plugin = stage->plugin->desc->name;
    const lmp_value *format = param(stage, p, "format"), *bits = param(stage, p, "bits");
    const lmp_value *gran = param(stage, p, "granularity"), *group = param(stage, p, "group_size");
    const lmp_value *weights = param(stage, p, "weights");
    if (weights && weights->num == 0) return 0; /* rtn weights = false: activations only */
    /* the floating-point grids compressed-tensors stores (hf_plan.h; the writer refuses the rest by name) */
    const int ct_float = is_str(format, "fp8_e4m3") || is_str(format, "nvfp4") || is_str(format, "mxfp4") ||
                         is_str(format, "mxfp8");
    if (format && format->str && strcmp(format->str, "int") != 0 && !ct_float)
        return lmp_fail(LMP_EUNSUPPORTED,
                        "variant '%s': pipeline[%d] (%s) puts %s on the %s grid, which compressed-tensors has no type "
                        "for here: export a .gguf for a GGUF format, or use the int grid (format = \"int\") or "
                        "fp8_e4m3, nvfp4, mxfp4, mxfp8", v->name, s, plugin, l->name, format->str);
    if ((is_str(format, "nvfp4") && l->in % 16) || ((is_str(format, "mxfp4") || is_str(format, "mxfp8")) && l->in % 32))
        return lmp_fail(LMP_EUNSUPPORTED, "variant '%s': pipeline[%d] (%s) puts %s on the %s grid, whose groups of %d do "
                        "not divide its %lld inputs: leave it out of that stage (refused before any work)", v->name, s,
                        plugin, l->name, format->str, is_str(format, "nvfp4") ? 16 : 32, (long long)l->in);
    if (ct_float && !is_str(format, "fp8_e4m3")) return 0; /* their groups are fixed */
    if (!bits || bits->num >= 16 || !is_str(gran, "group") || !group || group->num < 1) return 0;
    const int64_t g = (int64_t)group->num;
    if (l->in % g != 0)
        return lmp_fail(LMP_EUNSUPPORTED,
                        "variant '%s': pipeline[%d] (%s) quantizes %s in groups of %lld, which do not divide its %lld "
                        "inputs, and compressed-tensors (and vLLM) take no shorter last group: use a group size that "
                        "divides %lld (e.g. %lld), or leave it out of that stage (refused before any work)",
                        v->name, s, plugin, l->name, (long long)g, (long long)l->in, (long long)l->in,
                        (long long)(l->in % 64 == 0 ? 64 : l->in % 32 == 0 ? 32 : 1));
    return 0;
}

int lmp_export_preflight(const lmp_model *m, const lmp_run_config *c, const lmp_variant *v, const char *path)
{
    (void)c;
    const int gguf = lmp_export_is_gguf(path);
    if (v->model_path) return 0; /* another tool's file: not exported */
    /* the KV cache's quantization: what the writers refuse (export.c, hf_write.c), before any
     * block is compressed */
    const char *kv_why = v->kv.type == LMP_KV_NONE ? NULL
                         : gguf ? "which a GGUF has no place for (llama.cpp picks its cache type at run time): export a "
                                  "Hugging Face folder (compressed-tensors' kv_cache_scheme), or drop kv_cache"
                         : m->arch.family == LMP_FAMILY_GPT2 ? "which is not written for GPT-2"
                         : v->kv.dynamic  ? "with dynamic scales, which are not written (vLLM reads static k_scale / "
                                            "v_scale): use scales = \"static\""
                                          : NULL;
    if (kv_why)
        return lmp_fail(LMP_EUNSUPPORTED, "%s: variant '%s' quantizes the KV cache (%s, line %d) %s", path, v->name,
                        v->kv_at.key ? v->kv_at.key : "kv_cache", v->kv_at.line, kv_why);
    int st = lmp_export_check_arch(m, path);
    if (st) return st;
    if (gguf) return 0; /* block formats that do not divide a row: lmp_run_check_model */
    for (int64_t b = 0; b < m->arch.n_layers && !st; b++) {
        lmp_block blk; /* names and shapes: no weight is read */
        if ((st = lmp_block_init(&blk, (int)b, &m->arch))) {
            lmp_block_free_tables(&blk);
            break;
        }
        for (int s = 0; s < v->n_stages && !st; s++)
            for (int i = 0; i < blk.n_linears && !st; i++) {
                const lmp_value *p = lmp_stage_params_for_linear(&v->stages[s], &blk.linears[i]);
                if (p) st = check_hf_linear(v, s, &blk.linears[i], p);
            }
        lmp_block_free_tables(&blk);
    }
    return st ? lmp_fail_prefix(st, "%s", path) : 0;
}
