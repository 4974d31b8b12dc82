/* export.c — see export.h: which writer a path gets, and the checks before any work. */
#include "export/export.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "base/outfile.h"
#include "base/textfile.h"

int lmp_export_is_gguf(const char *path)
{
    size_t n = strlen(path);
    return n >= 5 && strcmp(path + n - 5, ".gguf") == 0;
}

/* The folder part of path ("." when it has none), in buf. */
static void parent_of(const char *path, char *buf, size_t size)
{
    const char *slash = strrchr(path, '/');
    if (!slash) snprintf(buf, size, ".");
    else if (slash == path) snprintf(buf, size, "/");
    else snprintf(buf, size, "%.*s", (int)(slash - path), path);
}

int lmp_export_check_path(const char *path, const char *what)
{
    if (!path || !*path) return lmp_fail(LMP_EINVAL, "%s: the path is empty", what);
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/') n--; /* "out/" names the folder out */
    char trimmed[4096], parent[4096];
    if (n >= sizeof trimmed) return lmp_fail(LMP_EINVAL, "%s: the path is too long", what);
    memcpy(trimmed, path, n);
    trimmed[n] = 0;
    struct stat st;
    const int gguf = lmp_export_is_gguf(trimmed);
    if (lmp_outfile_is_stdout(path))
        return lmp_fail(LMP_EINVAL, "%s: a model is written to a file or a folder, not to standard output (\"-\")", what);
    /* A link, a FIFO or a device is never replaced (base/outfile.h): a GGUF must be nothing or a
     * regular file, a folder nothing or a real folder. */
    if (lstat(trimmed, &st) == 0 && S_ISLNK(st.st_mode))
        return lmp_fail(LMP_EINVAL, "%s %s: is a symbolic link: lmpress does not replace or follow a link at an output "
                        "path; name its target instead", what, trimmed);
    if (stat(trimmed, &st) == 0) {
        if (gguf && S_ISDIR(st.st_mode))
            return lmp_fail(LMP_EINVAL, "%s: %s is a folder; a .gguf path names a file", what, trimmed);
        if (!gguf && !S_ISDIR(st.st_mode))
            return lmp_fail(LMP_EINVAL,
                            "%s: %s exists and is not a folder; a path not ending in .gguf names a Hugging Face folder",
                            what, trimmed);
    }
    if (gguf && lmp_outfile_check_kind(trimmed, what)) return LMP_EINVAL;
    parent_of(trimmed, parent, sizeof parent);
    if (stat(parent, &st) != 0 || !S_ISDIR(st.st_mode))
        return lmp_fail(LMP_EINVAL, "%s: %s: the folder %s does not exist", what, trimmed, parent);
    if (access(parent, W_OK | X_OK) != 0)
        return lmp_fail(LMP_EIO, "%s: %s: cannot write in %s: %s", what, trimmed, parent, strerror(errno));
    return 0;
}

int lmp_export_check_dir(const char *dir, const char *what)
{
    struct stat st;
    if (!dir || !*dir) return lmp_fail(LMP_EINVAL, "%s: the path is empty", what);
    if (lmp_outfile_is_stdout(dir))
        return lmp_fail(LMP_EINVAL, "%s: models are written to a folder, not to standard output (\"-\")", what);
    if (stat(dir, &st) != 0) {
        if (errno != ENOENT || mkdir(dir, 0777) != 0)
            return lmp_fail(LMP_EIO, "%s: cannot create the folder %s: %s", what, dir, strerror(errno));
        return 0;
    }
    if (!S_ISDIR(st.st_mode)) return lmp_fail(LMP_EINVAL, "%s: %s is not a folder", what, dir);
    if (access(dir, W_OK | X_OK) != 0) return lmp_fail(LMP_EIO, "%s: cannot write in %s: %s", what, dir, strerror(errno));
    return 0;
}

int lmp_export_model(lmp_ctx *ctx, const lmp_model *m, const lmp_block_source *blocks, const lmp_export_opts *o)
{
    int st = lmp_export_check_path(o->path, "export");
    if (st) return st;
    lmp_export_opts with_text = *o;
    char *text = NULL;
    size_t len = 0;
    /* the run's config goes into the file's metadata as text (a config that cannot be read
     * again, a pipe, is left out: the file name still is there) */
    if (!o->config_text && o->config_path && lmp_read_file(o->config_path, &text, &len) == 0 && !memchr(text, 0, len))
        with_text.config_text = text;
    /* A GGUF has no place for the KV cache's quantization (llama.cpp chooses its cache type at run
     * time, with no scales): refused by name rather than exported without it.  A Hugging Face
     * folder writes it as compressed-tensors' kv_cache_scheme (hf_write.c). */
    lmp_block b0;
    if (lmp_export_is_gguf(o->path) && blocks->n > 0 && (st = blocks->get(blocks->self, 0, &b0)) == 0) {
        const int kv = b0.kv.type != LMP_KV_NONE;
        lmp_block_free(&b0);
        if (kv)
            return lmp_fail(LMP_EUNSUPPORTED, "%s: the variant quantizes the KV cache (kv_cache), which a GGUF has no "
                            "place for (llama.cpp picks its cache type at run time): export a Hugging Face folder "
                            "(compressed-tensors' kv_cache_scheme), or drop kv_cache", o->path);
    }
    if (st) return st;
    lmp_clear_error();
    st = lmp_export_is_gguf(o->path) ? lmp_export_gguf(ctx, m, blocks, &with_text) : lmp_export_hf(ctx, m, blocks, &with_text);
    free(text);
    return st;
}

/* Whether YaRN's table and factor are what llama.cpp (and lmpress's GGUF reader) compute from
 * rope.scaling.factor and original_context_length alone: beta_fast 32, beta_slow 1, the truncated
 * ramp, cos and sin times 0.1 ln(factor) + 1.  Anything else (a config's beta_fast, attention_factor,
 * truncate false) would need keys llama.cpp's converter does not write. */
static int yarn_is_default(const lmp_rope *r)
{
    if (!(r->factor > 0) || !(r->orig_ctx > 0)) return 0;
    lmp_rope d;
    lmp_rope_default(&d, r->theta, r->n_rot, r->n_rot);
    lmp_rope_yarn(&d, r->factor, r->orig_ctx, 32, 1, 1);
    d.mscale = (float)lmp_rope_yarn_mscale(r->factor);
    return d.mscale == r->mscale && !memcmp(d.inv_freq, r->inv_freq, (size_t)(r->n_rot / 2) * sizeof *d.inv_freq);
}

/* DeepSeek-V2/V3 as llama.cpp's deepseek2 reads it (model_gguf.c says how): its routing (no
 * group_limited_greedy: llama.cpp ranks groups by the sum of their two best scores), its latent
 * norms on the file's one RMS epsilon, the dense layers first, and its YaRN (cos and sin times 1
 * with the scores times (0.1 m ln factor + 1)^2, or both of the default 0.1 ln factor + 1). */
static int check_deepseek2(const lmp_model *m, const char *path)
{
    const lmp_arch *a = &m->arch;
    const lmp_rope *r = &a->rope;
    if (a->route == LMP_ROUTE_SOFTMAX_GROUPS && a->n_group > 0 && a->topk_group < a->n_group)
        return lmp_fail(LMP_EUNSUPPORTED, "%s: %s routes with group_limited_greedy (%lld of %lld groups by their best "
                        "score), which llama.cpp's deepseek2 does not run (it ranks groups by the sum of their two best "
                        "scores, DeepSeek-V3's rule): not exported as a GGUF", path, m->path, (long long)a->topk_group,
                        (long long)a->n_group);
    if (a->mla_norm_eps != a->norm_eps)
        return lmp_fail(LMP_EUNSUPPORTED, "%s: %s's latent norms take epsilon %g and its other norms %g, but llama.cpp's "
                        "deepseek2 has one (attention.layer_norm_rms_epsilon): not exported", path, m->path,
                        (double)a->mla_norm_eps, (double)a->norm_eps);
    for (int64_t l = 1; l < a->n_layers; l++)
        if (lmp_arch_moe_layer(a, l - 1) && !lmp_arch_moe_layer(a, l))
            return lmp_fail(LMP_EUNSUPPORTED, "%s: %s has a dense MLP in layer %lld after a sparse one, which llama.cpp's "
                            "deepseek2 (its dense layers first: leading_dense_block_count) does not read", path, m->path,
                            (long long)l);
    const float q_scale = a->mla_q_scale ? a->mla_q_scale : 1.0f;
    const int yarn = r->n_rot > 0 && !r->plain && !strcmp(r->type, "yarn");
    if (r->n_rot > 0 && !r->plain && !yarn && strcmp(r->type, "default") != 0)
        return lmp_fail(LMP_EUNSUPPORTED, "%s: %s turns its rotary key with %s RoPE, which lmpress writes for "
                        "llama.cpp's deepseek2 as none or yarn only", path, m->path, r->type);
    if (!yarn && q_scale != 1.0f)
        return lmp_fail(LMP_EUNSUPPORTED, "%s: %s scales its attention scores by %g without YaRN, which llama.cpp's "
                        "deepseek2 cannot say", path, m->path, (double)q_scale);
    if (yarn) {
        lmp_rope d;
        lmp_rope_default(&d, r->theta, r->n_rot, r->n_rot);
        lmp_rope_yarn(&d, r->factor, r->orig_ctx, 32, 1, 1);
        const double plain = lmp_rope_yarn_mscale(r->factor);
        const int with_mul = r->mscale == 1.0f, without = fabs(r->mscale - plain) <= 1e-6 * plain &&
                                                          fabs(q_scale - plain * plain) <= 1e-6 * plain * plain;
        if (memcmp(d.inv_freq, r->inv_freq, (size_t)(r->n_rot / 2) * sizeof *d.inv_freq) != 0 || !(with_mul || without))
            return lmp_fail(LMP_EUNSUPPORTED, "%s: %s's YaRN (cos and sin times %g, scores times %g) is not what "
                            "llama.cpp's deepseek2 computes from its keys (beta_fast 32, beta_slow 1, truncated; cos "
                            "and sin times 1 with mscale = mscale_all_dim, or 0.1 ln(factor) + 1 with no "
                            "mscale_all_dim): not exported as a GGUF", path, m->path, (double)r->mscale, (double)q_scale);
    }
    return 0;
}

int lmp_export_check_arch(const lmp_model *m, const char *path)
{
    const lmp_rope *r = &m->arch.rope;
    const lmp_arch_desc *d = m->arch.desc ? m->arch.desc : lmp_arch_by_name("llama");
    const int gguf = lmp_export_is_gguf(path), from_hf = lmp_model_is_hf(m);
    const int rotated = r->n_rot > 0 && !r->plain; /* n_rot 0: the classic rotation, never filled */
    /* DeepSeek-V2/V3 as a GGUF: llama.cpp's deepseek2 (gguf_write.c) runs what lmpress reads from
     * one (model_gguf.c), not all a config.json can say */
    if (gguf && m->arch.mla) {
        const int st = check_deepseek2(m, path);
        if (st) return st;
    }
    /* gpt-oss as a Hugging Face folder: transformers 5.24's GptOssExperts holds every expert in
     * fused 3-D parameters (gate_up_proj [E, d, 2f] with gate and up interleaved by column,
     * down_proj [E, f, d]), not Linear modules, and has no per-expert checkpoint layout to
     * convert from (its conversion mapping has no gpt_oss entry): compressed-tensors, which
     * quantizes Linear modules only, can neither quantize nor dequantize them there */
    if (!gguf && m->arch.attn_sinks)
        return lmp_fail(LMP_EUNSUPPORTED, "%s: %s is %s, whose experts transformers 5 holds as fused 3-D parameters "
                        "(gate_up_proj, down_proj), not Linear modules: compressed-tensors cannot quantize or load "
                        "them, so a compressed-tensors Hugging Face folder of it is not written; export a .gguf "
                        "(llama.cpp's gpt-oss)", path, m->path, d->hf_class);
    /* llama.cpp's gpt-oss fixes the clamped SwiGLU's constants (no key says them) */
    if (gguf && m->arch.attn_sinks && (m->arch.swiglu_alpha != 1.702f || m->arch.swiglu_limit != 7.0f))
        return lmp_fail(LMP_EUNSUPPORTED, "%s: %s has swiglu_alpha %g and swiglu_limit %g, but llama.cpp's gpt-oss "
                        "always uses 1.702 and 7.0 (no GGUF key says otherwise): not exported", path, m->path,
                        (double)m->arch.swiglu_alpha, (double)m->arch.swiglu_limit);
    /* llama.cpp's qwen2moe never renormalizes the top-k weights, its qwen3moe and Mixtral's llama
     * always do, and no key says otherwise */
    if (gguf && m->arch.n_experts > 0 && d->moe && !d->moe->hf_deepseek && m->arch.norm_topk != d->moe->gguf_norm_topk)
        return lmp_fail(LMP_EUNSUPPORTED, "%s: %s has norm_topk_prob %s, but llama.cpp's %s %s renormalizes the top-k "
                        "routing weights (no GGUF key says otherwise): not exported", path, m->path,
                        m->arch.norm_topk ? "true" : "false", d->gguf_arch, d->moe->gguf_norm_topk ? "always" : "never");
    for (int64_t l = 0; gguf && m->arch.n_experts > 0 && !m->arch.mla && l < m->arch.n_layers; l++)
        if (!lmp_arch_moe_layer(&m->arch, l))
            return lmp_fail(LMP_EUNSUPPORTED, "%s: %s has a dense MLP in layer %lld of a mixture of experts, which "
                            "llama.cpp's %s does not read (every layer sparse): not exported", path, m->path,
                            (long long)l, d->gguf_arch);
    /* The families the Hugging Face writer carries (docs/architectures.md, "export"); the GGUF
     * writer carries every family with a llama.cpp architecture. */
    static const char *const hf_written[] = {"llama", "mistral", "qwen2", "qwen3", "gemma", "gpt2"};
    if (m->arch.online_r3 || m->arch.online_r4)
        return lmp_fail(LMP_EUNSUPPORTED, "%s: %s has online rotations (model.rotate %s): they are steps of the "
                        "forward that neither GGUF nor a Hugging Face folder can say (compressed-tensors' transform "
                        "config rebuilds its own Hadamards from a seed, not lmpress's H_a x R_m with a random odd "
                        "factor); "
                        "export without r3/r4 (fused r1/r2 are plain weights)", path, m->path,
                        m->arch.online_r3 && m->arch.online_r4 ? "r3, r4" : m->arch.online_r3 ? "r3" : "r4");
    if (d->export_refused) /* a family whose blocks the writers do not say (Falcon) */
        return lmp_fail(LMP_EUNSUPPORTED, "%s: %s is a %s model: %s (docs/architectures.md)", path, m->path, d->name,
                        d->export_refused);
    if (gguf && !d->gguf_arch) /* GPT-J, OPT: llama.cpp has no architecture for them */
        return lmp_fail(LMP_EUNSUPPORTED, "%s: %s is a %s model (%s), which llama.cpp has no architecture for (its "
                        "converter writes no GGUF of it): export a Hugging Face folder", path, m->path, d->name,
                        d->hf_class);
    int ok = gguf && d->gguf_arch;
    int from_hf_only = 1;
    for (size_t i = 0; i < sizeof hf_written / sizeof *hf_written; i++)
        if (!strcmp(d->name, hf_written[i])) ok |= !gguf, from_hf_only = 0;
    /* every other family (Phi-3, Gemma 2/3, GLM, GLM-4, ERNIE 4.5, the mixtures of experts, the
     * long tail of issue 40): written in a Hugging Face folder whose config.json (LongRoPE,
     * soft-caps, layer_types, partial rotary, its own key names, the experts...) is the source's
     * own; the config made here for a GGUF or llama2.c source says none of that.  The writer takes
     * the rest from the family's descriptor (names, norms, biases, fused modules). */
    ok |= from_hf_only && !gguf && from_hf;
    if (!ok && from_hf_only && !gguf)
        return lmp_fail(LMP_EUNSUPPORTED, "%s: %s is a %s model read from a %s file: a Hugging Face folder of it is "
                        "written from a Hugging Face source only, whose config.json it keeps (the config made here "
                        "would not say the architecture's own keys); export a .gguf, or export from the Hugging Face "
                        "folder", path, m->path, d->name, lmp_model_is_hf(m) ? "Hugging Face" : m->format);
    if (!ok)
        return lmp_fail(LMP_EUNSUPPORTED, "%s: %s is a %s model: the %s exporter does not write this architecture "
                        "yet (docs/architectures.md)", path, m->path, d->name, gguf ? "GGUF" : "Hugging Face");
    /* Sliding windows: a GGUF says them only where llama.cpp runs them (Gemma 2 and 3, with the
     * window and a per-layer pattern); llama.cpp's llama, qwen2, qwen3 and phi3 (whose SWA it
     * turns off) would attend over the whole context.  A config.json made here would not say
     * them either. */
    int slides = 0;
    for (int64_t l = 0; l < m->arch.n_layers && m->arch.window && m->arch.window < m->arch.seq_len; l++)
        slides |= lmp_arch_window(&m->arch, l) > 0;
    if (slides && gguf && !d->gguf_swa_pattern)
        return lmp_fail(LMP_EUNSUPPORTED, "%s: %s attends within a sliding window of %lld positions, which llama.cpp's "
                        "%s architecture does not run (it would attend over the whole context)%s", path, m->path,
                        (long long)m->arch.window, d->gguf_arch,
                        from_hf ? ": export a Hugging Face folder, which keeps the source's config" : "");
    if (slides && !gguf && !from_hf)
        return lmp_fail(LMP_EUNSUPPORTED, "%s: %s attends within a sliding window of %lld positions, which the "
                        "config.json written here does not say: the file would mean full attention (export a Hugging "
                        "Face folder from a Hugging Face source, which keeps its config)", path, m->path,
                        (long long)m->arch.window);
    if (rotated && !strcmp(r->type, "longrope") && (gguf ? strcmp(d->gguf_arch, "phi3") != 0 : !from_hf))
        return lmp_fail(LMP_EUNSUPPORTED, "%s: %s turns q and k with LongRoPE, which %s (the file would run another "
                        "rotation than the one lmpress evaluated)", path, m->path,
                        gguf ? "GGUF carries for llama.cpp's phi3 only" : "the config.json written here does not say");
    if (gguf) {
        if (!d->gguf_arch)
            return lmp_fail(LMP_EUNSUPPORTED, "%s: %s (%s) has no GGUF architecture here", path, m->path, d->name);
        /* llama.cpp's falcon has no RoPE keys (its converter writes none): full-head rotate-half
         * RoPE of base 10000, unscaled */
        if (d->hf_falcon) {
            const float theta = r->n_rot > 0 ? r->theta : m->arch.rope_theta;
            const int64_t n_rot = r->n_rot > 0 ? r->n_rot : m->arch.head_dim;
            if (theta != 10000.0f || n_rot != m->arch.head_dim || (rotated && strcmp(r->type, "default") != 0))
                return lmp_fail(LMP_EUNSUPPORTED, "%s: %s turns q and k with RoPE of base %g over %lld of %lld dims%s%s, "
                                "but llama.cpp's falcon has no key for it (it turns the whole head with base 10000)",
                                path, m->path, (double)theta, (long long)n_rot, (long long)m->arch.head_dim,
                                rotated ? ", scaled " : "", rotated ? r->type : "");
        }
        if (m->lm_head != m->tok_emb && !strcmp(d->gguf_arch, "gemma"))
            return lmp_fail(LMP_EUNSUPPORTED, "%s: %s is a Gemma model with a head of its own, which llama.cpp's gemma "
                            "architecture has no tensor for (it ties the head to token_embd)", path, m->path);
        /* (llama.cpp's gemma3 reads an output.weight when there is one) */
        if (m->lm_head != m->tok_emb && !strcmp(d->gguf_arch, "gemma2"))
            return lmp_fail(LMP_EUNSUPPORTED, "%s: %s is a %s model with a head of its own, which llama.cpp's %s "
                            "architecture does not read (it ties the head to token_embd)", path, m->path, d->name,
                            d->gguf_arch);
        if ((d->flags & LMP_ARCH_EMBED_SCALE) && m->arch.embed_scale != (float)sqrt((double)m->arch.dim))
            return lmp_fail(LMP_EUNSUPPORTED, "%s: %s scales its embeddings by %g, not llama.cpp's sqrt(%lld) for %s",
                            path, m->path, (double)m->arch.embed_scale, (long long)m->arch.dim, d->gguf_arch);
        /* Gemma 2 and 3's query_pre_attn_scalar: llama.cpp has no key, it scales by 1/sqrt(head_dim)
         * but for the 27B models (by their layer count), 1/sqrt(hidden / heads) */
        const double q_scale = m->arch.q_scale ? m->arch.q_scale : 1.0;
        const double q_llamacpp = d->gguf_scale_by_width_layers && m->arch.n_layers == d->gguf_scale_by_width_layers
                                      ? sqrt((double)m->arch.head_dim / (double)(m->arch.dim / m->arch.n_heads)) : 1.0;
        if (fabs(q_scale - q_llamacpp) > 1e-6 * q_llamacpp)
            return lmp_fail(LMP_EUNSUPPORTED, "%s: %s scales q by %g (query_pre_attn_scalar), which llama.cpp's %s "
                            "does not (it has no key for it and assumes %g for %lld layers)", path, m->path, q_scale,
                            d->gguf_arch, q_llamacpp, (long long)m->arch.n_layers);
        /* soft-capping: llama.cpp's gemma2 always caps (50 and 30 when the file says nothing),
         * its gemma3 never caps the attention scores, the others cap nothing */
        const int gemma2 = !strcmp(d->gguf_arch, "gemma2"), gemma3 = !strcmp(d->gguf_arch, "gemma3");
        if (gemma2 && (!m->arch.attn_softcap || !m->arch.final_softcap))
            return lmp_fail(LMP_EUNSUPPORTED, "%s: %s has no %s soft-capping, which llama.cpp's gemma2 always applies",
                            path, m->path, !m->arch.attn_softcap ? "attention" : "final");
        if ((m->arch.attn_softcap && !gemma2) || (m->arch.final_softcap && !gemma2 && !gemma3))
            return lmp_fail(LMP_EUNSUPPORTED, "%s: %s soft-caps its %s, which llama.cpp's %s does not", path, m->path,
                            m->arch.attn_softcap ? "attention scores (attn_logit_softcapping)" : "logits", d->gguf_arch);
        if (m->arch.rope_local.n_rot && !d->gguf_swa_base)
            return lmp_fail(LMP_EUNSUPPORTED, "%s: %s turns its sliding layers with a RoPE base of their own, which "
                            "llama.cpp's %s does not read", path, m->path, d->gguf_arch);
        if ((d->family == LMP_FAMILY_GPT2 || d->gguf_no_kv_heads) && m->arch.n_kv_heads != m->arch.n_heads)
            return lmp_fail(LMP_EUNSUPPORTED, "%s: %s has %lld kv heads for %lld heads, which llama.cpp's %s does not "
                            "read", path, m->path, (long long)m->arch.n_kv_heads, (long long)m->arch.n_heads,
                            d->gguf_arch);
        /* the gate-less MLP's GELU: llama.cpp's architecture has one (what lmpress reads its GGUF
         * with: desc->gguf_gelu_erf); a model with the other would read back otherwise */
        if (m->arch.plain_mlp && !m->arch.gelu_erf != !d->gguf_gelu_erf)
            return lmp_fail(LMP_EUNSUPPORTED, "%s: %s computes its MLP's GELU with %s, but a GGUF of llama.cpp's %s "
                            "is read with %s (no key says otherwise)", path, m->path,
                            m->arch.gelu_erf ? "the erf" : "the tanh approximation", d->gguf_arch,
                            d->gguf_gelu_erf ? "the erf" : "the tanh approximation");
        if (rotated && !strcmp(r->type, "llama3") && strcmp(d->gguf_arch, "llama") != 0)
            return lmp_fail(LMP_EUNSUPPORTED, "%s: %s turns q and k with llama3 RoPE, which GGUF carries as rope_freqs "
                            "for the llama architecture only, not %s", path, m->path, d->gguf_arch);
        if (rotated && !strcmp(r->type, "yarn") && !m->arch.mla && !yarn_is_default(r)) /* (MLA: check_deepseek2) */
            return lmp_fail(LMP_EUNSUPPORTED, "%s: %s turns q and k with YaRN parameters (beta_fast, beta_slow, "
                            "attention_factor or truncate) other than llama.cpp's defaults, which GGUF's rope.scaling "
                            "keys cannot say", path, m->path);
    } else if (!from_hf && rotated) { /* a config.json made here: rope_theta + rope_scaling */
        if (!strcmp(r->type, "llama3"))
            return lmp_fail(LMP_EUNSUPPORTED, "%s: %s turns q and k with llama3 RoPE, stored as rope_freqs divisors, "
                            "from which config.json's factor, low/high_freq_factor and original context cannot be "
                            "recovered: export a .gguf, or export from the Hugging Face folder", path, m->path);
        if (!strcmp(r->type, "yarn") &&
            (!yarn_is_default(r) || (double)m->arch.seq_len != r->factor * r->orig_ctx))
            return lmp_fail(LMP_EUNSUPPORTED, "%s: %s turns q and k with YaRN (factor %g, original context %g) that a "
                            "config.json with max_position_embeddings %lld cannot say as transformers reads it", path,
                            m->path, r->factor, r->orig_ctx, (long long)m->arch.seq_len);
        if (r->n_rot < m->arch.head_dim)
            return lmp_fail(LMP_EUNSUPPORTED, "%s: %s turns q and k over %lld of %lld dims (partial rotary), which the "
                            "config.json written here does not say", path, m->path, (long long)r->n_rot,
                            (long long)m->arch.head_dim);
    }
    if (rotated && strcmp(r->type, "linear") && strcmp(r->type, "yarn") && strcmp(r->type, "llama3") &&
        strcmp(r->type, "dynamic") && strcmp(r->type, "default") && strcmp(r->type, "longrope") && !(from_hf && !gguf))
        return lmp_fail(LMP_EUNSUPPORTED, "%s: %s turns q and k with %s RoPE, which the exporters do not write",
                        path, m->path, r->type);
    return 0;
}
