/* tokenizer.c — the public tokenizer API (tokenizer.h): checks arguments and forwards to the
 * engine of the tokenizer's kind (tokenizer_sp.c, tokenizer_bpe.c). */
#include "text/tokenizer.h"

#include "base/error.h"
#include "formats/gguf.h"
#include "text/spm_model.h"
#include "text/tokenizer_impl.h"

#include <stdlib.h>
#include <string.h>

struct lmp_tokenizer {
    lmp_tokenizer_kind kind;
    lmp_sp *sp;   /* kind SENTENCEPIECE */
    lmp_bpe *bpe; /* kind BPE */
};

/* Wraps a freshly loaded engine (exactly one of sp, bpe non-NULL) into *out. */
static int wrap(lmp_sp *sp, lmp_bpe *bpe, lmp_tokenizer **out)
{
    lmp_tokenizer *t = calloc(1, sizeof *t);
    if (!t) {
        lmp_sp_free(sp);
        lmp_bpe_free(bpe);
        return lmp_fail(LMP_ENOMEM, "out of memory creating a tokenizer");
    }
    t->kind = sp ? LMP_TOKENIZER_SENTENCEPIECE : LMP_TOKENIZER_BPE;
    t->sp = sp;
    t->bpe = bpe;
    *out = t;
    return 0;
}

int lmp_tokenizer_load_llama2c(const char *path, int vocab_size, lmp_tokenizer **out)
{
    if (!out) return lmp_fail(LMP_EINVAL, "lmp_tokenizer_load_llama2c: out is NULL");
    *out = NULL;
    lmp_sp *sp = NULL;
    int rc = lmp_sp_load_llama2c(path, vocab_size, &sp);
    return rc ? rc : wrap(sp, NULL, out);
}

int lmp_tokenizer_load_gguf(const lmp_gguf *g, lmp_tokenizer **out)
{
    if (!out) return lmp_fail(LMP_EINVAL, "lmp_tokenizer_load_gguf: out is NULL");
    *out = NULL;
    if (!g) return lmp_fail(LMP_EINVAL, "lmp_tokenizer_load_gguf: GGUF is NULL");
    const lmp_gguf_kv *kv = lmp_gguf_find_kv(g, "tokenizer.ggml.model");
    if (!kv)
        return lmp_fail(LMP_EINVAL, "%s: no tokenizer in this GGUF (metadata tokenizer.ggml.model is missing)",
                        g->path);
    if (kv->type != LMP_GGUF_STRING)
        return lmp_fail(LMP_EINVAL, "%s: tokenizer.ggml.model is not a string", g->path);
    const char *model = kv->strs[0];
    size_t n = (size_t)kv->str_lens[0];
    int rc;
    if (n == 4 && memcmp(model, "gpt2", 4) == 0) {
        lmp_bpe *bpe = NULL;
        rc = lmp_bpe_load_gguf(g, &bpe);
        return rc ? rc : wrap(NULL, bpe, out);
    }
    if (n == 5 && memcmp(model, "llama", 5) == 0) {
        lmp_sp *sp = NULL;
        rc = lmp_sp_load_gguf(g, &sp);
        return rc ? rc : wrap(sp, NULL, out);
    }
    return lmp_fail(LMP_EINVAL,
                    "%s: unsupported tokenizer model \"%.*s\" (tokenizer.ggml.model; supported: "
                    "\"gpt2\" byte-level BPE, \"llama\" SentencePiece)", g->path,
                    (int)(n > 64 ? 64 : n), model);
}

int lmp_tokenizer_load_hf(const char *tokenizer_json_path, lmp_tokenizer **out)
{
    if (!out) return lmp_fail(LMP_EINVAL, "lmp_tokenizer_load_hf: out is NULL");
    *out = NULL;
    if (!tokenizer_json_path) return lmp_fail(LMP_EINVAL, "lmp_tokenizer_load_hf: path is NULL");
    lmp_bpe *bpe = NULL;
    int rc = lmp_bpe_load_hf(tokenizer_json_path, &bpe);
    return rc ? rc : wrap(NULL, bpe, out);
}

int lmp_tokenizer_load_spm(const char *path, int add_bos, lmp_tokenizer **out)
{
    if (!out) return lmp_fail(LMP_EINVAL, "lmp_tokenizer_load_spm: out is NULL");
    *out = NULL;
    if (!path) return lmp_fail(LMP_EINVAL, "lmp_tokenizer_load_spm: path is NULL");
    lmp_spm_model *m = NULL;
    int rc = lmp_spm_model_read(path, &m);
    if (rc) return rc;
    lmp_sp_vocab v = *lmp_spm_model_vocab(m);
    v.adds_bos = v.adds_bos && add_bos;
    lmp_sp *sp = NULL;
    rc = lmp_sp_from_vocab(path, &v, &sp);
    lmp_spm_model_free(m);
    return rc ? rc : wrap(sp, NULL, out);
}

int lmp_tokenizer_load_gpt2_files(const char *encoder_json, const char *vocab_bpe,
                                  lmp_tokenizer **out)
{
    if (!out) return lmp_fail(LMP_EINVAL, "lmp_tokenizer_load_gpt2_files: out is NULL");
    *out = NULL;
    if (!encoder_json || !vocab_bpe)
        return lmp_fail(LMP_EINVAL, "lmp_tokenizer_load_gpt2_files: a path is NULL");
    lmp_bpe *bpe = NULL;
    int rc = lmp_bpe_load_gpt2_files(encoder_json, vocab_bpe, &bpe);
    return rc ? rc : wrap(NULL, bpe, out);
}

void lmp_tokenizer_free(lmp_tokenizer *t)
{
    if (!t) return;
    lmp_sp_free(t->sp);
    lmp_bpe_free(t->bpe);
    free(t);
}

lmp_tokenizer_kind lmp_tokenizer_get_kind(const lmp_tokenizer *t) { return t ? t->kind : 0; }

int lmp_tokenizer_vocab_size(const lmp_tokenizer *t)
{
    if (!t) return 0;
    return t->sp ? lmp_sp_vocab_size(t->sp) : lmp_bpe_vocab_size(t->bpe);
}

int lmp_tokenizer_bos(const lmp_tokenizer *t)
{
    if (!t) return -1;
    return t->sp ? lmp_sp_bos(t->sp) : lmp_bpe_bos(t->bpe);
}

int lmp_tokenizer_eos(const lmp_tokenizer *t)
{
    if (!t) return -1;
    return t->sp ? lmp_sp_eos(t->sp) : lmp_bpe_eos(t->bpe);
}

int lmp_tokenizer_adds_bos(const lmp_tokenizer *t)
{
    if (!t) return 0;
    return t->sp ? lmp_sp_adds_bos(t->sp) : lmp_bpe_adds_bos(t->bpe);
}

const char *lmp_tokenizer_gguf_pre(const lmp_tokenizer *t)
{
    return t && t->bpe ? lmp_bpe_gguf_pre(t->bpe) : NULL;
}

int lmp_tokenize_ex(const lmp_tokenizer *t, const char *text, size_t len, unsigned flags,
                    int32_t **ids, int64_t *n_ids)
{
    if (!t || !ids || !n_ids || (!text && len)) return lmp_fail(LMP_EINVAL, "lmp_tokenize: NULL argument");
    if (!text) text = ""; /* len == 0 */
    if (t->sp) return lmp_sp_encode(t->sp, text, len, (flags & LMP_TOKENIZE_ADD_BOS) != 0, ids, n_ids);
    return lmp_bpe_encode(t->bpe, text, len, flags, ids, n_ids);
}

int lmp_tokenize(const lmp_tokenizer *t, const char *text, size_t len, int add_bos,
                 int32_t **ids, int64_t *n_ids)
{
    return lmp_tokenize_ex(t, text, len, add_bos ? LMP_TOKENIZE_ADD_BOS : 0u, ids, n_ids);
}

const char *lmp_tokenizer_decode(lmp_tokenizer *t, int prev, int token, size_t *len)
{
    size_t dummy;
    if (!len) len = &dummy;
    if (!t) {
        *len = 0;
        return "";
    }
    if (t->sp) return lmp_sp_decode(t->sp, prev, token, len);
    return lmp_bpe_decode(t->bpe, prev, token, len);
}
