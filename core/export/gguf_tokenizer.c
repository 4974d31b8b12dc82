/* gguf_tokenizer.c — see gguf_tokenizer.h. */
#include "export/gguf_tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/error.h"
#include "base/input_file.h"
#include "base/log.h"
#include "formats/json.h"
#include "text/spm_model.h"
#include "text/tokenizer.h"
#include "text/tokenizer_open.h"

/* llama.cpp's llama_token_type. */
enum { TT_NORMAL = 1, TT_UNKNOWN = 2, TT_CONTROL = 3, TT_USER_DEFINED = 4, TT_UNUSED = 5, TT_BYTE = 6 };

/* ---- a GGUF's own vocabulary ---------------------------------------------------------------- */

static int copy_gguf(const lmp_gguf *g, int64_t vocab, lmp_gguf_meta *b)
{
    const lmp_gguf_kv *tok = lmp_gguf_find_kv(g, "tokenizer.ggml.tokens");
    if (!lmp_gguf_find_kv(g, "tokenizer.ggml.model") || !tok || tok->type != LMP_GGUF_ARRAY)
        return lmp_fail(LMP_EINVAL, "%s: no tokenizer to copy (tokenizer.ggml.model or tokenizer.ggml.tokens is missing)",
                        g->path);
    if ((int64_t)tok->n != vocab)
        return lmp_fail(LMP_EINVAL, "%s: the tokenizer has %llu tokens, the model %lld", g->path,
                        (unsigned long long)tok->n, (long long)vocab);
    for (uint64_t i = 0; i < g->n_kv; i++)
        if (strncmp(g->kv[i].key, "tokenizer.", 10) == 0) lmp_gguf_kv_copy(b, &g->kv[i]);
    return 0;
}

static int copy_gguf_file(const char *path, int64_t vocab, lmp_gguf_meta *b)
{
    lmp_gguf *g = NULL;
    int st = lmp_gguf_open(path, &g);
    if (!st) st = copy_gguf(g, vocab, b);
    lmp_gguf_close(g);
    return st;
}

/* ---- llama2.c's tokenizer.bin ------------------------------------------------------------- */

static int32_t rd_i32(const unsigned char *p)
{
    uint32_t u = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
    int32_t v;
    memcpy(&v, &u, 4);
    return v;
}

/* Characters of a UTF-8 string as Python counts them after decoding (bytes that do not continue
 * a character), for llama2c_to_gguf.py's len(t) == 6 test of a byte token. */
static size_t n_chars(const char *s, size_t n)
{
    size_t c = 0;
    for (size_t i = 0; i < n; i++) c += ((unsigned char)s[i] & 0xC0) != 0x80;
    return c;
}

/* Same token types as tools/ref/llama2c_to_gguf.py, so a file from either reads the same. */
static int32_t llama2c_type(int i, const char *s, size_t n)
{
    if (i == 0) return TT_UNKNOWN;
    if (i == 1 || i == 2) return TT_CONTROL;
    if (n_chars(s, n) == 6 && n >= 4 && memcmp(s, "<0x", 3) == 0 && s[n - 1] == '>') return TT_BYTE;
    return TT_NORMAL;
}

static int llama2c(const char *path, int64_t vocab, lmp_gguf_meta *b)
{
    char *data = NULL;
    size_t size = 0;
    int st = lmp_input_read(path, LMP_INPUT_TOKENIZER, &data, &size);
    if (st) return st;
    const unsigned char *u = (const unsigned char *)data;
    const int V = (int)vocab;
    char **strs = calloc((size_t)V, sizeof *strs);
    size_t *lens = calloc((size_t)V, sizeof *lens);
    float *scores = malloc((size_t)V * sizeof *scores);
    int32_t *types = malloc((size_t)V * sizeof *types);
    if (!strs || !lens || !scores || !types) {
        st = lmp_fail(LMP_ENOMEM, "%s: out of memory reading the tokenizer", path);
        goto done;
    }
    if (size < 4 || rd_i32(u) < 0) {
        st = lmp_fail(LMP_EINVAL, "%s: not a llama2.c tokenizer (no max_token_length header)", path);
        goto done;
    }
    size_t pos = 4;
    for (int i = 0; i < V; i++) {
        if (size - pos < 8) {
            st = lmp_fail(LMP_EINVAL, "%s: truncated llama2.c tokenizer: ends at token %d of %d", path, i, V);
            goto done;
        }
        memcpy(&scores[i], u + pos, 4); /* llama2.c files are little-endian, as the hosts are */
        const int32_t len = rd_i32(u + pos + 4);
        pos += 8;
        if (len < 0 || (size_t)len > size - pos) {
            st = lmp_fail(LMP_EINVAL, "%s: token %d has length %d, %zu bytes left: not a llama2.c tokenizer", path,
                          i, len, size - pos);
            goto done;
        }
        const char *s = data + pos;
        pos += (size_t)len;
        types[i] = llama2c_type(i, s, (size_t)len);
        /* A GGUF "llama" vocabulary holds SentencePiece's U+2581 where llama2.c's holds a space. */
        size_t spaces = 0;
        for (int32_t k = 0; k < len; k++) spaces += s[k] == ' ';
        if (!(strs[i] = malloc((size_t)len + 2 * spaces + 1))) {
            st = lmp_fail(LMP_ENOMEM, "%s: out of memory reading the tokenizer", path);
            goto done;
        }
        size_t o = 0;
        for (int32_t k = 0; k < len; k++)
            if (s[k] == ' ') {
                memcpy(strs[i] + o, "\xE2\x96\x81", 3);
                o += 3;
            } else {
                strs[i][o++] = s[k];
            }
        lens[i] = o;
    }
    lmp_gguf_kv_str(b, "tokenizer.ggml.model", "llama", 5);
    lmp_gguf_kv_strs(b, "tokenizer.ggml.tokens", (uint64_t)V, (const char *const *)strs, lens);
    lmp_gguf_kv_f32s(b, "tokenizer.ggml.scores", (uint64_t)V, scores);
    lmp_gguf_kv_i32s(b, "tokenizer.ggml.token_type", (uint64_t)V, types);
    /* llama2.c's fixed layout: <unk>, <s>, </s>; its encode prepends BOS and a dummy " " */
    lmp_gguf_kv_u32(b, "tokenizer.ggml.bos_token_id", 1);
    lmp_gguf_kv_u32(b, "tokenizer.ggml.eos_token_id", 2);
    lmp_gguf_kv_u32(b, "tokenizer.ggml.unknown_token_id", 0);
    lmp_gguf_kv_bool(b, "tokenizer.ggml.add_bos_token", 1);
    lmp_gguf_kv_bool(b, "tokenizer.ggml.add_space_prefix", 1);
done:
    for (int i = 0; strs && i < V; i++) free(strs[i]);
    free(strs);
    free(lens);
    free(scores);
    free(types);
    free(data);
    return st;
}

/* ---- a Hugging Face tokenizer.json -------------------------------------------------------- */

/* An integer member of the config.json beside the tokenizer, or -1 (an optional fallback: any
 * problem reading it just gives -1). */
/* A SentencePiece tokenizer.model: its pieces, scores and types as they are (a GGUF "llama"
 * vocabulary is the same thing; llama.cpp's converter writes it from the same file), the special
 * ids, and the flags that change the ids. */
static int spm(const char *path, int64_t vocab, lmp_gguf_meta *b)
{
    lmp_spm_model *m = NULL;
    int st = lmp_spm_model_read(path, &m);
    if (st) return st;
    const lmp_sp_vocab *v = lmp_spm_model_vocab(m);
    if (v->n > vocab) {
        st = lmp_fail(LMP_EINVAL, "%s: %d pieces, more than the model's vocabulary of %lld", path, v->n,
                      (long long)vocab);
        goto done;
    }
    /* A model whose embedding has more rows than pieces gets "[PAD<i>]" pieces of type UNUSED,
     * as llama.cpp's converter pads (llama.cpp wants one token per row). */
    const int V = (int)vocab;
    const char **strs = malloc((size_t)V * sizeof *strs);
    size_t *lens = malloc((size_t)V * sizeof *lens);
    float *scores = malloc((size_t)V * sizeof *scores);
    int32_t *types = malloc((size_t)V * sizeof *types);
    char *pads = malloc((size_t)(V - v->n) * 16 + 1);
    if (!strs || !lens || !scores || !types || !pads) {
        st = lmp_fail(LMP_ENOMEM, "%s: out of memory reading the tokenizer", path);
        goto free_arrays;
    }
    for (int i = 0; i < V; i++) {
        if (i < v->n) {
            strs[i] = v->piece[i];
            lens[i] = (size_t)v->piece_len[i];
            scores[i] = v->score[i];
            types[i] = v->type[i];
        } else {
            char *p = pads + (size_t)(i - v->n) * 16;
            strs[i] = p;
            lens[i] = (size_t)snprintf(p, 16, "[PAD%d]", i);
            scores[i] = -1000.0f;
            types[i] = TT_UNUSED;
        }
    }
    lmp_gguf_kv_str(b, "tokenizer.ggml.model", "llama", 5);
    lmp_gguf_kv_strs(b, "tokenizer.ggml.tokens", (uint64_t)V, strs, lens);
    lmp_gguf_kv_f32s(b, "tokenizer.ggml.scores", (uint64_t)V, scores);
    lmp_gguf_kv_i32s(b, "tokenizer.ggml.token_type", (uint64_t)V, types);
    if (v->bos_id >= 0) lmp_gguf_kv_u32(b, "tokenizer.ggml.bos_token_id", (uint32_t)v->bos_id);
    if (v->eos_id >= 0) lmp_gguf_kv_u32(b, "tokenizer.ggml.eos_token_id", (uint32_t)v->eos_id);
    if (v->unk_id >= 0) lmp_gguf_kv_u32(b, "tokenizer.ggml.unknown_token_id", (uint32_t)v->unk_id);
    lmp_gguf_kv_bool(b, "tokenizer.ggml.add_bos_token", v->adds_bos && lmp_tokenizer_config_adds_bos(path));
    lmp_gguf_kv_bool(b, "tokenizer.ggml.add_space_prefix", v->dummy_prefix);
    if (v->remove_extra_ws) lmp_gguf_kv_bool(b, "tokenizer.ggml.remove_extra_whitespaces", 1);
free_arrays:
    free(strs);
    free(scores);
    free(types);
    free(pads);
    free(lens);
done:
    lmp_spm_model_free(m);
    return st;
}

static int64_t config_id(const char *tokenizer_json, const char *key)
{
    const char *slash = strrchr(tokenizer_json, '/');
    char path[4096];
    snprintf(path, sizeof path, "%.*sconfig.json", slash ? (int)(slash - tokenizer_json + 1) : 0, tokenizer_json);
    char *text = NULL;
    size_t n = 0;
    lmp_json *j = NULL;
    int64_t v = -1;
    if (access(path, F_OK) == 0 && lmp_input_read(path, LMP_INPUT_JSON, &text, &n) == 0 &&
        lmp_json_parse(text, n, path, &j) == 0 && lmp_json_get_int(j, key, path, &v) != 0)
        v = -1;
    lmp_clear_error();
    lmp_json_free(j);
    free(text);
    return v;
}

static int hf(const char *path, int64_t vocab, lmp_gguf_meta *b)
{
    /* lmpress's own loader first: it refuses what it cannot tokenize (naming the file), and
     * gives the bos/eos it found and its pre-tokenization's GGUF name. */
    lmp_tokenizer *t = NULL;
    int st = lmp_tokenizer_load_hf(path, &t);
    if (st) return st;
    const char *pre = lmp_tokenizer_gguf_pre(t);
    int64_t bos = lmp_tokenizer_bos(t), eos = lmp_tokenizer_eos(t);
    const int adds_bos = lmp_tokenizer_adds_bos(t);
    lmp_tokenizer_free(t);
    if (!pre)
        return lmp_fail(LMP_EINVAL,
                        "%s: its normalizer or pre-tokenization (a SentencePiece-style model, ByteLevel "
                        "add_prefix_space, a normalizer other than Qwen2's NFC, a regex llama.cpp has no name for, "
                        "or ignore_merges without Llama 3's regex) has no tokenizer.ggml.pre that llama.cpp reads "
                        "the same way", path);
    if (bos < 0) bos = config_id(path, "bos_token_id");
    if (eos < 0) eos = config_id(path, "eos_token_id");

    char *text = NULL;
    size_t n = 0;
    lmp_json *j = NULL;
    const char **strs = NULL;
    size_t *lens = NULL;
    int32_t *types = NULL;
    char *pads = NULL, *joined = NULL;
    const char **mstrs = NULL;
    size_t *mlens = NULL;
    if ((st = lmp_input_read(path, LMP_INPUT_TOKENIZER, &text, &n)) || (st = lmp_json_parse(text, n, path, &j)))
        goto done;
    /* the loader above checked these are there and well formed */
    const lmp_json *model = lmp_json_get(j, "model");
    const lmp_json *vj = lmp_json_get(model, "vocab"), *mj = lmp_json_get(model, "merges");
    const lmp_json *added = lmp_json_get(j, "added_tokens");
    const size_t n_added = added && added->type == LMP_JSON_ARRAY ? added->n : 0;
    int64_t max_id = -1;
    for (size_t k = 0; k < vj->n; k++)
        if (vj->items[k].integer > max_id) max_id = vj->items[k].integer;
    for (size_t k = 0; k < n_added; k++) {
        const int64_t id = lmp_json_get(&added->items[k], "id")->integer;
        if (id > max_id) max_id = id;
    }
    if (max_id >= vocab) {
        st = lmp_fail(LMP_EINVAL, "%s: token ids go up to %lld, past the model's %lld embedding rows", path,
                      (long long)max_id, (long long)vocab);
        goto done;
    }
    const int V = (int)vocab;
    strs = calloc((size_t)V, sizeof *strs);
    lens = calloc((size_t)V, sizeof *lens);
    types = malloc((size_t)V * sizeof *types);
    pads = malloc((size_t)V * 16);
    mstrs = calloc(mj->n ? mj->n : 1, sizeof *mstrs);
    mlens = calloc(mj->n ? mj->n : 1, sizeof *mlens);
    size_t pair_bytes = 0;
    for (size_t r = 0; r < mj->n; r++)
        if (mj->items[r].type == LMP_JSON_ARRAY) pair_bytes += mj->items[r].items[0].str_len + mj->items[r].items[1].str_len + 1;
    joined = malloc(pair_bytes ? pair_bytes : 1);
    if (!strs || !lens || !types || !pads || !mstrs || !mlens || !joined) {
        st = lmp_fail(LMP_ENOMEM, "%s: out of memory reading the tokenizer", path);
        goto done;
    }
    for (int i = 0; i < V; i++) types[i] = TT_NORMAL;
    for (size_t k = 0; k < vj->n; k++) {
        const int id = (int)vj->items[k].integer;
        strs[id] = vj->keys[k];
        lens[id] = vj->key_lens[k];
    }
    for (size_t k = 0; k < n_added; k++) {
        const lmp_json *a = &added->items[k], *sp = lmp_json_get(a, "special");
        const lmp_json *content = lmp_json_get(a, "content");
        const int id = (int)lmp_json_get(a, "id")->integer;
        strs[id] = content->str;
        lens[id] = content->str_len;
        types[id] = sp && sp->type == LMP_JSON_BOOL && sp->boolean ? TT_CONTROL : TT_USER_DEFINED;
    }
    /* ids no token has (holes, the embedding's spare rows): named as llama.cpp's converter does */
    for (int i = 0; i < V; i++)
        if (!strs[i]) {
            strs[i] = pads + (size_t)i * 16;
            lens[i] = (size_t)snprintf(pads + (size_t)i * 16, 16, "[PAD%d]", i);
            types[i] = TT_UNUSED;
        }
    size_t o = 0;
    for (size_t r = 0; r < mj->n; r++) {
        const lmp_json *m = &mj->items[r];
        if (m->type == LMP_JSON_STRING) { /* "a b", as GGUF stores it */
            mstrs[r] = m->str;
            mlens[r] = m->str_len;
        } else { /* ["a", "b"] (tokenizers >= 0.20) */
            mstrs[r] = joined + o;
            memcpy(joined + o, m->items[0].str, m->items[0].str_len);
            o += m->items[0].str_len;
            joined[o++] = ' ';
            memcpy(joined + o, m->items[1].str, m->items[1].str_len);
            o += m->items[1].str_len;
            mlens[r] = (size_t)(joined + o - mstrs[r]);
        }
    }
    lmp_gguf_kv_str(b, "tokenizer.ggml.model", "gpt2", 4);
    lmp_gguf_kv_str(b, "tokenizer.ggml.pre", pre, strlen(pre));
    lmp_gguf_kv_strs(b, "tokenizer.ggml.tokens", (uint64_t)V, strs, lens);
    lmp_gguf_kv_i32s(b, "tokenizer.ggml.token_type", (uint64_t)V, types);
    lmp_gguf_kv_strs(b, "tokenizer.ggml.merges", mj->n, mstrs, mlens);
    if (bos >= 0 && bos < V) lmp_gguf_kv_u32(b, "tokenizer.ggml.bos_token_id", (uint32_t)bos);
    if (eos >= 0 && eos < V) lmp_gguf_kv_u32(b, "tokenizer.ggml.eos_token_id", (uint32_t)eos);
    lmp_gguf_kv_bool(b, "tokenizer.ggml.add_bos_token", adds_bos);
done:
    free(strs);
    free(lens);
    free(types);
    free(pads);
    free(mstrs);
    free(mlens);
    free(joined);
    lmp_json_free(j);
    free(text);
    return st;
}

/* ---- which one ---------------------------------------------------------------------------- */

static int is_gguf_file(const char *path)
{
    char why[256];
    unsigned char magic[4];
    const int fd = lmp_input_open(path, why, sizeof why);
    if (fd < 0) return 0;
    const int yes = pread(fd, magic, 4, 0) == 4 && memcmp(magic, "GGUF", 4) == 0;
    close(fd);
    return yes;
}

int lmp_gguf_meta_tokenizer(lmp_ctx *ctx, const lmp_model *m, const char *tokenizer_path, lmp_gguf_meta *b)
{
    const int64_t vocab = m->arch.vocab;
    int st;
    if (!tokenizer_path && m->src_data && strncmp(m->format, "GGUF", 4) == 0) {
        st = copy_gguf(m->src_data, vocab, b);
        return st ? lmp_fail_prefix(st, "tokenizer") : 0;
    }
    char beside[4096];
    const char *path = tokenizer_path;
    if (!path) {
        if ((st = lmp_tokenizer_beside(m, beside, sizeof beside))) return st;
        path = beside;
    }
    lmp_log(ctx, LMP_LOG_DEBUG, "export: the tokenizer is %s", path);
    const size_t n = strlen(path);
    if (is_gguf_file(path)) st = copy_gguf_file(path, vocab, b);
    else if (n > 5 && strcmp(path + n - 5, ".json") == 0) st = hf(path, vocab, b);
    else if (n > 6 && strcmp(path + n - 6, ".model") == 0) st = spm(path, vocab, b);
    else st = llama2c(path, vocab, b);
    return st ? lmp_fail_prefix(st, "tokenizer") : 0;
}
