/* tokenizer_sp.c — the SentencePiece-style engine behind tokenizer.h: llama2.c's BPE tokenizer
 * (tok512.bin, tokenizer.bin), also built from a GGUF "llama" vocabulary (tokens + scores) or a
 * SentencePiece tokenizer.model (spm_model.c).
 *
 * Data layout (vocab_size = V):
 *   pool       all pieces back to back, each followed by a '\0' (so sscanf in decode() sees the
 *              same C string llama2.c sees); piece[i] = pool + off[i], lens[i] bytes long.
 *   scores[V]  merge priority of the piece.
 *   slots[cap] open-addressing hash table over the pieces, cap = power of two >= 2V; a slot holds
 *              id + 1 (0 = empty).  A piece occurring twice keeps its lowest id (llama2.c's bsearch
 *              over a qsort'ed copy picks an unspecified one; tok512 has no duplicates).
 *
 *   rank[V]    merge priority as an integer: ids sorted by score, descending; equal scores share a
 *              rank (0 = best).  Ids that llama2.c never merges (score <= -1e10, its initial
 *              best_score with a strict '>', or NaN) get NO_RANK.
 *
 * encode(): the initial tokens form a doubly linked list over node indices 0..n-1, in text
 * order, so "leftmost" == "smallest left node index".  A candidate merge of the pair starting at
 * node a is the 64-bit key (rank << 32 | a); smaller key = llama2.c's choice (higher score, then
 * leftmost).  All keys live in one binary min-heap of uint64.
 *   Invariant: every current adjacent pair (a, next[a]) whose concatenation is a mergeable piece
 *   has an entry equal to its key in the heap.  (Initial pairs are heapified; a merge creates
 *   exactly two new pairs, (prev[a], a) and (a, next[a]), which are pushed.)
 * Lazy invalidation: a popped key (r, a) is executed only if a is alive, has a successor, and the
 * current pair there merges with rank r — then it is the current pair's key and, being the heap
 * minimum, the minimum over all current pairs: exactly the pair llama2.c's O(n^2) scan picks.
 * Otherwise no current pair has that key and it is dropped.  O(n log n) time, O(n) memory. */
#include "text/tokenizer_impl.h"

#include "base/error.h"
#include "base/input_file.h"
#include "formats/gguf.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct lmp_sp {
    int vocab_size;          /* V > 0 */
    int bos_id, eos_id;      /* 1 and 2 for llama2.c files; from the GGUF otherwise (-1: none) */
    int byte_base;           /* id of the piece for byte 0 ("<0x00>"); byte b -> byte_base + b */
    int dummy_prefix;        /* prepend " " to non-empty text (sentencepiece add_dummy_prefix) */
    int adds_bos;            /* the vocabulary's convention: prepend BOS */
    int meta_is_space;       /* GGUF: a "\u2581" in the text is a space (sentencepiece escapes spaces
                              * to it, so the two are one character to it) */
    unsigned char *user;     /* GGUF: [V] 1 for a USER_DEFINED piece (NULL: none): sentencepiece
                              * matches these whole, longest first, and never merges them */
    int32_t max_user_len;
    unsigned char user_first[256]; /* first bytes of user-defined pieces */
    int remove_extra_ws;     /* GGUF tokenizer.ggml.remove_extra_whitespaces: sentencepiece's
                              * normalizer drops leading and trailing spaces and collapses runs */
    char *pool;              /* sum(lens[i] + 1) bytes */
    size_t *off;             /* [V] offset of piece i in pool */
    int32_t *lens;           /* [V] piece length in bytes, >= 0 */
    float *scores;           /* [V] */
    uint32_t *rank;          /* [V] see above; NO_RANK = never merged */
    int32_t max_len;         /* max(lens): the longest concatenation worth looking up */
    uint32_t *slots;         /* [cap] id + 1, 0 = empty */
    uint32_t cap_mask;       /* cap - 1 */
    unsigned char byte_pieces[512]; /* byte_pieces[2b] = b, byte_pieces[2b+1] = 0 (llama2.c) */
};

#define NO_RANK UINT32_MAX

/* ---- hashing -------------------------------------------------------------------------------- */

#define FNV32_OFFSET 2166136261u
#define FNV32_PRIME 16777619u

static uint32_t fnv_step(uint32_t h, const unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= FNV32_PRIME;
    }
    return h;
}

/* Finds the id of the piece equal to a[0..la) ++ b[0..lb), or -1.  (The concatenation is never
 * built: the hash runs over both spans and the comparison checks them in turn.) */
static int lookup2(const lmp_sp *t, const char *a, size_t la, const char *b, size_t lb)
{
    if (la + lb > (size_t)t->max_len) return -1;
    uint32_t h = fnv_step(fnv_step(FNV32_OFFSET, (const unsigned char *)a, la),
                          (const unsigned char *)b, lb);
    for (uint32_t s = h & t->cap_mask;; s = (s + 1) & t->cap_mask) {
        uint32_t e = t->slots[s];
        if (e == 0) return -1;
        int id = (int)(e - 1);
        const char *p = t->pool + t->off[id];
        if ((size_t)t->lens[id] == la + lb && memcmp(p, a, la) == 0 && memcmp(p + la, b, lb) == 0)
            return id;
    }
}

static int lookup(const lmp_sp *t, const char *s, size_t n) { return lookup2(t, s, n, "", 0); }

/* ---- loading -------------------------------------------------------------------------------- */

/* Reads the whole file (shared with tokenizer_bpe.c) through lmp_input_read: a FIFO or a device
 * is refused without blocking, and a tokenizer over the cap (input_file.h) is refused before it
 * is read.  On failure records an error naming path and returns the status. */
int lmp_tok_read_file(const char *path, unsigned char **data, size_t *size)
{
    char *text = NULL;
    int rc = lmp_input_read(path, LMP_INPUT_TOKENIZER, &text, size);
    *data = (unsigned char *)text;
    return rc;
}

static int32_t rd_i32(const unsigned char *p)
{
    uint32_t u = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
    int32_t v;
    memcpy(&v, &u, 4);
    return v;
}

static float rd_f32(const unsigned char *p)
{
    uint32_t u = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
    float v;
    memcpy(&v, &u, 4);
    return v;
}

typedef struct {
    float score;
    int32_t id;
} scored_id;

/* qsort helper for compute_ranks(): by score, descending (no NaN reaches it). */
static int by_score_desc(const void *x, const void *y)
{
    float a = ((const scored_id *)x)->score, b = ((const scored_id *)y)->score;
    return (a < b) - (a > b);
}

/* Fills t->rank (see the top of the file).  Returns nonzero when out of memory. */
static int compute_ranks(lmp_sp *t)
{
    scored_id *v = malloc((size_t)t->vocab_size * sizeof *v);
    if (!v) return -1;
    int32_t m = 0;
    for (int32_t i = 0; i < t->vocab_size; i++) {
        t->rank[i] = NO_RANK;
        if (t->scores[i] > -1e10f) v[m++] = (scored_id){t->scores[i], i}; /* excludes NaN too */
    }
    qsort(v, (size_t)m, sizeof *v, by_score_desc);
    uint32_t r = 0;
    for (int32_t k = 0; k < m; k++) {
        if (k > 0 && v[k].score != v[k - 1].score) r++; /* equal scores (0.0 == -0.0) share */
        t->rank[v[k].id] = r;
    }
    free(v);
    return 0;
}

/* Allocates a tokenizer for V pieces with pool_size bytes of pool (pieces + NULs). */
static lmp_sp *sp_alloc(int V, size_t pool_size)
{
    lmp_sp *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    uint32_t cap = 1;
    while (cap < 2u * (uint32_t)V) cap <<= 1;
    t->pool = malloc(pool_size ? pool_size : 1);
    t->off = malloc((size_t)V * sizeof *t->off);
    t->lens = malloc((size_t)V * sizeof *t->lens);
    t->scores = malloc((size_t)V * sizeof *t->scores);
    t->slots = calloc(cap, sizeof *t->slots);
    t->rank = malloc((size_t)V * sizeof *t->rank);
    if (!t->pool || !t->off || !t->lens || !t->scores || !t->slots || !t->rank) {
        lmp_sp_free(t);
        return NULL;
    }
    t->vocab_size = V;
    t->cap_mask = cap - 1;
    return t;
}

/* Once pool/off/lens/scores hold all V pieces: fills the hash table (first occurrence of a piece
 * wins; ids with hidden[id] != 0 are left out, so text never produces them), the ranks (hidden
 * ids get NO_RANK) and the byte pieces.  Returns nonzero when out of memory. */
static int sp_finish(lmp_sp *t, const unsigned char *hidden)
{
    for (int i = 0; i < t->vocab_size; i++) {
        int32_t len = t->lens[i];
        if (len > t->max_len) t->max_len = len;
        if (hidden && hidden[i]) continue;
        uint32_t h = fnv_step(FNV32_OFFSET, (const unsigned char *)t->pool + t->off[i], (size_t)len);
        for (uint32_t s = h & t->cap_mask;; s = (s + 1) & t->cap_mask) {
            uint32_t e = t->slots[s];
            if (e == 0) {
                t->slots[s] = (uint32_t)i + 1;
                break;
            }
            int j = (int)(e - 1);
            if (t->lens[j] == len && memcmp(t->pool + t->off[j], t->pool + t->off[i], (size_t)len) == 0)
                break; /* duplicate piece: keep the lower id */
        }
    }
    if (compute_ranks(t)) return -1;
    if (hidden)
        for (int i = 0; i < t->vocab_size; i++)
            if (hidden[i]) t->rank[i] = NO_RANK;
    for (int b = 0; b < 256; b++) {
        t->byte_pieces[2 * b] = (unsigned char)b;
        t->byte_pieces[2 * b + 1] = 0;
    }
    return 0;
}

int lmp_sp_load_llama2c(const char *path, int vocab_size, lmp_sp **out)
{
    if (!out) return lmp_fail(LMP_EINVAL, "lmp_tokenizer_load_llama2c: out is NULL");
    *out = NULL;
    if (!path) return lmp_fail(LMP_EINVAL, "lmp_tokenizer_load_llama2c: path is NULL");
    if (vocab_size <= 0 || vocab_size > (1 << 30))
        return lmp_fail(LMP_EINVAL, "%s: invalid vocab_size %d (must be in 1..2^30)", path, vocab_size);

    unsigned char *data = NULL;
    size_t size = 0;
    int rc = lmp_tok_read_file(path, &data, &size);
    if (rc) return rc;

    lmp_sp *t = NULL;
    if (size >= 4 && memcmp(data, "GGUF", 4) == 0) {
        rc = lmp_fail(LMP_EINVAL, "%s: a GGUF file, not a llama2.c tokenizer (its vocabulary is read with "
                      "lmp_tokenizer_load_gguf)", path);
        goto fail;
    }
    if (size < 4) {
        rc = lmp_fail(LMP_EINVAL, "%s: truncated tokenizer file: %zu bytes, no max_token_length header",
                      path, size);
        goto fail;
    }
    int32_t max_token_length = rd_i32(data);
    if (max_token_length < 0) {
        rc = lmp_fail(LMP_EINVAL, "%s: invalid max_token_length %d in header", path, max_token_length);
        goto fail;
    }

    /* Pass 1: validate every record and size the pool. */
    size_t pos = 4, pool_size = 0;
    for (int i = 0; i < vocab_size; i++) {
        if (size - pos < 8) {
            rc = lmp_fail(LMP_EINVAL,
                          "%s: truncated tokenizer file: ends at token %d of %d (byte offset %zu, "
                          "score/length record incomplete)", path, i, vocab_size, pos);
            goto fail;
        }
        int32_t len = rd_i32(data + pos + 4);
        pos += 8;
        if (len < 0) {
            rc = lmp_fail(LMP_EINVAL, "%s: token %d has negative length %d", path, i, len);
            goto fail;
        }
        if ((size_t)len > size - pos) {
            rc = lmp_fail(LMP_EINVAL,
                          "%s: token %d has length %d but only %zu bytes remain (truncated or corrupt "
                          "tokenizer file)", path, i, len, size - pos);
            goto fail;
        }
        pos += (size_t)len;
        pool_size += (size_t)len + 1;
    }
    /* Trailing bytes after vocab_size records are ignored, as llama2.c does. */

    t = sp_alloc(vocab_size, pool_size);
    if (!t) {
        rc = lmp_fail(LMP_ENOMEM, "%s: out of memory loading tokenizer (%d tokens)", path, vocab_size);
        goto fail;
    }
    /* llama2.c's fixed layout: <unk>, <s>, </s>, then the 256 byte pieces. */
    t->bos_id = 1;
    t->eos_id = 2;
    t->byte_base = 3;
    t->dummy_prefix = 1;
    t->adds_bos = 1;

    /* Pass 2: copy the pieces. */
    pos = 4;
    size_t po = 0;
    for (int i = 0; i < vocab_size; i++) {
        t->scores[i] = rd_f32(data + pos);
        int32_t len = rd_i32(data + pos + 4);
        pos += 8;
        memcpy(t->pool + po, data + pos, (size_t)len);
        t->pool[po + (size_t)len] = '\0';
        t->off[i] = po;
        t->lens[i] = len;
        pos += (size_t)len;
        po += (size_t)len + 1;
    }
    if (sp_finish(t, NULL)) {
        rc = lmp_fail(LMP_ENOMEM, "%s: out of memory loading tokenizer (%d tokens)", path, vocab_size);
        goto fail;
    }
    free(data);
    *out = t;
    return 0;

fail:
    free(data);
    lmp_sp_free(t);
    return rc;
}

/* ---- SentencePiece vocabularies: GGUF "llama", tokenizer.model ------------------------------ */

/* A SentencePiece vocabulary (lmp_sp_vocab: from a GGUF "llama" vocabulary or a tokenizer.model)
 * as llama2.c would export it (tokenizer.py: "▁" -> " "), then tokenized with llama2.c's
 * algorithm.  Differences from llama2.c's export: control, unknown, unused and byte tokens are
 * hidden from the text lookup (sentencepiece never produces them from text; llama2.c's "<s>" is
 * "\n<s>\n" for the same reason), bytes fall back to the "<0x00>".."<0xFF>" run wherever it
 * starts, and the dummy " " prefix and whitespace removal follow the vocabulary's flags. */
int lmp_sp_from_vocab(const char *path, const lmp_sp_vocab *v, lmp_sp **out)
{
    *out = NULL;
    const int V = v->n;
    if (V <= 0) return lmp_fail(LMP_EINVAL, "%s: a vocabulary without pieces", path);
    /* "▁" (U+2581, E2 96 81) becomes " ": the pool needs at most the original size. */
    size_t pool_size = 0;
    for (int i = 0; i < V; i++) pool_size += (size_t)v->piece_len[i] + 1;
    lmp_sp *t = sp_alloc(V, pool_size);
    unsigned char *hidden = calloc((size_t)V, 1);
    int rc = 0;
    if (!t || !hidden) {
        rc = lmp_fail(LMP_ENOMEM, "%s: out of memory loading tokenizer (%d tokens)", path, V);
        goto done;
    }
    size_t po = 0;
    for (int i = 0; i < V; i++) {
        const char *s = v->piece[i];
        size_t n = (size_t)v->piece_len[i], start = po;
        for (size_t k = 0; k < n; k++) {
            if (k + 2 < n && (unsigned char)s[k] == 0xE2 && (unsigned char)s[k + 1] == 0x96 &&
                (unsigned char)s[k + 2] == 0x81) {
                t->pool[po++] = ' ';
                k += 2;
            } else {
                t->pool[po++] = s[k];
            }
        }
        t->pool[po++] = '\0';
        t->off[i] = start;
        t->lens[i] = (int32_t)(po - 1 - start);
        t->scores[i] = v->score[i];
        int type = v->type ? v->type[i] : LMP_SP_NORMAL;
        hidden[i] = type != LMP_SP_NORMAL && type != LMP_SP_USER_DEFINED;
        if (type == LMP_SP_USER_DEFINED && t->lens[i] > 0) {
            if (!t->user && !(t->user = calloc((size_t)V, 1))) {
                rc = lmp_fail(LMP_ENOMEM, "%s: out of memory loading tokenizer (%d tokens)", path, V);
                goto done;
            }
            t->user[i] = 1;
            t->user_first[(unsigned char)t->pool[t->off[i]]] = 1;
            if (t->lens[i] > t->max_user_len) t->max_user_len = t->lens[i];
        }
    }
    t->bos_id = v->bos_id >= 0 && v->bos_id < V ? v->bos_id : -1;
    t->eos_id = v->eos_id >= 0 && v->eos_id < V ? v->eos_id : -1;
    t->adds_bos = v->adds_bos;
    t->dummy_prefix = v->dummy_prefix;
    t->meta_is_space = 1;
    t->remove_extra_ws = v->remove_extra_ws;

    /* Byte fallback needs the 256 "<0xXX>" pieces in order. */
    t->byte_base = -1;
    for (int i = 0; i + 256 <= V && t->byte_base < 0; i++) {
        if (t->lens[i] != 6 || memcmp(t->pool + t->off[i], "<0x00>", 6) != 0) continue;
        int ok = 1;
        for (int b = 0; b < 256 && ok; b++) {
            char want[8];
            snprintf(want, sizeof want, "<0x%02X>", b);
            ok = t->lens[i + b] == 6 && memcmp(t->pool + t->off[i + b], want, 6) == 0;
        }
        if (ok) t->byte_base = i;
    }
    if (sp_finish(t, hidden)) {
        rc = lmp_fail(LMP_ENOMEM, "%s: out of memory loading tokenizer (%d tokens)", path, V);
        goto done;
    }
done:
    free(hidden);
    if (rc) lmp_sp_free(t);
    else *out = t;
    return rc;
}

static uint32_t ld_u32(const void *p)
{
    const unsigned char *b = p;
    return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

/* GGUF "llama": tokenizer.ggml.tokens + scores (+ token_type, whose numbers are sentencepiece's),
 * bos/eos ids, and llama.cpp's defaults for SPM vocabularies: BOS added, dummy prefix added. */
int lmp_sp_load_gguf(const lmp_gguf *g, lmp_sp **out)
{
    *out = NULL;
    const char *path = g->path;
    const lmp_gguf_kv *tok = lmp_gguf_find_kv(g, "tokenizer.ggml.tokens");
    const lmp_gguf_kv *sc = lmp_gguf_find_kv(g, "tokenizer.ggml.scores");
    const lmp_gguf_kv *ty = lmp_gguf_find_kv(g, "tokenizer.ggml.token_type");
    if (!tok || tok->type != LMP_GGUF_ARRAY || tok->arr_type != LMP_GGUF_STRING)
        return lmp_fail(LMP_EINVAL, "%s: tokenizer.ggml.tokens is missing or not an array of strings", path);
    if (tok->n == 0 || tok->n > (1u << 30))
        return lmp_fail(LMP_EINVAL, "%s: tokenizer.ggml.tokens has %llu entries", path,
                        (unsigned long long)tok->n);
    int V = (int)tok->n;
    if (!sc || sc->type != LMP_GGUF_ARRAY || sc->arr_type != LMP_GGUF_FLOAT32 || sc->n != tok->n)
        return lmp_fail(LMP_EINVAL,
                        "%s: tokenizer.ggml.scores is missing or not %d float32 values (a \"llama\" "
                        "vocabulary needs one score per token)", path, V);
    if (ty && (ty->type != LMP_GGUF_ARRAY || ty->arr_type != LMP_GGUF_INT32 || ty->n != tok->n))
        return lmp_fail(LMP_EINVAL, "%s: tokenizer.ggml.token_type is not %d int32 values", path, V);

    float *scores = malloc((size_t)V * sizeof *scores);
    int32_t *types = malloc((size_t)V * sizeof *types);
    if (!scores || !types) {
        free(scores);
        free(types);
        return lmp_fail(LMP_ENOMEM, "%s: out of memory loading tokenizer (%d tokens)", path, V);
    }
    for (int i = 0; i < V; i++) { /* the payload sits unaligned inside the mapping */
        uint32_t bits = ld_u32((const unsigned char *)sc->data + 4 * (size_t)i);
        memcpy(&scores[i], &bits, 4);
        types[i] = ty ? (int32_t)ld_u32((const unsigned char *)ty->data + 4 * (size_t)i) : LMP_SP_NORMAL;
    }
    int64_t x;
    lmp_sp_vocab v = {.n = V, .piece = tok->strs, .piece_len = tok->str_lens, .score = scores, .type = types};
    v.bos_id = lmp_gguf_get_int(g, "tokenizer.ggml.bos_token_id", &x) == 0 && x >= 0 && x < V ? (int)x : -1;
    v.eos_id = lmp_gguf_get_int(g, "tokenizer.ggml.eos_token_id", &x) == 0 && x >= 0 && x < V ? (int)x : -1;
    v.adds_bos = lmp_gguf_find_kv(g, "tokenizer.ggml.add_bos_token")
                     ? lmp_gguf_get_int(g, "tokenizer.ggml.add_bos_token", &x) == 0 && x != 0 : 1;
    v.dummy_prefix = lmp_gguf_find_kv(g, "tokenizer.ggml.add_space_prefix")
                         ? lmp_gguf_get_int(g, "tokenizer.ggml.add_space_prefix", &x) == 0 && x != 0 : 1;
    v.remove_extra_ws = lmp_gguf_find_kv(g, "tokenizer.ggml.remove_extra_whitespaces") &&
                        lmp_gguf_get_int(g, "tokenizer.ggml.remove_extra_whitespaces", &x) == 0 && x != 0;
    lmp_clear_error(); /* a malformed optional flag above just means "default" */
    /* Scores rank the merges.  gguf-py's LlamaHfVocab (convert_hf_to_gguf.py on a folder with a
     * tokenizer.json but no tokenizer.model, e.g. a current Mistral) writes -1000 for every token:
     * the merge order is then lost, and any tokenization of it differs from the model's from the
     * first token on.  Refuse rather than guess. */
    int rc = 0, n_multi = 0, distinct = 0;
    float first = 0;
    for (int i = 0; i < V; i++) {
        int shown = types[i] == LMP_SP_NORMAL || types[i] == LMP_SP_USER_DEFINED;
        int one_char = tok->str_lens[i] < 2 || (tok->str_lens[i] == 3 && memcmp(tok->strs[i], "\xE2\x96\x81", 3) == 0);
        if (!shown || one_char) continue;
        if (n_multi++ == 0) first = scores[i];
        else if (scores[i] != first) distinct = 1;
    }
    if (n_multi >= 2 && !distinct)
        rc = lmp_fail(LMP_EINVAL,
                      "%s: tokenizer.ggml.scores gives all %d multi-character tokens the same score (%g), so the "
                      "order of the merges is lost (a \"llama\" vocabulary converted from a tokenizer.json "
                      "without tokenizer.model): use the model's tokenizer.json (--tokenizer) instead", path,
                      n_multi, (double)first);
    if (!rc) rc = lmp_sp_from_vocab(path, &v, out);
    free(scores);
    free(types);
    return rc;
}

void lmp_sp_free(lmp_sp *t)
{
    if (!t) return;
    free(t->pool);
    free(t->off);
    free(t->lens);
    free(t->scores);
    free(t->rank);
    free(t->slots);
    free(t->user);
    free(t);
}

int lmp_sp_vocab_size(const lmp_sp *t) { return t->vocab_size; }
int lmp_sp_bos(const lmp_sp *t) { return t->bos_id; }
int lmp_sp_eos(const lmp_sp *t) { return t->eos_id; }
int lmp_sp_adds_bos(const lmp_sp *t) { return t->adds_bos; }

/* ---- encoding ------------------------------------------------------------------------------- */

/* Binary min-heap of merge keys (rank << 32 | left node). */
typedef struct {
    uint64_t *a;
    size_t n, cap;
} merge_heap;

static void heap_sift_down(merge_heap *h, size_t i)
{
    uint64_t v = h->a[i];
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n) break;
        if (c + 1 < h->n && h->a[c + 1] < h->a[c]) c++;
        if (h->a[c] >= v) break;
        h->a[i] = h->a[c];
        i = c;
    }
    h->a[i] = v;
}

static int heap_push(merge_heap *h, uint64_t key)
{
    if (h->n == h->cap) {
        size_t nc = h->cap ? h->cap * 2 : 64;
        uint64_t *na = realloc(h->a, nc * sizeof *na);
        if (!na) return -1;
        h->a = na;
        h->cap = nc;
    }
    size_t i = h->n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (h->a[p] <= key) break;
        h->a[i] = h->a[p];
        i = p;
    }
    h->a[i] = key;
    return 0;
}

static uint64_t heap_pop(merge_heap *h)
{
    uint64_t top = h->a[0];
    h->a[0] = h->a[--h->n];
    if (h->n) heap_sift_down(h, 0);
    return top;
}

/* The id that merging tokens a and b produces, or -1 if llama2.c would never merge them. */
static int pair_id_uncached(const lmp_sp *t, int a, int b)
{
    int id = lookup2(t, t->pool + t->off[a], (size_t)t->lens[a], t->pool + t->off[b],
                     (size_t)t->lens[b]);
    return id >= 0 && t->rank[id] != NO_RANK ? id : -1;
}

/* Per-call direct-mapped cache of pair_id_uncached(): key[i] = (a << 32 | b) + 1 (0 = empty).
 * Real text repeats a small set of pairs, so most lookups skip the byte hashing. */
typedef struct {
    const lmp_sp *t;
    uint64_t *key; /* [mask + 1] */
    int32_t *id;   /* [mask + 1] */
    uint32_t mask;
} pair_cache;

static int pair_id(pair_cache *c, int a, int b)
{
    uint64_t k = ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) + 1;
    uint64_t h = k * 0x9E3779B97F4A7C15ull;
    uint32_t s = (uint32_t)(h >> 40) & c->mask;
    if (c->key[s] != k) {
        c->key[s] = k;
        c->id[s] = pair_id_uncached(c->t, a, b);
    }
    return c->id[s];
}

/* One list node per initial token; tok = -1 marks a node absorbed into its predecessor. */
typedef struct {
    int32_t tok, prev, next; /* prev/next: node indices, -1 at the ends */
    int32_t frozen;          /* a user-defined piece: never merged (sentencepiece's Symbol::freeze) */
} tok_node;

/* Pushes the key of the pair starting at node l if it is mergeable. */
static int push_pair(pair_cache *c, merge_heap *h, const tok_node *nd, int32_t l)
{
    if (nd[l].frozen || nd[nd[l].next].frozen) return 0;
    int id = pair_id(c, nd[l].tok, nd[nd[l].next].tok);
    if (id < 0) return 0;
    return heap_push(h, (uint64_t)c->t->rank[id] << 32 | (uint32_t)l);
}

static int sp_encode(const lmp_sp *t, const char *text, size_t len, int add_bos, int dummy_prefix, int32_t **ids,
                     int64_t *n_ids);

/* sentencepiece's remove_extra_whitespaces (normalizer.cc): U+0020 only, as its identity
 * normalization leaves every other character alone. */
int lmp_sp_encode(const lmp_sp *t, const char *text, size_t len, int add_bos, int32_t **ids,
                  int64_t *n_ids)
{
    if (!t || !text || (!t->remove_extra_ws && !t->user)) return sp_encode(t, text, len, add_bos, 1, ids, n_ids);
    /* The dummy prefix goes into the text itself: a user-defined piece may start with it
     * (sentencepiece matches "\u2581\u2581" across it). */
    char *clean = malloc(len + 2);
    if (!clean) return lmp_fail(LMP_ENOMEM, "lmp_tokenize: out of memory (%zu bytes of text)", len);
    size_t n = 0;
    for (size_t i = 0; i < len; i++)
        if (!t->remove_extra_ws || text[i] != ' ' || (n > 0 && clean[n - 1] != ' ')) clean[n++] = text[i];
    while (t->remove_extra_ws && n > 0 && clean[n - 1] == ' ') n--;
    int prefix = n > 0 && t->dummy_prefix && t->user;
    if (prefix) {
        memmove(clean + 1, clean, n++);
        clean[0] = ' ';
    }
    int rc = sp_encode(t, clean, n, add_bos, !prefix, ids, n_ids);
    free(clean);
    return rc;
}

static int sp_encode(const lmp_sp *t, const char *text, size_t len, int add_bos, int dummy_prefix, int32_t **ids,
                     int64_t *n_ids)
{
    if (!t || !ids || !n_ids || (!text && len)) return lmp_fail(LMP_EINVAL, "lmp_tokenize: NULL argument");
    *ids = NULL;
    *n_ids = 0;
    /* Node indices are int32: at most len + 2 nodes (BOS, dummy prefix, one per byte). */
    if (len > (size_t)INT32_MAX - 8)
        return lmp_fail(LMP_EINVAL, "lmp_tokenize: text of %zu bytes is too long", len);
    const int V = t->vocab_size;
    if (add_bos && (t->bos_id < 0 || t->bos_id >= V))
        return lmp_fail(LMP_EINVAL, "lmp_tokenize: vocabulary of %d tokens has no BOS (id %d)", V,
                        t->bos_id);

    size_t cap = len + 2;
    tok_node *nd = malloc(cap * sizeof *nd);
    merge_heap heap = {0};
    pair_cache pc = {t, NULL, NULL, 0};
    int rc = 0;
    if (!nd) return lmp_fail(LMP_ENOMEM, "lmp_tokenize: out of memory (%zu bytes of text)", len);

    /* ---- initial tokens: BOS, dummy prefix, codepoints or bytes ---- */
    int32_t n = 0; /* invariant: n <= 2 + bytes consumed <= cap */
    if (add_bos) nd[n++] = (tok_node){t->bos_id, 0, 0, 0};
    if (len > 0 && t->dummy_prefix && dummy_prefix) {
        int sp = lookup(t, " ", 1);
        if (sp < 0) /* llama2.c assumes " " exists; its byte piece is the next best thing */
            sp = t->byte_base >= 0 && t->byte_base + ' ' < V ? t->byte_base + ' ' : -1;
        if (sp < 0) {
            rc = lmp_fail(LMP_EINVAL, "lmp_tokenize: vocabulary has no \" \" token for the dummy prefix");
            goto done;
        }
        nd[n++] = (tok_node){sp, 0, 0, 0};
    }
    const unsigned char *u = (const unsigned char *)text;
    for (size_t i = 0; i < len;) {
        /* One "codepoint": this byte plus following continuation bytes (10xxxxxx), at most 4
         * bytes in all.  A stray continuation byte starts its own group, as in llama2.c. */
        size_t j = i + 1;
        while (j < len && (u[j] & 0xC0) == 0x80 && j - i < 4) j++;
        if (t->user && t->user_first[u[i]]) { /* the longest user-defined piece here, whole */
            int uid = -1;
            size_t ul = len - i < (size_t)t->max_user_len ? len - i : (size_t)t->max_user_len;
            for (; ul > 0 && uid < 0; ul--) {
                int c = lookup(t, text + i, ul);
                if (c >= 0 && t->user[c]) uid = c;
            }
            if (uid >= 0) {
                nd[n++] = (tok_node){uid, 0, 0, 1};
                i += (size_t)t->lens[uid];
                continue;
            }
        }
        int id = t->meta_is_space && j - i == 3 && memcmp(text + i, "\xE2\x96\x81", 3) == 0 ? lookup(t, " ", 1) : -1;
        if (id < 0) id = lookup(t, text + i, j - i);
        if (id >= 0) {
            nd[n++] = (tok_node){id, 0, 0, 0};
        } else {
            for (size_t k = i; k < j; k++) {
                if (t->byte_base < 0 || t->byte_base + u[k] >= V) {
                    rc = lmp_fail(LMP_EINVAL,
                                  "lmp_tokenize: byte 0x%02X at offset %zu has no token and no byte "
                                  "fallback (vocab_size %d)", u[k], k, V);
                    goto done;
                }
                nd[n++] = (tok_node){t->byte_base + u[k], 0, 0, 0};
            }
        }
        i = j;
    }
    for (int32_t i = 0; i < n; i++) {
        nd[i].prev = i - 1;
        nd[i].next = i + 1 < n ? i + 1 : -1;
    }

    /* ---- merges ---- */
    if (n > 1) {
        uint32_t pcap = 64;
        while (pcap < 65536 && pcap < 4u * (uint32_t)n) pcap <<= 1;
        pc.key = calloc(pcap, sizeof *pc.key);
        pc.id = malloc(pcap * sizeof *pc.id);
        pc.mask = pcap - 1;
        heap.cap = (size_t)n;
        heap.a = malloc(heap.cap * sizeof *heap.a);
        if (!pc.key || !pc.id || !heap.a) goto oom;
        /* Initial candidates, then heapify (O(n)). */
        for (int32_t i = 0; i + 1 < n; i++) {
            if (nd[i].frozen || nd[i + 1].frozen) continue;
            int id = pair_id(&pc, nd[i].tok, nd[i + 1].tok);
            if (id >= 0) heap.a[heap.n++] = (uint64_t)t->rank[id] << 32 | (uint32_t)i;
        }
        for (size_t i = heap.n / 2; i-- > 0;) heap_sift_down(&heap, i);
    }
    int32_t count = n;
    while (heap.n) {
        uint64_t key = heap_pop(&heap);
#if defined(__GNUC__)
        if (heap.n) __builtin_prefetch(&nd[(uint32_t)heap.a[0]]); /* the next pop's node */
#endif
        int32_t a = (int32_t)(uint32_t)key, b = nd[a].next;
        uint32_t r = (uint32_t)(key >> 32);
        if (nd[a].tok < 0 || b < 0 || nd[b].frozen) continue; /* stale: a absorbed, now last, or before a
                                                                * user-defined piece */
        int id = pair_id(&pc, nd[a].tok, nd[b].tok);
        if (id < 0 || t->rank[id] != r) continue;      /* stale: the pair at a changed */
        int32_t c = nd[b].next;
        nd[a].tok = id;
        nd[a].next = c;
        nd[b].tok = -1;
        if (c >= 0) nd[c].prev = a;
        count--;
        if (nd[a].prev >= 0 && push_pair(&pc, &heap, nd, nd[a].prev)) goto oom;
        if (c >= 0 && push_pair(&pc, &heap, nd, a)) goto oom;
    }

    /* ---- output: walk the list from node 0 (the head is never removed) ---- */
    int32_t *res = malloc((size_t)(count ? count : 1) * sizeof *res);
    if (!res) goto oom;
    int64_t k = 0;
    for (int32_t i = n ? 0 : -1; i >= 0; i = nd[i].next) res[k++] = nd[i].tok;
    *ids = res;
    *n_ids = k;
    goto done;

oom:
    rc = lmp_fail(LMP_ENOMEM, "lmp_tokenize: out of memory (%zu bytes of text)", len);
done:
    free(nd);
    free(pc.key);
    free(pc.id);
    free(heap.a);
    return rc;
}

/* ---- decoding ------------------------------------------------------------------------------- */

const char *lmp_sp_decode(lmp_sp *t, int prev, int token, size_t *len)
{
    size_t dummy;
    if (!len) len = &dummy;
    if (!t || token < 0 || token >= t->vocab_size) {
        *len = 0;
        return "";
    }
    const char *piece = t->pool + t->off[token];
    size_t n = (size_t)t->lens[token];
    /* After BOS, sentencepiece's decoder strips a leading space (llama2.c PR #89). */
    if (prev == t->bos_id && n > 0 && piece[0] == ' ') {
        piece++;
        n--;
    }
    /* Raw-byte pieces look like "<0x0A>": the same sscanf test as llama2.c. */
    unsigned char byte_val;
    if (sscanf(piece, "<0x%02hhX>", &byte_val) == 1) {
        *len = 1;
        return (const char *)t->byte_pieces + 2 * byte_val;
    }
    *len = n;
    return piece;
}
