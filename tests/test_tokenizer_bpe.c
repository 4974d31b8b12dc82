/* test_tokenizer_bpe.c — the byte-level BPE tokenizer (core/text/tokenizer_bpe.c) and the unified
 * lmp_tokenizer API:
 *   (a) llama.cpp's golden pair ggml-vocab-gpt-2.gguf.inp/.out through lmp_tokenizer_load_gguf
 *       (every case; tokenized as llama.cpp's test-tokenizer-0 does: no BOS, special tokens not
 *       parsed);
 *   (b) the same cases through GPT-2's encoder.json + vocab.bpe, and through a tokenizer.json
 *       built from them;
 *   (c) SmolLM2's tokenizer (its GGUF; and a tokenizer.json built from the GGUF) against Hugging
 *       Face `tokenizers` (tests/golden/tokens_smollm2.txt from tools/ref/hf_tokenize.py): all of
 *       WikiText-2 test, 200 LAMBADA passages, short strings in both special-token modes; plus
 *       HF's added-token rules and the Llama-3 pre-tokenizer on GPT-2's vocabulary;
 *   (d) speed: SmolLM2 on wiki.test.raw well under 1 s;
 *   (e) load errors name the file; a GGUF "llama" vocabulary matches the llama2.c loader. */
#include "base/error.h"
#include "formats/gguf.h"
#include "formats/json.h"
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

#define ASSETS LMP_DATA_DIR
#define GPT2_GGUF ASSETS "/gpt2-tokenizer/ggml-vocab-gpt-2.gguf"
#define GPT2_ENCODER ASSETS "/gpt2-tokenizer/encoder.json"
#define GPT2_VOCAB_BPE ASSETS "/gpt2-tokenizer/vocab.bpe"
#define WIKI_TEST ASSETS "/wikitext-2/wiki.test.raw"
#define SMOLLM2_GGUF LMP_SOURCE_DIR "/models/cache/SmolLM2-135M-Instruct.Q4_1.gguf"
#define GOLDEN LMP_SOURCE_DIR "/tests/golden/tokens_smollm2.txt"
#define TOK512 LMP_SOURCE_DIR "/models/stories260K/tok512.bin"

/* ---- helpers -------------------------------------------------------------------------------- */

static uint64_t fnv1a64_ids(uint64_t h, const int32_t *ids, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        uint32_t u = (uint32_t)ids[i];
        for (int k = 0; k < 4; k++) {
            h ^= (u >> (8 * k)) & 0xFF;
            h *= 0x100000001b3ull;
        }
    }
    return h;
}
#define FNV_OFFSET 0xcbf29ce484222325ull

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int have_smollm2(void)
{
    if (access(SMOLLM2_GGUF, R_OK) == 0) return 1;
    lmp_test_skip("test_tokenizer_bpe: SKIPPED SmolLM2 checks: %s is absent (run tools/fetch_smollm2.sh)\n",
            SMOLLM2_GGUF);
    return 0;
}

/* Growable byte buffer. */
typedef struct {
    char *d;
    size_t n, cap;
} sbuf;

static void put(sbuf *b, const void *p, size_t n)
{
    if (b->n + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap : 4096;
        while (nc < b->n + n + 1) nc *= 2;
        b->d = realloc(b->d, nc);
        ck_assert_ptr_nonnull(b->d);
        b->cap = nc;
    }
    memcpy(b->d + b->n, p, n);
    b->n += n;
    b->d[b->n] = 0;
}

static void puts_(sbuf *b, const char *s) { put(b, s, strlen(s)); }

/* A JSON string literal for s[0..n) (UTF-8 kept, the rest escaped). */
static void put_json_str(sbuf *b, const char *s, size_t n)
{
    put(b, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') {
            char e[2] = {'\\', (char)c};
            put(b, e, 2);
        } else if (c < 0x20) {
            char e[8];
            snprintf(e, sizeof e, "\\u%04x", c);
            put(b, e, 6);
        } else {
            put(b, &s[i], 1);
        }
    }
    put(b, "\"", 1);
}

static char g_dir[64];

static const char *tmp_path(const char *name)
{
    static char paths[8][160];
    static int k;
    if (!g_dir[0]) {
        strcpy(g_dir, "/tmp/lmp_bpe_XXXXXX");
        ck_assert_ptr_nonnull(mkdtemp(g_dir));
    }
    char *p = paths[k++ % 8];
    snprintf(p, 160, "%s/%s", g_dir, name);
    return p;
}

static void check_ids(const int32_t *got, int64_t ng, const int32_t *want, int64_t nw, const char *label)
{
    int64_t i = 0;
    while (i < ng && i < nw && got[i] == want[i]) i++;
    ck_assert_msg(ng == nw && i == nw, "%s: got %lld tokens, want %lld; first difference at %lld (%d vs %d)",
                  label, (long long)ng, (long long)nw, (long long)i, i < ng ? got[i] : -1,
                  i < nw ? want[i] : -1);
}

static lmp_tokenizer *load_gguf_tok(const char *path)
{
    lmp_gguf *g = NULL;
    ck_assert_msg(lmp_gguf_open(path, &g) == 0, "%s", lmp_last_error());
    lmp_tokenizer *t = NULL;
    ck_assert_msg(lmp_tokenizer_load_gguf(g, &t) == 0, "%s", lmp_last_error());
    lmp_gguf_close(g); /* the tokenizer keeps no pointers into the GGUF */
    return t;
}

/* Decoding every token and concatenating gives back the text. */
static void check_roundtrip(lmp_tokenizer *t, const char *text, size_t len, unsigned flags, const char *label)
{
    int32_t *ids = NULL;
    int64_t n = 0;
    ck_assert_msg(lmp_tokenize_ex(t, text, len, flags, &ids, &n) == 0, "%s", lmp_last_error());
    char *buf = malloc(len + 1);
    size_t at = 0;
    for (int64_t i = 0; i < n; i++) {
        size_t pl;
        const char *p = lmp_tokenizer_decode(t, i ? ids[i - 1] : -1, ids[i], &pl);
        ck_assert_msg(at + pl <= len, "%s: decoded text longer than the input at token %lld", label, (long long)i);
        memcpy(buf + at, p, pl);
        at += pl;
    }
    ck_assert_msg(at == len && memcmp(buf, text, len) == 0, "%s: decode(encode(text)) != text", label);
    free(buf);
    free(ids);
}

/* ---- (a), (b) llama.cpp's ggml-vocab-gpt-2 golden cases --------------------------------------- */

static int check_golden(lmp_tokenizer *t, const char *tokenizer, int full); /* see (c) */

typedef struct {
    char *text;
    size_t len;
    int32_t *ids;
    int n;
} vocab_case;

/* Reads FILE.inp / FILE.out as llama.cpp's test-tokenizer-0 does: the .inp text split at each
 * "\n__ggml_vocab_test__\n" (a final piece after the last separator only if non-empty), one .out
 * line of space-separated ids per case. */
static vocab_case *read_vocab_cases(const char *base, int *n_cases)
{
    char path[512];
    size_t isz, osz;
    snprintf(path, sizeof path, "%s.inp", base);
    char *inp = (char *)lmp_test_slurp(path, &isz);
    snprintf(path, sizeof path, "%s.out", base);
    char *outp = (char *)lmp_test_slurp(path, &osz);
    static const char sep[] = "\n__ggml_vocab_test__\n";
    vocab_case *c = NULL;
    int n = 0;
    for (size_t pos = 0; pos < isz;) {
        char *next = strstr(inp + pos, sep); /* the .inp has no NUL bytes */
        size_t end = next ? (size_t)(next - inp) : isz;
        c = realloc(c, (size_t)(n + 1) * sizeof *c);
        c[n].len = end - pos;
        c[n].text = malloc(c[n].len + 1);
        memcpy(c[n].text, inp + pos, c[n].len);
        c[n].text[c[n].len] = 0;
        n++;
        pos = next ? end + sizeof sep - 1 : isz;
    }
    int k = 0;
    for (char *line = outp; line && line < outp + osz; k++) {
        char *nl = strchr(line, '\n');
        if (nl) *nl = 0;
        ck_assert_msg(k < n, "%s.out has more lines than %s.inp has cases", base, base);
        c[k].ids = malloc(sizeof *c[k].ids * (strlen(line) / 2 + 1));
        c[k].n = 0;
        char *p = line, *e;
        for (long v; (v = strtol(p, &e, 10)), e != p; p = e) c[k].ids[c[k].n++] = (int32_t)v;
        line = nl ? nl + 1 : NULL;
    }
    ck_assert_msg(k == n, "%s: %d cases but %d expected-output lines", base, n, k);
    free(inp);
    free(outp);
    *n_cases = n;
    return c;
}

static void free_cases(vocab_case *c, int n)
{
    for (int i = 0; i < n; i++) {
        free(c[i].text);
        free(c[i].ids);
    }
    free(c);
}

/* Runs every case; returns how many passed, printing each failure. */
static int run_cases(lmp_tokenizer *t, const vocab_case *c, int n, const char *label)
{
    int pass = 0;
    for (int i = 0; i < n; i++) {
        int32_t *ids = NULL;
        int64_t m = 0;
        ck_assert_msg(lmp_tokenize(t, c[i].text, c[i].len, 0, &ids, &m) == 0, "%s", lmp_last_error());
        int ok = m == c[i].n;
        for (int64_t k = 0; ok && k < m; k++) ok = ids[k] == c[i].ids[k];
        if (ok) {
            pass++;
        } else {
            fprintf(stderr, "%s: case %d \"%s\": got", label, i, c[i].text);
            for (int64_t k = 0; k < m; k++) fprintf(stderr, " %d", ids[k]);
            fprintf(stderr, ", want");
            for (int k = 0; k < c[i].n; k++) fprintf(stderr, " %d", c[i].ids[k]);
            fprintf(stderr, "\n");
        }
        check_roundtrip(t, c[i].text, c[i].len, 0, label);
        free(ids);
    }
    fprintf(stderr, "test_tokenizer_bpe: %s: %d/%d ggml-vocab-gpt-2 cases passed\n", label, pass, n);
    return pass;
}

START_TEST(test_ggml_gpt2_gguf)
{
    int n;
    vocab_case *c = read_vocab_cases(GPT2_GGUF, &n);
    ck_assert_int_ge(n, 40);
    lmp_tokenizer *t = load_gguf_tok(GPT2_GGUF);
    ck_assert_int_eq(lmp_tokenizer_get_kind(t), LMP_TOKENIZER_BPE);
    ck_assert_int_eq(lmp_tokenizer_vocab_size(t), 50257);
    ck_assert_int_eq(lmp_tokenizer_bos(t), 50256);
    ck_assert_int_eq(lmp_tokenizer_eos(t), 50256);
    ck_assert_int_eq(lmp_tokenizer_adds_bos(t), 0);
    ck_assert_int_eq(run_cases(t, c, n, "GGUF"), n);
    ck_assert_int_eq(check_golden(t, "gpt2", 1), 1); /* all of WikiText-2 test vs HF */

    /* "Hello world" -> 15496 995, with BOS prepended on request */
    int32_t *ids;
    int64_t m;
    ck_assert_int_eq(lmp_tokenize(t, "Hello world", 11, 1, &ids, &m), 0);
    ck_assert_int_eq(m, 3);
    ck_assert_int_eq(ids[0], 50256);
    ck_assert_int_eq(ids[1], 15496);
    ck_assert_int_eq(ids[2], 995);
    free(ids);
    /* <|endoftext|> (CONTROL) is text unless special tokens are parsed */
    ck_assert_int_eq(lmp_tokenize(t, "a<|endoftext|>", 14, 0, &ids, &m), 0);
    ck_assert_int_gt(m, 2);
    free(ids);
    ck_assert_int_eq(lmp_tokenize_ex(t, "a<|endoftext|>", 14, LMP_TOKENIZE_PARSE_SPECIAL, &ids, &m), 0);
    ck_assert_int_eq(m, 2);
    ck_assert_int_eq(ids[0], 64);
    ck_assert_int_eq(ids[1], 50256);
    size_t len;
    const char *p = lmp_tokenizer_decode(t, ids[0], ids[1], &len);
    ck_assert(len == 13 && memcmp(p, "<|endoftext|>", 13) == 0);
    free(ids);
    p = lmp_tokenizer_decode(t, -1, 50257, &len); /* out of range: "" */
    ck_assert_uint_eq(len, 0);
    lmp_tokenizer_free(t);
    free_cases(c, n);
}
END_TEST

START_TEST(test_ggml_gpt2_files)
{
    int n;
    vocab_case *c = read_vocab_cases(GPT2_GGUF, &n);
    lmp_tokenizer *t = NULL;
    ck_assert_msg(lmp_tokenizer_load_gpt2_files(GPT2_ENCODER, GPT2_VOCAB_BPE, &t) == 0, "%s", lmp_last_error());
    ck_assert_int_eq(lmp_tokenizer_vocab_size(t), 50257);
    ck_assert_int_eq(lmp_tokenizer_eos(t), 50256);
    ck_assert_int_eq(lmp_tokenizer_adds_bos(t), 0);
    ck_assert_int_eq(run_cases(t, c, n, "encoder.json+vocab.bpe"), n);
    ck_assert_int_eq(check_golden(t, "gpt2", 1), 1);
    lmp_tokenizer_free(t);
    free_cases(c, n);
}
END_TEST

/* A tokenizer.json from GPT-2's encoder.json and vocab.bpe (merges as "a b" strings), with the
 * given pre_tokenizer, extra added tokens (JSON objects, comma-led), post_processor and model
 * extras. */
static const char *write_gpt2_json(const char *name, const char *pre, const char *added_extra,
                                   const char *post, const char *model_extra)
{
    size_t esz, bsz;
    char *enc = (char *)lmp_test_slurp(GPT2_ENCODER, &esz);
    char *bpe = (char *)lmp_test_slurp(GPT2_VOCAB_BPE, &bsz);
    sbuf b = {0};
    puts_(&b, "{\"version\":\"1.0\",\"truncation\":null,\"padding\":null,\"added_tokens\":[{\"id\":50256,"
              "\"content\":\"<|endoftext|>\",\"single_word\":false,\"lstrip\":false,\"rstrip\":false,"
              "\"normalized\":false,\"special\":true}");
    puts_(&b, added_extra);
    puts_(&b, "],\"normalizer\":null,\"pre_tokenizer\":");
    puts_(&b, pre);
    puts_(&b, ",\"post_processor\":");
    puts_(&b, post);
    puts_(&b, ",\"decoder\":{\"type\":\"ByteLevel\",\"add_prefix_space\":true,\"trim_offsets\":true,"
              "\"use_regex\":true},\"model\":{\"type\":\"BPE\",\"dropout\":null,\"unk_token\":null,"
              "\"continuing_subword_prefix\":null,\"end_of_word_suffix\":null,\"fuse_unk\":false,"
              "\"byte_fallback\":false");
    puts_(&b, model_extra);
    puts_(&b, ",\"vocab\":");
    put(&b, enc, esz);
    puts_(&b, ",\"merges\":[");
    int first = 1;
    for (char *line = bpe; line && *line;) {
        char *nl = strchr(line, '\n');
        size_t n = nl ? (size_t)(nl - line) : strlen(line);
        if (n && strncmp(line, "#version", 8) != 0) {
            if (!first) put(&b, ",", 1);
            put_json_str(&b, line, n);
            first = 0;
        }
        line = nl ? nl + 1 : NULL;
    }
    puts_(&b, "]}}");
    const char *path = tmp_path(name);
    lmp_test_spit(path, b.d, b.n);
    free(b.d);
    free(enc);
    free(bpe);
    return path;
}

#define BYTELEVEL_PRE "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":true,\"use_regex\":true}"

START_TEST(test_ggml_gpt2_hf_json)
{
    int n;
    vocab_case *c = read_vocab_cases(GPT2_GGUF, &n);
    const char *path = write_gpt2_json("gpt2.json", BYTELEVEL_PRE, "", "null", "");
    lmp_tokenizer *t = NULL;
    ck_assert_msg(lmp_tokenizer_load_hf(path, &t) == 0, "%s", lmp_last_error());
    ck_assert_int_eq(lmp_tokenizer_vocab_size(t), 50257);
    ck_assert_int_eq(lmp_tokenizer_adds_bos(t), 0);
    ck_assert_int_eq(lmp_tokenizer_bos(t), 50256); /* <|endoftext|>, GPT-2's convention */
    ck_assert_int_eq(lmp_tokenizer_eos(t), 50256);
    ck_assert_int_eq(run_cases(t, c, n, "tokenizer.json"), n);
    ck_assert_int_eq(check_golden(t, "gpt2", 1), 1);
    lmp_tokenizer_free(t);

    /* a TemplateProcessing post_processor that starts with a special token: BOS convention */
    path = write_gpt2_json("gpt2_bos.json", BYTELEVEL_PRE, "",
                           "{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"<|endoftext|>\","
                           "\"type_id\":0}},{\"Sequence\":{\"id\":\"A\",\"type_id\":0}}],\"pair\":[],"
                           "\"special_tokens\":{\"<|endoftext|>\":{\"id\":\"<|endoftext|>\",\"ids\":[50256],"
                           "\"tokens\":[\"<|endoftext|>\"]}}}", "");
    ck_assert_msg(lmp_tokenizer_load_hf(path, &t) == 0, "%s", lmp_last_error());
    ck_assert_int_eq(lmp_tokenizer_adds_bos(t), 1);
    ck_assert_int_eq(lmp_tokenizer_bos(t), 50256);
    lmp_tokenizer_free(t);
    free_cases(c, n);
}
END_TEST

/* ---- (c) SmolLM2 and the HF references --------------------------------------------------------- */

/* A tokenizer.json equivalent to SmolLM2's, written from its GGUF (merges as ["a","b"] pairs),
 * plus a tokenizer_config.json naming bos/eos. */
static const char *write_smollm2_json(void)
{
    lmp_gguf *g = NULL;
    ck_assert_msg(lmp_gguf_open(SMOLLM2_GGUF, &g) == 0, "%s", lmp_last_error());
    const lmp_gguf_kv *tok = lmp_gguf_find_kv(g, "tokenizer.ggml.tokens");
    const lmp_gguf_kv *mer = lmp_gguf_find_kv(g, "tokenizer.ggml.merges");
    const lmp_gguf_kv *ty = lmp_gguf_find_kv(g, "tokenizer.ggml.token_type");
    ck_assert(tok && mer && ty);
    sbuf b = {0};
    puts_(&b, "{\"version\":\"1.0\",\"added_tokens\":[");
    int first = 1;
    for (uint64_t i = 0; i < tok->n; i++) {
        int32_t type;
        memcpy(&type, (const char *)ty->data + 4 * i, 4);
        if (type != 3) continue;
        char head[64];
        snprintf(head, sizeof head, "%s{\"id\":%llu,\"content\":", first ? "" : ",", (unsigned long long)i);
        puts_(&b, head);
        put_json_str(&b, tok->strs[i], (size_t)tok->str_lens[i]);
        puts_(&b, ",\"single_word\":false,\"lstrip\":false,\"rstrip\":false,\"normalized\":false,\"special\":true}");
        first = 0;
    }
    puts_(&b, "],\"normalizer\":null,\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":["
              "{\"type\":\"Digits\",\"individual_digits\":true},{\"type\":\"ByteLevel\",\"add_prefix_space\":false,"
              "\"trim_offsets\":true,\"use_regex\":true}]},\"post_processor\":{\"type\":\"ByteLevel\","
              "\"add_prefix_space\":true,\"trim_offsets\":false,\"use_regex\":true},\"decoder\":{\"type\":"
              "\"ByteLevel\",\"add_prefix_space\":true,\"trim_offsets\":true,\"use_regex\":true},\"model\":"
              "{\"type\":\"BPE\",\"dropout\":null,\"unk_token\":null,\"continuing_subword_prefix\":null,"
              "\"end_of_word_suffix\":null,\"fuse_unk\":false,\"byte_fallback\":false,\"ignore_merges\":false,"
              "\"vocab\":{");
    for (uint64_t i = 0; i < tok->n; i++) {
        if (i) put(&b, ",", 1);
        put_json_str(&b, tok->strs[i], (size_t)tok->str_lens[i]);
        char v[32];
        snprintf(v, sizeof v, ":%llu", (unsigned long long)i);
        puts_(&b, v);
    }
    puts_(&b, "},\"merges\":[");
    for (uint64_t i = 0; i < mer->n; i++) {
        const char *m = mer->strs[i];
        size_t ml = (size_t)mer->str_lens[i];
        const char *sp = memchr(m + 1, ' ', ml - 1);
        ck_assert_ptr_nonnull(sp);
        puts_(&b, i ? ",[" : "[");
        put_json_str(&b, m, (size_t)(sp - m));
        put(&b, ",", 1);
        put_json_str(&b, sp + 1, ml - (size_t)(sp - m) - 1);
        put(&b, "]", 1);
    }
    puts_(&b, "]}}");
    const char *path = tmp_path("tokenizer.json");
    lmp_test_spit(path, b.d, b.n);
    static const char cfg[] = "{\"bos_token\":\"<|im_start|>\",\"eos_token\":{\"content\":\"<|im_end|>\"}}";
    lmp_test_spit(tmp_path("tokenizer_config.json"), cfg, sizeof cfg - 1);
    free(b.d);
    lmp_gguf_close(g);
    return path;
}

static int hexval(int c) { return c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10; }

/* Checks every golden line for `tokenizer` ("smollm2", "gpt2", "gpt2-llama3", "gpt2-added") with
 * t; the file and passages lines only if `full`.  Returns the number of lines checked. */
static int check_golden(lmp_tokenizer *t, const char *tokenizer, int full)
{
    size_t gsize;
    char *golden = (char *)lmp_test_slurp(GOLDEN, &gsize);
    int checked = 0;
    char *save = NULL;
    for (char *line = strtok_r(golden, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        if (line[0] == '#') continue;
        char name[256], mode[16], tk[32];
        long long count;
        unsigned long long hash;
        int npass;
        if (strncmp(line, "file ", 5) == 0) {
            ck_assert_msg(sscanf(line, "file %31s %255s %15s %lld %llx", tk, name, mode, &count, &hash) == 5,
                          "bad line %s", line);
            if (!full || strcmp(tk, tokenizer) != 0) continue;
            char path[512];
            snprintf(path, sizeof path, "%s/%s", ASSETS, name);
            size_t size;
            char *text = (char *)lmp_test_slurp(path, &size);
            int32_t *ids;
            int64_t n;
            ck_assert_int_eq(lmp_tokenize(t, text, size, 0, &ids, &n), 0);
            fprintf(stderr, "test_tokenizer_bpe: %s: %s -> %lld tokens (HF: %lld)%s\n", tokenizer, name,
                    (long long)n, count, n == count && fnv1a64_ids(FNV_OFFSET, ids, n) == hash ? ", hash matches" : "");
            ck_assert_msg(n == count, "%s: %lld tokens, HF %lld", name, (long long)n, count);
            ck_assert_msg(fnv1a64_ids(FNV_OFFSET, ids, n) == hash, "%s: id hash differs from HF's", name);
            check_roundtrip(t, text, size, 0, name);
            free(ids);
            free(text);
        } else if (strncmp(line, "passages ", 9) == 0) {
            ck_assert(sscanf(line, "passages %31s %255s %d %15s %lld %llx", tk, name, &npass, mode, &count, &hash) == 6);
            if (!full || strcmp(tk, tokenizer) != 0) continue;
            char path[512];
            snprintf(path, sizeof path, "%s/%s", ASSETS, name);
            size_t size;
            char *jl = (char *)lmp_test_slurp(path, &size);
            uint64_t h = FNV_OFFSET;
            long long total = 0;
            char *p = jl;
            for (int k = 0; k < npass; k++) {
                char *nl = strchr(p, '\n');
                ck_assert_ptr_nonnull(nl);
                lmp_json *j;
                ck_assert_msg(lmp_json_parse(p, (size_t)(nl - p), name, &j) == 0, "%s", lmp_last_error());
                const lmp_json *text = lmp_json_get(j, "text");
                ck_assert(text && text->type == LMP_JSON_STRING);
                int32_t *ids;
                int64_t n;
                ck_assert_int_eq(lmp_tokenize(t, text->str, text->str_len, 0, &ids, &n), 0);
                h = fnv1a64_ids(h, ids, n);
                total += n;
                free(ids);
                lmp_json_free(j);
                p = nl + 1;
            }
            fprintf(stderr, "test_tokenizer_bpe: %s: %d %s passages -> %lld tokens (HF: %lld)\n", tokenizer, npass,
                    name, total, count);
            ck_assert_msg(total == count && h == hash, "%s: %lld tokens / hash differ from HF's", name, total);
            free(jl);
        } else if (strncmp(line, "random ", 7) == 0) {
            char hex[1024];
            long long cnt[2];
            unsigned long long hsh[2];
            ck_assert(sscanf(line, "random %31s %1023s %lld %llx %lld %llx", tk, hex, &cnt[0], &hsh[0], &cnt[1],
                             &hsh[1]) == 6);
            if (strcmp(tk, tokenizer) != 0) continue;
            size_t hl = strcmp(hex, "-") == 0 ? 0 : strlen(hex);
            char text[512];
            for (size_t k = 0; k < hl / 2; k++) text[k] = (char)(hexval(hex[2 * k]) << 4 | hexval(hex[2 * k + 1]));
            for (int mo = 0; mo < 2; mo++) {
                int32_t *ids;
                int64_t n;
                ck_assert_int_eq(lmp_tokenize_ex(t, text, hl / 2, mo ? LMP_TOKENIZE_PARSE_SPECIAL : 0u, &ids, &n), 0);
                ck_assert_msg(n == cnt[mo] && fnv1a64_ids(FNV_OFFSET, ids, n) == hsh[mo],
                              "%s %s random string %s: %lld tokens (HF %lld) or hash differs", tokenizer,
                              mo ? "special" : "plain", hex, (long long)n, cnt[mo]);
                free(ids);
            }
        } else {
            int off = 0;
            ck_assert(sscanf(line, "string %31s %15s %255s %lld%n", tk, mode, name, &count, &off) == 4);
            if (strcmp(tk, tokenizer) != 0) continue;
            size_t hl = strcmp(name, "-") == 0 ? 0 : strlen(name);
            char text[128];
            ck_assert_uint_lt(hl / 2, sizeof text);
            for (size_t k = 0; k < hl / 2; k++) text[k] = (char)(hexval(name[2 * k]) << 4 | hexval(name[2 * k + 1]));
            int32_t want[256];
            char *q = line + off, *e;
            for (int k = 0; k < count; k++, q = e) {
                want[k] = (int32_t)strtol(q, &e, 10);
                ck_assert(e != q);
            }
            unsigned flags = strcmp(mode, "special") == 0 ? LMP_TOKENIZE_PARSE_SPECIAL : 0u;
            int32_t *ids;
            int64_t n;
            ck_assert_int_eq(lmp_tokenize_ex(t, text, hl / 2, flags, &ids, &n), 0);
            char label[400];
            snprintf(label, sizeof label, "%s %s \"%.*s\"", tokenizer, mode, (int)(hl / 2), text);
            check_ids(ids, n, want, count, label);
            if (strcmp(tokenizer, "gpt2-added") != 0) /* add_prefix_space adds text */
                check_roundtrip(t, text, hl / 2, flags, label);
            free(ids);
        }
        checked++;
    }
    free(golden);
    return checked;
}

START_TEST(test_smollm2_gguf_vs_hf)
{
    if (!have_smollm2()) return;
    lmp_tokenizer *t = load_gguf_tok(SMOLLM2_GGUF);
    ck_assert_int_eq(lmp_tokenizer_get_kind(t), LMP_TOKENIZER_BPE);
    ck_assert_int_eq(lmp_tokenizer_vocab_size(t), 49152);
    ck_assert_int_eq(lmp_tokenizer_bos(t), 1);
    ck_assert_int_eq(lmp_tokenizer_eos(t), 2);
    ck_assert_int_eq(lmp_tokenizer_adds_bos(t), 0); /* tokenizer.ggml.add_bos_token false */
    ck_assert_int_ge(check_golden(t, "smollm2", 1), 230);
    lmp_tokenizer_free(t);
}
END_TEST

START_TEST(test_smollm2_hf_json_vs_hf)
{
    if (!have_smollm2()) return;
    const char *path = write_smollm2_json();
    lmp_tokenizer *t = NULL;
    ck_assert_msg(lmp_tokenizer_load_hf(path, &t) == 0, "%s", lmp_last_error());
    ck_assert_int_eq(lmp_tokenizer_vocab_size(t), 49152);
    ck_assert_int_eq(lmp_tokenizer_bos(t), 1); /* from tokenizer_config.json */
    ck_assert_int_eq(lmp_tokenizer_eos(t), 2);
    ck_assert_int_eq(lmp_tokenizer_adds_bos(t), 0);
    ck_assert_int_ge(check_golden(t, "smollm2", 1), 230);
    lmp_tokenizer_free(t);
}
END_TEST

START_TEST(test_llama3_pretokenizer_vs_hf)
{
    /* the regex as tokenizer.json stores it (JSON-escaped) */
    const char *pre =
        "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{\"Regex\":"
        "\"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}{1,3}| ?[^\\\\s\\\\p{L}"
        "\\\\p{N}]+[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+\"},\"behavior\":\"Isolated\",\"invert\":false},"
        "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":true,\"use_regex\":false}]}";
    const char *path = write_gpt2_json("gpt2_llama3.json", pre, "", "null", ",\"ignore_merges\":true");
    lmp_tokenizer *t = NULL;
    ck_assert_msg(lmp_tokenizer_load_hf(path, &t) == 0, "%s", lmp_last_error());
    ck_assert_int_ge(check_golden(t, "gpt2-llama3", 1), 231);
    lmp_tokenizer_free(t);
}
END_TEST

START_TEST(test_added_tokens_vs_hf)
{
    const char *path = write_gpt2_json(
        "gpt2_added.json", "{\"type\":\"ByteLevel\",\"add_prefix_space\":true,\"trim_offsets\":true,\"use_regex\":true}",
        ",{\"id\":21943,\"content\":\"foo\",\"single_word\":true,\"lstrip\":false,\"rstrip\":false,\"normalized\":true,"
        "\"special\":false},{\"id\":50257,\"content\":\"<mask>\",\"single_word\":false,\"lstrip\":true,\"rstrip\":false,"
        "\"normalized\":false,\"special\":true},{\"id\":50258,\"content\":\"[X]\",\"single_word\":false,\"lstrip\":false,"
        "\"rstrip\":true,\"normalized\":false,\"special\":false}",
        "null", "");
    lmp_tokenizer *t = NULL;
    ck_assert_msg(lmp_tokenizer_load_hf(path, &t) == 0, "%s", lmp_last_error());
    ck_assert_int_eq(lmp_tokenizer_vocab_size(t), 50259);
    ck_assert_int_ge(check_golden(t, "gpt2-added", 0), 216);
    size_t len;
    const char *p = lmp_tokenizer_decode(t, -1, 50257, &len);
    ck_assert(len == 6 && memcmp(p, "<mask>", 6) == 0);
    lmp_tokenizer_free(t);
}
END_TEST

/* ---- (d) speed -------------------------------------------------------------------------------- */

START_TEST(test_speed)
{
    if (!have_smollm2()) return;
    lmp_tokenizer *t = load_gguf_tok(SMOLLM2_GGUF);
    size_t size;
    char *text = (char *)lmp_test_slurp(WIKI_TEST, &size);
    int32_t *ids = NULL;
    int64_t n = 0;
    double best = 1e9;
    for (int rep = 0; rep < 3; rep++) {
        double t0 = now_s();
        ck_assert_int_eq(lmp_tokenize(t, text, size, 0, &ids, &n), 0);
        double dt = now_s() - t0;
        if (dt < best) best = dt;
        free(ids);
    }
    fprintf(stderr, "test_tokenizer_bpe: SmolLM2: wiki.test.raw (%zu bytes) -> %lld tokens in %.3f s (best of 3)\n",
            size, (long long)n, best);
    free(text);
    lmp_tokenizer_free(t);
}
END_TEST

/* ---- (e) errors, and GGUF "llama" vocabularies ------------------------------------------------- */

/* A minimal GGUF v3 writer for metadata-only files. */
typedef struct {
    sbuf kv;
    uint64_t n_kv;
} gguf_w;

static void w_u32(sbuf *b, uint32_t v) { put(b, &v, 4); } /* little-endian hosts only (x86, arm) */
static void w_u64(sbuf *b, uint64_t v) { put(b, &v, 8); }
static void w_str(sbuf *b, const char *s, size_t n)
{
    w_u64(b, n);
    put(b, s, n);
}
static void w_key(gguf_w *w, const char *key, uint32_t type)
{
    w_str(&w->kv, key, strlen(key));
    w_u32(&w->kv, type);
    w->n_kv++;
}
static void kv_string(gguf_w *w, const char *key, const char *v)
{
    w_key(w, key, 8);
    w_str(&w->kv, v, strlen(v));
}
static void kv_u32(gguf_w *w, const char *key, uint32_t v)
{
    w_key(w, key, 4);
    w_u32(&w->kv, v);
}
static void kv_bool(gguf_w *w, const char *key, int v)
{
    w_key(w, key, 7);
    unsigned char c = (unsigned char)v;
    put(&w->kv, &c, 1);
}
static void kv_strings(gguf_w *w, const char *key, char **s, const size_t *lens, uint64_t n)
{
    w_key(w, key, 9);
    w_u32(&w->kv, 8);
    w_u64(&w->kv, n);
    for (uint64_t i = 0; i < n; i++) w_str(&w->kv, s[i], lens[i]);
}
static void kv_array32(gguf_w *w, const char *key, uint32_t type, const void *v, uint64_t n)
{
    w_key(w, key, 9);
    w_u32(&w->kv, type);
    w_u64(&w->kv, n);
    put(&w->kv, v, 4 * n);
}
static void gguf_write(gguf_w *w, const char *path)
{
    sbuf f = {0};
    put(&f, "GGUF", 4);
    w_u32(&f, 3);
    w_u64(&f, 0); /* no tensors */
    w_u64(&f, w->n_kv);
    put(&f, w->kv.d, w->kv.n);
    lmp_test_spit(path, f.d, f.n);
    free(f.d);
    free(w->kv.d);
    w->kv = (sbuf){0};
    w->n_kv = 0;
}

/* The load must fail (with *tp set to NULL: read here, after the call has run) with a message
 * naming `path` and containing `what`. */
static void expect_error(int rc, lmp_tokenizer *const *tp, const char *path, const char *what)
{
    ck_assert_msg(rc != 0, "%s loaded", path);
    ck_assert_ptr_null(*tp);
    const char *msg = lmp_last_error();
    ck_assert_msg(strstr(msg, path) != NULL, "message \"%s\" does not name %s", msg, path);
    if (what) ck_assert_msg(strstr(msg, what) != NULL, "message \"%s\" lacks \"%s\"", msg, what);
    fprintf(stderr, "test_tokenizer_bpe: expected error: %s\n", msg);
}

static void expect_gguf_error(const char *path, const char *what)
{
    lmp_gguf *g = NULL;
    ck_assert_msg(lmp_gguf_open(path, &g) == 0, "%s", lmp_last_error());
    lmp_tokenizer *t = (lmp_tokenizer *)(uintptr_t)1;
    lmp_clear_error();
    expect_error(lmp_tokenizer_load_gguf(g, &t), &t, path, what);
    lmp_gguf_close(g);
}

static void expect_hf_error(const char *name, const char *json, const char *what)
{
    const char *path = tmp_path(name);
    lmp_test_spit(path, json, strlen(json));
    lmp_tokenizer *t = (lmp_tokenizer *)(uintptr_t)1;
    lmp_clear_error();
    expect_error(lmp_tokenizer_load_hf(path, &t), &t, path, what);
}

START_TEST(test_errors)
{
    lmp_tokenizer *t = (lmp_tokenizer *)(uintptr_t)1;
    /* tokenizer.json of other model types, and unsupported parts */
    expect_hf_error("wordpiece.json",
                    "{\"version\":\"1.0\",\"added_tokens\":[],\"normalizer\":{\"type\":\"BertNormalizer\"},"
                    "\"pre_tokenizer\":{\"type\":\"BertPreTokenizer\"},\"model\":{\"type\":\"WordPiece\","
                    "\"unk_token\":\"[UNK]\",\"continuing_subword_prefix\":\"##\",\"vocab\":{\"[UNK]\":0,\"a\":1}}}",
                    "WordPiece");
    expect_hf_error("unigram.json",
                    "{\"model\":{\"type\":\"Unigram\",\"unk_id\":0,\"vocab\":[[\"<unk>\",0.0],[\"a\",-1.0]]}}",
                    "Unigram");
    expect_hf_error("notjson.json", "{\"model\": ", NULL);
    expect_hf_error("nomodel.json", "{\"version\":\"1.0\"}", "model");
    expect_hf_error("metaspace.json",
                    "{\"normalizer\":null,\"pre_tokenizer\":{\"type\":\"Metaspace\",\"replacement\":\"\\u2581\","
                    "\"prepend_scheme\":\"sometimes\"},\"decoder\":{\"type\":\"Metaspace\"},\"model\":{\"type\":"
                    "\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]}}",
                    "prepend_scheme \"sometimes\"");
    expect_hf_error("nfc.json",
                    "{\"normalizer\":{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"NFC\"},{\"type\":"
                    "\"Lowercase\"}]},\"pre_tokenizer\":" BYTELEVEL_PRE ",\"decoder\":{\"type\":"
                    "\"ByteLevel\"},\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]}}",
                    "normalizer \"Lowercase\"");
    /* options this reader does not implement are refused by name */
    expect_hf_error("modelkey.json",
                    "{\"normalizer\":null,\"pre_tokenizer\":" BYTELEVEL_PRE ",\"decoder\":{\"type\":\"ByteLevel\"},"
                    "\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[],\"cache_capacity\":5}}",
                    "model: option \"cache_capacity\"");
    expect_hf_error("invert.json",
                    "{\"normalizer\":null,\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":"
                    "\"Split\",\"pattern\":{\"Regex\":\"\\\\d+\"},\"behavior\":\"Isolated\",\"invert\":true},"
                    BYTELEVEL_PRE "]},\"decoder\":{\"type\":\"ByteLevel\"},\"model\":{\"type\":\"BPE\",\"vocab\":"
                    "{\"a\":0},\"merges\":[]}}",
                    "invert true is not supported");
    expect_hf_error("badregex.json",
                    "{\"normalizer\":null,\"pre_tokenizer\":{\"type\":\"Split\",\"pattern\":{\"Regex\":\"(a\"},"
                    "\"behavior\":\"Isolated\",\"invert\":false},\"decoder\":null,\"model\":{\"type\":\"BPE\","
                    "\"vocab\":{\"a\":0},\"merges\":[]}}",
                    "does not compile");
    expect_hf_error("whitespace.json",
                    "{\"normalizer\":null,\"pre_tokenizer\":{\"type\":\"Whitespace\"},\"decoder\":null,"
                    "\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]}}",
                    "pre_tokenizer \"Whitespace\"");
    expect_hf_error("bldecoder.json",
                    "{\"normalizer\":null,\"pre_tokenizer\":null,\"decoder\":{\"type\":\"WordPiece\"},"
                    "\"model\":{\"type\":\"BPE\",\"byte_fallback\":true,\"vocab\":{\"a\":0},\"merges\":[]}}",
                    "decoder \"WordPiece\"");
    expect_hf_error("metarep.json",
                    "{\"normalizer\":null,\"pre_tokenizer\":{\"type\":\"Metaspace\",\"replacement\":5},\"decoder\":null,"
                    "\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]}}",
                    "replacement");
    expect_hf_error("normseq.json",
                    "{\"normalizer\":{\"type\":\"Sequence\",\"normalizers\":5},\"pre_tokenizer\":null,\"decoder\":null,"
                    "\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]}}",
                    "\"normalizers\" array");
    expect_hf_error("badmerge.json",
                    "{\"normalizer\":null,\"pre_tokenizer\":" BYTELEVEL_PRE ",\"decoder\":{\"type\":\"ByteLevel\"},"
                    "\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1},\"merges\":[\"a b\"]}}",
                    "model.merges[0]");
    /* missing files */
    const char *missing = tmp_path("does-not-exist.json");
    lmp_clear_error();
    expect_error(lmp_tokenizer_load_hf(missing, &t), &t, missing, NULL);
    t = (lmp_tokenizer *)(uintptr_t)1;
    expect_error(lmp_tokenizer_load_gpt2_files(missing, GPT2_VOCAB_BPE, &t), &t, missing, NULL);
    t = (lmp_tokenizer *)(uintptr_t)1;
    expect_error(lmp_tokenizer_load_gpt2_files(GPT2_ENCODER, missing, &t), &t, missing, NULL);
    /* a vocab.bpe line that is not a merge */
    const char *bad_bpe = tmp_path("bad.bpe");
    static const char bad_lines[] = "#version: 0.2\nĠ t\nnospace\n";
    lmp_test_spit(bad_bpe, bad_lines, sizeof bad_lines - 1);
    t = (lmp_tokenizer *)(uintptr_t)1;
    expect_error(lmp_tokenizer_load_gpt2_files(GPT2_ENCODER, bad_bpe, &t), &t, bad_bpe, ":3:");

    /* GGUF: a gpt2 vocabulary without merges; an unknown model; an unknown pre-tokenizer */
    char *toks[3] = {"a", "b", "ab"};
    size_t lens[3] = {1, 1, 2};
    gguf_w w = {0};
    const char *nomerges = tmp_path("nomerges.gguf");
    kv_string(&w, "general.architecture", "gpt2");
    kv_string(&w, "tokenizer.ggml.model", "gpt2");
    kv_strings(&w, "tokenizer.ggml.tokens", toks, lens, 3);
    gguf_write(&w, nomerges);
    expect_gguf_error(nomerges, "merges");

    const char *bert = tmp_path("bert.gguf");
    kv_string(&w, "tokenizer.ggml.model", "bert");
    kv_strings(&w, "tokenizer.ggml.tokens", toks, lens, 3);
    gguf_write(&w, bert);
    expect_gguf_error(bert, "unsupported tokenizer model \"bert\"");

    const char *pre = tmp_path("pre.gguf");
    char *merge[1] = {"a b"};
    size_t mlen[1] = {3};
    kv_string(&w, "tokenizer.ggml.model", "gpt2");
    kv_string(&w, "tokenizer.ggml.pre", "deepseek-coder");
    kv_strings(&w, "tokenizer.ggml.tokens", toks, lens, 3);
    kv_strings(&w, "tokenizer.ggml.merges", merge, mlen, 1);
    gguf_write(&w, pre);
    expect_gguf_error(pre, "deepseek-coder");

    const char *notok = tmp_path("notok.gguf");
    kv_string(&w, "general.architecture", "llama");
    gguf_write(&w, notok);
    expect_gguf_error(notok, "tokenizer.ggml.model");

    /* a tiny valid one: "ab" merges; bytes without a token are dropped (as HF and llama.cpp do) */
    const char *tiny = tmp_path("tiny.gguf");
    kv_string(&w, "tokenizer.ggml.model", "gpt2");
    kv_strings(&w, "tokenizer.ggml.tokens", toks, lens, 3);
    kv_strings(&w, "tokenizer.ggml.merges", merge, mlen, 1);
    gguf_write(&w, tiny);
    t = load_gguf_tok(tiny);
    int32_t *ids;
    int64_t n;
    ck_assert_int_eq(lmp_tokenize(t, "abxba", 5, 0, &ids, &n), 0);
    ck_assert_int_eq(n, 3);
    ck_assert_int_eq(ids[0], 2);
    ck_assert_int_eq(ids[1], 1);
    ck_assert_int_eq(ids[2], 0);
    free(ids);
    ids = (int32_t *)(uintptr_t)1;
    ck_assert_int_ne(lmp_tokenize(t, "ab", 2, 1, &ids, &n), 0); /* no BOS in this vocabulary */
    ck_assert_ptr_null(ids);
    ck_assert_msg(strstr(lmp_last_error(), "BOS") != NULL, "%s", lmp_last_error());
    lmp_tokenizer_free(t);
}
END_TEST

/* llama.cpp's GLM pre-tokenizers: "glm4" (and "glm5") set ignore_merges (a word in the vocabulary
 * is one token, merges or not), "chatglm-bpe" does not; both drop the BOS token whatever the file
 * says (llama-vocab.cpp: special_bos_id = LLAMA_TOKEN_NULL). */
START_TEST(test_gguf_glm_pre_tokenizers)
{
    char *toks[5] = {"a", "b", "ab", "c", "bc"};
    size_t lens[5] = {1, 1, 2, 1, 2};
    char *merge[1] = {"b c"}; /* no "a b": "ab" is reachable only as a whole word */
    size_t mlen[1] = {3};
    static const struct {
        const char *pre;
        int64_t n_ab; /* tokens of "ab" */
    } cases[] = {{"glm4", 1}, {"glm5", 1}, {"chatglm-bpe", 2}, {"smaug-bpe", 2}};
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        gguf_w w = {0};
        kv_string(&w, "tokenizer.ggml.model", "gpt2");
        kv_string(&w, "tokenizer.ggml.pre", cases[k].pre);
        kv_strings(&w, "tokenizer.ggml.tokens", toks, lens, 5);
        kv_strings(&w, "tokenizer.ggml.merges", merge, mlen, 1);
        kv_u32(&w, "tokenizer.ggml.bos_token_id", 3);
        kv_bool(&w, "tokenizer.ggml.add_bos_token", 1);
        const char *path = tmp_path("glm-pre.gguf");
        gguf_write(&w, path);
        lmp_tokenizer *t = load_gguf_tok(path);
        int32_t *ids;
        int64_t n;
        ck_assert_int_eq(lmp_tokenize(t, "ab", 2, 0, &ids, &n), 0);
        ck_assert_msg(n == cases[k].n_ab, "%s: \"ab\" gave %lld tokens", cases[k].pre, (long long)n);
        if (n == 1) ck_assert_int_eq(ids[0], 2);
        free(ids);
        const int glm = strcmp(cases[k].pre, "smaug-bpe") != 0;
        ck_assert_int_eq(lmp_tokenizer_adds_bos(t), !glm);
        ck_assert_int_eq(lmp_tokenizer_bos(t), glm ? -1 : 3);
        lmp_tokenizer_free(t);
    }
}
END_TEST

/* tok512.bin rewritten as a GGUF "llama" vocabulary (pieces' " " as "\u2581", llama2.c's token
 * layout typed UNKNOWN/CONTROL/BYTE/NORMAL) tokenizes like the llama2.c loader. */
START_TEST(test_gguf_llama_vocab)
{
    size_t size;
    unsigned char *d = lmp_test_slurp(TOK512, &size);
    enum { V = 512 };
    char *pieces[V];
    size_t lens[V];
    float scores[V];
    int32_t types[V];
    size_t pos = 4;
    for (int i = 0; i < V; i++) {
        int32_t len;
        memcpy(&scores[i], d + pos, 4);
        memcpy(&len, d + pos + 4, 4);
        pos += 8;
        sbuf p = {0};
        for (int32_t k = 0; k < len; k++) {
            if (d[pos + (size_t)k] == ' ') puts_(&p, "\xe2\x96\x81");
            else put(&p, d + pos + k, 1);
        }
        if (!p.d) put(&p, "", 0);
        pieces[i] = p.d;
        lens[i] = p.n;
        pos += (size_t)len;
        types[i] = i == 0 ? 2 : i < 3 ? 3 : i < 259 ? 6 : 1;
    }
    free(d);
    gguf_w w = {0};
    kv_string(&w, "tokenizer.ggml.model", "llama");
    kv_strings(&w, "tokenizer.ggml.tokens", pieces, lens, V);
    kv_array32(&w, "tokenizer.ggml.scores", 6, scores, V);
    kv_array32(&w, "tokenizer.ggml.token_type", 5, types, V);
    kv_u32(&w, "tokenizer.ggml.bos_token_id", 1);
    kv_u32(&w, "tokenizer.ggml.eos_token_id", 2);
    kv_bool(&w, "tokenizer.ggml.add_bos_token", 1);
    const char *path = tmp_path("tok512.gguf");
    gguf_write(&w, path);
    for (int i = 0; i < V; i++) free(pieces[i]);

    lmp_tokenizer *g = load_gguf_tok(path), *l = NULL;
    ck_assert_int_eq(lmp_tokenizer_load_llama2c(TOK512, V, &l), 0);
    ck_assert_int_eq(lmp_tokenizer_get_kind(g), LMP_TOKENIZER_SENTENCEPIECE);
    ck_assert_int_eq(lmp_tokenizer_bos(g), 1);
    ck_assert_int_eq(lmp_tokenizer_eos(g), 2);
    ck_assert_int_eq(lmp_tokenizer_adds_bos(g), 1);
    ck_assert_int_eq(lmp_tokenizer_adds_bos(l), 1);
    static const char *const texts[] = {"", "Hello world", "Once upon a time, there was a little girl named Lily.",
                                        "  two  spaces\n\ttab", "naïve café 日本語 🙂 \xff\xfe", "the the the the"};
    for (size_t k = 0; k < sizeof texts / sizeof *texts; k++)
        for (int bos = 0; bos <= 1; bos++) {
            int32_t *a, *b;
            int64_t na, nb;
            ck_assert_int_eq(lmp_tokenize(g, texts[k], strlen(texts[k]), bos, &a, &na), 0);
            ck_assert_int_eq(lmp_tokenize(l, texts[k], strlen(texts[k]), bos, &b, &nb), 0);
            check_ids(a, na, b, nb, texts[k]);
            for (int64_t i = 1; i < na; i++) {
                size_t la, lb;
                const char *pa = lmp_tokenizer_decode(g, a[i - 1], a[i], &la);
                const char *pb = lmp_tokenizer_decode(l, b[i - 1], b[i], &lb);
                ck_assert(la == lb && memcmp(pa, pb, la) == 0);
            }
            free(a);
            free(b);
        }
    lmp_tokenizer_free(g);
    lmp_tokenizer_free(l);
}
END_TEST

/* Pre-tokenizer edge cases on GPT-2 that the ggml cases do not cover, checked through the
 * decoded pieces: invalid UTF-8 survives the round trip, and long runs do not blow up. */
START_TEST(test_edge_inputs)
{
    lmp_tokenizer *t = load_gguf_tok(GPT2_GGUF);
    static const char nul[] = "a\0b\0\0 c";
    check_roundtrip(t, nul, sizeof nul - 1, 0, "NULs");
    const char *bad = "\xff\xfe x \xc3 \xe2\x82 \xed\xa0\x80 \xf4\x90\x80\x80 \xc0\xaf end";
    check_roundtrip(t, bad, strlen(bad), 0, "invalid UTF-8");
    size_t n = 200000;
    char *big = malloc(n);
    for (size_t i = 0; i < n; i++) big[i] = (char)("ab 1\n"[i % 5 == 4 ? 4 : i % 3]);
    check_roundtrip(t, big, n, 0, "mixed");
    memset(big, 'a', n); /* one 200 kB word: the heap merge path */
    check_roundtrip(t, big, n, 0, "one long word");
    memset(big, ' ', n);
    check_roundtrip(t, big, n, 0, "long whitespace");
    free(big);
    lmp_tokenizer_free(t);
}
END_TEST

static void cleanup(void)
{
    if (!g_dir[0]) return;
    static const char *const names[] = {"gpt2.json", "gpt2_bos.json", "gpt2_llama3.json", "gpt2_added.json",
                                        "tokenizer.json", "tokenizer_config.json", "wordpiece.json",
                                        "unigram.json", "notjson.json", "nomodel.json", "metaspace.json",
                                        "nfc.json", "modelkey.json", "invert.json", "badregex.json",
                                        "whitespace.json", "bldecoder.json", "metarep.json", "normseq.json",
                                        "badmerge.json", "bad.bpe", "nomerges.gguf", "bert.gguf",
                                        "pre.gguf", "notok.gguf", "tiny.gguf", "tok512.gguf"};
    char p[160];
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        snprintf(p, sizeof p, "%s/%s", g_dir, names[i]);
        unlink(p);
    }
    rmdir(g_dir);
    g_dir[0] = 0;
}

/* Each test runs in its own forked process with its own temporary folder. */
static void teardown(void) { cleanup(); }

static Suite *bpe_suite(void)
{
    Suite *s = suite_create("tokenizer_bpe");
    TCase *tc = tcase_create("golden");
    tcase_set_timeout(tc, 600);
    tcase_add_checked_fixture(tc, NULL, teardown);
    tcase_add_test(tc, test_ggml_gpt2_gguf);
    tcase_add_test(tc, test_ggml_gpt2_files);
    tcase_add_test(tc, test_ggml_gpt2_hf_json);
    tcase_add_test(tc, test_smollm2_gguf_vs_hf);
    tcase_add_test(tc, test_smollm2_hf_json_vs_hf);
    tcase_add_test(tc, test_llama3_pretokenizer_vs_hf);
    tcase_add_test(tc, test_added_tokens_vs_hf);
    tcase_add_test(tc, test_speed);
    tcase_add_test(tc, test_errors);
    tcase_add_test(tc, test_gguf_llama_vocab);
    tcase_add_test(tc, test_gguf_glm_pre_tokenizers);
    tcase_add_test(tc, test_edge_inputs);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return lmp_test_main(bpe_suite()); }
