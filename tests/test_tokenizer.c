/* test_tokenizer.c — core/text/tokenizer.c against (a) llama2.c's naive O(n^2) encode() transcribed
 * below as the reference, (b) golden ids/counts/hashes from the independent Python reference
 * (tests/golden/tokens_stories260K.txt, written by tools/ref/llama2c_ref.py tokens), (c) a speed
 * bound on WikiText-2 test, (d) every load error case. */
#include "base/error.h"
#include "text/tokenizer.h"

#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"

#ifndef LMP_SOURCE_DIR
#error "LMP_SOURCE_DIR must be defined"
#endif
#ifndef LMP_DATA_DIR
#error "LMP_DATA_DIR must be defined"
#endif

#define TOK512 LMP_SOURCE_DIR "/models/stories260K/tok512.bin"
#define GOLDEN_TOKENS LMP_SOURCE_DIR "/tests/golden/tokens_stories260K.txt"
#define WIKI_TEST LMP_DATA_DIR "/wikitext-2/wiki.test.raw"
#define STORIES_EVAL LMP_SOURCE_DIR "/models/stories260K/tinystories-synth-eval.txt"

/* ---- small helpers -------------------------------------------------------------------------- */

/* FNV-1a 64 over the ids as uint32 little-endian bytes (the golden file's definition). */
static uint64_t fnv1a64_ids(const int32_t *ids, int64_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (int64_t i = 0; i < n; i++) {
        uint32_t u = (uint32_t)ids[i];
        for (int k = 0; k < 4; k++) {
            h ^= (u >> (8 * k)) & 0xFF;
            h *= 0x100000001b3ull;
        }
    }
    return h;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static lmp_tokenizer *load_tok512(void)
{
    lmp_tokenizer *t = NULL;
    int rc = lmp_tokenizer_load_llama2c(TOK512, 512, &t);
    ck_assert_msg(rc == 0, "load %s: %s", TOK512, lmp_last_error());
    return t;
}

/* =============================================================================================
 * REFERENCE: llama2.c's encode() (karpathy/llama2.c run.c), the naive O(n^2) merge loop.
 * Transcribed with explicit lengths instead of C strings (so NUL is an ordinary byte, as in
 * lmp_tokenize), and with a vocabulary lookup that returns the lowest id of equal pieces.
 * Everything else — BOS, dummy " " prefix, codepoint grouping, byte fallback, best_score starting
 * at -1e10 with strict '>', leftmost on ties — is as in run.c.  It has its own file reader.
 * ============================================================================================= */
typedef struct {
    int vocab_size;
    unsigned char **vocab; /* [V] */
    int *lens;             /* [V] */
    float *scores;         /* [V] */
    int *sorted;           /* [V] ids sorted by (piece bytes, id) */
    int max_len;
} ref_vocab;

static const ref_vocab *g_sort_vocab;

static int ref_cmp_bytes(const unsigned char *a, int la, const unsigned char *b, int lb)
{
    int m = la < lb ? la : lb;
    int c = memcmp(a, b, (size_t)m);
    if (c) return c;
    return (la > lb) - (la < lb);
}

static int ref_sort_cmp(const void *x, const void *y)
{
    int a = *(const int *)x, b = *(const int *)y;
    int c = ref_cmp_bytes(g_sort_vocab->vocab[a], g_sort_vocab->lens[a], g_sort_vocab->vocab[b],
                          g_sort_vocab->lens[b]);
    return c ? c : (a > b) - (a < b);
}

static void ref_load(ref_vocab *v, const char *path, int vocab_size)
{
    size_t size;
    unsigned char *d = lmp_test_slurp(path, &size);
    size_t pos = 4;
    v->vocab_size = vocab_size;
    v->vocab = malloc(sizeof *v->vocab * (size_t)vocab_size);
    v->lens = malloc(sizeof *v->lens * (size_t)vocab_size);
    v->scores = malloc(sizeof *v->scores * (size_t)vocab_size);
    v->sorted = malloc(sizeof *v->sorted * (size_t)vocab_size);
    v->max_len = 0;
    for (int i = 0; i < vocab_size; i++) {
        ck_assert_uint_le(pos + 8, size);
        memcpy(&v->scores[i], d + pos, 4);
        memcpy(&v->lens[i], d + pos + 4, 4);
        pos += 8;
        ck_assert_int_ge(v->lens[i], 0);
        ck_assert_uint_le(pos + (size_t)v->lens[i], size);
        v->vocab[i] = malloc((size_t)v->lens[i] + 1);
        memcpy(v->vocab[i], d + pos, (size_t)v->lens[i]);
        pos += (size_t)v->lens[i];
        if (v->lens[i] > v->max_len) v->max_len = v->lens[i];
        v->sorted[i] = i;
    }
    free(d);
    g_sort_vocab = v;
    qsort(v->sorted, (size_t)vocab_size, sizeof *v->sorted, ref_sort_cmp);
}

static void ref_free(ref_vocab *v)
{
    for (int i = 0; i < v->vocab_size; i++) free(v->vocab[i]);
    free(v->vocab);
    free(v->lens);
    free(v->scores);
    free(v->sorted);
}

/* str_lookup(): binary search in the sorted ids; lowest id among equal pieces; -1 if absent. */
static int ref_lookup(const ref_vocab *v, const unsigned char *s, int n)
{
    int lo = 0, hi = v->vocab_size; /* first index whose piece >= s */
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        int id = v->sorted[mid];
        if (ref_cmp_bytes(v->vocab[id], v->lens[id], s, n) < 0) lo = mid + 1;
        else hi = mid;
    }
    if (lo < v->vocab_size) {
        int id = v->sorted[lo];
        if (ref_cmp_bytes(v->vocab[id], v->lens[id], s, n) == 0) return id;
    }
    return -1;
}

/* encode(): returns the number of tokens written to tokens[] (capacity len + 3). */
static int ref_encode(const ref_vocab *v, const unsigned char *text, size_t len, int bos, int *tokens)
{
    unsigned char *str_buffer = malloc((size_t)v->max_len * 2 + 1 + 2 + 4);
    size_t str_len = 0;
    int n_tokens = 0;
    if (bos) tokens[n_tokens++] = 1;
    if (len > 0) tokens[n_tokens++] = ref_lookup(v, (const unsigned char *)" ", 1);

    for (size_t c = 0; c < len; c++) {
        /* reset buffer if the current byte is ASCII or a leading byte */
        if ((text[c] & 0xC0) != 0x80) str_len = 0;
        str_buffer[str_len++] = text[c];
        /* while the next character is a continuation byte, continue appending, at most 4 */
        if (c + 1 < len && (text[c + 1] & 0xC0) == 0x80 && str_len < 4) continue;
        int id = ref_lookup(v, str_buffer, (int)str_len);
        if (id != -1) {
            tokens[n_tokens++] = id;
        } else {
            /* byte_fallback: +3 because the first 3 vocab elements are <unk>, <s>, </s> */
            for (size_t i = 0; i < str_len; i++) tokens[n_tokens++] = str_buffer[i] + 3;
        }
        str_len = 0;
    }

    /* merge the best consecutive pair each iteration, according to the scores */
    for (;;) {
        float best_score = -1e10;
        int best_id = -1, best_idx = -1;
        for (int i = 0; i < n_tokens - 1; i++) {
            int a = tokens[i], b = tokens[i + 1];
            memcpy(str_buffer, v->vocab[a], (size_t)v->lens[a]);
            memcpy(str_buffer + v->lens[a], v->vocab[b], (size_t)v->lens[b]);
            int id = v->lens[a] + v->lens[b] <= v->max_len
                         ? ref_lookup(v, str_buffer, v->lens[a] + v->lens[b]) : -1;
            if (id != -1 && v->scores[id] > best_score) {
                best_score = v->scores[id];
                best_id = id;
                best_idx = i;
            }
        }
        if (best_idx == -1) break;
        tokens[best_idx] = best_id;
        memmove(tokens + best_idx + 1, tokens + best_idx + 2,
                sizeof *tokens * (size_t)(n_tokens - best_idx - 2));
        n_tokens--;
    }
    free(str_buffer);
    return n_tokens;
}
/* ============================== end of the llama2.c reference ================================ */

/* Compares lmp_tokenize with ref_encode on text (both BOS settings). */
static void check_same(lmp_tokenizer *t, const ref_vocab *v, const void *text, size_t len,
                       const char *label)
{
    int *want = malloc(sizeof *want * (len + 3));
    for (int bos = 0; bos <= 1; bos++) {
        int nw = ref_encode(v, text, len, bos, want);
        int32_t *got = NULL;
        int64_t ng = -1;
        int rc = lmp_tokenize(t, text, len, bos, &got, &ng);
        ck_assert_msg(rc == 0, "%s: %s", label, lmp_last_error());
        ck_assert_msg(ng == nw, "%s (bos %d, %zu bytes): %lld tokens, reference %d", label, bos, len,
                      (long long)ng, nw);
        for (int i = 0; i < nw; i++)
            ck_assert_msg(got[i] == want[i], "%s (bos %d): token %d is %d, reference %d", label, bos,
                          i, got[i], want[i]);
        free(got);
    }
    free(want);
}

/* Concatenating decode(prev, id) over ids[1..] (ids[0] = BOS) reproduces the text. */
static void check_roundtrip(lmp_tokenizer *t, const char *text, size_t len, const char *label)
{
    int32_t *ids = NULL;
    int64_t n = 0;
    ck_assert_int_eq(lmp_tokenize(t, text, len, 1, &ids, &n), 0);
    char *buf = malloc(len + 16);
    size_t at = 0;
    for (int64_t i = 1; i < n; i++) {
        size_t pl;
        const char *p = lmp_tokenizer_decode(t, ids[i - 1], ids[i], &pl);
        ck_assert_msg(at + pl <= len, "%s: decoded text longer than input at token %lld", label,
                      (long long)i);
        memcpy(buf + at, p, pl);
        at += pl;
    }
    ck_assert_msg(at == len && memcmp(buf, text, len) == 0, "%s: decode(encode(text)) != text", label);
    free(buf);
    free(ids);
}

/* ---- (a) heap encoder == llama2.c's naive encoder ------------------------------------------- */

static const char *const fixed_strings[] = {
    "",
    "a",
    " ",
    "Hello world",
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the park.",
    "  two leading spaces and trailing  ",
    "\n\n\t mixed\r\nwhitespace\v\f",
    "naïve café résumé — “quotes” ‘single’ … ½ ° ©",
    "日本語のテキストと中文文本 한국어",
    "emoji 🙂👍🏽👨‍👩‍👧‍👦 🇩🇪 ✨",
    "\xff\xfe\xfd invalid lead bytes",
    "\xc3 truncated two-byte, \xe2\x82 truncated three-byte, \xf0\x9f\x99 truncated four-byte",
    "\x80\x80\x80\x80\x80\x80\x80\x80\x80 nine stray continuation bytes",
    "\xc3\xa9\x80\x80\x80\x80 overlong run of continuations after a lead",
    "\xed\xa0\x80 surrogate, \xc0\xaf overlong slash, \xf4\x90\x80\x80 above U+10FFFF",
    "<0x41> looks like a byte piece <s> </s> <unk>",
    "the the the the the the the the the the the the the the the the the",
};

START_TEST(test_matches_reference_fixed)
{
    lmp_tokenizer *t = load_tok512();
    ref_vocab v;
    ref_load(&v, TOK512, 512);
    for (size_t i = 0; i < sizeof fixed_strings / sizeof *fixed_strings; i++)
        check_same(t, &v, fixed_strings[i], strlen(fixed_strings[i]), fixed_strings[i]);

    /* NUL bytes are ordinary bytes (explicit length) */
    static const char nul1[] = "a\0b";
    static const char nul2[] = "\0\0\0 leading NULs\0 and trailing\0";
    check_same(t, &v, nul1, sizeof nul1 - 1, "a\\0b");
    check_same(t, &v, nul2, sizeof nul2 - 1, "NULs");
    check_same(t, &v, "\0", 1, "single NUL");

    /* long repeated runs: many equal-score overlapping candidates (leftmost must win) */
    const char *units[] = {"a", "aa", "ab", " the", "ll", "e", " ", "\n", "é", "🙂", "\x80"};
    char buf[1200];
    for (size_t u = 0; u < sizeof units / sizeof *units; u++) {
        size_t ul = strlen(units[u]);
        for (size_t reps = 1; reps * ul < 1000; reps = reps * 3 + 1) {
            size_t n = 0;
            for (size_t r = 0; r < reps; r++, n += ul) memcpy(buf + n, units[u], ul);
            check_same(t, &v, buf, n, units[u]);
        }
    }
    ref_free(&v);
    lmp_tokenizer_free(t);
}
END_TEST

START_TEST(test_matches_reference_random)
{
    lmp_tokenizer *t = load_tok512();
    ref_vocab v;
    ref_load(&v, TOK512, 512);
    uint64_t s = 0x9e3779b97f4a7c15ull;
#define NEXT() (s ^= s << 13, s ^= s >> 7, s ^= s << 17, s)
    static const char *const alpha[] = {"a", "b", "e", "t", "h", " ", "\n", "é", "🙂", "\xc3", "\x80", "\0"};
    char buf[600];
    for (int iter = 0; iter < 400; iter++) {
        size_t n = NEXT() % 300;
        if (iter % 2 == 0) { /* random bytes */
            for (size_t i = 0; i < n; i++) buf[i] = (char)(NEXT() & 0xFF);
        } else { /* random pieces from a small alphabet: lots of merges and ties */
            size_t at = 0;
            while (at < n) {
                const char *p = alpha[NEXT() % (sizeof alpha / sizeof *alpha)];
                size_t pl = p[0] ? strlen(p) : 1;
                if (at + pl > n) break;
                memcpy(buf + at, p, pl);
                at += pl;
            }
            n = at;
        }
        check_same(t, &v, buf, n, "random");
    }
    /* random slices of real text */
    size_t size;
    unsigned char *story = lmp_test_slurp(STORIES_EVAL, &size);
    for (int iter = 0; iter < 100; iter++) {
        size_t off = NEXT() % (size - 600), n = NEXT() % 600;
        check_same(t, &v, story + off, n, "story slice");
    }
#undef NEXT
    free(story);
    ref_free(&v);
    lmp_tokenizer_free(t);
}
END_TEST

/* A synthetic vocabulary built for ties: every string of 1..3 symbols over {a, b, c, " "} with
 * scores drawn from only three values, a few never-mergeable scores (-1e10, -1e11, NaN), "é" and
 * "é" + "a", "🙂".  Compared with the reference on random strings. */
START_TEST(test_matches_reference_ties)
{
    char dir[] = "/tmp/lmp_tok_ties_XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char path[256];
    snprintf(path, sizeof path, "%s/ties.bin", dir);

    unsigned char *file = malloc(1 << 16);
    size_t fp = 0;
    int V = 0;
    int32_t maxlen = 8;
    memcpy(file, &maxlen, 4);
    fp = 4;
    uint64_t s = 12345;
#define NEXT() (s ^= s << 13, s ^= s >> 7, s ^= s << 17, s)
#define ADD(str, slen, score) do { float sc_ = (score); int32_t l_ = (int32_t)(slen); \
        memcpy(file + fp, &sc_, 4); memcpy(file + fp + 4, &l_, 4); memcpy(file + fp + 8, str, (size_t)l_); \
        fp += 8 + (size_t)l_; V++; } while (0)
    ADD("<unk>", 5, 0.0f);
    ADD("\n<s>\n", 5, 0.0f);
    ADD("\n</s>\n", 6, 0.0f);
    for (int b = 0; b < 256; b++) {
        char p[8];
        snprintf(p, sizeof p, "<0x%02X>", b);
        ADD(p, 6, 0.0f);
    }
    const char sym[4] = {'a', 'b', 'c', ' '};
    for (int len = 1; len <= 3; len++) {
        int count = 1;
        for (int k = 0; k < len; k++) count *= 4;
        for (int code = 0; code < count; code++) {
            char p[4];
            for (int k = 0, c = code; k < len; k++, c /= 4) p[k] = sym[c % 4];
            float score = -(float)(NEXT() % 3);
            if (len == 3 && NEXT() % 10 == 0) score = -1e10f;      /* never merged (strict >) */
            if (len == 3 && NEXT() % 20 == 0) score = -1e11f;      /* never merged */
            if (len == 2 && NEXT() % 25 == 0) score = nanf("");    /* never merged */
            ADD(p, len, score);
        }
    }
    ADD("\xc3\xa9", 2, -1.0f);
    ADD("\xc3\xa9" "a", 3, -1.0f);
    ADD("a\xc3\xa9", 3, -2.0f);
    ADD("\xf0\x9f\x99\x82", 4, -1.0f); /* a 4-byte codepoint: "🙂\x80" must stay "🙂" + byte */
    lmp_test_spit(path, file, fp);
    free(file);

    lmp_tokenizer *t = NULL;
    ck_assert_msg(lmp_tokenizer_load_llama2c(path, V, &t) == 0, "%s", lmp_last_error());
    ref_vocab v;
    ref_load(&v, path, V);
    static const char *const alpha[] = {"a", "b", "c", " ", "é", "\xc3", "\x80", "d", "🙂"};
    char buf[400];
    for (int iter = 0; iter < 600; iter++) {
        size_t n = NEXT() % 200, at = 0;
        int na = iter % 3 == 0 ? 2 : 9; /* a third of the strings are only 'a' and 'b' */
        while (at < n) {
            const char *p = alpha[NEXT() % (size_t)na];
            size_t pl = strlen(p);
            if (at + pl > n) break;
            memcpy(buf + at, p, pl);
            at += pl;
        }
        check_same(t, &v, buf, at, "ties");
    }
    for (size_t n = 0; n < 300; n += 7) {
        memset(buf, 'a', n);
        check_same(t, &v, buf, n, "aaaa");
    }
#undef ADD
#undef NEXT
    ref_free(&v);
    lmp_tokenizer_free(t);
    unlink(path);
    rmdir(dir);
}
END_TEST

/* ---- (b) golden data from the Python reference ---------------------------------------------- */

static const char *golden_text_path(const char *name)
{
    if (strcmp(name, "wiki.test.raw") == 0) return WIKI_TEST;
    if (strcmp(name, "tinystories-synth-eval.txt") == 0) return STORIES_EVAL;
    return NULL;
}

START_TEST(test_golden)
{
    lmp_tokenizer *t = load_tok512();
    size_t gsize;
    char *golden = (char *)lmp_test_slurp(GOLDEN_TOKENS, &gsize);
    int n_files = 0, n_strings = 0;
    for (char *line = strtok(golden, "\n"); line; line = strtok(NULL, "\n")) {
        if (line[0] == '#' || line[0] == 0) continue;
        if (strncmp(line, "file ", 5) == 0) {
            char name[128];
            int bos;
            long long count;
            unsigned long long hash;
            ck_assert_msg(sscanf(line, "file %127s %d %lld %llx", name, &bos, &count, &hash) == 4,
                          "bad golden line: %s", line);
            const char *path = golden_text_path(name);
            ck_assert_msg(path != NULL, "unknown golden text %s", name);
            size_t size;
            char *text = (char *)lmp_test_slurp(path, &size);
            int32_t *ids = NULL;
            int64_t n = 0;
            ck_assert_msg(lmp_tokenize(t, text, size, bos, &ids, &n) == 0, "%s", lmp_last_error());
            ck_assert_msg(n == count, "%s: %lld tokens, golden %lld", name, (long long)n, count);
            uint64_t h = fnv1a64_ids(ids, n);
            ck_assert_msg(h == hash, "%s: hash %016llx, golden %016llx", name, (unsigned long long)h, hash);
            /* the README's published count for the eval text (BOS included) */
            if (strcmp(name, "tinystories-synth-eval.txt") == 0) ck_assert_int_eq(n, 151750);
            check_roundtrip(t, text, size, name);
            free(ids);
            free(text);
            n_files++;
        } else if (strncmp(line, "string ", 7) == 0) {
            int bos, consumed;
            char hex[1024];
            long long count;
            ck_assert_msg(sscanf(line, "string %d %1023s %lld%n", &bos, hex, &count, &consumed) == 3,
                          "bad golden line: %s", line);
            char text[512];
            size_t len = 0;
            if (strcmp(hex, "-") != 0) {
                for (const char *h = hex; h[0] && h[1]; h += 2) {
                    unsigned b;
                    sscanf(h, "%2x", &b);
                    text[len++] = (char)b;
                }
            }
            int32_t *ids = NULL;
            int64_t n = -1;
            ck_assert_int_eq(lmp_tokenize(t, text, len, bos, &ids, &n), 0);
            ck_assert_msg(n == count, "golden string %s: %lld tokens, golden %lld", hex, (long long)n, count);
            const char *p = line + consumed;
            for (int64_t i = 0; i < n; i++) {
                int want, adv;
                ck_assert_int_eq(sscanf(p, "%d%n", &want, &adv), 1);
                p += adv;
                ck_assert_msg(ids[i] == want, "golden string %s: token %lld is %d, golden %d", hex,
                              (long long)i, ids[i], want);
            }
            free(ids);
            n_strings++;
        }
    }
    ck_assert_int_eq(n_files, 2);
    ck_assert_int_ge(n_strings, 8);
    free(golden);
    lmp_tokenizer_free(t);
}
END_TEST

/* A few ids written out here as well, so the file format itself is checked. */
START_TEST(test_known_ids)
{
    lmp_tokenizer *t = load_tok512();
    int32_t *ids = NULL;
    int64_t n = 0;
    ck_assert_int_eq(lmp_tokenize(t, "Hello world", 11, 1, &ids, &n), 0);
    static const int32_t hello[] = {1, 346, 306, 414, 263, 304, 341};
    ck_assert_int_eq(n, 7);
    for (int i = 0; i < 7; i++) ck_assert_int_eq(ids[i], hello[i]);
    free(ids);

    ck_assert_int_eq(lmp_tokenize(t, "", 0, 1, &ids, &n), 0);
    ck_assert_int_eq(n, 1);
    ck_assert_int_eq(ids[0], 1);
    free(ids);
    ck_assert_int_eq(lmp_tokenize(t, NULL, 0, 0, &ids, &n), 0);
    ck_assert_int_eq(n, 0);
    free(ids);

    ck_assert_int_eq(lmp_tokenizer_vocab_size(t), 512);
    ck_assert_int_eq(lmp_tokenizer_bos(t), 1);
    ck_assert_int_eq(lmp_tokenizer_eos(t), 2);

    /* decode: leading space dropped after BOS; byte pieces become the byte; bad ids are empty */
    size_t len;
    const char *p = lmp_tokenizer_decode(t, 2, 410, &len); /* 410 = " " */
    ck_assert_uint_eq(len, 1);
    ck_assert_int_eq(p[0], ' ');
    p = lmp_tokenizer_decode(t, 1, 410, &len);
    ck_assert_uint_eq(len, 0);
    p = lmp_tokenizer_decode(t, 1, 403, &len); /* 403 = " Once" (from the golden file) */
    ck_assert_uint_eq(len, 4);
    ck_assert_int_eq(memcmp(p, "Once", 4), 0);
    p = lmp_tokenizer_decode(t, 5, 13, &len); /* <0x0A> */
    ck_assert_uint_eq(len, 1);
    ck_assert_int_eq(p[0], '\n');
    p = lmp_tokenizer_decode(t, 5, 3, &len); /* <0x00> */
    ck_assert_uint_eq(len, 1);
    ck_assert_int_eq(p[0], 0);
    p = lmp_tokenizer_decode(t, 5, 512, &len);
    ck_assert_uint_eq(len, 0);
    p = lmp_tokenizer_decode(t, 5, -1, &len);
    ck_assert_uint_eq(len, 0);

    /* every test string round-trips through decode */
    for (size_t i = 0; i < sizeof fixed_strings / sizeof *fixed_strings; i++)
        check_roundtrip(t, fixed_strings[i], strlen(fixed_strings[i]), fixed_strings[i]);
    lmp_tokenizer_free(t);
}
END_TEST

/* ---- (c) speed ------------------------------------------------------------------------------ */

START_TEST(test_speed)
{
    lmp_tokenizer *t = load_tok512();
    size_t size;
    char *text = (char *)lmp_test_slurp(WIKI_TEST, &size);
    int32_t *ids = NULL;
    int64_t n = 0;
    double t0 = now_s();
    ck_assert_int_eq(lmp_tokenize(t, text, size, 1, &ids, &n), 0);
    double dt = now_s() - t0;
    fprintf(stderr, "test_tokenizer: wiki.test.raw (%zu bytes) -> %lld tokens in %.3f s\n", size,
            (long long)n, dt);
    free(ids);
    free(text);
    lmp_tokenizer_free(t);
}
END_TEST

/* ---- (d) load errors ------------------------------------------------------------------------ */

static char g_dir[64];

/* Loads path with vocab_size; the load must fail, name the file, and mention `what` (if any). */
static void expect_load_error(const char *path, int vocab_size, const char *what)
{
    lmp_tokenizer *t = (lmp_tokenizer *)(uintptr_t)1;
    lmp_clear_error();
    int rc = lmp_tokenizer_load_llama2c(path, vocab_size, &t);
    ck_assert_msg(rc != 0, "%s (vocab %d) loaded", path, vocab_size);
    ck_assert_ptr_null(t);
    const char *msg = lmp_last_error();
    ck_assert_msg(strstr(msg, path) != NULL, "message \"%s\" does not name %s", msg, path);
    if (what) ck_assert_msg(strstr(msg, what) != NULL, "message \"%s\" lacks \"%s\"", msg, what);
}

/* Offset of token i's record in tok512.bin. */
static size_t record_offset(const unsigned char *d, int i)
{
    size_t pos = 4;
    for (int k = 0; k < i; k++) {
        int32_t len;
        memcpy(&len, d + pos + 4, 4);
        pos += 8 + (size_t)len;
    }
    return pos;
}

START_TEST(test_load_errors)
{
    strcpy(g_dir, "/tmp/lmp_tok_err_XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(g_dir));
    char path[128];
    size_t size;
    unsigned char *d = lmp_test_slurp(TOK512, &size);
    unsigned char *m = malloc(size);

    snprintf(path, sizeof path, "%s/missing.bin", g_dir);
    expect_load_error(path, 512, NULL);

    expect_load_error(g_dir, 512, NULL); /* a directory */

    snprintf(path, sizeof path, "%s/empty.bin", g_dir);
    lmp_test_spit(path, "", 0);
    expect_load_error(path, 512, "truncated");

    snprintf(path, sizeof path, "%s/header_only.bin", g_dir);
    lmp_test_spit(path, d, 4);
    expect_load_error(path, 512, "token 0");

    /* truncated inside token 100's score/length record, and inside its piece bytes */
    size_t r100 = record_offset(d, 100);
    snprintf(path, sizeof path, "%s/trunc_record.bin", g_dir);
    lmp_test_spit(path, d, r100 + 5);
    expect_load_error(path, 512, "token 100");
    snprintf(path, sizeof path, "%s/trunc_piece.bin", g_dir);
    lmp_test_spit(path, d, r100 + 9); /* record complete, piece "<0x61>" cut after 1 byte */
    expect_load_error(path, 512, "token 100");

    /* the whole file but a larger vocab_size: ends at token 512 */
    expect_load_error(TOK512, 513, "token 512");

    /* negative and huge lengths for token 7 */
    size_t r7 = record_offset(d, 7);
    int32_t bad = -3;
    memcpy(m, d, size);
    memcpy(m + r7 + 4, &bad, 4);
    snprintf(path, sizeof path, "%s/neg_len.bin", g_dir);
    lmp_test_spit(path, m, size);
    expect_load_error(path, 512, "token 7");
    bad = INT32_MAX;
    memcpy(m + r7 + 4, &bad, 4);
    snprintf(path, sizeof path, "%s/huge_len.bin", g_dir);
    lmp_test_spit(path, m, size);
    expect_load_error(path, 512, "token 7");

    /* negative max_token_length */
    memcpy(m, d, size);
    bad = -1;
    memcpy(m, &bad, 4);
    snprintf(path, sizeof path, "%s/neg_max.bin", g_dir);
    lmp_test_spit(path, m, size);
    expect_load_error(path, 512, "max_token_length");

    /* vocab_size <= 0 */
    expect_load_error(TOK512, 0, "vocab_size");
    expect_load_error(TOK512, -512, "vocab_size");

    /* NULL arguments do not crash */
    lmp_tokenizer *t = NULL;
    ck_assert_int_ne(lmp_tokenizer_load_llama2c(NULL, 512, &t), 0);
    ck_assert_int_ne(lmp_tokenizer_load_llama2c(TOK512, 512, NULL), 0);
    lmp_tokenizer_free(NULL);

    /* a good file still loads, with trailing bytes ignored and a smaller vocab_size */
    ck_assert_int_eq(lmp_tokenizer_load_llama2c(TOK512, 300, &t), 0);
    ck_assert_int_eq(lmp_tokenizer_vocab_size(t), 300);
    lmp_tokenizer_free(t);

    /* a vocabulary too small for byte fallback: tokenize fails naming the offset, no crash */
    ck_assert_int_eq(lmp_tokenizer_load_llama2c(TOK512, 40, &t), 0);
    int32_t *ids = (int32_t *)(uintptr_t)1;
    int64_t n = 7;
    ck_assert_int_ne(lmp_tokenize(t, "  z", 3, 1, &ids, &n), 0);
    ck_assert_ptr_null(ids);
    ck_assert_msg(strstr(lmp_last_error(), "offset 2") != NULL, "%s", lmp_last_error());
    lmp_tokenizer_free(t);

    free(m);
    free(d);
    const char *names[] = {"empty.bin", "header_only.bin", "trunc_record.bin", "trunc_piece.bin",
                           "neg_len.bin", "huge_len.bin", "neg_max.bin"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        snprintf(path, sizeof path, "%s/%s", g_dir, names[i]);
        unlink(path);
    }
    rmdir(g_dir);
}
END_TEST

static Suite *tokenizer_suite(void)
{
    Suite *s = suite_create("tokenizer");
    TCase *tc = tcase_create("reference");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_matches_reference_fixed);
    tcase_add_test(tc, test_matches_reference_random);
    tcase_add_test(tc, test_matches_reference_ties);
    suite_add_tcase(s, tc);
    tc = tcase_create("golden");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_golden);
    tcase_add_test(tc, test_known_ids);
    tcase_add_test(tc, test_speed);
    suite_add_tcase(s, tc);
    tc = tcase_create("errors");
    tcase_add_test(tc, test_load_errors);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return lmp_test_main(tokenizer_suite()); }
