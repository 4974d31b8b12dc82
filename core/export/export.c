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
    return lmp_export_is_gguf(o->path) ? lmp_export_gguf(ctx, m, blocks, o) : lmp_export_hf(ctx, m, blocks, o);
}

int lmp_export_check_arch(const lmp_model *m, const char *path)
{
    const lmp_rope *r = &m->arch.rope;
    /* What the writers have always written: the Llama block (Llama, Mistral, Qwen2) and GPT-2. */
    static const char *const written[] = {"llama", "mistral", "qwen2", "gpt2"};
    const char *name = m->arch.desc ? m->arch.desc->name : "llama";
    int ok = 0;
    for (size_t i = 0; i < sizeof written / sizeof *written; i++) ok |= !strcmp(name, written[i]);
    if (!ok)
        return lmp_fail(LMP_EUNSUPPORTED, "%s: %s is a %s model: the exporters do not write this architecture yet "
                        "(docs/architectures.md)", path, m->path, name);
    if (r->n_rot && !r->plain)
        return lmp_fail(LMP_EUNSUPPORTED, "%s: %s turns q and k with %s RoPE%s, which the exporters do not write yet "
                        "(the file would run the plain rotation: its numbers would differ from what lmpress "
                        "evaluated)", path, m->path, r->type, r->n_rot < m->arch.head_dim ? " over part of each head" : "");
    return 0;
}
