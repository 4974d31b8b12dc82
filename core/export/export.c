/* export.c — see export.h: which writer a path gets, and the checks before any work. */
#include "export/export.h"

#include <errno.h>
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

int lmp_export_check_arch(const lmp_model *m, const char *path)
{
    const lmp_rope *r = &m->arch.rope;
    const lmp_arch_desc *d = m->arch.desc ? m->arch.desc : lmp_arch_by_name("llama");
    const int gguf = lmp_export_is_gguf(path), from_hf = lmp_model_is_hf(m);
    const int rotated = r->n_rot > 0 && !r->plain; /* n_rot 0: the classic rotation, never filled */
    /* The families whose identity both writers carry (docs/architectures.md, "export"). */
    static const char *const written[] = {"llama", "mistral", "qwen2", "qwen3", "gemma"};
    int ok = 0;
    for (size_t i = 0; i < sizeof written / sizeof *written; i++) ok |= !strcmp(d->name, written[i]);
    /* Phi-3: its fused modules are written in a Hugging Face folder whose config.json (LongRoPE
     * included) is the source's own; llama.cpp's phi3 is not written */
    ok |= !strcmp(d->name, "phi3") && !gguf && from_hf;
    if (!strcmp(d->name, "phi3") && !ok)
        return lmp_fail(LMP_EUNSUPPORTED, "%s: %s is a Phi-3 model (Phi3ForCausalLM): the GGUF writer does not write "
                        "llama.cpp's phi3 yet (fused attn_qkv / ffn_up, LongRoPE factors; docs/architectures.md)",
                        path, m->path);
    if (!ok)
        return lmp_fail(LMP_EUNSUPPORTED, "%s: %s is a %s model: the exporters do not write this architecture yet "
                        "(docs/architectures.md)", path, m->path, d->name);
    /* Sliding windows: llama.cpp's converter writes none for these architectures (a GGUF would
     * mean full attention), and a config.json made here would not say it either. */
    int slides = 0;
    for (int64_t l = 0; l < m->arch.n_layers && m->arch.window && m->arch.window < m->arch.seq_len; l++)
        slides |= lmp_arch_window(&m->arch, l) > 0;
    if (slides && (gguf || !from_hf))
        return lmp_fail(LMP_EUNSUPPORTED, "%s: %s attends within a sliding window of %lld positions, which %s does "
                        "not say: the file would mean full attention (export a Hugging Face folder from a Hugging "
                        "Face source, which keeps its config)", path, m->path, (long long)m->arch.window,
                        gguf ? "a GGUF of this architecture" : "the config.json written here");
    if (rotated && !strcmp(r->type, "longrope") && (gguf || !from_hf))
        return lmp_fail(LMP_EUNSUPPORTED, "%s: %s turns q and k with LongRoPE, which the exporters do not write yet "
                        "(the file would run another rotation than the one lmpress evaluated)", path, m->path);
    if (gguf) {
        if (!d->gguf_arch)
            return lmp_fail(LMP_EUNSUPPORTED, "%s: %s (%s) has no GGUF architecture here", path, m->path, d->name);
        if (m->lm_head != m->tok_emb && !strcmp(d->gguf_arch, "gemma"))
            return lmp_fail(LMP_EUNSUPPORTED, "%s: %s is a Gemma model with a head of its own, which llama.cpp's gemma "
                            "architecture has no tensor for (it ties the head to token_embd)", path, m->path);
        if (rotated && !strcmp(r->type, "llama3") && strcmp(d->gguf_arch, "llama") != 0)
            return lmp_fail(LMP_EUNSUPPORTED, "%s: %s turns q and k with llama3 RoPE, which GGUF carries as rope_freqs "
                            "for the llama architecture only, not %s", path, m->path, d->gguf_arch);
        if (rotated && !strcmp(r->type, "yarn") && !yarn_is_default(r))
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
        strcmp(r->type, "dynamic") && strcmp(r->type, "default") && !(from_hf && !gguf))
        return lmp_fail(LMP_EUNSUPPORTED, "%s: %s turns q and k with %s RoPE, which the exporters do not write",
                        path, m->path, r->type);
    return 0;
}
