/* hf_tokenizer.c — see hf_tokenizer.h. */
#include "export/hf_tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/log.h"
#include "export/gguf_tokenizer.h"
#include "formats/json_write.h"

/* llama.cpp's llama_token_type. */
enum { TT_NORMAL = 1, TT_UNKNOWN = 2, TT_CONTROL = 3, TT_USER_DEFINED = 4 };

/* The tokenizer.* metadata, parsed back from an in-memory GGUF image of it. */
typedef struct {
    unsigned char *image;
    lmp_gguf *g;
    int64_t n;
    const lmp_gguf_kv *tokens, *types, *scores, *merges;
    int is_llama;                /* "llama" (SentencePiece); else "gpt2" */
    int smollm_digits;           /* pre-tokenizer "smollm": digits split off one by one */
    int64_t bos, eos, unk;       /* -1 when absent */
    int add_bos, add_space_prefix;
    struct entry *order;         /* the tokens sorted by their bytes, for lookups */
} vocab;

struct entry {
    const char *s;
    size_t len;
    int32_t id;
};

static const char *tok(const vocab *v, int64_t i, size_t *len)
{
    *len = (size_t)v->tokens->str_lens[i];
    return v->tokens->strs[i];
}

static int32_t type_of(const vocab *v, int64_t i)
{
    int32_t t = TT_NORMAL;
    if (v->types) memcpy(&t, (const char *)v->types->data + 4 * i, 4);
    return t;
}

static float score_of(const vocab *v, int64_t i)
{
    float s = 0;
    if (v->scores) memcpy(&s, (const char *)v->scores->data + 4 * i, 4);
    return s;
}

static int cmp_bytes(const char *a, size_t na, const char *b, size_t nb)
{
    const int c = memcmp(a, b, na < nb ? na : nb);
    return c ? c : (na > nb) - (na < nb);
}

static int cmp_entries(const void *pa, const void *pb)
{
    const struct entry *a = pa, *b = pb;
    return cmp_bytes(a->s, a->len, b->s, b->len);
}

/* The id of the token with bytes s[0..n), or -1. */
static int64_t find(const vocab *v, const char *s, size_t n)
{
    int64_t lo = 0, hi = v->n;
    while (lo < hi) {
        const int64_t mid = lo + (hi - lo) / 2;
        const int c = cmp_bytes(v->order[mid].s, v->order[mid].len, s, n);
        if (c == 0) return v->order[mid].id;
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return -1;
}

static int64_t id_or_none(const lmp_gguf *g, const char *key)
{
    int64_t id;
    return lmp_gguf_find_kv(g, key) && lmp_gguf_get_int(g, key, &id) == 0 ? id : -1;
}

static int flag(const lmp_gguf *g, const char *key, int dflt)
{
    int64_t x;
    return lmp_gguf_find_kv(g, key) && lmp_gguf_get_int(g, key, &x) == 0 ? x != 0 : dflt;
}

static void vocab_free(vocab *v)
{
    lmp_gguf_close(v->g);
    free(v->image);
    free(v->order);
}

/* Loads the metadata; sets *why (and returns 0) when it is a tokenizer this file does not translate. */
static int vocab_load(lmp_ctx *ctx, const lmp_model *m, const char *tokenizer_path, vocab *v, const char **why)
{
    lmp_gguf_meta kv = {0}, img = {0};
    int st = lmp_gguf_meta_tokenizer(ctx, m, tokenizer_path, &kv);
    if (!st) {
        lmp_gguf_put_bytes(&img, "GGUF", 4);
        lmp_gguf_put_u32(&img, 3);
        lmp_gguf_put_u64(&img, 0);
        lmp_gguf_put_u64(&img, kv.n);
        lmp_gguf_put_bytes(&img, kv.data, kv.len);
        st = lmp_gguf_meta_status(&img, "tokenizer");
    }
    lmp_gguf_meta_free(&kv);
    if (st) {
        lmp_gguf_meta_free(&img);
        return st;
    }
    v->image = img.data;
    if ((st = lmp_gguf_parse(v->image, img.len, "tokenizer metadata", &v->g))) return st;
    const lmp_gguf *g = v->g;
    const char *model = NULL, *pre = NULL;
    size_t model_len = 0, pre_len = 0;
    lmp_gguf_get_string(g, "tokenizer.ggml.model", &model, &model_len);
    if (lmp_gguf_find_kv(g, "tokenizer.ggml.pre")) lmp_gguf_get_string(g, "tokenizer.ggml.pre", &pre, &pre_len);
    v->tokens = lmp_gguf_find_kv(g, "tokenizer.ggml.tokens");
    v->types = lmp_gguf_find_kv(g, "tokenizer.ggml.token_type");
    v->scores = lmp_gguf_find_kv(g, "tokenizer.ggml.scores");
    v->merges = lmp_gguf_find_kv(g, "tokenizer.ggml.merges");
    if (!v->tokens || v->tokens->type != LMP_GGUF_ARRAY || v->tokens->arr_type != LMP_GGUF_STRING) {
        *why = "its tokenizer.ggml.tokens is not an array of strings";
        return 0;
    }
    v->n = (int64_t)v->tokens->n;
    if (v->types && (v->types->arr_type != LMP_GGUF_INT32 || (int64_t)v->types->n != v->n)) v->types = NULL;
    if (v->scores && (v->scores->arr_type != LMP_GGUF_FLOAT32 || (int64_t)v->scores->n != v->n)) v->scores = NULL;
    v->is_llama = model && model_len == 5 && memcmp(model, "llama", 5) == 0;
    const int is_gpt2 = model && model_len == 4 && memcmp(model, "gpt2", 4) == 0;
    v->smollm_digits = pre && pre_len == 6 && memcmp(pre, "smollm", 6) == 0;
    if (!v->is_llama && !is_gpt2) *why = "its tokenizer model is neither \"llama\" nor \"gpt2\"";
    else if (is_gpt2 && pre && !v->smollm_digits && !(pre_len == 5 && memcmp(pre, "gpt-2", 5) == 0))
        *why = "its pre-tokenizer is neither GPT-2's nor SmolLM2's";
    else if (is_gpt2 && (!v->merges || v->merges->arr_type != LMP_GGUF_STRING))
        *why = "it has no merges";
    else if (v->is_llama && !v->scores) *why = "it has no scores";
    if (*why) return 0;
    v->bos = id_or_none(g, "tokenizer.ggml.bos_token_id");
    v->eos = id_or_none(g, "tokenizer.ggml.eos_token_id");
    v->unk = id_or_none(g, "tokenizer.ggml.unknown_token_id");
    v->add_bos = flag(g, "tokenizer.ggml.add_bos_token", v->is_llama) && v->bos >= 0 && v->bos < v->n;
    v->add_space_prefix = flag(g, "tokenizer.ggml.add_space_prefix", 1);
    if (!(v->order = malloc((size_t)v->n * sizeof *v->order)))
        return lmp_fail(LMP_ENOMEM, "out of memory indexing the tokenizer");
    for (int64_t i = 0; i < v->n; i++) {
        v->order[i].s = tok(v, i, &v->order[i].len);
        v->order[i].id = (int32_t)i;
    }
    qsort(v->order, (size_t)v->n, sizeof *v->order, cmp_entries);
    for (int64_t i = 1; i < v->n; i++)
        if (cmp_entries(&v->order[i - 1], &v->order[i]) == 0)
            *why = "two of its tokens are the same string (a tokenizer.json vocab is a map)";
    return 0;
}

/* ---- tokenizer.json ------------------------------------------------------------------------- */

static void name(FILE *f, const vocab *v, int64_t id)
{
    size_t n;
    const char *s = tok(v, id, &n);
    lmp_jw_string_n(f, s, n);
}

static void added_tokens(FILE *f, const vocab *v)
{
    fputs("  \"added_tokens\": [", f);
    int first = 1;
    for (int64_t i = 0; i < v->n; i++) {
        const int32_t t = type_of(v, i);
        if (t != TT_UNKNOWN && t != TT_CONTROL && t != TT_USER_DEFINED) continue;
        const int special = t != TT_USER_DEFINED;
        fprintf(f, "%s\n    {\"id\": %lld, \"content\": ", first ? "" : ",", (long long)i);
        name(f, v, i);
        fprintf(f, ", \"single_word\": false, \"lstrip\": false, \"rstrip\": false, \"normalized\": %s, \"special\": %s}",
                special ? "false" : "true", special ? "true" : "false");
        first = 0;
    }
    fputs(first ? "],\n" : "\n  ],\n", f);
}

static void bos_template(FILE *f, const vocab *v)
{
    fputs("{\"type\": \"TemplateProcessing\", \"single\": [{\"SpecialToken\": {\"id\": ", f);
    name(f, v, v->bos);
    fputs(", \"type_id\": 0}}, {\"Sequence\": {\"id\": \"A\", \"type_id\": 0}}], \"pair\": [{\"SpecialToken\": {\"id\": ", f);
    name(f, v, v->bos);
    fputs(", \"type_id\": 0}}, {\"Sequence\": {\"id\": \"A\", \"type_id\": 0}}, {\"SpecialToken\": {\"id\": ", f);
    name(f, v, v->bos);
    fputs(", \"type_id\": 1}}, {\"Sequence\": {\"id\": \"B\", \"type_id\": 1}}], \"special_tokens\": {", f);
    name(f, v, v->bos);
    fputs(": {\"id\": ", f);
    name(f, v, v->bos);
    fprintf(f, ", \"ids\": [%lld], \"tokens\": [", (long long)v->bos);
    name(f, v, v->bos);
    fputs("]}}}", f);
}

typedef struct {
    float score;
    int32_t merged, left, right;
} spm_merge;

static int cmp_merges(const void *pa, const void *pb)
{
    const spm_merge *a = pa, *b = pb;
    if (a->score != b->score) return a->score > b->score ? -1 : 1;
    if (a->merged != b->merged) return a->merged < b->merged ? -1 : 1;
    return (a->left > b->left) - (a->left < b->left);
}

/* SentencePiece's scores as ranked merges (see the header). */
static int spm_merges(const vocab *v, spm_merge **out, size_t *n_out)
{
    size_t n = 0, cap = 0;
    spm_merge *ms = NULL;
    for (int64_t i = 0; i < v->n; i++) {
        if (type_of(v, i) != TT_NORMAL) continue;
        size_t len;
        const char *s = tok(v, i, &len);
        for (size_t k = 1; k < len; k++) {
            if (((unsigned char)s[k] & 0xC0) == 0x80) continue; /* inside a character */
            const int64_t l = find(v, s, k), r = find(v, s + k, len - k);
            if (l < 0 || r < 0 || type_of(v, l) != TT_NORMAL || type_of(v, r) != TT_NORMAL) continue;
            if (n == cap) {
                spm_merge *grown = realloc(ms, (cap = cap ? 2 * cap : 1024) * sizeof *ms);
                if (!grown) {
                    free(ms);
                    return lmp_fail(LMP_ENOMEM, "out of memory ranking the tokenizer's merges");
                }
                ms = grown;
            }
            ms[n++] = (spm_merge){score_of(v, i), (int32_t)i, (int32_t)l, (int32_t)r};
        }
    }
    qsort(ms, n, sizeof *ms, cmp_merges);
    *out = ms;
    *n_out = n;
    return 0;
}

static int has_space(const vocab *v, int64_t id)
{
    size_t n;
    const char *s = tok(v, id, &n);
    return memchr(s, ' ', n) != NULL;
}

static int write_model(FILE *f, const vocab *v)
{
    fputs("  \"model\": {\n    \"type\": \"BPE\", \"dropout\": null, \"unk_token\": ", f);
    if (v->is_llama && v->unk >= 0 && v->unk < v->n) name(f, v, v->unk);
    else fputs("null", f);
    fprintf(f, ", \"continuing_subword_prefix\": null, \"end_of_word_suffix\": null, \"fuse_unk\": %s, "
               "\"byte_fallback\": %s, \"ignore_merges\": false,\n    \"vocab\": {",
            v->is_llama ? "true" : "false", v->is_llama ? "true" : "false");
    for (int64_t i = 0; i < v->n; i++) {
        fputs(i ? ", " : "", f);
        if (i % 8 == 0) fputs("\n      ", f);
        name(f, v, i);
        fprintf(f, ": %lld", (long long)i);
    }
    fputs("\n    },\n    \"merges\": [", f);
    if (!v->is_llama) { /* GGUF keeps them as HF's "a b" strings */
        for (uint64_t i = 0; i < v->merges->n; i++) {
            fputs(i ? ",\n      " : "\n      ", f);
            lmp_jw_string_n(f, v->merges->strs[i], (size_t)v->merges->str_lens[i]);
        }
    } else {
        spm_merge *ms = NULL;
        size_t n = 0;
        int st = spm_merges(v, &ms, &n);
        if (st) return st;
        /* "a b" cannot hold a piece with a space in it; the pair form can (tokenizers >= 0.20) */
        int pairs = 0;
        for (size_t i = 0; i < n && !pairs; i++) pairs = has_space(v, ms[i].left) || has_space(v, ms[i].right);
        for (size_t i = 0; i < n; i++) {
            fputs(i ? ",\n      " : "\n      ", f);
            size_t nl, nr;
            const char *l = tok(v, ms[i].left, &nl), *r = tok(v, ms[i].right, &nr);
            if (pairs) {
                fputc('[', f);
                lmp_jw_string_n(f, l, nl);
                fputs(", ", f);
                lmp_jw_string_n(f, r, nr);
                fputc(']', f);
            } else {
                char *joined = malloc(nl + nr + 1);
                if (!joined) {
                    free(ms);
                    return lmp_fail(LMP_ENOMEM, "out of memory writing the tokenizer's merges");
                }
                memcpy(joined, l, nl);
                joined[nl] = ' ';
                memcpy(joined + nl + 1, r, nr);
                lmp_jw_string_n(f, joined, nl + nr + 1);
                free(joined);
            }
        }
        free(ms);
    }
    fputs("\n    ]\n  }\n}\n", f);
    return 0;
}

static int write_tokenizer_json(FILE *f, const vocab *v)
{
    static const char *const byte_level = "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": true, "
                                          "\"use_regex\": true}";
    fputs("{\n  \"version\": \"1.0\",\n  \"truncation\": null,\n  \"padding\": null,\n", f);
    added_tokens(f, v);
    if (v->is_llama) {
        fputs("  \"normalizer\": {\"type\": \"Sequence\", \"normalizers\": [", f);
        if (v->add_space_prefix) fputs("{\"type\": \"Prepend\", \"prepend\": \"\u2581\"}, ", f);
        fputs("{\"type\": \"Replace\", \"pattern\": {\"String\": \" \"}, \"content\": \"\u2581\"}]},\n", f);
        fputs("  \"pre_tokenizer\": null,\n", f);
    } else {
        fputs("  \"normalizer\": null,\n  \"pre_tokenizer\": ", f);
        if (v->smollm_digits)
            fprintf(f, "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Digits\", \"individual_digits\": true}, %s]}",
                    byte_level);
        else fputs(byte_level, f);
        fputs(",\n", f);
    }
    fputs("  \"post_processor\": ", f);
    if (v->add_bos) bos_template(f, v);
    else if (v->is_llama) fputs("null", f);
    else fputs("{\"type\": \"ByteLevel\", \"add_prefix_space\": true, \"trim_offsets\": false, \"use_regex\": true}", f);
    fputs(",\n  \"decoder\": ", f);
    if (v->is_llama)
        fprintf(f, "{\"type\": \"Sequence\", \"decoders\": [{\"type\": \"Replace\", \"pattern\": {\"String\": \"\u2581\"}, "
                   "\"content\": \" \"}, {\"type\": \"ByteFallback\"}, {\"type\": \"Fuse\"}%s]}",
                v->add_space_prefix ? ", {\"type\": \"Strip\", \"content\": \" \", \"start\": 1, \"stop\": 0}" : "");
    else fputs("{\"type\": \"ByteLevel\", \"add_prefix_space\": true, \"trim_offsets\": true, \"use_regex\": true}", f);
    fputs(",\n", f);
    return write_model(f, v);
}

static void special_name(FILE *f, const vocab *v, const char *key, int64_t id)
{
    if (id < 0 || id >= v->n) return;
    fprintf(f, ",\n  \"%s\": ", key);
    name(f, v, id);
}

static void write_tokenizer_config(FILE *f, const vocab *v, const lmp_model *m)
{
    fprintf(f, "{\n  \"tokenizer_class\": \"PreTrainedTokenizerFast\",\n  \"add_bos_token\": %s,\n"
               "  \"add_eos_token\": false,\n  \"clean_up_tokenization_spaces\": false,\n  \"model_max_length\": %lld",
            v->add_bos ? "true" : "false", (long long)m->arch.seq_len);
    special_name(f, v, "bos_token", v->bos);
    special_name(f, v, "eos_token", v->eos);
    special_name(f, v, "unk_token", v->unk);
    const lmp_gguf_kv *tmpl = lmp_gguf_find_kv(v->g, "tokenizer.chat_template");
    if (tmpl && tmpl->type == LMP_GGUF_STRING) {
        fputs(",\n  \"chat_template\": ", f);
        lmp_jw_string_n(f, tmpl->strs[0], (size_t)tmpl->str_lens[0]);
    }
    fputs("\n}\n", f);
}

int lmp_hf_write_tokenizer(lmp_ctx *ctx, const lmp_model *m, const char *tokenizer_path, lmp_outdir *od,
                           int *written)
{
    vocab v = {0};
    const char *why = NULL;
    FILE *f;
    *written = 0;
    int st = vocab_load(ctx, m, tokenizer_path, &v, &why);
    if (st || why) { /* the weights are still worth having */
        lmp_log(ctx, LMP_LOG_WARN, "%s: no tokenizer.json written: %s", od->dest, st ? lmp_last_error() : why);
        st = 0;
    } else if (!(st = lmp_outdir_create(od, "tokenizer.json", &f))) {
        st = write_tokenizer_json(f, &v);
        const int cst = lmp_outdir_close(od, "tokenizer.json", f);
        if (!st) st = cst;
        if (!st && !(st = lmp_outdir_create(od, "tokenizer_config.json", &f))) {
            write_tokenizer_config(f, &v, m);
            st = lmp_outdir_close(od, "tokenizer_config.json", f);
        }
        *written = !st;
    }
    vocab_free(&v);
    return st;
}
