/* test_tokenizer_families.c — the tokenizers of today's model families, id for id against the
 * reference libraries: tests/fixtures/tokenizers/ holds small tokenizer.json files with exactly
 * the normalizer / pre-tokenizer / model options / decoder of Qwen2 (NFC + Split regex +
 * ByteLevel), Llama 3, an NFKC byte-level one, Llama 2 (Prepend + Replace, byte_fallback),
 * Mistral (Metaspace prepend_scheme "first"), Gemma (Replace only), Metaspace "always"/"never",
 * every Split behaviour before ByteLevel, and Split steps before a SentencePiece-style model,
 * a sentencepiece model as a GGUF "llama" vocabulary (plain, with remove_extra_whitespaces, with
 * user-defined pieces),
 * and GGUF "gpt2" vocabularies with tokenizer.ggml.pre "qwen2" and "llama-bpe"; golden.json has
 * the ids PyPI `tokenizers` and `sentencepiece` give for texts.json (English, code, digits, CJK,
 * emoji, whitespace runs, decomposed accents that NFC composes, NFKC compatibility forms).  All
 * of it is made by tools/ref/tok_fixtures.py; no PyPI package is needed at test time.
 *
 * Also: a "llama" GGUF whose scores were flattened by the converter is refused; lmpress reads
 * back the tokenizer.json it exports for a llama2.c model (issue 34, item 16) with the same ids
 * as the llama2.c tokenizer; a catastrophic Split regex stops at PCRE2's match limit with a
 * message. */
#include "base/ctx.h"
#include "base/error.h"
#include "export/hf_tokenizer.h"
#include "export/out_dir.h"
#include "formats/gguf.h"
#include "formats/json.h"
#include "model/model.h"
#include "text/tokenizer.h"
#include "text/tokenizer_open.h"
#include "text/tokenizer_regex.h"

#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "testutil.h"

#define FIX LMP_SOURCE_DIR "/tests/fixtures/tokenizers/"
#define STORIES LMP_SOURCE_DIR "/models/stories260K/stories260K.bin"
#define TOK512 LMP_SOURCE_DIR "/models/stories260K/tok512.bin"
#define WIKI LMP_DATA_DIR "/wikitext-2/wiki.test.raw"

static lmp_json *load_json(const char *path)
{
    size_t n;
    char *text = (char *)lmp_test_slurp(path, &n);
    lmp_json *j = NULL;
    ck_assert_msg(lmp_json_parse(text, n, path, &j) == 0, "%s", lmp_last_error());
    free(text);
    return j;
}

static lmp_tokenizer *load(const char *file)
{
    char path[512];
    snprintf(path, sizeof path, "%s%s", FIX, file);
    lmp_tokenizer *t = NULL;
    size_t n = strlen(path);
    if (strcmp(path + n - 5, ".json") == 0) {
        ck_assert_msg(lmp_tokenizer_load_hf(path, &t) == 0, "%s", lmp_last_error());
    } else if (strcmp(path + n - 6, ".model") == 0) { /* sentencepiece's encode(): no BOS */
        ck_assert_msg(lmp_tokenizer_load_spm(path, 0, &t) == 0, "%s", lmp_last_error());
    } else {
        lmp_gguf *g = NULL;
        ck_assert_msg(lmp_gguf_open(path, &g) == 0, "%s", lmp_last_error());
        ck_assert_msg(lmp_tokenizer_load_gguf(g, &t) == 0, "%s", lmp_last_error());
        lmp_gguf_close(g);
    }
    return t;
}

/* Tokenizes every text of texts.json with flags and compares with golden[key]; a null golden
 * entry is a text the reference does not cover for that file.  Returns the number compared. */
static int compare_family(const char *file, const char *key, unsigned flags, int with_bos)
{
    lmp_json *texts = load_json(FIX "texts.json"), *golden = load_json(FIX "golden.json");
    const lmp_json *want = lmp_json_get(golden, key);
    ck_assert_msg(want && want->type == LMP_JSON_ARRAY, "golden.json has no \"%s\"", key);
    lmp_tokenizer *t = load(file);
    if (with_bos && lmp_tokenizer_adds_bos(t)) flags |= LMP_TOKENIZE_ADD_BOS;
    int compared = 0;
    for (size_t i = 0; i < want->n; i++) {
        const lmp_json *w = &want->items[i], *text = &texts->items[i];
        if (w->type == LMP_JSON_NULL) continue;
        int32_t *ids = NULL;
        int64_t n = 0;
        ck_assert_msg(lmp_tokenize_ex(t, text->str, text->str_len, flags, &ids, &n) == 0, "%s: %s", file,
                      lmp_last_error());
        int same = (size_t)n == w->n;
        for (int64_t k = 0; same && k < n; k++) same = ids[k] == (int32_t)w->items[k].integer;
        if (!same) {
            fprintf(stderr, "%s text %zu: got", file, i);
            for (int64_t k = 0; k < n; k++) fprintf(stderr, " %d", ids[k]);
            fprintf(stderr, "\n  want");
            for (size_t k = 0; k < w->n; k++) fprintf(stderr, " %lld", (long long)w->items[k].integer);
            fprintf(stderr, "\n");
        }
        ck_assert_msg(same, "%s (%s): text %zu (\"%.40s\") differs from the reference", file, key, i, text->str);
        free(ids);
        compared++;
    }
    lmp_tokenizer_free(t);
    lmp_json_free(texts);
    lmp_json_free(golden);
    printf("test_tokenizer_families: %s: %d texts equal to %s\n", file, compared, key);
    return compared;
}

START_TEST(test_byte_level_families)
{
    /* HF encode(add_special_tokens=False) matches added tokens in the text: PARSE_SPECIAL */
    ck_assert_int_eq(compare_family("qwen2.tokenizer.json", "qwen2", LMP_TOKENIZE_PARSE_SPECIAL, 0), 24);
    ck_assert_int_eq(compare_family("llama3.tokenizer.json", "llama3", LMP_TOKENIZE_PARSE_SPECIAL, 0), 24);
    ck_assert_int_eq(compare_family("nfkc.tokenizer.json", "nfkc", LMP_TOKENIZE_PARSE_SPECIAL, 0), 24);
    /* Split with MergedWithPrevious, Contiguous, MergedWithNext and Removed, then ByteLevel */
    ck_assert_int_eq(compare_family("splits.tokenizer.json", "splits", LMP_TOKENIZE_PARSE_SPECIAL, 0), 24);
}
END_TEST

START_TEST(test_sentencepiece_style_families)
{
    static const char *const fams[] = {"llama2", "mistral", "gemma", "llama2_always", "llama2_never", "sp_split"};
    for (size_t f = 0; f < sizeof fams / sizeof *fams; f++) {
        char file[64], key[64];
        snprintf(file, sizeof file, "%s.tokenizer.json", fams[f]);
        ck_assert_int_eq(compare_family(file, fams[f], LMP_TOKENIZE_PARSE_SPECIAL, 0), 24);
        snprintf(key, sizeof key, "%s+bos", fams[f]); /* encode() with the post_processor's BOS */
        ck_assert_int_eq(compare_family(file, key, LMP_TOKENIZE_PARSE_SPECIAL, 1), 2);
        lmp_tokenizer *t = load(file); /* <s> and </s> without a tokenizer_config.json */
        ck_assert_int_eq(lmp_tokenizer_bos(t), 1);
        ck_assert_int_eq(lmp_tokenizer_eos(t), 2);
        ck_assert_int_eq(lmp_tokenizer_adds_bos(t), 1);
        lmp_tokenizer_free(t);
    }
}
END_TEST

START_TEST(test_gguf_vocabularies)
{
    /* sentencepiece itself, through the GGUF fields llama.cpp's converter writes */
    ck_assert_int_eq(compare_family("sp.gguf", "sp.gguf", 0, 0), 24);
    ck_assert_int_eq(compare_family("sp_rws.gguf", "sp_rws.gguf", 0, 0), 24);
    /* user-defined pieces (Gemma has many): matched whole, longest first, never merged */
    ck_assert_int_eq(compare_family("sp_user.gguf", "sp_user.gguf", 0, 0), 24);
    /* tokenizer.ggml.pre "qwen2" / "llama-bpe": the texts already in NFC (llama.cpp has no NFC) */
    ck_assert_int_ge(compare_family("qwen2.gguf", "qwen2.gguf", LMP_TOKENIZE_PARSE_SPECIAL, 0), 18);
    ck_assert_int_ge(compare_family("llama3.gguf", "llama3.gguf", LMP_TOKENIZE_PARSE_SPECIAL, 0), 18);
}
END_TEST

static uint64_t fnv1a64_ids(const int32_t *ids, int64_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (int64_t i = 0; i < n; i++)
        for (int k = 0; k < 4; k++) {
            h ^= ((uint32_t)ids[i] >> (8 * k)) & 0xFF;
            h *= 0x100000001b3ull;
        }
    return h;
}

/* A long text: the first 100 kB of WikiText-2 test, id count and FNV-1a hash of the ids equal to
 * the reference's (golden.json "wiki100k"): the Llama 2 / Mistral files tokenize it as one word
 * of 100 k characters (no pre-tokenizer, or Metaspace without split). */
START_TEST(test_long_text)
{
    lmp_json *golden = load_json(FIX "golden.json");
    const lmp_json *w = lmp_json_get(golden, "wiki100k");
    ck_assert_ptr_nonnull(w);
    size_t n;
    char *wiki = (char *)lmp_test_slurp(WIKI, &n);
    int64_t len = 0;
    ck_assert_int_eq(lmp_json_get_int(w, "bytes", "golden.json", &len), 0);
    ck_assert_int_le(len, (int64_t)n);
    int checked = 0;
    for (size_t k = 0; k < w->n; k++) {
        if (strcmp(w->keys[k], "bytes") == 0) continue;
        char file[64];
        snprintf(file, sizeof file, "%s%s", w->keys[k], strstr(w->keys[k], ".gguf") ? "" : ".tokenizer.json");
        lmp_tokenizer *t = load(file);
        int32_t *ids;
        int64_t m;
        unsigned flags = strstr(file, ".gguf") ? 0u : LMP_TOKENIZE_PARSE_SPECIAL;
        ck_assert_msg(lmp_tokenize_ex(t, wiki, (size_t)len, flags, &ids, &m) == 0, "%s", lmp_last_error());
        char hash[32];
        snprintf(hash, sizeof hash, "%016llx", (unsigned long long)fnv1a64_ids(ids, m));
        const lmp_json *want = &w->items[k];
        ck_assert_msg(m == want->items[0].integer && strcmp(hash, want->items[1].str) == 0,
                      "%s: %lld ids, hash %s; the reference: %lld, %s", file, (long long)m, hash,
                      (long long)want->items[0].integer, want->items[1].str);
        printf("test_tokenizer_families: %s: WikiText-2 100 kB -> %lld ids, hash equal to the reference\n", file,
               (long long)m);
        free(ids);
        lmp_tokenizer_free(t);
        checked++;
    }
    ck_assert_int_eq(checked, 12);
    free(wiki);
    lmp_json_free(golden);
}
END_TEST

/* Long runs of one class (a million spaces, 300 k "!", a repeated mix): the regex match limit lets
 * linear patterns through (Qwen2's \s*[\r\n]+ rescans a whitespace run), and the ids equal the
 * reference's (golden.json "runs"). */
static char *make_run(const char *name, size_t *n)
{
    char *s = malloc(1100000);
    ck_assert_ptr_nonnull(s);
    size_t k = 0;
    if (strcmp(name, "spaces") == 0) {
        memset(s, ' ', 1000000);
        k = 1000000;
        s[k++] = 'x';
    } else if (strcmp(name, "bangs") == 0) {
        memset(s, '!', 300000);
        memset(s + 300000, '\n', 1000);
        k = 301000;
    } else {
        for (int i = 0; i < 50000; i++, k += 6) memcpy(s + k, "ab1 !\t", 6);
    }
    *n = k;
    return s;
}

START_TEST(test_long_runs)
{
    lmp_json *golden = load_json(FIX "golden.json");
    const lmp_json *runs = lmp_json_get(golden, "runs");
    ck_assert_ptr_nonnull(runs);
    ck_assert_int_eq((int)runs->n, 9);
    for (size_t k = 0; k < runs->n; k++) {
        char kind[64], file[96];
        const char *slash = strchr(runs->keys[k], '/');
        ck_assert_ptr_nonnull(slash);
        snprintf(kind, sizeof kind, "%.*s", (int)(slash - runs->keys[k]), runs->keys[k]);
        snprintf(file, sizeof file, "%s.tokenizer.json", kind);
        size_t n;
        char *text = make_run(slash + 1, &n);
        lmp_tokenizer *t = load(file);
        int32_t *ids;
        int64_t m;
        ck_assert_msg(lmp_tokenize(t, text, n, 0, &ids, &m) == 0, "%s: %s", runs->keys[k], lmp_last_error());
        char hash[32];
        snprintf(hash, sizeof hash, "%016llx", (unsigned long long)fnv1a64_ids(ids, m));
        const lmp_json *want = &runs->items[k];
        ck_assert_msg(m == want->items[0].integer && strcmp(hash, want->items[1].str) == 0,
                      "%s: %lld ids, hash %s; the reference: %lld, %s", runs->keys[k], (long long)m, hash,
                      (long long)want->items[0].integer, want->items[1].str);
        free(ids);
        free(text);
        lmp_tokenizer_free(t);
    }
    printf("test_tokenizer_families: 9 long runs equal to the reference\n");
    lmp_json_free(golden);
}
END_TEST

/* Split pieces (Isolated) of regexes on text with whitespace beyond ASCII, equal to `tokenizers`'
 * (U+0085, U+00A0, U+2028, U+3000: Unicode White_Space in both Oniguruma and PCRE2). */
START_TEST(test_regex_spaces_as_oniguruma)
{
    static const struct { const char *name, *re; } cases[] = {
        {"qwen2", "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
                  "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
        {"s", "\\s+"}, {"S", "\\S+"}, {"class", "[^\\s\\p{L}]+"}};
    lmp_json *golden = load_json(FIX "golden.json");
    const lmp_json *text = lmp_json_get(golden, "splits_text"), *all = lmp_json_get(golden, "split_pieces");
    ck_assert_ptr_nonnull(text);
    ck_assert_ptr_nonnull(all);
    const unsigned char *s = (const unsigned char *)text->str;
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        const lmp_json *want = lmp_json_get(all, cases[c].name);
        ck_assert_ptr_nonnull(want);
        lmp_tok_regex *re;
        ck_assert_msg(lmp_tok_regex_compile(cases[c].re, strlen(cases[c].re), 0, "test", &re) == 0, "%s",
                      lmp_last_error());
        lmp_tok_regex_scratch *m = lmp_tok_regex_scratch_new(re);
        ck_assert_ptr_nonnull(m);
        size_t got[64][2], n = 0, i = 0, ms, me;
        while (lmp_tok_regex_find(re, m, s, text->str_len, i, &ms, &me) == 1) {
            if (ms > i) got[n][0] = i, got[n++][1] = ms;
            got[n][0] = ms, got[n++][1] = me;
            i = me;
        }
        if (i < text->str_len) got[n][0] = i, got[n++][1] = text->str_len;
        int same = n == want->n;
        for (size_t k = 0; same && k < n; k++)
            same = (int64_t)got[k][0] == want->items[k].items[0].integer &&
                   (int64_t)got[k][1] == want->items[k].items[1].integer;
        ck_assert_msg(same, "regex %s: %zu pieces, the reference %zu (or their offsets differ)", cases[c].name, n,
                      want->n);
        lmp_tok_regex_scratch_free(m);
        lmp_tok_regex_free(re);
    }
    lmp_json_free(golden);
}
END_TEST

/* A "llama" GGUF whose scores are all equal (gguf-py's LlamaHfVocab: a tokenizer.json-only
 * folder, e.g. a current Mistral, converted by convert_hf_to_gguf.py) has lost its merge order:
 * refused, naming the key, instead of tokenized differently from the first token on. */
/* A tokenizer.model read as it is (a Hugging Face folder without tokenizer.json), against
 * sentencepiece's own ids; then what it cannot do, refused by name. */
START_TEST(test_sentencepiece_model_files)
{
    ck_assert_int_eq(compare_family("sp.model", "sp.model", 0, 0), 24);
    ck_assert_int_eq(compare_family("sp_user.model", "sp_user.model", 0, 0), 24);
    ck_assert_int_eq(compare_family("sp_rws.model", "sp_rws.model", 0, 0), 24);

    /* protobuf by hand: one piece "a" (field 1 { 1: "a", 2: 0.0f }), then a trainer_spec or a
     * normalizer_spec field, then the message expected */
    static const struct {
        const char *what;
        unsigned char tail[24];
        size_t n;
        const char *msg;
    } bad[] = {
        {"unigram", {0x12, 0x02, 0x18, 0x01}, 4, "model_type UNIGRAM"},
        {"charsmap", {0x12, 0x05, 0x18, 0x02, 0x98, 0x02, 0x01, 0x1A, 0x0E, 0x0A, 0x08, 'n', 'm', 't', '_', 'n', 'f',
                      'k', 'c', 0x12, 0x02, 0x01, 0x02}, 23, "precompiled_charsmap"},
        {"no byte fallback", {0x12, 0x02, 0x18, 0x02}, 4, "byte_fallback"},
        {"truncated", {0x12, 0x09, 0x18}, 3, "malformed"},
    };
    static const unsigned char piece[] = {0x0A, 0x08, 0x0A, 0x01, 'a', 0x15, 0, 0, 0, 0};
    char dir[256];
    lmp_test_tmpdir(dir, sizeof dir, "spm");
    const char *path = lmp_test_path(dir, "bad.model");
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        FILE *f = fopen(path, "wb");
        ck_assert_ptr_nonnull(f);
        fwrite(piece, 1, sizeof piece, f);
        fwrite(bad[i].tail, 1, bad[i].n, f);
        fclose(f);
        lmp_tokenizer *t = NULL;
        ck_assert_msg(lmp_tokenizer_load_spm(path, 1, &t) != 0, "%s: accepted", bad[i].what);
        ck_assert_ptr_null(t);
        const char *msg = lmp_last_error();
        ck_assert_msg(strstr(msg, bad[i].msg) && strstr(msg, "bad.model"), "%s: message: %s", bad[i].what, msg);
        printf("test_tokenizer_families: %s refused: %s\n", bad[i].what, msg);
    }
    lmp_test_rmtree(dir);
}
END_TEST

/* A Hugging Face folder with a tokenizer.model and no tokenizer.json (the arch fixtures of the
 * SentencePiece families): found beside the model and read, BOS added as Llama's tokenizer does. */
START_TEST(test_folder_tokenizer_model)
{
    lmp_model *m = NULL;
    ck_assert_msg(lmp_model_load(LMP_SOURCE_DIR "/tests/fixtures/arch/mistral/hf5", &m) == 0, "%s", lmp_last_error());
    char file[4096];
    ck_assert_int_eq(lmp_tokenizer_beside(m, file, sizeof file), 0);
    ck_assert_msg(strstr(file, "/tokenizer.model"), "%s", file);
    lmp_tokenizer *t = NULL;
    ck_assert_msg(lmp_open_tokenizer(m, NULL, &t) == 0, "%s", lmp_last_error());
    ck_assert_int_eq(lmp_tokenizer_get_kind(t), LMP_TOKENIZER_SENTENCEPIECE);
    ck_assert_int_eq(lmp_tokenizer_adds_bos(t), 1);
    ck_assert_int_eq(lmp_tokenizer_bos(t), 1);
    lmp_tokenizer_free(t);
    lmp_model_free(m);
}
END_TEST

START_TEST(test_flat_scores_refused)
{
    lmp_gguf *g = NULL;
    ck_assert_msg(lmp_gguf_open(FIX "sp_flat.gguf", &g) == 0, "%s", lmp_last_error());
    lmp_tokenizer *t = (lmp_tokenizer *)(uintptr_t)1;
    ck_assert_int_ne(lmp_tokenizer_load_gguf(g, &t), 0);
    ck_assert_ptr_null(t);
    const char *msg = lmp_last_error();
    ck_assert_msg(strstr(msg, "sp_flat.gguf") && strstr(msg, "tokenizer.ggml.scores"), "message: %s", msg);
    printf("test_tokenizer_families: expected error: %s\n", msg);
    lmp_gguf_close(g);
}
END_TEST

/* The name each tokenizer.json's pre-tokenization gets in a GGUF export (llama.cpp's names). */
START_TEST(test_gguf_pre_names)
{
    static const struct { const char *file, *pre; } cases[] = {
        {"qwen2.tokenizer.json", "qwen2"}, {"llama3.tokenizer.json", "llama-bpe"},
        {"nfkc.tokenizer.json", NULL},      /* GGUF has no NFKC */
        {"llama2.tokenizer.json", NULL},   {"qwen2.gguf", "qwen2"}, {"llama3.gguf", "llama-bpe"}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        lmp_tokenizer *t = load(cases[i].file);
        const char *pre = lmp_tokenizer_gguf_pre(t);
        if (cases[i].pre) ck_assert_msg(pre && strcmp(pre, cases[i].pre) == 0, "%s: %s", cases[i].file, pre ? pre : "NULL");
        else ck_assert_msg(pre == NULL, "%s: %s", cases[i].file, pre);
        lmp_tokenizer_free(t);
    }
}
END_TEST

/* llama.cpp's "bloom" pre-tokenizer (tokenizer.ggml.pre; issue 40): bloom_llamacpp.txt tokenized by
 * llama.cpp itself with the bloom architecture fixture's GGUF vocabulary (tests/fixtures/arch/bloom:
 * llama-perplexity, llama.cpp 0c1e570, -c 64 --kl-divergence-base, whose file keeps the text's ids:
 * the first 37 x 64 of them, no BOS) in bloom_llamacpp.ids; lmpress's ids of the same text must
 * begin with them.  The text has what the regex splits on: spaces, tabs, newlines, '(' '|' ')',
 * . , ! ? and the CJK, Devanagari and Arabic marks, the ellipsis, digits, emoji. */
START_TEST(test_gguf_bloom_pre_tokenizer)
{
    lmp_gguf *g = NULL;
    lmp_tokenizer *t = NULL;
    const char *path = LMP_SOURCE_DIR "/tests/fixtures/arch/bloom/model.gguf";
    ck_assert_msg(lmp_gguf_open(path, &g) == 0, "%s", lmp_last_error());
    ck_assert_msg(lmp_tokenizer_load_gguf(g, &t) == 0, "%s", lmp_last_error());
    lmp_gguf_close(g);
    ck_assert_str_eq(lmp_tokenizer_gguf_pre(t), "bloom");
    size_t len, id_len;
    char *text = (char *)lmp_test_slurp(FIX "bloom_llamacpp.txt", &len);
    char *id_text = (char *)lmp_test_slurp(FIX "bloom_llamacpp.ids", &id_len);
    int32_t *ids = NULL;
    int64_t n = 0, k = 0;
    ck_assert_msg(lmp_tokenize_ex(t, text, len, 0, &ids, &n) == 0, "%s", lmp_last_error());
    char *at = id_text, *end;
    for (long v; (v = strtol(at, &end, 10)), end != at; at = end, k++) {
        ck_assert_msg(k < n, "lmpress gives %lld ids, llama.cpp more", (long long)n);
        ck_assert_msg(ids[k] == (int32_t)v, "id %lld: lmpress %d, llama.cpp %ld", (long long)k, ids[k], v);
    }
    printf("test_tokenizer_families: bloom: %lld ids equal to llama.cpp's (of lmpress's %lld)\n", (long long)k,
           (long long)n);
    ck_assert_int_gt(k, 2000);
    free(ids);
    free(text);
    free(id_text);
    lmp_tokenizer_free(t);
}
END_TEST

/* lmpress's ids of text_file with the GGUF vocabulary at gguf_path must begin with llama.cpp's own ids
 * in ids_file (whitespace-separated); returns how many were compared. */
static int64_t ids_equal_to_llamacpp(const char *gguf_path, const char *pre, const char *text_file,
                                     const char *ids_file)
{
    lmp_gguf *g = NULL;
    lmp_tokenizer *t = NULL;
    ck_assert_msg(lmp_gguf_open(gguf_path, &g) == 0, "%s", lmp_last_error());
    ck_assert_msg(lmp_tokenizer_load_gguf(g, &t) == 0, "%s", lmp_last_error());
    lmp_gguf_close(g);
    ck_assert_str_eq(lmp_tokenizer_gguf_pre(t), pre);
    size_t len, id_len;
    char *text = (char *)lmp_test_slurp(text_file, &len);
    char *id_text = (char *)lmp_test_slurp(ids_file, &id_len);
    int32_t *ids = NULL;
    int64_t n = 0, k = 0;
    ck_assert_msg(lmp_tokenize_ex(t, text, len, 0, &ids, &n) == 0, "%s", lmp_last_error());
    char *at = id_text, *end;
    for (long v; (v = strtol(at, &end, 10)), end != at; at = end, k++) {
        ck_assert_msg(k < n, "%s: lmpress gives %lld ids, llama.cpp more", pre, (long long)n);
        ck_assert_msg(ids[k] == (int32_t)v, "%s: id %lld: lmpress %d, llama.cpp %ld", pre, (long long)k, ids[k], v);
    }
    printf("test_tokenizer_families: %s: %lld ids equal to llama.cpp's (of lmpress's %lld)\n", pre, (long long)k,
           (long long)n);
    free(ids);
    free(text);
    free(id_text);
    lmp_tokenizer_free(t);
    return k;
}

/* llama.cpp's "deepseek-llm" and "deepseek-v3" pre-tokenizers (tokenizer.ggml.pre of DeepSeek-V2 and
 * V3 GGUFs): deepseek_llamacpp.txt (Latin, accented Latin, Greek, Cyrillic, CJK, kana, Hangul, digit
 * runs, ASCII and full-width punctuation, tabs, runs of spaces, CRLF and lone CR, emoji, Unicode
 * digits and whitespace, U+3000 and U+2028 next to CJK punctuation and letters, five times)
 * tokenized by llama.cpp itself with the DeepSeek fixtures'
 * vocabulary (tests/fixtures/arch/deepseek_v3/model.gguf; llama-perplexity, llama.cpp 0c1e570,
 * -c 64 -t 1 --kl-divergence-base FILE, whose file keeps the text's ids: the first 158 x 64 of
 * them; the file's add_bos is unset, so no BOS).  llama.cpp 0c1e570 does not load
 * deepseek_v2/model.gguf (it wants deepseek2.attention.q_lora_rank), so the deepseek-llm ids come
 * from a copy of the V3 file with tokenizer.ggml.pre "deepseek-llm" (gguf-py's gguf_new_metadata.py
 * --pre-tokenizer deepseek-llm); its tokens, merges, types and BOS/EOS equal deepseek_v2's, which
 * lmpress reads here.  That vocabulary is tiny (320 tokens, 62 English merges), and a split shows
 * only where a merge would cross it: both pre-tokenizers give the same 10112 ids there.  So
 * deepseek_probe_{llm,v3}.gguf keep its specials and bytes with 62 merges trained on the raw text
 * (no pre-tokenization: digits across 3-digit groups, spaces, newlines, CJK, kana, Hangul bytes
 * across characters, punctuation with letters), and deepseek_probe_{llm,v3}.ids are llama.cpp's
 * ids with them (tools/ref/deepseek_tok_probe.py, the same llama-perplexity run on the V3 model
 * with that vocabulary: 8448 ids each, which differ between the two names and from GPT-2's; taking
 * U+3000 into the full-width punctuation, or U+2000-U+3000 into U+0800-U+4E00, changes them). */
START_TEST(test_gguf_deepseek_pre_tokenizers)
{
    int64_t k = ids_equal_to_llamacpp(LMP_SOURCE_DIR "/tests/fixtures/arch/deepseek_v2/model.gguf", "deepseek-llm",
                                      FIX "deepseek_llamacpp.txt", FIX "deepseek_llm_llamacpp.ids");
    ck_assert_int_gt(k, 10000);
    k = ids_equal_to_llamacpp(LMP_SOURCE_DIR "/tests/fixtures/arch/deepseek_v3/model.gguf", "deepseek-v3",
                              FIX "deepseek_llamacpp.txt", FIX "deepseek_v3_llamacpp.ids");
    ck_assert_int_gt(k, 10000);
    k = ids_equal_to_llamacpp(FIX "deepseek_probe_llm.gguf", "deepseek-llm", FIX "deepseek_llamacpp.txt",
                              FIX "deepseek_probe_llm.ids");
    ck_assert_int_gt(k, 8000);
    k = ids_equal_to_llamacpp(FIX "deepseek_probe_v3.gguf", "deepseek-v3", FIX "deepseek_llamacpp.txt",
                              FIX "deepseek_probe_v3.ids");
    ck_assert_int_gt(k, 8000);
}
END_TEST

/* Decoding undoes a SentencePiece-style tokenization: "\u2581" becomes " ", <0xXX> the byte, and
 * the first space after BOS goes (the Strip / Metaspace decoder). */
START_TEST(test_char_level_decode)
{
    static const char *const fams[] = {"llama2.tokenizer.json", "mistral.tokenizer.json", "llama2_always.tokenizer.json"};
    lmp_json *texts = load_json(FIX "texts.json");
    for (size_t f = 0; f < sizeof fams / sizeof *fams; f++) {
        lmp_tokenizer *t = load(fams[f]);
        int checked = 0;
        for (size_t i = 0; i < texts->n; i++) {
            const lmp_json *x = &texts->items[i];
            if (x->str_len == 0 || strchr(x->str, '<') || strstr(x->str, "\xE2\x96\x81")) continue;
            /* Metaspace adds no "\u2581" before a leading space, and the decoder strips one: HF's
             * round trip loses that space too */
            if (f > 0 && x->str[0] == ' ') continue;
            int32_t *ids;
            int64_t n;
            ck_assert_int_eq(lmp_tokenize(t, x->str, x->str_len, 1, &ids, &n), 0);
            char *back = malloc(4 * x->str_len + 16);
            size_t m = 0;
            for (int64_t k = 1; k < n; k++) {
                size_t len;
                const char *p = lmp_tokenizer_decode(t, ids[k - 1], ids[k], &len);
                memcpy(back + m, p, len);
                m += len;
            }
            ck_assert_msg(m == x->str_len && memcmp(back, x->str, m) == 0, "%s: text %zu decodes to \"%.*s\"",
                          fams[f], i, (int)m, back);
            free(back);
            free(ids);
            checked++;
        }
        ck_assert_int_ge(checked, 12);
        lmp_tokenizer_free(t);
    }
    lmp_json_free(texts);
}
END_TEST

/* A Split regex with exponential backtracking fails at PCRE2's match limit, quickly, naming the
 * file and the limit (instead of running for minutes). */
START_TEST(test_regex_match_limit)
{
    char dir[128];
    lmp_test_tmpdir(dir, sizeof dir, "tokfam");
    const char *path = lmp_test_path(dir, "evil.json");
    static const char doc[] =
        "{\"normalizer\":null,\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\","
        "\"pattern\":{\"Regex\":\"(\\\\p{L}+)+\\\\d\"},\"behavior\":\"Isolated\",\"invert\":false},{\"type\":"
        "\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":true,\"use_regex\":false}]},\"decoder\":{\"type\":"
        "\"ByteLevel\"},\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"!\":1},\"merges\":[]}}";
    lmp_test_spit(path, doc, sizeof doc - 1);
    lmp_tokenizer *t = NULL;
    ck_assert_msg(lmp_tokenizer_load_hf(path, &t) == 0, "%s", lmp_last_error());
    char text[64];
    memset(text, 'a', 40);
    strcpy(text + 40, "!");
    int32_t *ids = NULL;
    int64_t n = 0;
    clock_t c0 = clock();
    int rc = lmp_tokenize(t, text, strlen(text), 0, &ids, &n);
    double secs = (double)(clock() - c0) / CLOCKS_PER_SEC;
    ck_assert_msg(rc != 0, "the match limit did not stop the regex");
    ck_assert_ptr_null(ids);
    const char *msg = lmp_last_error();
    ck_assert_msg(strstr(msg, path) && strstr(msg, "limit"), "message: %s", msg);
    printf("test_tokenizer_families: expected error after %.2f s: %s\n", secs, msg);
    lmp_tokenizer_free(t);
    lmp_test_rmtree(dir);
}
END_TEST

/* Issue 34, item 16: the tokenizer.json lmpress exports for a llama2.c model (byte_fallback,
 * merges ranked from the scores) reads back, and tokenizes as the llama2.c tokenizer does. */
START_TEST(test_llama2c_hf_export_reads_back)
{
    char dir[128];
    lmp_test_tmpdir(dir, sizeof dir, "tokfam");
    char dest[256], json[300];
    snprintf(dest, sizeof dest, "%s/hf", dir);
    snprintf(json, sizeof json, "%s/tokenizer.json", dest);
    lmp_ctx ctx;
    lmp_ctx_init(&ctx);
    lmp_model *m = NULL;
    ck_assert_msg(lmp_model_load(STORIES, &m) == 0, "%s", lmp_last_error());
    lmp_outdir od;
    ck_assert_msg(lmp_outdir_begin(&od, dest) == 0, "%s", lmp_last_error());
    int written = 0;
    ck_assert_msg(lmp_hf_write_tokenizer(&ctx, m, NULL, &od, &written) == 0, "%s", lmp_last_error());
    ck_assert_int_eq(written, 1);
    ck_assert_msg(lmp_outdir_commit(&od) == 0, "%s", lmp_last_error());

    lmp_tokenizer *hf = NULL, *l2c = NULL;
    ck_assert_msg(lmp_tokenizer_load_hf(json, &hf) == 0, "%s", lmp_last_error());
    ck_assert_msg(lmp_tokenizer_load_llama2c(TOK512, 512, &l2c) == 0, "%s", lmp_last_error());
    ck_assert_int_eq(lmp_tokenizer_adds_bos(hf), lmp_tokenizer_adds_bos(l2c));
    ck_assert_int_eq(lmp_tokenizer_bos(hf), lmp_tokenizer_bos(l2c));

    size_t n;
    char *wiki = (char *)lmp_test_slurp(WIKI, &n);
    const char *texts[] = {"Once upon a time, there was a little girl named Lily.",
                           "naïve café 東京 12345 3.14159 🙂\tdon't  two  spaces\n\n", " leading space", "x", ""};
    for (size_t i = 0; i <= sizeof texts / sizeof *texts; i++) {
        const char *s = i < sizeof texts / sizeof *texts ? texts[i] : wiki;
        size_t len = i < sizeof texts / sizeof *texts ? strlen(s) : (n < 30000 ? n : 30000);
        int32_t *a, *b;
        int64_t na, nb;
        ck_assert_msg(lmp_tokenize(hf, s, len, 1, &a, &na) == 0, "%s", lmp_last_error());
        ck_assert_msg(lmp_tokenize(l2c, s, len, 1, &b, &nb) == 0, "%s", lmp_last_error());
        ck_assert_msg(na == nb && memcmp(a, b, (size_t)na * sizeof *a) == 0,
                      "text %zu: %lld ids from the exported tokenizer.json, %lld from tok512.bin", i, (long long)na,
                      (long long)nb);
        free(a);
        free(b);
    }
    printf("test_tokenizer_families: the exported tokenizer.json tokenizes %zu texts as tok512.bin does\n",
           sizeof texts / sizeof *texts + 1);
    free(wiki);
    lmp_tokenizer_free(hf);
    lmp_tokenizer_free(l2c);
    lmp_model_free(m);
    lmp_ctx_clear(&ctx);
    lmp_test_rmtree(dir);
}
END_TEST

static Suite *families_suite(void)
{
    Suite *s = suite_create("tokenizer_families");
    TCase *tc = tcase_create("reference");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_byte_level_families);
    tcase_add_test(tc, test_sentencepiece_style_families);
    tcase_add_test(tc, test_gguf_vocabularies);
    tcase_add_test(tc, test_gguf_bloom_pre_tokenizer);
    tcase_add_test(tc, test_gguf_deepseek_pre_tokenizers);
    tcase_add_test(tc, test_long_text);
    tcase_add_test(tc, test_long_runs);
    tcase_add_test(tc, test_gguf_pre_names);
    tcase_add_test(tc, test_sentencepiece_model_files);
    tcase_add_test(tc, test_folder_tokenizer_model);
    tcase_add_test(tc, test_flat_scores_refused);
    tcase_add_test(tc, test_char_level_decode);
    tcase_add_test(tc, test_regex_match_limit);
    tcase_add_test(tc, test_regex_spaces_as_oniguruma);
    tcase_add_test(tc, test_llama2c_hf_export_reads_back);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return lmp_test_main(families_suite()); }
