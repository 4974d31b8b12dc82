/* tokenizer_bpe.c — merge-ranked BPE (see tokenizer.h), token for token what Hugging Face
 * `tokenizers` (BPE model) and llama.cpp produce: byte-level models (GPT-2, SmolLM2, Llama 3,
 * Qwen2) and SentencePiece-style ones (Llama 2, Mistral, Gemma tokenizer.json).
 *
 * Encoding pipeline, per call:
 *   1. Added tokens are split off the raw text (split_added): leftmost match, longest at that
 *      position; HF's two passes: tokens with normalized=false on the raw text, then each piece
 *      between them is normalized on its own (normalize_piece, tokenizer_norm.c) and the
 *      normalized=true tokens are split off that; lstrip/rstrip swallow neighbouring
 *      whitespace; single_word matches are discarded when a word character (Rust regex's \w)
 *      touches them.  Special tokens take part only with LMP_TOKENIZE_PARSE_SPECIAL (see
 *      tokenizer.h for why).
 *   2. Each remaining piece is pre-tokenized (pretokenize): either Metaspace (" " -> "\u2581",
 *      the prefix by prepend_scheme, split before each "\u2581"), or a chain of steps (run_steps),
 *      each splitting the pieces the previous one left, as HF's Sequence pre-tokenizer and
 *      llama.cpp's chained regexes do (a lookahead sees the piece's end): STEP_DIGITS cuts out
 *      every \p{N} character; STEP_GPT2 is GPT-2's regex
 *        's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *      matched by hand (match_gpt2), STEP_LLAMA3 Llama 3's (match_llama3), STEP_REGEX any other
 *      regex by PCRE2 (tokenizer_regex.c; matches and gaps are pieces, "Isolated", or the matches
 *      dropped, "Removed").  HF's ByteLevel add_prefix_space prepends " " to each piece that does
 *      not start with one.
 *   3. Each pre-token ("word") is BPE-merged (bpe_word): its bytes become the tokens of their
 *      byte-level characters (GPT-2's bytes_to_unicode; a byte with no token is dropped, as HF
 *      without unk_token and llama.cpp do) — or, SentencePiece-style, its characters become
 *      their tokens, else their <0xXX> byte tokens (byte_fallback), else unk (fused runs with
 *      fuse_unk) — then the adjacent pair with the lowest merge rank is
 *      merged, leftmost first on equal ranks, until no pair has a merge — HF's Word::merge_all
 *      exactly: a min-heap of (rank << 32 | left position) with lazy invalidation (a popped entry
 *      whose left symbol is gone or whose pair changed is skipped; every new adjacent pair is
 *      pushed).  O(n log n) per word.  A per-call cache maps each distinct word to the ids it
 *      produced the first time (the ids stay in the output array; the cache keeps offsets).
 *
 * Vocabulary storage: token strings as the file writes them (byte-level characters), hashed for
 * the lookups loading needs (merges name their parts by string); and each token's decoded bytes
 * (byte-level characters mapped back; an added token, or a token with a character outside the
 * map, keeps its UTF-8 text as is — HF's ByteLevel decoder does the same for the latter;
 * SentencePiece-style: "\u2581" as " ", <0xXX> as that byte).
 * Merges: open-addressing table (left id, right id) -> (rank, merged id).  Duplicate merges: the
 * last occurrence's rank wins, as in HF (its merge map is collected from the list in order). */
#include "text/tokenizer_impl.h"

#include "base/error.h"
#include "formats/gguf.h"
#include "formats/json.h"
#include "text/tokenizer_norm.h"
#include "text/tokenizer_regex.h"
#include "text/unicode_tables.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* One pre-tokenizer step: each splits every piece the previous step left (HF's Sequence of
 * pre-tokenizers, llama.cpp's chain of regexes).  GPT-2's and Llama 3's regexes have exact
 * hand-written matchers (fast, and tested against HF); any other regex goes to PCRE2. */
enum { STEP_GPT2, STEP_LLAMA3, STEP_DIGITS, STEP_REGEX };
enum { MAX_STEPS = 8 };
/* HF Split behaviours: what becomes of a match (the "delimiter") and the text between matches. */
enum { SPLIT_ISOLATED, SPLIT_REMOVED, SPLIT_MERGED_PREV, SPLIT_MERGED_NEXT, SPLIT_CONTIGUOUS };
typedef struct {
    int kind;
    int behavior;         /* STEP_REGEX: SPLIT_* */
    lmp_tok_regex *re;    /* STEP_REGEX */
} pre_step;

enum { META_NEVER, META_ALWAYS, META_FIRST };

typedef struct {
    int32_t id;
    uint32_t off, len;          /* content in added_pool */
    unsigned char special, lstrip, rstrip, single_word, normalized;
} added_token;

struct lmp_bpe {
    char *what;                 /* the file, for messages */
    int n_vocab;                /* ids 0..n_vocab-1; an id with no token has str_len UINT32_MAX */
    char *str_pool;             /* vocabulary strings (byte-level form), back to back */
    size_t *str_off;            /* [n_vocab] */
    uint32_t *str_len;          /* [n_vocab] */
    int32_t *slots;             /* string hash: id + 1, 0 = empty */
    uint32_t slot_mask;
    char *raw_pool;             /* decoded bytes of every token */
    size_t *raw_off;            /* [n_vocab] */
    uint32_t *raw_len;          /* [n_vocab] */
    int32_t byte_tok[256];      /* token of each byte's byte-level character, -1 if none */
    unsigned char byte_utf8[256][2]; /* that character in UTF-8 (all are below U+0800) */
    unsigned char byte_utf8_len[256];
    uint64_t *mkey;             /* merges: (a << 32 | b), EMPTY_KEY = unused slot */
    uint32_t *mrank;
    int32_t *mnew;
    uint32_t mmask;
    added_token *added;         /* sorted by first byte, then longer first */
    int n_added;
    char *added_pool;
    int first_idx[257];         /* added[first_idx[c] .. first_idx[c+1]) start with byte c */
    int has_normalized_added;   /* some added token has normalized=true: run HF's second pass */
    pre_step steps[MAX_STEPS];  /* pre-tokenization (byte-level models) */
    int n_steps;
    const char *gguf_pre;       /* lmp_bpe_gguf_pre's answer */
    int add_prefix_space;       /* HF ByteLevel add_prefix_space */
    lmp_tok_norm *norm;         /* tokenizer.json normalizer, or NULL */
    int char_level;             /* SentencePiece-style: symbols are UTF-8 characters, not byte-level ones */
    int byte_fallback;          /* char_level: a character not in the vocabulary becomes <0xXX> tokens */
    int byte_tok_sp[256];       /* the <0xXX> tokens, -1 if missing */
    int fuse_unk;               /* consecutive unknown characters make one unk token */
    int metaspace;              /* Metaspace pre-tokenizer: " " -> "\u2581", prefix, split */
    int meta_prepend;           /* META_* */
    int meta_split;
    int strip_after_bos;        /* decoder: the first space after BOS is dropped (Strip / Metaspace) */
    int ignore_merges;          /* HF BPE ignore_merges: a word in the vocabulary is one token */
    int unk_id, bos_id, eos_id; /* -1: none */
    int adds_bos;
};

#define EMPTY_KEY UINT64_MAX
#define MAX_VOCAB (1 << 30)

/* Token ids index arrays of max id + 1 entries, so a file of a few bytes naming id 10^9 would
 * cost gigabytes: real vocabularies are dense (at most a few holes), so ids may exceed the
 * number of tokens given by at most that many again, plus 1024. */
static int ids_too_sparse(const char *path, int64_t max_id, size_t n_given)
{
    if (max_id < 2 * (int64_t)n_given + 1024) return 0;
    return lmp_fail(LMP_EINVAL, "%s: token ids go up to %lld for only %zu tokens: not a vocabulary", path,
                    (long long)max_id, n_given);
}

/* ---- small helpers -------------------------------------------------------------------------- */

static uint64_t hash_bytes(const void *p, size_t n, uint64_t h)
{
    const unsigned char *s = p;
    for (size_t i = 0; i < n; i++) {
        h ^= s[i];
        h *= 0x100000001b3ull;
    }
    return h;
}
#define HASH_SEED 0xcbf29ce484222325ull

static uint32_t mix64(uint64_t k)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    return (uint32_t)k;
}

/* GPT-2's bytes_to_unicode(): the printable bytes '!'..'~', 0xA1..0xAC, 0xAE..0xFF stand for
 * themselves; the other 68 bytes, in increasing order, become U+0100, U+0101, ... */
static void byte_to_cp_table(uint32_t cp[256])
{
    uint32_t next = 256;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
        cp[b] = printable ? (uint32_t)b : next++;
    }
}

static size_t utf8_put(uint32_t cp, unsigned char *o)
{
    if (cp < 0x80) { o[0] = (unsigned char)cp; return 1; }
    if (cp < 0x800) { o[0] = (unsigned char)(0xC0 | cp >> 6); o[1] = (unsigned char)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        o[0] = (unsigned char)(0xE0 | cp >> 12);
        o[1] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
        o[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (unsigned char)(0xF0 | cp >> 18);
    o[1] = (unsigned char)(0x80 | (cp >> 12 & 0x3F));
    o[2] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
    o[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Decodes the character at s[i] (i < end) strictly: *n receives its byte length and *cp the
 * code point.  An invalid or truncated sequence, overlong form, surrogate or value past U+10FFFF
 * is one byte long with *cp = UINT32_MAX. */
static inline void decode_char(const unsigned char *s, size_t i, size_t end, uint32_t *cp, size_t *n)
{
    unsigned c = s[i];
    if (c < 0x80) {
        *cp = c;
        *n = 1;
        return;
    }
    size_t k;
    uint32_t v;
    if (c >= 0xC2 && c <= 0xDF) { k = 2; v = c & 0x1F; }
    else if (c >= 0xE0 && c <= 0xEF) { k = 3; v = c & 0x0F; }
    else if (c >= 0xF0 && c <= 0xF4) { k = 4; v = c & 0x07; }
    else goto bad;
    if (end - i < k) goto bad;
    for (size_t j = 1; j < k; j++) {
        unsigned d = s[i + j];
        if ((d & 0xC0) != 0x80) goto bad;
        v = v << 6 | (d & 0x3F);
    }
    if ((k == 3 && (v < 0x800 || (v >= 0xD800 && v <= 0xDFFF))) || (k == 4 && (v < 0x10000 || v > 0x10FFFF)))
        goto bad;
    *cp = v;
    *n = k;
    return;
bad:
    *cp = UINT32_MAX;
    *n = 1;
}

/* The Unicode class (LMP_UC_*) of the character at s[i]; its length in *n. */
static inline int class_at(const unsigned char *s, size_t i, size_t end, size_t *n)
{
    if (s[i] < 0x80) {
        *n = 1;
        return lmp_uc_class(s[i]);
    }
    uint32_t cp;
    decode_char(s, i, end, &cp, n);
    return cp == UINT32_MAX ? LMP_UC_OTHER : lmp_uc_class(cp);
}

/* Start of the character that ends at s[i] (exclusive), not before lo. */
static size_t prev_char_start(const unsigned char *s, size_t lo, size_t i)
{
    size_t j = i - 1;
    while (j > lo && i - j < 4 && (s[j] & 0xC0) == 0x80) j--;
    size_t n;
    uint32_t cp;
    decode_char(s, j, i, &cp, &n);
    return j + n == i ? j : i - 1; /* not one valid character: the last byte alone */
}

/* ---- the vocabulary ------------------------------------------------------------------------- */

static lmp_bpe *bpe_new(const char *what)
{
    lmp_bpe *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    t->what = strdup(what);
    if (!t->what) {
        free(t);
        return NULL;
    }
    t->unk_id = t->bos_id = t->eos_id = -1;
    for (int b = 0; b < 256; b++) t->byte_tok[b] = -1;
    return t;
}

void lmp_bpe_free(lmp_bpe *t)
{
    if (!t) return;
    free(t->what);
    free(t->str_pool);
    free(t->str_off);
    free(t->str_len);
    free(t->slots);
    free(t->raw_pool);
    free(t->raw_off);
    free(t->raw_len);
    free(t->mkey);
    free(t->mrank);
    free(t->mnew);
    free(t->added);
    free(t->added_pool);
    for (int k = 0; k < t->n_steps; k++) lmp_tok_regex_free(t->steps[k].re);
    lmp_tok_norm_free(t->norm);
    free(t);
}

static int oom(const lmp_bpe *t) { return lmp_fail(LMP_ENOMEM, "%s: out of memory loading the tokenizer", t->what); }

/* Id of the vocabulary string a[0..la) ++ b[0..lb), or -1. */
static int lookup2(const lmp_bpe *t, const char *a, size_t la, const char *b, size_t lb)
{
    uint64_t h = hash_bytes(b, lb, hash_bytes(a, la, HASH_SEED));
    for (uint32_t s = mix64(h) & t->slot_mask;; s = (s + 1) & t->slot_mask) {
        int32_t e = t->slots[s];
        if (e == 0) return -1;
        int id = e - 1;
        const char *p = t->str_pool + t->str_off[id];
        if (t->str_len[id] == la + lb && memcmp(p, a, la) == 0 && memcmp(p + la, b, lb) == 0) return id;
    }
}

static int lookup(const lmp_bpe *t, const char *s, size_t n) { return lookup2(t, s, n, "", 0); }

/* Sets the vocabulary: strs[i] (lens[i] bytes) is token i's string as the file writes it,
 * NULL for an id without a token.  Builds the string hash (a string given twice keeps its lower
 * id), the decoded bytes and byte_tok. */
static int bpe_set_vocab(lmp_bpe *t, int n, const char *const *strs, const size_t *lens)
{
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        if (!strs[i]) continue;
        if (lens[i] >= UINT32_MAX)
            return lmp_fail(LMP_EINVAL, "%s: token %d is %zu bytes long", t->what, i, lens[i]);
        total += lens[i];
    }
    uint32_t cap = 1;
    while (cap < 2u * (uint32_t)n) cap <<= 1;
    t->n_vocab = n;
    t->str_pool = malloc(total ? total : 1);
    t->raw_pool = malloc(total ? total : 1); /* decoding never lengthens a string */
    t->str_off = malloc((size_t)n * sizeof *t->str_off);
    t->raw_off = malloc((size_t)n * sizeof *t->raw_off);
    t->str_len = malloc((size_t)n * sizeof *t->str_len);
    t->raw_len = malloc((size_t)n * sizeof *t->raw_len);
    t->slots = calloc(cap, sizeof *t->slots);
    t->slot_mask = cap - 1;
    if (!t->str_pool || !t->raw_pool || !t->str_off || !t->raw_off || !t->str_len || !t->raw_len || !t->slots)
        return oom(t);

    uint32_t b2cp[256];
    byte_to_cp_table(b2cp);
    unsigned char cp2b[324]; /* the map's image is below U+0144 */
    memset(cp2b, 0, sizeof cp2b);
    for (int b = 0; b < 256; b++) cp2b[b2cp[b]] = (unsigned char)b;
    int is_image[324] = {0};
    for (int b = 0; b < 256; b++) is_image[b2cp[b]] = 1;

    size_t so = 0, ro = 0;
    for (int i = 0; i < n; i++) {
        t->str_off[i] = so;
        t->raw_off[i] = ro;
        if (!strs[i]) {
            t->str_len[i] = UINT32_MAX;
            t->raw_len[i] = 0;
            continue;
        }
        const unsigned char *s = (const unsigned char *)strs[i];
        size_t len = lens[i];
        memcpy(t->str_pool + so, s, len);
        t->str_len[i] = (uint32_t)len;
        /* decoded bytes: every character must be in the byte map, else the text as is */
        size_t r = 0, k = 0;
        while (k < len) {
            uint32_t cp;
            size_t m;
            decode_char(s, k, len, &cp, &m);
            if (cp >= 324 || !is_image[cp]) break;
            t->raw_pool[ro + r++] = (char)cp2b[cp];
            k += m;
        }
        if (k < len) {
            memcpy(t->raw_pool + ro, s, len);
            r = len;
        }
        t->raw_len[i] = (uint32_t)r;
        so += len;
        ro += r;

        uint64_t h = hash_bytes(s, len, HASH_SEED);
        for (uint32_t sl = mix64(h) & t->slot_mask;; sl = (sl + 1) & t->slot_mask) {
            int32_t e = t->slots[sl];
            if (e == 0) {
                t->slots[sl] = i + 1;
                break;
            }
            if (t->str_len[e - 1] == len && memcmp(t->str_pool + t->str_off[e - 1], s, len) == 0) break;
        }
    }
    for (int b = 0; b < 256; b++) {
        unsigned char u[4];
        size_t m = utf8_put(b2cp[b], u);
        t->byte_tok[b] = lookup(t, (const char *)u, m);
        memcpy(t->byte_utf8[b], u, m);
        t->byte_utf8_len[b] = (unsigned char)m;
    }
    return 0;
}

/* Allocates the merge table for up to n merges. */
static int bpe_alloc_merges(lmp_bpe *t, size_t n)
{
    uint64_t cap = 16;
    while (cap < 2 * (uint64_t)n) cap <<= 1;
    if (cap > (1ull << 31)) return lmp_fail(LMP_EINVAL, "%s: %zu merges is too many", t->what, n);
    t->mkey = malloc(cap * sizeof *t->mkey);
    t->mrank = malloc(cap * sizeof *t->mrank);
    t->mnew = malloc(cap * sizeof *t->mnew);
    if (!t->mkey || !t->mrank || !t->mnew) return oom(t);
    for (uint64_t i = 0; i < cap; i++) t->mkey[i] = EMPTY_KEY;
    t->mmask = (uint32_t)(cap - 1);
    return 0;
}

static inline uint32_t merge_slot(const lmp_bpe *t, uint64_t key) { return mix64(key) & t->mmask; }

/* The merge of tokens a, b: its rank in *rank and the merged token's id, or -1. */
static inline int merge_find(const lmp_bpe *t, int32_t a, int32_t b, uint32_t *rank)
{
    uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    for (uint32_t s = merge_slot(t, key);; s = (s + 1) & t->mmask) {
        uint64_t k = t->mkey[s];
        if (k == key) {
            *rank = t->mrank[s];
            return t->mnew[s];
        }
        if (k == EMPTY_KEY) return -1;
    }
}

/* Adds merge number `rank`: the strings a and b (as the file writes them).  `where` describes
 * the merge's place for messages ("merge 17", "vocab.bpe line 18"). */
static int bpe_add_merge(lmp_bpe *t, uint32_t rank, const char *a, size_t la, const char *b, size_t lb,
                         const char *where)
{
    int ia = lookup(t, a, la), ib = lookup(t, b, lb), in = lookup2(t, a, la, b, lb);
    if (ia < 0 || ib < 0 || in < 0) {
        const char *miss = ia < 0 ? a : ib < 0 ? b : NULL;
        size_t lm = ia < 0 ? la : lb;
        if (miss)
            return lmp_fail(LMP_EINVAL, "%s: %s (\"%.*s %.*s\"): \"%.*s\" is not in the vocabulary",
                            t->what, where, (int)(la > 64 ? 64 : la), a, (int)(lb > 64 ? 64 : lb), b,
                            (int)(lm > 64 ? 64 : lm), miss);
        return lmp_fail(LMP_EINVAL, "%s: %s (\"%.*s %.*s\"): the merged token is not in the vocabulary",
                        t->what, where, (int)(la > 64 ? 64 : la), a, (int)(lb > 64 ? 64 : lb), b);
    }
    uint64_t key = (uint64_t)(uint32_t)ia << 32 | (uint32_t)ib;
    for (uint32_t s = merge_slot(t, key);; s = (s + 1) & t->mmask) {
        if (t->mkey[s] == EMPTY_KEY || t->mkey[s] == key) {
            t->mkey[s] = key; /* a repeated pair: the later rank wins (HF) */
            t->mrank[s] = rank;
            t->mnew[s] = in;
            return 0;
        }
    }
}

/* Splits a merge line "a b" at its space (the first at index >= 1, as llama.cpp does: a token
 * never starts with a space in byte-level vocabularies).  strict: exactly one space (HF). */
static int split_merge(const char *s, size_t n, size_t *sp, int strict)
{
    const char *p = n > 1 ? memchr(s + 1, ' ', n - 1) : NULL;
    if (!p || p == s + n - 1) return -1;
    if (strict && memchr(p + 1, ' ', n - (size_t)(p + 1 - s))) return -1;
    *sp = (size_t)(p - s);
    return 0;
}

typedef struct {
    int32_t id;
    const char *s;
    size_t len;
    unsigned char special, lstrip, rstrip, single_word, normalized;
} added_spec;

static const added_spec *g_sort_added; /* qsort context (loading is not reentrant-sensitive) */

static int added_cmp(const void *x, const void *y)
{
    const added_spec *a = &g_sort_added[*(const int *)x], *b = &g_sort_added[*(const int *)y];
    unsigned char ca = (unsigned char)a->s[0], cb = (unsigned char)b->s[0];
    if (ca != cb) return ca < cb ? -1 : 1;
    if (a->len != b->len) return a->len > b->len ? -1 : 1; /* longer first: longest match wins */
    return *(const int *)x - *(const int *)y;
}

/* Installs the added tokens (empty contents are ignored, as HF does).  Each id must be a
 * vocabulary id; a token whose id had no vocabulary string gets its content as string. */
static int bpe_set_added(lmp_bpe *t, const added_spec *spec, int n)
{
    size_t total = 0;
    int m = 0;
    int *order = malloc((size_t)(n ? n : 1) * sizeof *order);
    if (!order) return oom(t);
    for (int i = 0; i < n; i++) {
        if (spec[i].len == 0) continue;
        if (spec[i].id < 0 || spec[i].id >= t->n_vocab) {
            free(order);
            return lmp_fail(LMP_EINVAL, "%s: added token \"%.*s\" has id %d outside the vocabulary (0..%d)",
                            t->what, (int)(spec[i].len > 64 ? 64 : spec[i].len), spec[i].s, spec[i].id,
                            t->n_vocab - 1);
        }
        order[m++] = i;
        total += spec[i].len;
    }
    g_sort_added = spec;
    qsort(order, (size_t)m, sizeof *order, added_cmp);
    t->added = malloc((size_t)(m ? m : 1) * sizeof *t->added);
    t->added_pool = malloc(total ? total : 1);
    if (!t->added || !t->added_pool) {
        free(order);
        return oom(t);
    }
    size_t off = 0;
    for (int k = 0; k < m; k++) {
        const added_spec *a = &spec[order[k]];
        added_token *d = &t->added[k];
        memcpy(t->added_pool + off, a->s, a->len);
        d->id = a->id;
        d->off = (uint32_t)off;
        d->len = (uint32_t)a->len;
        d->special = a->special;
        d->lstrip = a->lstrip;
        d->rstrip = a->rstrip;
        d->single_word = a->single_word;
        d->normalized = a->normalized;
        if (a->normalized) t->has_normalized_added = 1;
        off += a->len;
    }
    t->n_added = m;
    free(order);
    int k = 0;
    for (int c = 0; c <= 256; c++) {
        while (k < m && (unsigned char)t->added_pool[t->added[k].off] < c) k++;
        t->first_idx[c] = k;
    }
    return 0;
}

/* An added token decodes to its content as is: point its decoded bytes there. */
static int bpe_added_decode_as_text(lmp_bpe *t)
{
    if (!t->n_added) return 0;
    size_t extra = 0;
    for (int k = 0; k < t->n_added; k++) extra += t->added[k].len;
    size_t used = 0;
    for (int i = 0; i < t->n_vocab; i++) used += t->raw_len[i];
    char *np = realloc(t->raw_pool, used + extra);
    if (!np) return oom(t);
    t->raw_pool = np;
    for (int k = 0; k < t->n_added; k++) {
        const added_token *a = &t->added[k];
        memcpy(t->raw_pool + used, t->added_pool + a->off, a->len);
        t->raw_off[a->id] = used;
        t->raw_len[a->id] = a->len;
        used += a->len;
    }
    return 0;
}

int lmp_bpe_vocab_size(const lmp_bpe *t) { return t->n_vocab; }
int lmp_bpe_bos(const lmp_bpe *t) { return t->bos_id; }
int lmp_bpe_eos(const lmp_bpe *t) { return t->eos_id; }
int lmp_bpe_adds_bos(const lmp_bpe *t) { return t->adds_bos; }

const char *lmp_bpe_gguf_pre(const lmp_bpe *t) { return t->gguf_pre; }

const char *lmp_bpe_decode(const lmp_bpe *t, int prev, int token, size_t *len)
{
    if (token < 0 || token >= t->n_vocab) {
        *len = 0;
        return "";
    }
    *len = t->raw_len[token];
    const char *p = t->raw_pool + t->raw_off[token];
    if (t->strip_after_bos && prev == t->bos_id && prev >= 0 && *len && p[0] == ' ') {
        p++;
        (*len)--;
    }
    return p;
}

/* ---- pre-tokenizers ------------------------------------------------------------------------- */

/* End of the match of GPT-2's regex at s[i] (i < end; the regex matches every character, so a
 * match always starts at i):
 *   's|'t|'re|'ve|'m|'ll|'d | ?\p{L}+ | ?\p{N}+ | ?[^\s\p{L}\p{N}]+ | \s+(?!\S) | \s+
 * The alternatives are tried in order, like the backtracking engines (HF's Oniguruma). */
static size_t match_gpt2(const unsigned char *s, size_t i, size_t end)
{
    unsigned c = s[i];
    if (c == '\'' && i + 1 < end) {
        unsigned d = s[i + 1];
        if (d == 's' || d == 't' || d == 'm' || d == 'd') return i + 2;
        if (i + 2 < end) {
            unsigned e = s[i + 2];
            if ((d == 'r' && e == 'e') || (d == 'v' && e == 'e') || (d == 'l' && e == 'l')) return i + 3;
        }
    }
    size_t n, start = i;
    int cls = class_at(s, i, end, &n);
    if (c == ' ' && i + 1 < end) { /* " ?X+": the optional space, when X follows */
        size_t n1;
        int c1 = class_at(s, i + 1, end, &n1);
        if (c1 != LMP_UC_SPACE) {
            start = i + 1;
            cls = c1;
            n = n1;
        }
    }
    size_t j = start + n;
    if (cls != LMP_UC_SPACE) { /* \p{L}+, \p{N}+ or [^\s\p{L}\p{N}]+: the run of that class */
        while (j < end) {
            size_t m;
            if (class_at(s, j, end, &m) != cls) break;
            j += m;
        }
        return j;
    }
    /* \s+(?!\S): the whitespace run, less its last character when a non-space follows (then
     * the lookahead holds); a single whitespace character before a non-space is \s+. */
    size_t last = i;
    while (j < end) {
        size_t m;
        if (class_at(s, j, end, &m) != LMP_UC_SPACE) break;
        last = j;
        j += m;
    }
    if (j == end) return j;
    return last > i ? last : j;
}

static inline int is_crlf(unsigned c) { return c == '\r' || c == '\n'; }

/* End of the match of Llama 3's regex at s[i] (i < end):
 *   (?i:'s|'t|'re|'ve|'m|'ll|'d) | [^\r\n\p{L}\p{N}]?\p{L}+ | \p{N}{1,3} | ?[^\s\p{L}\p{N}]+[\r\n]*
 *   | \s*[\r\n]+ | \s+(?!\S) | \s+ */
static size_t match_llama3(const unsigned char *s, size_t i, size_t end)
{
    unsigned c = s[i];
    if (c == '\'' && i + 1 < end) {
        unsigned d = s[i + 1] | 0x20; /* ASCII case fold (only letters are compared) */
        if (d == 's' || d == 't' || d == 'm' || d == 'd') return i + 2;
        if (i + 2 < end) {
            unsigned e = s[i + 2] | 0x20;
            if ((d == 'r' && e == 'e') || (d == 'v' && e == 'e') || (d == 'l' && e == 'l')) return i + 3;
        }
    }
    size_t n, m;
    int cls = class_at(s, i, end, &n);
    /* [^\r\n\p{L}\p{N}]?\p{L}+ */
    size_t lstart = cls == LMP_UC_LETTER ? i : SIZE_MAX;
    if (cls != LMP_UC_LETTER && cls != LMP_UC_NUMBER && !is_crlf(c) && i + n < end &&
        class_at(s, i + n, end, &m) == LMP_UC_LETTER)
        lstart = i + n;
    if (lstart != SIZE_MAX) {
        size_t j = lstart;
        while (j < end && class_at(s, j, end, &m) == LMP_UC_LETTER) j += m;
        return j;
    }
    if (cls == LMP_UC_NUMBER) { /* \p{N}{1,3} */
        size_t j = i + n;
        for (int k = 1; k < 3 && j < end && class_at(s, j, end, &m) == LMP_UC_NUMBER; k++) j += m;
        return j;
    }
    /* " ?[^\s\p{L}\p{N}]+[\r\n]*" */
    size_t ostart = cls == LMP_UC_OTHER ? i : SIZE_MAX;
    if (c == ' ' && i + 1 < end && class_at(s, i + 1, end, &m) == LMP_UC_OTHER) ostart = i + 1;
    if (ostart != SIZE_MAX) {
        size_t j = ostart;
        while (j < end && class_at(s, j, end, &m) == LMP_UC_OTHER) j += m;
        while (j < end && is_crlf(s[j])) j++;
        return j;
    }
    /* whitespace (cls == SPACE): \s*[\r\n]+ ends after the run's last \r or \n */
    size_t j = i + n, last = i, last_nl = is_crlf(c) ? i : SIZE_MAX;
    while (j < end && class_at(s, j, end, &m) == LMP_UC_SPACE) {
        if (is_crlf(s[j])) last_nl = j;
        last = j;
        j += m;
    }
    if (last_nl != SIZE_MAX) return last_nl + 1;
    if (j == end) return j;           /* \s+(?!\S) */
    return last > i ? last : j;       /* \s+(?!\S) backed off one character, or \s+ */
}

/* ---- encoding ------------------------------------------------------------------------------- */

/* One cache entry: a word seen before and where its ids are in the output. */
typedef struct {
    uint64_t hash;   /* 0 = empty slot (real hashes are forced nonzero) */
    size_t word_off; /* in the arena */
    size_t out_off;  /* in the output */
    uint32_t word_len, n_ids;
} cache_entry;

typedef struct {
    const lmp_bpe *t;
    unsigned flags;
    int32_t *out;
    size_t n_out, cap_out;
    /* scratch for one word */
    int32_t *sym, *prv, *nxt;
    uint64_t *heap;
    size_t scap;
    unsigned char *tmp; /* byte-level form of a word (ignore_merges), or a prefixed piece */
    size_t tmp_cap;
    /* word cache */
    cache_entry *cache;
    size_t cache_mask, cache_used;
    char *arena;
    size_t arena_len, arena_cap;
    lmp_tok_regex_scratch *rx[MAX_STEPS]; /* match data of STEP_REGEX steps, made on first use */
} enc;

/* Error codes of the encoding helpers (0 = fine). */
enum { ENC_OOM = -1, ENC_HEAP = -2, ENC_FAILED = -3 /* the message is already set */ };

static int push_id(enc *e, int32_t id)
{
    if (e->n_out == e->cap_out) {
        size_t nc = e->cap_out ? e->cap_out * 2 : 256;
        int32_t *no = realloc(e->out, nc * sizeof *no);
        if (!no) return -1;
        e->out = no;
        e->cap_out = nc;
    }
    e->out[e->n_out++] = id;
    return 0;
}

static int reserve_scratch(enc *e, size_t n)
{
    if (n <= e->scap) return 0;
    size_t nc = e->scap ? e->scap : 64;
    while (nc < n) nc *= 2;
    free(e->sym);
    free(e->prv);
    free(e->nxt);
    free(e->heap);
    e->sym = malloc(nc * sizeof *e->sym);
    e->prv = malloc(nc * sizeof *e->prv);
    e->nxt = malloc(nc * sizeof *e->nxt);
    e->heap = malloc(2 * nc * sizeof *e->heap);
    e->scap = e->sym && e->prv && e->nxt && e->heap ? nc : 0;
    return e->scap ? 0 : -1;
}

static int reserve_tmp(enc *e, size_t n)
{
    if (n <= e->tmp_cap) return 0;
    size_t nc = e->tmp_cap ? e->tmp_cap : 256;
    while (nc < n) nc *= 2;
    unsigned char *p = realloc(e->tmp, nc);
    if (!p) return -1;
    e->tmp = p;
    e->tmp_cap = nc;
    return 0;
}

/* Binary min-heap of uint64 keys (rank << 32 | left position). */
static void sift_down(uint64_t *h, size_t n, size_t i)
{
    uint64_t v = h[i];
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && h[c + 1] < h[c]) c++;
        if (h[c] >= v) break;
        h[i] = h[c];
        i = c;
    }
    h[i] = v;
}

static void sift_up(uint64_t *h, size_t i)
{
    uint64_t v = h[i];
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (h[p] <= v) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = v;
}

/* BPE-merges one word w[0..n) and appends its ids. */
static int bpe_word(enc *e, const unsigned char *w, size_t n)
{
    const lmp_bpe *t = e->t;
    if (t->ignore_merges) { /* HF: a word that is a token needs no merging */
        int id;
        if (t->char_level) {
            id = lookup(t, (const char *)w, n);
        } else {
            if (reserve_tmp(e, 2 * n)) return -1;
            size_t m = 0;
            for (size_t k = 0; k < n; k++) {
                memcpy(e->tmp + m, t->byte_utf8[w[k]], 2);
                m += t->byte_utf8_len[w[k]];
            }
            id = lookup(t, (const char *)e->tmp, m);
        }
        if (id >= 0) return push_id(e, id);
    }
    if (reserve_scratch(e, n)) return -1;
    int32_t *sym = e->sym, *prv = e->prv, *nxt = e->nxt;
    size_t m = 0;
    if (t->char_level) {
        /* HF BPE::merge_word: each character's token; else (byte_fallback) one <0xXX> token per
         * byte when all of them exist; else unk, consecutive ones fused with fuse_unk. */
        int pending_unk = 0;
        for (size_t k = 0; k < n;) {
            size_t cl;
            uint32_t cp;
            decode_char(w, k, n, &cp, &cl);
            int id = lookup(t, (const char *)w + k, cl);
            if (id < 0 && t->byte_fallback) {
                int all = 1;
                for (size_t q = k; q < k + cl; q++) all &= t->byte_tok_sp[w[q]] >= 0;
                if (all) {
                    if (pending_unk) sym[m++] = t->unk_id;
                    pending_unk = 0;
                    for (size_t q = k; q < k + cl; q++) sym[m++] = t->byte_tok_sp[w[q]];
                    k += cl;
                    continue;
                }
            }
            if (id >= 0) {
                if (pending_unk) sym[m++] = t->unk_id;
                pending_unk = 0;
                sym[m++] = id;
            } else if (t->unk_id >= 0) { /* no unk token: the character is dropped, as HF does */
                if (pending_unk && !t->fuse_unk) sym[m++] = t->unk_id;
                pending_unk = 1;
            }
            k += cl;
        }
        if (pending_unk) sym[m++] = t->unk_id;
    } else {
        for (size_t k = 0; k < n; k++) {
            int32_t id = t->byte_tok[w[k]];
            if (id < 0) id = t->unk_id;
            if (id >= 0) sym[m++] = id; /* no token and no unk: the byte is dropped (HF, llama.cpp) */
        }
    }
    if (m <= 1) return m ? push_id(e, sym[0]) : 0;
    size_t hn = 0;
    uint64_t *heap = e->heap;
    for (size_t k = 0; k < m; k++) {
        prv[k] = (int32_t)k - 1;
        nxt[k] = k + 1 < m ? (int32_t)k + 1 : -1;
        uint32_t r;
        if (k + 1 < m && merge_find(t, sym[k], sym[k + 1], &r) >= 0) heap[hn++] = (uint64_t)r << 32 | k;
    }
    for (size_t k = hn / 2; k-- > 0;) sift_down(heap, hn, k);
    /* Heap size: m - 1 initial entries; each merge first pops its own entry, then pushes at
     * most two: a net +1 per merge, at most m - 1 merges, so 2m - 2 < 2 * scap entries. */
    while (hn) {
        uint64_t key = heap[0];
        heap[0] = heap[--hn];
        if (hn) sift_down(heap, hn, 0);
        int32_t a = (int32_t)(uint32_t)key, b = nxt[a];
        if (sym[a] < 0 || b < 0) continue; /* stale: a absorbed, or now last */
        uint32_t r;
        int32_t id = merge_find(t, sym[a], sym[b], &r);
        if (id < 0 || r != (uint32_t)(key >> 32)) continue; /* stale: the pair at a changed */
        int32_t c = nxt[b];
        sym[a] = id;
        sym[b] = -1;
        nxt[a] = c;
        if (c >= 0) prv[c] = a;
        /* the two new pairs (prv[a], a) and (a, c) */
        int32_t p = prv[a];
        if (p >= 0 && (id = merge_find(t, sym[p], sym[a], &r)) >= 0) {
            if (hn == 2 * e->scap) return -2;
            heap[hn] = (uint64_t)r << 32 | (uint32_t)p;
            sift_up(heap, hn++);
        }
        if (c >= 0 && (id = merge_find(t, sym[a], sym[c], &r)) >= 0) {
            if (hn == 2 * e->scap) return -2;
            heap[hn] = (uint64_t)r << 32 | (uint32_t)a;
            sift_up(heap, hn++);
        }
    }
    for (int32_t k = 0; k >= 0; k = nxt[k])
        if (push_id(e, sym[k])) return -1;
    return 0;
}

/* Appends the ids of word w[0..n), through the cache. */
static int encode_word(enc *e, const unsigned char *w, size_t n)
{
    const lmp_bpe *t = e->t;
    if (n == 1 && !t->ignore_merges && !t->char_level) { /* the commonest word: one byte, one token */
        int32_t id = t->byte_tok[w[0]];
        if (id < 0) id = t->unk_id;
        return id >= 0 ? push_id(e, id) : 0;
    }
    uint64_t h = hash_bytes(w, n, HASH_SEED) | 1; /* nonzero: 0 marks empty slots */
    size_t s = mix64(h) & e->cache_mask;
    for (;; s = (s + 1) & e->cache_mask) {
        cache_entry *c = &e->cache[s];
        if (c->hash == 0) break;
        if (c->hash == h && c->word_len == n && memcmp(e->arena + c->word_off, w, n) == 0) {
            if (e->n_out + c->n_ids > e->cap_out) {
                size_t nc = e->cap_out * 2;
                while (nc < e->n_out + c->n_ids) nc *= 2;
                int32_t *no = realloc(e->out, nc * sizeof *no);
                if (!no) return -1;
                e->out = no;
                e->cap_out = nc;
            }
            memcpy(e->out + e->n_out, e->out + c->out_off, c->n_ids * sizeof *e->out);
            e->n_out += c->n_ids;
            return 0;
        }
    }
    size_t before = e->n_out;
    int rc = bpe_word(e, w, n);
    if (rc) return rc;
    if (e->n_out - before > UINT32_MAX || n > UINT32_MAX) return 0; /* absurd word: not cached */
    /* remember it: copy the word into the arena, then insert (growing the table at 1/2 full) */
    if (e->arena_len + n > e->arena_cap) {
        size_t nc = e->arena_cap ? e->arena_cap * 2 : 1 << 16;
        while (nc < e->arena_len + n) nc *= 2;
        char *na = realloc(e->arena, nc);
        if (!na) return -1;
        e->arena = na;
        e->arena_cap = nc;
    }
    memcpy(e->arena + e->arena_len, w, n);
    if (2 * (e->cache_used + 1) > e->cache_mask + 1) {
        size_t ncap = (e->cache_mask + 1) * 2;
        cache_entry *nt = calloc(ncap, sizeof *nt);
        if (!nt) return -1;
        for (size_t k = 0; k <= e->cache_mask; k++) {
            if (!e->cache[k].hash) continue;
            size_t q = mix64(e->cache[k].hash) & (ncap - 1);
            while (nt[q].hash) q = (q + 1) & (ncap - 1);
            nt[q] = e->cache[k];
        }
        free(e->cache);
        e->cache = nt;
        e->cache_mask = ncap - 1;
        s = mix64(h) & e->cache_mask;
        while (e->cache[s].hash) s = (s + 1) & e->cache_mask;
    }
    e->cache[s] = (cache_entry){h, e->arena_len, before, (uint32_t)n, (uint32_t)(e->n_out - before)};
    e->cache_used++;
    e->arena_len += n;
    return 0;
}

/* Splits s[a..b) by pre-tokenizer step k and passes each piece on to step k + 1; after the last
 * step each piece is a word to encode. */
static int run_steps(enc *e, const unsigned char *s, size_t a, size_t b, int k)
{
    const lmp_bpe *t = e->t;
    if (a >= b) return 0;
    if (k == t->n_steps) return encode_word(e, s + a, b - a);
    const pre_step *st = &t->steps[k];
    int rc;
    if (st->kind == STEP_DIGITS) { /* every \p{N} character is a piece of its own */
        size_t i = a;
        while (i < b) {
            size_t n, end;
            if (class_at(s, i, b, &n) == LMP_UC_NUMBER) {
                end = i + n;
            } else {
                end = i + n;
                while (end < b && class_at(s, end, b, &n) != LMP_UC_NUMBER) end += n;
            }
            if ((rc = run_steps(e, s, i, end, k + 1)) != 0) return rc;
            i = end;
        }
        return 0;
    }
    if (st->kind == STEP_REGEX) {
        /* HF's Split: Isolated: gaps and matches are pieces; Removed: the gaps only;
         * MergedWithPrevious: each match ends the piece before it; MergedWithNext: each match
         * starts the piece after it; Contiguous: adjacent matches make one piece. */
        if (!e->rx[k] && !(e->rx[k] = lmp_tok_regex_scratch_new(st->re))) return ENC_OOM;
        size_t i = a, ms, me, run_start = SIZE_MAX; /* run_start: a Contiguous run of matches */
        for (;;) {
            int found = lmp_tok_regex_find(st->re, e->rx[k], s + a, b - a, i - a, &ms, &me);
            if (found < 0) return ENC_FAILED;
            if (!found) break;
            ms += a;
            me += a;
            switch (st->behavior) {
            case SPLIT_ISOLATED:
            case SPLIT_REMOVED:
                if ((rc = run_steps(e, s, i, ms, k + 1)) != 0) return rc;
                if (st->behavior == SPLIT_ISOLATED && (rc = run_steps(e, s, ms, me, k + 1)) != 0) return rc;
                i = me;
                break;
            case SPLIT_MERGED_PREV:
                if ((rc = run_steps(e, s, i, me, k + 1)) != 0) return rc;
                i = me;
                break;
            case SPLIT_MERGED_NEXT: /* the piece so far ends where the match starts */
                if ((rc = run_steps(e, s, i, ms, k + 1)) != 0) return rc;
                i = ms;
                /* the match is in the next piece; search on after it */
                if ((rc = lmp_tok_regex_find(st->re, e->rx[k], s + a, b - a, me - a, &ms, &me)) < 0) return ENC_FAILED;
                while (rc == 1) {
                    ms += a;
                    me += a;
                    if ((rc = run_steps(e, s, i, ms, k + 1)) != 0) return rc;
                    i = ms;
                    if ((rc = lmp_tok_regex_find(st->re, e->rx[k], s + a, b - a, me - a, &ms, &me)) < 0)
                        return ENC_FAILED;
                }
                return run_steps(e, s, i, b, k + 1);
            case SPLIT_CONTIGUOUS:
                if (run_start != SIZE_MAX && ms != i) { /* a gap ends the run of matches */
                    if ((rc = run_steps(e, s, run_start, i, k + 1)) != 0) return rc;
                    run_start = SIZE_MAX;
                }
                if (run_start == SIZE_MAX) {
                    if ((rc = run_steps(e, s, i, ms, k + 1)) != 0) return rc;
                    run_start = ms;
                }
                i = me;
                break;
            }
        }
        if (run_start != SIZE_MAX && (rc = run_steps(e, s, run_start, i, k + 1)) != 0) return rc;
        return run_steps(e, s, i, b, k + 1);
    }
    for (size_t i = a; i < b;) {
        size_t j = st->kind == STEP_LLAMA3 ? match_llama3(s, i, b) : match_gpt2(s, i, b);
        if ((rc = run_steps(e, s, i, j, k + 1)) != 0) return rc;
        i = j;
    }
    return 0;
}

#define META "\xE2\x96\x81" /* U+2581, SentencePiece's visible space */

/* HF's Metaspace pre-tokenizer on s[a..b): " " becomes U+2581; a U+2581 is prepended (always, or
 * for the piece that starts the text with prepend_scheme "first") unless the piece starts with
 * one; with split, each U+2581 starts a new word (MergedWithNext). */
static int metaspace(enc *e, const unsigned char *s, size_t a, size_t b, int at_text_start)
{
    const lmp_bpe *t = e->t;
    size_t spaces = 0;
    for (size_t i = a; i < b; i++) spaces += s[i] == ' ';
    unsigned char *w = malloc(b - a + 2 * spaces + 4);
    if (!w) return ENC_OOM;
    size_t n = 0;
    int starts_meta = (b - a >= 3 && memcmp(s + a, META, 3) == 0) || s[a] == ' ';
    if (!starts_meta && (t->meta_prepend == META_ALWAYS || (t->meta_prepend == META_FIRST && at_text_start))) {
        memcpy(w, META, 3);
        n = 3;
    }
    for (size_t i = a; i < b; i++) {
        if (s[i] == ' ') {
            memcpy(w + n, META, 3);
            n += 3;
        } else {
            w[n++] = s[i];
        }
    }
    int rc = 0;
    if (!t->meta_split) {
        rc = encode_word(e, w, n);
    } else {
        size_t start = 0;
        for (size_t i = 1; i + 3 <= n && !rc; i++)
            if (memcmp(w + i, META, 3) == 0) {
                rc = encode_word(e, w + start, i - start);
                start = i;
                i += 2;
            }
        if (!rc && start < n) rc = encode_word(e, w + start, n - start);
    }
    free(w);
    return rc;
}

/* Pre-tokenizes s[a..b) (normalized; no added tokens in it) and encodes every word.
 * at_text_start: the piece starts at the beginning of the original text. */
static int pretokenize(enc *e, const unsigned char *s, size_t a, size_t b, int at_text_start)
{
    if (a >= b) return 0;
    if (e->t->metaspace) return metaspace(e, s, a, b, at_text_start);
    if (!e->t->add_prefix_space || s[a] == ' ') return run_steps(e, s, a, b, 0);
    /* HF ByteLevel add_prefix_space: the piece gets a leading space (the cache copies words,
     * so a temporary buffer is fine) */
    unsigned char *copy = malloc(b - a + 1);
    if (!copy) return ENC_OOM;
    copy[0] = ' ';
    memcpy(copy + 1, s + a, b - a);
    int rc = run_steps(e, copy, 0, b - a + 1, 0);
    free(copy);
    return rc;
}

/* Whether the character ending at s[i] (within [lo, i)) / starting at s[i] (within [i, hi)) is
 * a word character, Rust regex's \w (HF's single_word test); an invalid byte is not. */
static int word_before(const unsigned char *s, size_t lo, size_t i)
{
    if (i <= lo) return 0;
    size_t j = prev_char_start(s, lo, i), n;
    uint32_t cp;
    decode_char(s, j, i, &cp, &n);
    return cp != UINT32_MAX && lmp_uc_is_word(cp);
}

static int word_after(const unsigned char *s, size_t i, size_t hi)
{
    if (i >= hi) return 0;
    size_t n;
    uint32_t cp;
    decode_char(s, i, hi, &cp, &n);
    return cp != UINT32_MAX && lmp_uc_is_word(cp);
}

/* The leftmost-longest added token of this pass (normalized == pass) in s[pos..b), or NULL. */
static const added_token *find_added(const enc *e, const unsigned char *s, size_t pos, size_t b,
                                     int pass, size_t *at)
{
    const lmp_bpe *t = e->t;
    int special_ok = (e->flags & LMP_TOKENIZE_PARSE_SPECIAL) != 0;
    for (size_t p = pos; p < b; p++) {
        unsigned c = s[p];
        for (int k = t->first_idx[c]; k < t->first_idx[c + 1]; k++) {
            const added_token *a = &t->added[k];
            if (a->normalized != pass || (a->special && !special_ok)) continue;
            if (a->len <= b - p && memcmp(s + p, t->added_pool + a->off, a->len) == 0) {
                *at = p;
                return a;
            }
        }
    }
    return NULL;
}

static int split_added(enc *e, const unsigned char *s, size_t a, size_t b, int pass, int at_text_start);

/* A piece of the raw text between non-normalized added tokens: normalized (HF normalizes each
 * such piece on its own), then split on the normalized added tokens. */
static int normalize_piece(enc *e, const unsigned char *s, size_t a, size_t b, int at_text_start)
{
    if (!e->t->norm) return split_added(e, s, a, b, 1, at_text_start);
    unsigned char *nb;
    size_t nn;
    if (lmp_tok_norm_apply(e->t->norm, s + a, b - a, &nb, &nn)) return ENC_OOM;
    int rc = split_added(e, nb, 0, nn, 1, at_text_start);
    free(nb);
    return rc;
}

/* Splits s[a..b) on the added tokens of `pass` (0: normalized=false, on the raw text; 1:
 * normalized=true, on normalized text), HF's AddedVocabulary::extract_and_normalize; the pieces
 * between go to normalization (after pass 0) or the pre-tokenizer (after pass 1). */
static int split_added(enc *e, const unsigned char *s, size_t a, size_t b, int pass, int at_text_start)
{
    const lmp_bpe *t = e->t;
    if (pass == 1 && !t->has_normalized_added) return pretokenize(e, s, a, b, at_text_start);
    size_t pos = a, done = a;
    const added_token *tok;
    size_t ms;
    while (pos < b && (tok = find_added(e, s, pos, b, pass, &ms)) != NULL) {
        size_t st = ms, en = ms + tok->len;
        if (tok->single_word && (word_before(s, a, ms) || word_after(s, en, b))) {
            pos = en; /* not a single word: the text stays text, the search goes on after it */
            continue;
        }
        if (tok->lstrip) {
            while (st > done) {
                size_t q = prev_char_start(s, done, st), n;
                if (class_at(s, q, st, &n) != LMP_UC_SPACE) break;
                st = q;
            }
        }
        if (tok->rstrip) {
            size_t n;
            while (en < b && class_at(s, en, b, &n) == LMP_UC_SPACE) en += n;
        }
        if (done < st) {
            int first = at_text_start && done == a;
            int rc = pass == 0 ? normalize_piece(e, s, done, st, first) : pretokenize(e, s, done, st, first);
            if (rc) return rc;
        }
        if (push_id(e, tok->id)) return ENC_OOM;
        done = pos = en;
    }
    if (done < b) {
        int first = at_text_start && done == a;
        return pass == 0 ? normalize_piece(e, s, done, b, first) : pretokenize(e, s, done, b, first);
    }
    return 0;
}

int lmp_bpe_encode(const lmp_bpe *t, const char *text, size_t len, unsigned flags, int32_t **ids,
                   int64_t *n_ids)
{
    *ids = NULL;
    *n_ids = 0;
    if ((flags & LMP_TOKENIZE_ADD_BOS) && t->bos_id < 0)
        return lmp_fail(LMP_EINVAL, "lmp_tokenize: %s: this tokenizer has no BOS token", t->what);
    enc e = {0};
    e.t = t;
    e.flags = flags;
    e.cap_out = len / 3 + 16;
    e.out = malloc(e.cap_out * sizeof *e.out);
    e.cache_mask = 1023;
    e.cache = calloc(e.cache_mask + 1, sizeof *e.cache);
    int rc = 0;
    if (!e.out || !e.cache) rc = -1;
    if (!rc && (flags & LMP_TOKENIZE_ADD_BOS)) rc = push_id(&e, t->bos_id);
    if (!rc) rc = split_added(&e, (const unsigned char *)text, 0, len, 0, 1);
    for (int k = 0; k < MAX_STEPS; k++) lmp_tok_regex_scratch_free(e.rx[k]);
    free(e.sym);
    free(e.prv);
    free(e.nxt);
    free(e.heap);
    free(e.tmp);
    free(e.cache);
    free(e.arena);
    if (rc) {
        free(e.out);
        if (rc == ENC_FAILED) return lmp_fail_prefix(LMP_EINVAL, "lmp_tokenize");
        if (rc == ENC_HEAP)
            return lmp_fail(LMP_EINVAL, "lmp_tokenize: %s: internal error (merge heap overflow)", t->what);
        return lmp_fail(LMP_ENOMEM, "lmp_tokenize: out of memory (%zu bytes of text)", len);
    }
    if (e.n_out == 0) { /* a valid malloc'd pointer even for no tokens */
        free(e.out);
        e.out = malloc(sizeof *e.out);
        if (!e.out) return lmp_fail(LMP_ENOMEM, "lmp_tokenize: out of memory");
    }
    *ids = e.out;
    *n_ids = (int64_t)e.n_out;
    return 0;
}

/* ---- loading: GGUF -------------------------------------------------------------------------- */

/* GGUF token types (llama.cpp's llama_token_type). */
enum { TT_NORMAL = 1, TT_UNKNOWN = 2, TT_CONTROL = 3, TT_USER_DEFINED = 4, TT_UNUSED = 5, TT_BYTE = 6 };

static uint32_t ld_u32(const void *p)
{
    const unsigned char *b = p;
    return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

static int name_is(const char *s, size_t n, const char *name)
{
    return n == strlen(name) && memcmp(s, name, n) == 0;
}

/* Regexes of llama.cpp's pre-tokenizers (src/llama-vocab.cpp, llm_tokenizer_bpe), as it writes
 * them: llama.cpp spells Qwen2's (?i:...) out as [sS] classes.  (Llama 3's regex has a hand
 * matcher with ASCII case folding, as llama.cpp spells it: match_llama3.) */
#define GPT2_RE "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"
static const char QWEN2_RE_LLAMA_CPP[] =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}"
    "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
/* llama.cpp's LLAMA_VOCAB_PRE_TYPE_BLOOM regex " ?[^(\\s|.,!?<marks>)]+" (the class's '(', '|' and
 * ')' are literal), its marks in UTF-8: U+2026 (ellipsis), U+3002, U+FF0C, U+3001 (CJK full stop,
 * comma, enumeration comma), U+0964 (Devanagari danda), U+06D4, U+060C (Arabic full stop, comma). */
static const char BLOOM_RE_LLAMA_CPP[] = " ?[^(\\s|.,!?"
                                         "\xE2\x80\xA6" "\xE3\x80\x82" "\xEF\xBC\x8C" "\xE3\x80\x81"
                                         "\xE0\xA5\xA4" "\xDB\x94" "\xD8\x8C" ")]+";
/* The DeepSeek pre-tokenizers (llama.cpp's LLAMA_VOCAB_PRE_TYPE_DEEPSEEK_LLM, "deepseek-llm", and
 * DEEPSEEK3_LLM, "deepseek-v3"): chains of regexes that llama.cpp does not match by hand, so it
 * runs them through std::regex (unicode.cpp, unicode_regex_split): a regex with a \p{..} class on
 * the text with every non-ASCII code point collapsed to its category (whitespace to \v), one without
 * on the code points with non-ASCII whitespace turned into \v.  Either way its \s means exactly
 * llama.cpp's whitespace set (PCRE2's \s adds U+180E), and no non-ASCII whitespace can match a
 * class of explicit ranges: LLAMA_CPP_WS spells that set out, and the ranges below leave those
 * code points out (U+3000 from the full-width punctuation, U+1680, U+2000-U+200A, U+2028,
 * U+2029, U+202F, U+205F, U+3000 from U+0800-U+4E00).  std::regex's $ is the end of the piece:
 * \z.  The non-ASCII characters are written as \x{..}, the ranges as llama.cpp writes them. */
#define LLAMA_CPP_WS "\\t\\n\\x0B\\f\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"
static const char DEEPSEEK_LLM_RE_LETTERS[] =
    "[" LLAMA_CPP_WS "]?[A-Za-z\\x{B5}\\x{C0}-\\x{D6}\\x{D8}-\\x{F6}\\x{F8}-\\x{1BA}\\x{1BC}-\\x{1BF}\\x{1C4}-\\x{293}"
    "\\x{295}-\\x{2AF}\\x{370}-\\x{373}\\x{376}\\x{377}\\x{37B}-\\x{37D}\\x{37F}\\x{386}\\x{388}-\\x{38A}\\x{38C}"
    "\\x{38E}-\\x{3A1}\\x{3A3}-\\x{3F5}\\x{3F7}-\\x{481}\\x{48A}-\\x{52F}\\x{531}-\\x{556}\\x{10A0}-\\x{10C5}"
    "\\x{13A0}-\\x{13F5}\\x{13F8}-\\x{13FD}\\x{1C90}-\\x{1CBA}\\x{1CBD}-\\x{1CBF}\\x{1D00}-\\x{1D2B}"
    "\\x{1D6B}-\\x{1D77}\\x{1D79}-\\x{1D9A}\\x{1E00}-\\x{1F15}\\x{1F18}-\\x{1F1D}\\x{1F20}-\\x{1F45}"
    "\\x{1F48}-\\x{1F4D}\\x{1F50}-\\x{1F57}\\x{1F59}\\x{1F5B}\\x{1F5D}\\x{1F5F}-\\x{1F7D}\\x{1F80}-\\x{1FB4}"
    "\\x{1FB6}-\\x{1FBC}\\x{1FBE}\\x{1FC2}-\\x{1FC4}\\x{1FC6}-\\x{1FCC}\\x{1FD0}-\\x{1FD3}\\x{1FD6}-\\x{1FDB}"
    "\\x{1FE0}-\\x{1FEC}\\x{1FF2}-\\x{1FF4}\\x{1FF6}-\\x{1FFC}\\x{2102}\\x{2107}\\x{210A}-\\x{2113}\\x{2115}"
    "\\x{2119}-\\x{211D}\\x{2124}\\x{2126}\\x{2128}\\x{212A}-\\x{212D}\\x{212F}-\\x{2134}\\x{2139}"
    "\\x{213C}-\\x{213F}\\x{2145}-\\x{2149}\\x{214E}\\x{2183}\\x{2184}\\x{2C00}-\\x{2C7B}\\x{2C7E}-\\x{2CE4}"
    "\\x{2CEB}-\\x{2CEE}\\x{2CF2}\\x{2CF3}\\x{A640}-\\x{A66D}\\x{A680}-\\x{A69B}\\x{A722}-\\x{A76F}"
    "\\x{A771}-\\x{A787}\\x{A78B}-\\x{A78E}\\x{AB70}-\\x{ABBF}\\x{FB00}-\\x{FB06}\\x{FB13}-\\x{FB17}"
    "\\x{FF21}-\\x{FF3A}\\x{FF41}-\\x{FF5A}\\x{10400}-\\x{1044F}\\x{104B0}-\\x{104D3}\\x{104D8}-\\x{104FB}"
    "\\x{10C80}-\\x{10CB2}\\x{10CC0}-\\x{10CF2}\\x{118A0}-\\x{118DF}\\x{1E900}-\\x{1E943}]+";
static const char DEEPSEEK_LLM_RE_PUNCT[] = /* llama.cpp: [!-/:-~！-／：-～‘-‟　-。] */
    "[" LLAMA_CPP_WS "]?[!-/:-~\\x{FF01}-\\x{FF0F}\\x{FF1A}-\\x{FF5E}\\x{2018}-\\x{201F}\\x{3001}-\\x{3002}]+";
static const char DEEPSEEK_LLM_RE_CJK[] = /* llama.cpp: [一-龥ࠀ-一가-퟿] */
    "[\\x{4E00}-\\x{9FA5}\\x{800}-\\x{167F}\\x{1681}-\\x{1FFF}\\x{200B}-\\x{2027}\\x{202A}-\\x{202E}"
    "\\x{2030}-\\x{205E}\\x{2060}-\\x{2FFF}\\x{3001}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+";
static const char DEEPSEEK3_RE_WORDS[] =
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+"
    "| ?[\\p{P}\\p{S}]+[\\r\\n]*|[" LLAMA_CPP_WS "]*[\\r\\n]+|[" LLAMA_CPP_WS "]+(?![^" LLAMA_CPP_WS "])"
    "|[" LLAMA_CPP_WS "]+";
/* Qwen2's regex as its tokenizer.json writes it (after JSON unescaping). */
static const char QWEN2_REGEX[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
    "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

/* llama.cpp's tokenizer.ggml.pre names, by the pre-tokenization llama.cpp gives them.  Each
 * group: the names, the chain of steps (a hand matcher, or a regex for PCRE2), whether
 * llama.cpp sets ignore_merges, and whether it drops the BOS token (special_bos_id NULL: the GLM
 * families, whose prompts start with their own [gMASK] tokens instead).  Names not listed here are refused by name: llama.cpp falls back
 * to its "default" regexes for them, which would tokenize those models differently. */
enum { MAX_PRE_CHAIN = 6 }; /* DeepSeek LLM's six regexes */
typedef struct {
    const char *names[16];
    int kinds[MAX_PRE_CHAIN];           /* STEP_*, -1 ends */
    const char *regexes[MAX_PRE_CHAIN]; /* for STEP_REGEX */
    int ignore_merges;
    int no_bos;
} gguf_pre_group;

static const gguf_pre_group GGUF_PRE[] = {
    {{"gpt-2", "phi-2", "mpt", "olmo", "jais", "jina-es", "jina-de", "jina-v2-es", "jina-v2-de", "gigachat",
      "a.x-4.0", "mellum", "exaone4", "trillion", "granite-docling", NULL},
     {STEP_GPT2, -1}, {NULL}, 0, 0},
    {{"smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva-7b", NULL},
     {STEP_DIGITS, STEP_GPT2, -1}, {NULL}, 0, 0},
    {{"llama-bpe", "llama3", "llama-v3", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2", NULL},
     {STEP_LLAMA3, -1}, {NULL}, 1, 0},
    {{"dbrx", "smaug-bpe", NULL}, {STEP_LLAMA3, -1}, {NULL}, 0, 0},
    /* CHATGLM4's regex is Llama 3's; "glm4" (and "glm5") with ignore_merges, "chatglm-bpe" without */
    {{"glm4", "glm5", NULL}, {STEP_LLAMA3, -1}, {NULL}, 1, 1},
    {{"chatglm-bpe", NULL}, {STEP_LLAMA3, -1}, {NULL}, 0, 1},
    {{"qwen2", "deepseek-r1-qwen", "kormo", "megrez", "stablelm2", NULL},
     {STEP_REGEX, -1}, {QWEN2_RE_LLAMA_CPP}, 0, 0},
    {{"default", NULL},
     {STEP_REGEX, STEP_REGEX, STEP_REGEX, STEP_REGEX, -1},
     {"[\\p{P}\\$\\+<=>\\^~\\|]+", GPT2_RE, "\\p{N}+", "[0-9][0-9][0-9]"}, 0, 0},
    {{"falcon", NULL},
     {STEP_REGEX, STEP_GPT2, STEP_REGEX, -1}, {"[\\p{P}\\$\\+<=>\\^~\\|`]+", NULL, "[0-9][0-9][0-9]"}, 0, 0},
    /* BLOOM (and GPT3-finnish, which llama.cpp splits alike): a run of anything but whitespace,
     * '(', '|', ')' and the sentence marks . , ! ? ... and their CJK, Devanagari and Arabic forms,
     * with one optional space before it; what no match covers is a piece of its own */
    {{"bloom", "gpt3-finnish", NULL}, {STEP_REGEX, -1}, {BLOOM_RE_LLAMA_CPP}, 0, 0},
    /* DEEPSEEK_LLM: each newline alone, runs of (mostly Latin, Greek, Cyrillic) letters, of ASCII and
     * full-width punctuation (each with one optional whitespace before), trailing whitespace, runs
     * of CJK (and U+0800-U+4E00) and Hangul, runs of numbers.  BOS only as the file says */
    {{"deepseek-llm", NULL},
     {STEP_REGEX, STEP_REGEX, STEP_REGEX, STEP_REGEX, STEP_REGEX, STEP_REGEX},
     {"[\\r\\n]", DEEPSEEK_LLM_RE_LETTERS, DEEPSEEK_LLM_RE_PUNCT, "[" LLAMA_CPP_WS "]+\\z", DEEPSEEK_LLM_RE_CJK,
      "\\p{N}+"}, 0, 0},
    /* DEEPSEEK3_LLM: 1-3 digit numbers, runs of CJK ideographs and kana, then a Llama-3-like regex */
    {{"deepseek-v3", NULL},
     {STEP_REGEX, STEP_REGEX, STEP_REGEX, -1},
     {"\\p{N}{1,3}", "[\\x{4E00}-\\x{9FA5}\\x{3040}-\\x{309F}\\x{30A0}-\\x{30FF}]+", DEEPSEEK3_RE_WORDS}, 0, 0},
};


static const gguf_pre_group *pre_from_gguf(const char *s, size_t n)
{
    for (size_t g = 0; g < sizeof GGUF_PRE / sizeof *GGUF_PRE; g++)
        for (const char *const *q = GGUF_PRE[g].names; *q; q++)
            if (name_is(s, n, *q)) return &GGUF_PRE[g];
    return NULL;
}

/* Appends a pre-tokenizer step; what names the place for messages. */
static int add_step(lmp_bpe *t, int kind, const char *re, size_t re_len, int literal, int behavior, const char *what)
{
    if (t->n_steps == MAX_STEPS)
        return lmp_fail(LMP_EINVAL, "%s: more than %d pre-tokenizer steps", what, MAX_STEPS);
    pre_step *st = &t->steps[t->n_steps];
    *st = (pre_step){kind, behavior, NULL};
    if (kind == STEP_REGEX) {
        int rc = lmp_tok_regex_compile(re, re_len, literal, what, &st->re);
        if (rc) return rc;
    }
    t->n_steps++;
    return 0;
}

int lmp_bpe_load_gguf(const lmp_gguf *g, lmp_bpe **out)
{
    *out = NULL;
    const char *path = g->path;
    const lmp_gguf_kv *tok = lmp_gguf_find_kv(g, "tokenizer.ggml.tokens");
    const lmp_gguf_kv *mer = lmp_gguf_find_kv(g, "tokenizer.ggml.merges");
    const lmp_gguf_kv *ty = lmp_gguf_find_kv(g, "tokenizer.ggml.token_type");
    const lmp_gguf_kv *pre = lmp_gguf_find_kv(g, "tokenizer.ggml.pre");
    if (!tok || tok->type != LMP_GGUF_ARRAY || tok->arr_type != LMP_GGUF_STRING)
        return lmp_fail(LMP_EINVAL, "%s: tokenizer.ggml.tokens is missing or not an array of strings", path);
    if (tok->n == 0 || tok->n > MAX_VOCAB)
        return lmp_fail(LMP_EINVAL, "%s: tokenizer.ggml.tokens has %llu entries", path,
                        (unsigned long long)tok->n);
    if (!mer)
        return lmp_fail(LMP_EINVAL,
                        "%s: tokenizer.ggml.merges is missing: a \"gpt2\" (byte-level BPE) vocabulary "
                        "needs its merges", path);
    if (mer->type != LMP_GGUF_ARRAY || mer->arr_type != LMP_GGUF_STRING)
        return lmp_fail(LMP_EINVAL, "%s: tokenizer.ggml.merges is not an array of strings", path);
    if (ty && (ty->type != LMP_GGUF_ARRAY || ty->arr_type != LMP_GGUF_INT32 || ty->n != tok->n))
        return lmp_fail(LMP_EINVAL, "%s: tokenizer.ggml.token_type is not %llu int32 values", path,
                        (unsigned long long)tok->n);
    const gguf_pre_group *group = &GGUF_PRE[0]; /* no tokenizer.ggml.pre (old files): GPT-2's own regex */
    const char *pre_name = "gpt-2";
    if (pre) {
        if (pre->type != LMP_GGUF_STRING)
            return lmp_fail(LMP_EINVAL, "%s: tokenizer.ggml.pre is not a string", path);
        size_t n = (size_t)pre->str_lens[0];
        if (!(group = pre_from_gguf(pre->strs[0], n)))
            return lmp_fail(LMP_EINVAL,
                            "%s: unsupported pre-tokenizer \"%.*s\" (tokenizer.ggml.pre; supported: gpt-2 and "
                            "its aliases, smollm, starcoder, refact, command-r, codeshell, exaone, llama3, "
                            "llama-bpe, qwen2, dbrx, smaug-bpe, glm4, glm5, chatglm-bpe, default, falcon, bloom, deepseek-llm, deepseek-v3: see docs/tokenizers.md)",
                            path, (int)(n > 64 ? 64 : n), pre->strs[0]);
        pre_name = group->names[0];
    }

    int V = (int)tok->n, rc = 0;
    lmp_bpe *t = bpe_new(path);
    const char **strs = malloc((size_t)V * sizeof *strs);
    size_t *lens = malloc((size_t)V * sizeof *lens);
    added_spec *spec = malloc((size_t)V * sizeof *spec);
    if (!t || !strs || !lens || !spec) {
        rc = lmp_fail(LMP_ENOMEM, "%s: out of memory loading the tokenizer", path);
        goto done;
    }
    for (int k = 0; k < MAX_PRE_CHAIN && group->kinds[k] >= 0; k++) {
        const char *re = group->regexes[k];
        char what[256];
        snprintf(what, sizeof what, "%s: tokenizer.ggml.pre \"%s\"", path, pre_name);
        if ((rc = add_step(t, group->kinds[k], re, re ? strlen(re) : 0, 0, 0, what)) != 0) goto done;
    }
    t->ignore_merges = group->ignore_merges; /* as llama.cpp does for Llama 3 */
    t->gguf_pre = pre_name;
    for (int i = 0; i < V; i++) {
        strs[i] = tok->strs[i];
        lens[i] = (size_t)tok->str_lens[i];
    }
    if ((rc = bpe_set_vocab(t, V, strs, lens)) != 0) goto done;
    if ((rc = bpe_alloc_merges(t, (size_t)mer->n)) != 0) goto done;
    if (mer->n > UINT32_MAX) {
        rc = lmp_fail(LMP_EINVAL, "%s: too many merges", path);
        goto done;
    }
    for (uint64_t r = 0; r < mer->n; r++) {
        const char *m = mer->strs[r];
        size_t ml = (size_t)mer->str_lens[r], sp;
        char where[64];
        snprintf(where, sizeof where, "tokenizer.ggml.merges[%llu]", (unsigned long long)r);
        if (split_merge(m, ml, &sp, 0)) {
            rc = lmp_fail(LMP_EINVAL, "%s: %s \"%.*s\" is not two tokens separated by a space", path,
                          where, (int)(ml > 64 ? 64 : ml), m);
            goto done;
        }
        if ((rc = bpe_add_merge(t, (uint32_t)r, m, sp, m + sp + 1, ml - sp - 1, where)) != 0) goto done;
    }
    /* Added tokens: CONTROL and UNKNOWN are special (parsed only on request, like llama.cpp's
     * parse_special), USER_DEFINED always. */
    int n_spec = 0;
    for (int i = 0; ty && i < V; i++) {
        int type = (int)(int32_t)ld_u32((const unsigned char *)ty->data + 4 * (size_t)i);
        if (type != TT_CONTROL && type != TT_UNKNOWN && type != TT_USER_DEFINED) continue;
        spec[n_spec++] = (added_spec){i, strs[i], lens[i], type != TT_USER_DEFINED, 0, 0, 0, 0};
    }
    if ((rc = bpe_set_added(t, spec, n_spec)) != 0) goto done;
    if ((rc = bpe_added_decode_as_text(t)) != 0) goto done;

    int64_t v;
    if (lmp_gguf_find_kv(g, "tokenizer.ggml.bos_token_id") &&
        lmp_gguf_get_int(g, "tokenizer.ggml.bos_token_id", &v) == 0 && v >= 0 && v < V)
        t->bos_id = (int)v;
    if (lmp_gguf_find_kv(g, "tokenizer.ggml.eos_token_id") &&
        lmp_gguf_get_int(g, "tokenizer.ggml.eos_token_id", &v) == 0 && v >= 0 && v < V)
        t->eos_id = (int)v;
    /* No BOS by default: GPT-2-style models do not use one (llama.cpp's default for "gpt2"). */
    if (lmp_gguf_find_kv(g, "tokenizer.ggml.add_bos_token") &&
        lmp_gguf_get_int(g, "tokenizer.ggml.add_bos_token", &v) == 0)
        t->adds_bos = v != 0 && t->bos_id >= 0;
    if (group->no_bos) { /* as llama.cpp: whatever the file says */
        t->bos_id = -1;
        t->adds_bos = 0;
    }
    lmp_clear_error(); /* a malformed optional key above just keeps its default */

done:
    free(strs);
    free(lens);
    free(spec);
    if (rc) lmp_bpe_free(t);
    else *out = t;
    return rc;
}

/* ---- loading: Hugging Face tokenizer.json --------------------------------------------------- */

/* Llama 3's pre-tokenizer regex as tokenizer.json writes it (after JSON unescaping). */
static const char LLAMA3_REGEX[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
    "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

static const char *jstr(const lmp_json *o, const char *key)
{
    const lmp_json *v = lmp_json_get(o, key);
    return v && v->type == LMP_JSON_STRING ? v->str : NULL;
}

static int jtype_is(const lmp_json *o, const char *type)
{
    const char *s = o && o->type == LMP_JSON_OBJECT ? jstr(o, "type") : NULL;
    return s && strcmp(s, type) == 0;
}

/* A boolean member, `dflt` if absent or null; -1 if present with another type. */
static int jbool(const lmp_json *o, const char *key, int dflt)
{
    const lmp_json *v = lmp_json_get(o, key);
    if (!v || v->type == LMP_JSON_NULL) return dflt;
    return v->type == LMP_JSON_BOOL ? v->boolean : -1;
}

/* A member that must be absent, null or (for strings) empty for this implementation. */
static int junset(const lmp_json *o, const char *key)
{
    const lmp_json *v = lmp_json_get(o, key);
    return !v || v->type == LMP_JSON_NULL || (v->type == LMP_JSON_STRING && v->str_len == 0) ||
           (v->type == LMP_JSON_BOOL && !v->boolean);
}

/* Describes a pre_tokenizer/normalizer/decoder for messages: its "type" or "null". */
static const char *jdesc(const lmp_json *o)
{
    if (!o || o->type == LMP_JSON_NULL) return "null";
    const char *s = o->type == LMP_JSON_OBJECT ? jstr(o, "type") : NULL;
    return s ? s : "(no type)";
}

/* Refuses a member of object o other than the listed ones (NULL-terminated): an option this
 * reader does not implement may change the ids.  what: "pre_tokenizer Split", ... */
static int only_keys(const lmp_bpe *t, const lmp_json *o, const char *const *keys, const char *what)
{
    for (size_t k = 0; o && o->type == LMP_JSON_OBJECT && k < o->n; k++) {
        int ok = 0;
        for (const char *const *q = keys; *q && !ok; q++) ok = strcmp(o->keys[k], *q) == 0;
        if (!ok)
            return lmp_fail(LMP_EINVAL, "%s: %s: option \"%.64s\" is not supported", t->what, what, o->keys[k]);
    }
    return 0;
}

/* ByteLevel as a pre-tokenizer: its GPT-2 regex step when use_regex. */
static int hf_byte_level(lmp_bpe *t, const lmp_json *bl, int alone)
{
    static const char *const keys[] = {"type", "add_prefix_space", "trim_offsets", "use_regex", NULL};
    int rc = only_keys(t, bl, keys, "pre_tokenizer ByteLevel");
    if (rc) return rc;
    int ur = jbool(bl, "use_regex", 1), aps = jbool(bl, "add_prefix_space", 1); /* HF's defaults */
    if (ur < 0 || aps < 0)
        return lmp_fail(LMP_EINVAL, "%s: pre_tokenizer ByteLevel: use_regex or add_prefix_space is not a boolean",
                        t->what);
    if (aps && !alone)
        return lmp_fail(LMP_EINVAL, "%s: pre_tokenizer ByteLevel inside a Sequence with add_prefix_space true is "
                        "not supported", t->what);
    t->add_prefix_space = aps;
    return ur ? add_step(t, STEP_GPT2, NULL, 0, 0, 0, t->what) : 0;
}

static int hf_split(lmp_bpe *t, const lmp_json *sp)
{
    static const char *const keys[] = {"type", "pattern", "behavior", "invert", NULL};
    int rc = only_keys(t, sp, keys, "pre_tokenizer Split");
    if (rc) return rc;
    const lmp_json *pat = lmp_json_get(sp, "pattern");
    const lmp_json *re = pat && pat->type == LMP_JSON_OBJECT ? lmp_json_get(pat, "Regex") : NULL;
    const lmp_json *lit = pat && pat->type == LMP_JSON_OBJECT ? lmp_json_get(pat, "String") : NULL;
    const lmp_json *p = re ? re : lit;
    if (!p || p->type != LMP_JSON_STRING || p->str_len == 0)
        return lmp_fail(LMP_EINVAL, "%s: pre_tokenizer Split: pattern is not {\"Regex\": ...} or {\"String\": ...}",
                        t->what);
    const char *beh = jstr(sp, "behavior");
    static const char *const names[] = {"Isolated", "Removed", "MergedWithPrevious", "MergedWithNext", "Contiguous"};
    int behavior = -1;
    for (int k = 0; beh && k < 5; k++)
        if (strcmp(beh, names[k]) == 0) behavior = k;
    if (behavior < 0)
        return lmp_fail(LMP_EINVAL, "%s: pre_tokenizer Split: behavior \"%s\" is not supported (Isolated, Removed, "
                        "MergedWithPrevious, MergedWithNext, Contiguous)", t->what, beh ? beh : "(none)");
    if (jbool(sp, "invert", 0) != 0)
        return lmp_fail(LMP_EINVAL, "%s: pre_tokenizer Split: invert true is not supported", t->what);
    /* Llama 3's regex has an exact hand matcher (tested against HF); others go to PCRE2 */
    if (re && behavior == SPLIT_ISOLATED && strcmp(p->str, LLAMA3_REGEX) == 0)
        return add_step(t, STEP_LLAMA3, NULL, 0, 0, 0, t->what);
    char what[4200];
    snprintf(what, sizeof what, "%s: pre_tokenizer Split", t->what);
    return add_step(t, STEP_REGEX, p->str, p->str_len, lit != NULL, behavior, what);
}

static int hf_metaspace(lmp_bpe *t, const lmp_json *ms)
{
    static const char *const keys[] = {"type", "replacement", "prepend_scheme", "split", "add_prefix_space",
                                       "str_rep", NULL};
    int rc = only_keys(t, ms, keys, "pre_tokenizer Metaspace");
    if (rc) return rc;
    const lmp_json *rj = lmp_json_get(ms, "replacement");
    const char *rep = jstr(ms, "replacement");
    if ((rj && !rep) || (rep && strcmp(rep, META) != 0))
        return lmp_fail(LMP_EINVAL, "%s: pre_tokenizer Metaspace: replacement \"%.16s\" is not supported (only "
                        "\"\\u2581\")", t->what, rep ? rep : "(not a string)");
    const char *scheme = jstr(ms, "prepend_scheme");
    const lmp_json *sj = lmp_json_get(ms, "prepend_scheme");
    if (sj && sj->type != LMP_JSON_NULL && !scheme)
        return lmp_fail(LMP_EINVAL, "%s: pre_tokenizer Metaspace: prepend_scheme is not a string", t->what);
    int aps = jbool(ms, "add_prefix_space", 1), split = jbool(ms, "split", 1);
    if (aps < 0 || split < 0)
        return lmp_fail(LMP_EINVAL, "%s: pre_tokenizer Metaspace: add_prefix_space or split is not a boolean", t->what);
    if (!scheme) t->meta_prepend = aps ? META_ALWAYS : META_NEVER; /* files before tokenizers 0.14 */
    else if (strcmp(scheme, "always") == 0) t->meta_prepend = META_ALWAYS;
    else if (strcmp(scheme, "first") == 0) t->meta_prepend = META_FIRST;
    else if (strcmp(scheme, "never") == 0) t->meta_prepend = META_NEVER;
    else
        return lmp_fail(LMP_EINVAL, "%s: pre_tokenizer Metaspace: prepend_scheme \"%.32s\" is not supported", t->what,
                        scheme);
    t->metaspace = 1;
    t->meta_split = split;
    return 0;
}

/* Reads the pre_tokenizer into t->steps (byte-level models) or t->metaspace (SentencePiece-style
 * ones); *byte_level receives whether a ByteLevel step was there. */
static int hf_pre_tokenizer(lmp_bpe *t, const lmp_json *pt, int *byte_level)
{
    const char *path = t->what;
    *byte_level = 0;
    if (!pt || pt->type == LMP_JSON_NULL) return 0;
    if (jtype_is(pt, "ByteLevel")) {
        *byte_level = 1;
        return hf_byte_level(t, pt, 1);
    }
    if (jtype_is(pt, "Metaspace")) return hf_metaspace(t, pt);
    if (jtype_is(pt, "Split")) return hf_split(t, pt);
    if (jtype_is(pt, "Sequence")) {
        static const char *const keys[] = {"type", "pretokenizers", NULL};
        int rc = only_keys(t, pt, keys, "pre_tokenizer Sequence");
        if (rc) return rc;
        const lmp_json *seq = lmp_json_get(pt, "pretokenizers");
        if (!seq || seq->type != LMP_JSON_ARRAY)
            return lmp_fail(LMP_EINVAL, "%s: pre_tokenizer Sequence has no \"pretokenizers\" array", path);
        for (size_t k = 0; k < seq->n; k++) {
            const lmp_json *it = &seq->items[k];
            if (*byte_level)
                return lmp_fail(LMP_EINVAL, "%s: pre_tokenizer Sequence: a step after ByteLevel is not supported",
                                path);
            if (jtype_is(it, "ByteLevel")) {
                *byte_level = 1;
                rc = hf_byte_level(t, it, 0);
            } else if (jtype_is(it, "Split")) {
                rc = hf_split(t, it);
            } else if (jtype_is(it, "Digits")) {
                static const char *const dkeys[] = {"type", "individual_digits", NULL};
                if ((rc = only_keys(t, it, dkeys, "pre_tokenizer Digits")) != 0) return rc;
                if (jbool(it, "individual_digits", 0) != 1)
                    return lmp_fail(LMP_EINVAL, "%s: pre_tokenizer Digits without individual_digits is not supported",
                                    path);
                rc = add_step(t, STEP_DIGITS, NULL, 0, 0, 0, path);
            } else {
                return lmp_fail(LMP_EINVAL, "%s: pre_tokenizer Sequence: pre-tokenizer \"%s\" is not supported "
                                "(ByteLevel, Split, Digits)", path, jdesc(it));
            }
            if (rc) return rc;
        }
        return 0;
    }
    return lmp_fail(LMP_EINVAL,
                    "%s: pre_tokenizer \"%s\" is not supported (ByteLevel, Metaspace, Split, Sequence of "
                    "ByteLevel/Split/Digits)", path, jdesc(pt));
}

/* The decoder must undo what the model and pre-tokenizer did: ByteLevel for byte-level models;
 * for SentencePiece-style ones Metaspace, or a Sequence of Replace("\u2581", " "), ByteFallback,
 * Fuse and Strip(" ", n, 0) (Llama 2's).  Sets t->strip_after_bos. */
static int hf_decoder(lmp_bpe *t, const lmp_json *dec, int byte_level)
{
    const char *path = t->what;
    if (byte_level) {
        if (!jtype_is(dec, "ByteLevel"))
            return lmp_fail(LMP_EINVAL, "%s: decoder \"%s\" is not supported with a ByteLevel pre_tokenizer "
                            "(expected ByteLevel)", path, jdesc(dec));
        return 0;
    }
    if (!dec || dec->type == LMP_JSON_NULL) return 0;
    if (jtype_is(dec, "Metaspace")) {
        t->strip_after_bos = t->meta_prepend != META_NEVER;
        return 0;
    }
    const lmp_json *seq = jtype_is(dec, "Sequence") ? lmp_json_get(dec, "decoders") : NULL;
    if (!seq || seq->type != LMP_JSON_ARRAY)
        return lmp_fail(LMP_EINVAL, "%s: decoder \"%s\" is not supported for a SentencePiece-style BPE (Metaspace, "
                        "or a Sequence of Replace, ByteFallback, Fuse, Strip)", path, jdesc(dec));
    for (size_t k = 0; k < seq->n; k++) {
        const lmp_json *d = &seq->items[k];
        if (jtype_is(d, "ByteFallback") || jtype_is(d, "Fuse")) continue;
        if (jtype_is(d, "Replace")) {
            const lmp_json *pat = lmp_json_get(d, "pattern");
            const char *from = pat && pat->type == LMP_JSON_OBJECT ? jstr(pat, "String") : NULL;
            const char *to = jstr(d, "content");
            if (from && to && strcmp(from, META) == 0 && strcmp(to, " ") == 0) continue;
        } else if (jtype_is(d, "Strip")) {
            const char *c = jstr(d, "content");
            const lmp_json *st = lmp_json_get(d, "start"), *sp = lmp_json_get(d, "stop");
            if (c && strcmp(c, " ") == 0 && st && st->type == LMP_JSON_NUMBER && st->is_integer &&
                st->integer <= 1 && sp && sp->type == LMP_JSON_NUMBER && sp->integer == 0) {
                t->strip_after_bos = st->integer == 1;
                continue;
            }
        } else if (jtype_is(d, "Metaspace")) {
            t->strip_after_bos = 1;
            continue;
        }
        return lmp_fail(LMP_EINVAL, "%s: decoder Sequence: decoder \"%s\" (decoders[%zu]) is not supported", path,
                        jdesc(d), k);
    }
    return 0;
}

/* What lmp_bpe_gguf_pre answers: the tokenizer.ggml.pre name that llama.cpp and
 * lmp_bpe_load_gguf read back as this pre-tokenization, or NULL. */
static const char *hf_gguf_pre_name(const lmp_bpe *t)
{
    /* llama.cpp adds no prefix space and ignores merges only for Llama 3's regex */
    if (t->char_level || t->add_prefix_space) return NULL;
    /* GGUF has no normalizer; llama.cpp's converter writes "qwen2" for Qwen2's NFC + regex and
     * llama.cpp skips the NFC, which changes nothing on text already in NFC (docs/tokenizers.md) */
    int nfc = lmp_tok_norm_is_nfc_only(t->norm);
    if (t->norm && !nfc) return NULL;
    const pre_step *s = t->steps;
    if (nfc) {
        if (t->n_steps == 1 && s[0].kind == STEP_REGEX && s[0].behavior == SPLIT_ISOLATED && !t->ignore_merges &&
            strcmp(lmp_tok_regex_pattern(s[0].re), QWEN2_REGEX) == 0)
            return "qwen2";
        return NULL;
    }
    if (t->n_steps == 1 && s[0].kind == STEP_GPT2 && !t->ignore_merges) return "gpt-2";
    if (t->n_steps == 2 && s[0].kind == STEP_DIGITS && s[1].kind == STEP_GPT2 && !t->ignore_merges) return "smollm";
    if (t->n_steps == 1 && s[0].kind == STEP_LLAMA3) return t->ignore_merges ? "llama-bpe" : "dbrx";
    if (t->n_steps == 1 && s[0].kind == STEP_REGEX && s[0].behavior == SPLIT_ISOLATED && !t->ignore_merges &&
        strcmp(lmp_tok_regex_pattern(s[0].re), QWEN2_REGEX) == 0)
        return "qwen2";
    return NULL;
}

/* The id of `name` as an added token or vocabulary string, or -1. */
static int hf_token_id(const lmp_bpe *t, const char *name)
{
    if (!name) return -1;
    size_t n = strlen(name);
    for (int k = 0; k < t->n_added; k++)
        if (t->added[k].len == n && memcmp(t->added_pool + t->added[k].off, name, n) == 0)
            return t->added[k].id;
    return lookup(t, name, n);
}

/* BOS from the post_processor: a TemplateProcessing (alone or in a Sequence) whose "single"
 * template starts with a special token prepends it. */
static void hf_post_processor(lmp_bpe *t, const lmp_json *pp)
{
    if (jtype_is(pp, "Sequence")) {
        const lmp_json *ps = lmp_json_get(pp, "processors");
        for (size_t k = 0; ps && ps->type == LMP_JSON_ARRAY && k < ps->n; k++)
            hf_post_processor(t, &ps->items[k]);
        return;
    }
    if (!jtype_is(pp, "TemplateProcessing")) return;
    const lmp_json *single = lmp_json_get(pp, "single");
    if (!single || single->type != LMP_JSON_ARRAY || single->n == 0) return;
    const lmp_json *st = lmp_json_get(&single->items[0], "SpecialToken");
    const char *name = st ? jstr(st, "id") : NULL;
    if (!name) return;
    /* special_tokens: { name: { "id": name, "ids": [id], "tokens": [...] } } */
    const lmp_json *sts = lmp_json_get(pp, "special_tokens");
    const lmp_json *ent = sts ? lmp_json_get(sts, name) : NULL;
    const lmp_json *ids = ent ? lmp_json_get(ent, "ids") : NULL;
    int id = -1;
    if (ids && ids->type == LMP_JSON_ARRAY && ids->n == 1 && ids->items[0].type == LMP_JSON_NUMBER &&
        ids->items[0].is_integer && ids->items[0].integer >= 0 && ids->items[0].integer < t->n_vocab)
        id = (int)ids->items[0].integer;
    if (id < 0) id = hf_token_id(t, name);
    if (id >= 0) {
        t->bos_id = id;
        t->adds_bos = 1;
    }
}

/* bos/eos names from tokenizer_config.json next to the tokenizer.json, if there is one. */
static void hf_config(lmp_bpe *t, const char *json_path)
{
    const char *slash = strrchr(json_path, '/');
    size_t dir = slash ? (size_t)(slash - json_path + 1) : 0;
    char *cfg = malloc(dir + sizeof "tokenizer_config.json");
    if (!cfg) return;
    memcpy(cfg, json_path, dir);
    memcpy(cfg + dir, "tokenizer_config.json", sizeof "tokenizer_config.json");
    /* Only if it is there (access() does not open it); read through lmp_tok_read_file, so a FIFO
     * or a device in its place is refused without blocking and simply ignored. */
    if (access(cfg, F_OK) == 0) {
        unsigned char *data = NULL;
        size_t size = 0;
        lmp_json *j = NULL;
        if (lmp_tok_read_file(cfg, &data, &size) == 0 && lmp_json_parse((const char *)data, size, cfg, &j) == 0) {
            static const char *const keys[2] = {"bos_token", "eos_token"};
            for (int k = 0; k < 2; k++) {
                const lmp_json *v = lmp_json_get(j, keys[k]);
                const char *name = v && v->type == LMP_JSON_STRING ? v->str
                                   : v && v->type == LMP_JSON_OBJECT ? jstr(v, "content") : NULL;
                int id = hf_token_id(t, name);
                if (id >= 0 && k == 0 && t->bos_id < 0) t->bos_id = id;
                if (id >= 0 && k == 1) t->eos_id = id;
            }
        }
        lmp_clear_error(); /* an unreadable config only loses the bos/eos names */
        lmp_json_free(j);
        free(data);
    }
    free(cfg);
}

/* SentencePiece-style vocabularies: the <0xXX> byte tokens, and each token's decoded bytes
 * ("\u2581" is a space, <0xXX> that byte when byte_fallback; added tokens keep their text), in a
 * new pool (the byte-level decoding bpe_set_vocab made does not apply). */
static int bpe_char_level_decoding(lmp_bpe *t)
{
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        t->byte_tok_sp[b] = lookup(t, name, 6);
    }
    size_t total = 1;
    for (int i = 0; i < t->n_vocab; i++) total += t->str_len[i] == UINT32_MAX ? 0 : t->str_len[i];
    for (int k = 0; k < t->n_added; k++) total += t->added[k].len;
    char *pool = malloc(total);
    if (!pool) return oom(t);
    size_t ro = 0;
    for (int i = 0; i < t->n_vocab; i++) {
        t->raw_off[i] = ro;
        t->raw_len[i] = 0;
        if (t->str_len[i] == UINT32_MAX) continue;
        const char *src = t->str_pool + t->str_off[i];
        size_t n = t->str_len[i], r = 0;
        char *dst = pool + ro;
        unsigned v;
        if (t->byte_fallback && n == 6 && memcmp(src, "<0x", 3) == 0 && src[5] == '>' &&
            sscanf(src + 3, "%2X", &v) == 1 && t->byte_tok_sp[v & 0xFF] == i) {
            dst[r++] = (char)v;
        } else {
            for (size_t k = 0; k < n;) {
                if (n - k >= 3 && memcmp(src + k, META, 3) == 0) {
                    dst[r++] = ' ';
                    k += 3;
                } else {
                    dst[r++] = src[k++];
                }
            }
        }
        t->raw_len[i] = (uint32_t)r;
        ro += r;
    }
    for (int k = 0; k < t->n_added; k++) { /* added tokens decode to their text */
        const added_token *a = &t->added[k];
        memcpy(pool + ro, t->added_pool + a->off, a->len);
        t->raw_off[a->id] = ro;
        t->raw_len[a->id] = a->len;
        ro += a->len;
    }
    free(t->raw_pool);
    t->raw_pool = pool;
    return 0;
}

int lmp_bpe_load_hf(const char *path, lmp_bpe **out)
{
    *out = NULL;
    unsigned char *data = NULL;
    size_t size = 0;
    lmp_json *j = NULL;
    lmp_bpe *t = NULL;
    const char **strs = NULL;
    size_t *lens = NULL;
    added_spec *spec = NULL;
    int rc = lmp_tok_read_file(path, &data, &size);
    if (rc) return rc;
    if ((rc = lmp_json_parse((const char *)data, size, path, &j)) != 0) goto done;
    if (!(t = bpe_new(path))) {
        rc = lmp_fail(LMP_ENOMEM, "%s: out of memory loading the tokenizer", path);
        goto done;
    }
    const lmp_json *model = j->type == LMP_JSON_OBJECT ? lmp_json_get(j, "model") : NULL;
    if (!model || model->type != LMP_JSON_OBJECT) {
        rc = lmp_fail(LMP_EINVAL, "%s: no \"model\" object: not a Hugging Face tokenizer.json", path);
        goto done;
    }
    const char *mtype = jstr(model, "type");
    if (!mtype) {
        rc = lmp_fail(LMP_EINVAL, "%s: model has no \"type\" (expected \"BPE\")", path);
        goto done;
    }
    if (strcmp(mtype, "BPE") != 0) {
        rc = lmp_fail(LMP_EINVAL,
                      "%s: tokenizer model type \"%s\" is not supported (only \"BPE\" tokenizer.json files "
                      "are: byte-level, or SentencePiece-style with byte_fallback)", path, mtype);
        goto done;
    }
    static const char *const model_keys[] = {"type", "dropout", "unk_token", "continuing_subword_prefix",
                                             "end_of_word_suffix", "fuse_unk", "byte_fallback", "ignore_merges",
                                             "vocab", "merges", NULL};
    if ((rc = only_keys(t, model, model_keys, "model")) != 0) goto done;
    static const char *const unsupported[] = {"dropout", "continuing_subword_prefix", "end_of_word_suffix"};
    for (size_t k = 0; k < sizeof unsupported / sizeof *unsupported; k++)
        if (!junset(model, unsupported[k])) {
            rc = lmp_fail(LMP_EINVAL, "%s: BPE model option \"%s\" is not supported", path, unsupported[k]);
            goto done;
        }
    int im = jbool(model, "ignore_merges", 0), bf = jbool(model, "byte_fallback", 0), fu = jbool(model, "fuse_unk", 0);
    if (im < 0 || bf < 0 || fu < 0) {
        rc = lmp_fail(LMP_EINVAL, "%s: model.ignore_merges, byte_fallback or fuse_unk is not a boolean", path);
        goto done;
    }
    t->ignore_merges = im;
    t->byte_fallback = bf;
    t->fuse_unk = fu;
    if ((rc = lmp_tok_norm_parse(lmp_json_get(j, "normalizer"), path, &t->norm)) != 0) goto done;
    int byte_level;
    if ((rc = hf_pre_tokenizer(t, lmp_json_get(j, "pre_tokenizer"), &byte_level)) != 0) goto done;
    /* Without a ByteLevel pre-tokenizer the model's symbols are characters (SentencePiece-style:
     * Llama 2, Mistral, Gemma); a byte-level model needs no byte fallback. */
    t->char_level = !byte_level;
    if (byte_level && bf) {
        rc = lmp_fail(LMP_EINVAL, "%s: model.byte_fallback with a ByteLevel pre_tokenizer is not supported", path);
        goto done;
    }
    if (!byte_level && t->metaspace && t->n_steps > 0) {
        rc = lmp_fail(LMP_EINVAL, "%s: pre_tokenizer Metaspace with Split/Digits steps is not supported", path);
        goto done;
    }
    if ((rc = hf_decoder(t, lmp_json_get(j, "decoder"), byte_level)) != 0) goto done;

    /* vocabulary: ids from model.vocab and added_tokens */
    const lmp_json *vocab = lmp_json_get(model, "vocab");
    const lmp_json *merges = lmp_json_get(model, "merges");
    const lmp_json *added = lmp_json_get(j, "added_tokens");
    if (!vocab || vocab->type != LMP_JSON_OBJECT || !merges || merges->type != LMP_JSON_ARRAY) {
        rc = lmp_fail(LMP_EINVAL, "%s: model.vocab (object) or model.merges (array) is missing", path);
        goto done;
    }
    if (added && added->type != LMP_JSON_ARRAY && added->type != LMP_JSON_NULL) {
        rc = lmp_fail(LMP_EINVAL, "%s: added_tokens is not an array", path);
        goto done;
    }
    size_t n_added = added && added->type == LMP_JSON_ARRAY ? added->n : 0;
    int64_t max_id = -1;
    for (size_t k = 0; k < vocab->n; k++) {
        const lmp_json *v = &vocab->items[k];
        if (v->type != LMP_JSON_NUMBER || !v->is_integer || v->integer < 0 || v->integer >= MAX_VOCAB) {
            rc = lmp_fail(LMP_EINVAL, "%s: model.vocab[\"%.64s\"] is not a token id", path, vocab->keys[k]);
            goto done;
        }
        if (v->integer > max_id) max_id = v->integer;
    }
    spec = calloc(n_added ? n_added : 1, sizeof *spec);
    if (!spec) {
        rc = lmp_fail(LMP_ENOMEM, "%s: out of memory loading the tokenizer", path);
        goto done;
    }
    for (size_t k = 0; k < n_added; k++) {
        const lmp_json *a = &added->items[k];
        const lmp_json *id = lmp_json_get(a, "id"), *content = lmp_json_get(a, "content");
        if (!id || id->type != LMP_JSON_NUMBER || !id->is_integer || id->integer < 0 ||
            id->integer >= MAX_VOCAB || !content || content->type != LMP_JSON_STRING) {
            rc = lmp_fail(LMP_EINVAL, "%s: added_tokens[%zu] has no valid \"id\" and \"content\"", path, k);
            goto done;
        }
        int sp = jbool(a, "special", 0), ls = jbool(a, "lstrip", 0), rs = jbool(a, "rstrip", 0),
            sw = jbool(a, "single_word", 0), nz = jbool(a, "normalized", !sp);
        if (sp < 0 || ls < 0 || rs < 0 || sw < 0 || nz < 0) {
            rc = lmp_fail(LMP_EINVAL, "%s: added_tokens[%zu] has a non-boolean flag", path, k);
            goto done;
        }
        spec[k] = (added_spec){(int32_t)id->integer, content->str, content->str_len, (unsigned char)sp,
                               (unsigned char)ls, (unsigned char)rs, (unsigned char)sw, (unsigned char)nz};
        if (id->integer > max_id) max_id = id->integer;
    }
    if (max_id < 0) {
        rc = lmp_fail(LMP_EINVAL, "%s: the vocabulary is empty", path);
        goto done;
    }
    if ((rc = ids_too_sparse(path, max_id, vocab->n + n_added))) goto done;
    int V = (int)max_id + 1;
    strs = calloc((size_t)V, sizeof *strs);
    lens = calloc((size_t)V, sizeof *lens);
    if (!strs || !lens) {
        rc = lmp_fail(LMP_ENOMEM, "%s: out of memory loading the tokenizer", path);
        goto done;
    }
    for (size_t k = 0; k < vocab->n; k++) {
        int id = (int)vocab->items[k].integer;
        if (strs[id]) {
            rc = lmp_fail(LMP_EINVAL, "%s: model.vocab gives id %d to both \"%.64s\" and \"%.64s\"", path, id,
                          strs[id], vocab->keys[k]);
            goto done;
        }
        strs[id] = vocab->keys[k];
        lens[id] = vocab->key_lens[k];
    }
    for (size_t k = 0; k < n_added; k++) /* an added token outside the model vocabulary */
        if (!strs[spec[k].id]) {
            strs[spec[k].id] = spec[k].s;
            lens[spec[k].id] = spec[k].len;
        }
    if ((rc = bpe_set_vocab(t, V, strs, lens)) != 0) goto done;

    if ((rc = bpe_alloc_merges(t, merges->n)) != 0) goto done;
    for (size_t r = 0; r < merges->n; r++) {
        const lmp_json *m = &merges->items[r];
        char where[48];
        snprintf(where, sizeof where, "model.merges[%zu]", r);
        if (m->type == LMP_JSON_STRING) { /* "a b" */
            size_t sp;
            if (split_merge(m->str, m->str_len, &sp, 1)) {
                rc = lmp_fail(LMP_EINVAL, "%s: %s \"%.64s\" is not two tokens separated by one space", path,
                              where, m->str);
                goto done;
            }
            rc = bpe_add_merge(t, (uint32_t)r, m->str, sp, m->str + sp + 1, m->str_len - sp - 1, where);
        } else if (m->type == LMP_JSON_ARRAY && m->n == 2 && m->items[0].type == LMP_JSON_STRING &&
                   m->items[1].type == LMP_JSON_STRING) { /* ["a", "b"] (tokenizers >= 0.20) */
            rc = bpe_add_merge(t, (uint32_t)r, m->items[0].str, m->items[0].str_len, m->items[1].str,
                               m->items[1].str_len, where);
        } else {
            rc = lmp_fail(LMP_EINVAL, "%s: %s is neither \"a b\" nor [\"a\", \"b\"]", path, where);
        }
        if (rc) goto done;
    }
    if ((rc = bpe_set_added(t, spec, (int)n_added)) != 0) goto done;
    if ((rc = bpe_added_decode_as_text(t)) != 0) goto done;
    const char *unk = jstr(model, "unk_token");
    if (unk) t->unk_id = hf_token_id(t, unk);
    if (t->char_level && (rc = bpe_char_level_decoding(t)) != 0) goto done;
    t->gguf_pre = hf_gguf_pre_name(t);
    hf_post_processor(t, lmp_json_get(j, "post_processor"));
    hf_config(t, path);
    if (t->char_level) { /* SentencePiece's names: Llama 2 / Mistral "<s>" "</s>", Gemma "<bos>" "<eos>" */
        if (t->bos_id < 0) t->bos_id = hf_token_id(t, "<s>") >= 0 ? hf_token_id(t, "<s>") : hf_token_id(t, "<bos>");
        if (t->eos_id < 0) t->eos_id = hf_token_id(t, "</s>") >= 0 ? hf_token_id(t, "</s>") : hf_token_id(t, "<eos>");
    }
    if (t->eos_id < 0 || t->bos_id < 0) { /* GPT-2's convention: <|endoftext|> is both */
        int id = hf_token_id(t, "<|endoftext|>");
        if (t->eos_id < 0) t->eos_id = id;
        if (t->bos_id < 0) t->bos_id = id;
    }

done:
    free(strs);
    free(lens);
    free(spec);
    lmp_json_free(j);
    free(data);
    if (rc) lmp_bpe_free(t);
    else *out = t;
    return rc;
}

/* ---- loading: GPT-2's encoder.json + vocab.bpe ---------------------------------------------- */

int lmp_bpe_load_gpt2_files(const char *encoder_json, const char *vocab_bpe, lmp_bpe **out)
{
    *out = NULL;
    unsigned char *enc_data = NULL, *bpe_data = NULL;
    size_t enc_size = 0, bpe_size = 0;
    lmp_json *j = NULL;
    lmp_bpe *t = NULL;
    const char **strs = NULL;
    size_t *lens = NULL;
    int rc = lmp_tok_read_file(encoder_json, &enc_data, &enc_size);
    if (!rc) rc = lmp_tok_read_file(vocab_bpe, &bpe_data, &bpe_size);
    if (rc) goto done;
    if ((rc = lmp_json_parse((const char *)enc_data, enc_size, encoder_json, &j)) != 0) goto done;
    if (j->type != LMP_JSON_OBJECT || j->n == 0) {
        rc = lmp_fail(LMP_EINVAL, "%s: not a GPT-2 encoder.json (expected a non-empty {\"token\": id} object)",
                      encoder_json);
        goto done;
    }
    int64_t max_id = -1;
    for (size_t k = 0; k < j->n; k++) {
        const lmp_json *v = &j->items[k];
        if (v->type != LMP_JSON_NUMBER || !v->is_integer || v->integer < 0 || v->integer >= MAX_VOCAB) {
            rc = lmp_fail(LMP_EINVAL, "%s: the value of \"%.64s\" is not a token id", encoder_json, j->keys[k]);
            goto done;
        }
        if (v->integer > max_id) max_id = v->integer;
    }
    if ((rc = ids_too_sparse(encoder_json, max_id, j->n))) goto done;
    int V = (int)max_id + 1;
    t = bpe_new(encoder_json);
    strs = calloc((size_t)V, sizeof *strs);
    lens = calloc((size_t)V, sizeof *lens);
    if (!t || !strs || !lens) {
        rc = lmp_fail(LMP_ENOMEM, "%s: out of memory loading the tokenizer", encoder_json);
        goto done;
    }
    for (size_t k = 0; k < j->n; k++) {
        int id = (int)j->items[k].integer;
        if (strs[id]) {
            rc = lmp_fail(LMP_EINVAL, "%s: id %d is given to both \"%.64s\" and \"%.64s\"", encoder_json, id,
                          strs[id], j->keys[k]);
            goto done;
        }
        strs[id] = j->keys[k];
        lens[id] = j->key_lens[k];
    }
    if ((rc = bpe_set_vocab(t, V, strs, lens)) != 0) goto done;
    if ((rc = add_step(t, STEP_GPT2, NULL, 0, 0, 0, encoder_json)) != 0) goto done; /* GPT-2's regex */
    t->gguf_pre = "gpt-2";

    /* vocab.bpe: "#version: 0.2" first, then "a b" per line; merge errors name this file */
    size_t n_lines = 1;
    for (size_t k = 0; k < bpe_size; k++) n_lines += bpe_data[k] == '\n';
    char *what = strdup(vocab_bpe);
    if (!what) {
        rc = lmp_fail(LMP_ENOMEM, "%s: out of memory loading the tokenizer", vocab_bpe);
        goto done;
    }
    free(t->what);
    t->what = what;
    if ((rc = bpe_alloc_merges(t, n_lines)) != 0) goto done;
    uint32_t rank = 0;
    size_t line_no = 0;
    for (size_t p = 0; p < bpe_size;) {
        const char *line = (const char *)bpe_data + p;
        const char *nl = memchr(line, '\n', bpe_size - p);
        size_t n = nl ? (size_t)(nl - line) : bpe_size - p;
        p += n + (nl != NULL);
        line_no++;
        if (n && line[n - 1] == '\r') n--;
        if (n == 0 || (n >= 8 && memcmp(line, "#version", 8) == 0)) continue;
        size_t sp;
        char where[48];
        snprintf(where, sizeof where, "line %zu", line_no);
        if (split_merge(line, n, &sp, 1)) {
            rc = lmp_fail(LMP_EINVAL, "%s:%zu: \"%.*s\" is not two tokens separated by one space", vocab_bpe,
                          line_no, (int)(n > 64 ? 64 : n), line);
            goto done;
        }
        if ((rc = bpe_add_merge(t, rank++, line, sp, line + sp + 1, n - sp - 1, where)) != 0) goto done;
    }
    /* <|endoftext|>: GPT-2's one special token, its BOS and EOS (no BOS is added by default) */
    int eot = lookup(t, "<|endoftext|>", 13);
    if (eot >= 0) {
        added_spec s = {eot, "<|endoftext|>", 13, 1, 0, 0, 0, 0};
        if ((rc = bpe_set_added(t, &s, 1)) != 0) goto done;
        if ((rc = bpe_added_decode_as_text(t)) != 0) goto done;
        t->bos_id = t->eos_id = eot;
    }
    free(t->what); /* later messages name the vocabulary file */
    t->what = strdup(encoder_json);
    if (!t->what) rc = lmp_fail(LMP_ENOMEM, "%s: out of memory loading the tokenizer", encoder_json);

done:
    free(strs);
    free(lens);
    lmp_json_free(j);
    free(enc_data);
    free(bpe_data);
    if (rc) lmp_bpe_free(t);
    else *out = t;
    return rc;
}
