/* tokenizer_open.c — see tokenizer_open.h. */
#include "text/tokenizer_open.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "base/input_file.h"
#include "base/textfile.h"
#include "formats/gguf.h"
#include "formats/json.h"

/* Every id the tokenizer can produce (its vocabulary, BOS and EOS) indexes the model's embedding
 * rows and its head's logits, so none may reach the model's vocabulary size: one check for every
 * tokenizer source, before any text is encoded.  A tokenizer smaller than the model is fine (HF
 * models often pad their embedding). */
static int check_ids_fit_model(const lmp_model *m, const char *tok_path, lmp_tokenizer **out)
{
    int64_t max_id = (int64_t)lmp_tokenizer_vocab_size(*out) - 1;
    int64_t bos = lmp_tokenizer_bos(*out), eos = lmp_tokenizer_eos(*out);
    if (bos > max_id) max_id = bos;
    if (eos > max_id) max_id = eos;
    if (max_id < m->arch.vocab) return 0;
    int st = lmp_fail(LMP_EINVAL,
                      "%s: the tokenizer's ids go up to %lld (%d tokens), but the model %s has a vocabulary of "
                      "%lld: a larger id would read past its embedding; use the model's own tokenizer",
                      tok_path, (long long)max_id, lmp_tokenizer_vocab_size(*out), m->path, (long long)m->arch.vocab);
    lmp_tokenizer_free(*out);
    *out = NULL;
    return st;
}

static int open_unchecked(const lmp_model *m, const char *path, lmp_tokenizer **out, char *used, size_t used_size);

int lmp_open_tokenizer(const lmp_model *m, const char *path, lmp_tokenizer **out)
{
    char used[4096];
    int st = open_unchecked(m, path, out, used, sizeof used);
    return st ? st : check_ids_fit_model(m, used, out);
}

static int has_suffix(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n > k && strcmp(s + n - k, suffix) == 0;
}

int lmp_tokenizer_config_adds_bos(const char *tokenizer_model_path)
{
    const char *slash = strrchr(tokenizer_model_path, '/');
    char cfg[4096];
    snprintf(cfg, sizeof cfg, "%.*s%stokenizer_config.json", slash ? (int)(slash - tokenizer_model_path) : 0,
             tokenizer_model_path, slash ? "/" : "");
    char *text = NULL;
    size_t len = 0;
    lmp_json *j = NULL;
    int adds = 1;
    if (access(cfg, R_OK) == 0 && lmp_input_read(cfg, LMP_INPUT_TOKENIZER, &text, &len) == 0 &&
        lmp_json_parse(text, len, cfg, &j) == 0) {
        const lmp_json *b = lmp_json_get(j, "add_bos_token");
        if (b && b->type == LMP_JSON_BOOL) adds = b->boolean;
    }
    lmp_clear_error(); /* an unreadable or malformed optional file: the default */
    lmp_json_free(j);
    free(text);
    return adds;
}

/* A file given or found by name: tokenizer.json (Hugging Face), tokenizer.model (SentencePiece)
 * or a llama2.c tokenizer file. */
static int load_named(const lmp_model *m, const char *file, lmp_tokenizer **out)
{
    if (has_suffix(file, ".json")) return lmp_tokenizer_load_hf(file, out);
    if (has_suffix(file, ".model")) return lmp_tokenizer_load_spm(file, lmp_tokenizer_config_adds_bos(file), out);
    return lmp_tokenizer_load_llama2c(file, (int)m->arch.vocab, out);
}

/* An explicit path: a Hugging Face tokenizer.json, a SentencePiece tokenizer.model, or a llama2.c
 * tokenizer file.  Without one: the GGUF file's own vocabulary; for a Hugging Face folder (or a
 * .safetensors file) the tokenizer.json in that folder, else its tokenizer.model; else
 * tokenizer.bin or tok<vocab>.bin beside the model.  The file read goes into used[used_size] for
 * the messages. */
static int open_unchecked(const lmp_model *m, const char *path, lmp_tokenizer **out, char *used, size_t used_size)
{
    snprintf(used, used_size, "%s", path ? path : m->path);
    /* By content first: a GGUF given as the tokenizer lends its own vocabulary (whatever its
     * name).  The peek opens regular files only, without blocking (input_file.h); anything else
     * goes on to the loaders below, which give the message. */
    char why[256];
    int fd = path ? lmp_input_open(path, why, sizeof why) : -1;
    if (fd >= 0) {
        unsigned char magic[4];
        int is_gguf = pread(fd, magic, 4, 0) == 4 && memcmp(magic, "GGUF", 4) == 0;
        close(fd);
        if (is_gguf) {
            lmp_gguf *g = NULL;
            int st = lmp_gguf_open(path, &g);
            if (!st) st = lmp_tokenizer_load_gguf(g, out); /* its messages name the file */
            if (!st && lmp_tokenizer_vocab_size(*out) != m->arch.vocab) {
                st = lmp_fail(LMP_EINVAL, "%s: the GGUF's tokenizer has %d tokens, the model %lld", path,
                              lmp_tokenizer_vocab_size(*out), (long long)m->arch.vocab);
                lmp_tokenizer_free(*out);
                *out = NULL;
            }
            lmp_gguf_close(g);
            return st;
        }
    }
    if (path) return load_named(m, path, out);
    if (m->src_data && strncmp(m->format, "GGUF", 4) == 0) {
        int st = lmp_tokenizer_load_gguf(m->src_data, out);
        if (!st && lmp_tokenizer_vocab_size(*out) != m->arch.vocab) {
            st = lmp_fail(LMP_EINVAL, "%s: the tokenizer has %d tokens, the model %lld", m->path,
                          lmp_tokenizer_vocab_size(*out), (long long)m->arch.vocab);
            lmp_tokenizer_free(*out);
            *out = NULL;
        }
        return st;
    }
    char file[4096];
    int st = lmp_tokenizer_beside(m, file, sizeof file);
    if (st) return st;
    snprintf(used, used_size, "%s", file);
    return load_named(m, file, out);
}

int lmp_tokenizer_beside(const lmp_model *m, char *file, size_t size)
{
    struct stat sb;
    int is_dir = stat(m->path, &sb) == 0 && S_ISDIR(sb.st_mode);
    const char *slash = strrchr(m->path, '/');
    int dirlen = is_dir ? (int)strlen(m->path) : slash ? (int)(slash - m->path) : 1;
    const char *dir = is_dir || slash ? m->path : ".";
    char hf[4096], spm[4096];
    snprintf(hf, sizeof hf, "%.*s/tokenizer.json", dirlen, dir);
    snprintf(spm, sizeof spm, "%.*s/tokenizer.model", dirlen, dir);
    const int hf_model = lmp_model_is_hf(m);
    for (int i = 0; hf_model && i < 2; i++)
        if (access(i ? spm : hf, R_OK) == 0) {
            snprintf(file, size, "%s", i ? spm : hf);
            return 0;
        }
    char cand[2][4096];
    snprintf(cand[0], sizeof cand[0], "%.*s/tokenizer.bin", dirlen, dir);
    snprintf(cand[1], sizeof cand[1], "%.*s/tok%lld.bin", dirlen, dir, (long long)m->arch.vocab);
    for (int i = 0; i < 2; i++)
        if (access(cand[i], R_OK) == 0) {
            snprintf(file, size, "%s", cand[i]);
            return 0;
        }
    return lmp_fail(LMP_EINVAL, "%s: no tokenizer given and none found beside the model (%s, %s%s%s%s%s): "
                    "pass --tokenizer FILE or set model.tokenizer", m->path, cand[0], cand[1],
                    hf_model ? ", " : "", hf_model ? hf : "", hf_model ? ", " : "", hf_model ? spm : "");
}

int lmp_tokenize_file(const lmp_tokenizer *t, const char *path, int32_t **ids, int64_t *n)
{
    char *text;
    size_t len;
    int st = lmp_read_file(path, &text, &len);
    if (st) return st;
    st = lmp_tokenize(t, text, len, lmp_tokenizer_adds_bos(t), ids, n);
    free(text);
    return st ? lmp_fail_prefix(st, "%s", path) : 0;
}

