/* spm_model.c — a SentencePiece tokenizer.model, read into the SentencePiece engine
 * (tokenizer_sp.c).
 *
 * The file is a serialized protobuf message ModelProto (sentencepiece_model.proto).  Only the
 * wire format is needed: each field is a varint key (field number << 3 | wire type) followed by a
 * varint (type 0), 8 bytes (1), a varint length and that many bytes (2), or 4 bytes (5).  The
 * fields read, with the proto's defaults where absent:
 *
 *   ModelProto        1 pieces (repeated SentencePiece)   2 trainer_spec   3 normalizer_spec
 *   SentencePiece     1 piece (string)  2 score (float)  3 type (NORMAL=1 .. BYTE=6; default 1)
 *   TrainerSpec       3 model_type (UNIGRAM=1, BPE=2, WORD=3, CHAR=4; default 1)
 *                     24 treat_whitespace_as_suffix (false)  35 byte_fallback (false)
 *                     40 unk_id (0)  41 bos_id (1)  42 eos_id (2)   (int32: -1 is a 10-byte varint)
 *   NormalizerSpec    1 name  2 precompiled_charsmap  3 add_dummy_prefix (true)
 *                     4 remove_extra_whitespaces (true)  5 escape_whitespaces (true)
 *                     6 normalization_rule_tsv
 *
 * What changes the ids and is not implemented is refused by name: a model type other than BPE
 * (Unigram needs a Viterbi search, not merges), a normalization (precompiled charsmap or rule
 * table; "identity" is what Llama 2, Mistral and Gemma ship), whitespace as a suffix, unescaped
 * whitespace, no byte fallback.  Other fields (training options, the denormalizer, which only
 * decoding uses, self-test data) are skipped. */
#include "text/spm_model.h"

#include "base/error.h"
#include "text/tokenizer_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A cursor over a message's bytes. */
typedef struct {
    const unsigned char *p, *end;
} pb_reader;

enum { PB_VARINT = 0, PB_I64 = 1, PB_LEN = 2, PB_I32 = 5 };

static int pb_varint(pb_reader *r, uint64_t *out)
{
    uint64_t v = 0;
    for (int shift = 0; shift < 64 && r->p < r->end; shift += 7) {
        unsigned char b = *r->p++;
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *out = v;
            return 0;
        }
    }
    return -1;
}

/* The next field: its number, wire type, and payload (a varint in *num, or a sub-range in *sub
 * for LEN and the fixed-size types).  Returns 1 at the end, 0 for a field, -1 when malformed. */
static int pb_next(pb_reader *r, uint32_t *field, int *wire, uint64_t *num, pb_reader *sub)
{
    if (r->p >= r->end) return 1;
    uint64_t key;
    if (pb_varint(r, &key) || key >> 3 == 0 || key >> 3 > UINT32_MAX) return -1;
    *field = (uint32_t)(key >> 3);
    *wire = (int)(key & 7);
    size_t size;
    switch (*wire) {
    case PB_VARINT:
        return pb_varint(r, num) ? -1 : 0;
    case PB_I64: size = 8; break;
    case PB_I32: size = 4; break;
    case PB_LEN:
        if (pb_varint(r, num) || *num > (uint64_t)(r->end - r->p)) return -1;
        size = (size_t)*num;
        break;
    default: return -1; /* groups (3, 4) are not used by this proto */
    }
    if (size > (size_t)(r->end - r->p)) return -1;
    sub->p = r->p;
    sub->end = r->p + size;
    r->p += size;
    return 0;
}

static float pb_float(const pb_reader *sub)
{
    uint32_t bits = (uint32_t)sub->p[0] | (uint32_t)sub->p[1] << 8 | (uint32_t)sub->p[2] << 16 |
                    (uint32_t)sub->p[3] << 24;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

struct lmp_spm_model {
    unsigned char *data; /* the file: pieces point into it */
    lmp_sp_vocab vocab;
    int n, cap;
    const char **piece;
    uint64_t *piece_len;
    float *score;
    int32_t *type;
    int model_type, byte_fallback, ws_suffix, unk_id, bos_id, eos_id;
    int dummy_prefix, remove_extra_ws, escape_ws;
    const char *norm_name;
    size_t norm_name_len, charsmap_len, rules_len;
};
typedef struct lmp_spm_model spm_model;

static int grow(spm_model *m)
{
    int cap = m->cap ? 2 * m->cap : 1024;
    const char **piece = realloc(m->piece, (size_t)cap * sizeof *piece);
    if (piece) m->piece = piece;
    uint64_t *len = realloc(m->piece_len, (size_t)cap * sizeof *len);
    if (len) m->piece_len = len;
    float *score = realloc(m->score, (size_t)cap * sizeof *score);
    if (score) m->score = score;
    int32_t *type = realloc(m->type, (size_t)cap * sizeof *type);
    if (type) m->type = type;
    if (!piece || !len || !score || !type) return -1;
    m->cap = cap;
    return 0;
}

static int read_piece(pb_reader r, spm_model *m)
{
    if (m->n == m->cap && grow(m)) return LMP_ENOMEM;
    int i = m->n;
    m->piece[i] = "";
    m->piece_len[i] = 0;
    m->score[i] = 0;
    m->type[i] = LMP_SP_NORMAL;
    uint32_t f;
    int w, st;
    uint64_t num = 0;
    pb_reader sub;
    while ((st = pb_next(&r, &f, &w, &num, &sub)) == 0) {
        if (f == 1 && w == PB_LEN) {
            m->piece[i] = (const char *)sub.p;
            m->piece_len[i] = (uint64_t)(sub.end - sub.p);
        } else if (f == 2 && w == PB_I32) {
            m->score[i] = pb_float(&sub);
        } else if (f == 3 && w == PB_VARINT) {
            if (num < LMP_SP_NORMAL || num > LMP_SP_BYTE) return LMP_EINVAL;
            m->type[i] = (int32_t)num;
        }
    }
    if (st < 0) return LMP_EINVAL;
    m->n++;
    return 0;
}

static int read_trainer(pb_reader r, spm_model *m)
{
    uint32_t f;
    int w, st;
    uint64_t num = 0;
    pb_reader sub;
    while ((st = pb_next(&r, &f, &w, &num, &sub)) == 0) {
        if (w != PB_VARINT) continue;
        switch (f) {
        case 3: m->model_type = (int)num; break;
        case 24: m->ws_suffix = num != 0; break;
        case 35: m->byte_fallback = num != 0; break;
        case 40: m->unk_id = (int32_t)(uint32_t)num; break;
        case 41: m->bos_id = (int32_t)(uint32_t)num; break; /* int32: two's complement */
        case 42: m->eos_id = (int32_t)(uint32_t)num; break;
        default: break;
        }
    }
    return st < 0 ? LMP_EINVAL : 0;
}

static int read_normalizer(pb_reader r, spm_model *m)
{
    uint32_t f;
    int w, st;
    uint64_t num = 0;
    pb_reader sub;
    while ((st = pb_next(&r, &f, &w, &num, &sub)) == 0) {
        if (w == PB_LEN) {
            size_t n = (size_t)(sub.end - sub.p);
            if (f == 1) {
                m->norm_name = (const char *)sub.p;
                m->norm_name_len = n;
            } else if (f == 2) {
                m->charsmap_len = n;
            } else if (f == 6) {
                m->rules_len = n;
            }
        } else if (w == PB_VARINT) {
            if (f == 3) m->dummy_prefix = num != 0;
            else if (f == 4) m->remove_extra_ws = num != 0;
            else if (f == 5) m->escape_ws = num != 0;
        }
    }
    return st < 0 ? LMP_EINVAL : 0;
}

static int parse(const unsigned char *data, size_t size, spm_model *m)
{
    pb_reader r = {data, data + size};
    uint32_t f;
    int w, st;
    uint64_t num = 0;
    pb_reader sub;
    while ((st = pb_next(&r, &f, &w, &num, &sub)) == 0) {
        if (w != PB_LEN) continue;
        int rc = f == 1 ? read_piece(sub, m) : f == 2 ? read_trainer(sub, m) : f == 3 ? read_normalizer(sub, m) : 0;
        if (rc) return rc;
    }
    return st < 0 ? LMP_EINVAL : 0;
}

/* The first feature of the model that changes the ids and that lmpress does not implement, or
 * NULL. */
static const char *unsupported(const spm_model *m, char *buf, size_t size)
{
    static const char *const types[] = {"?", "UNIGRAM", "BPE", "WORD", "CHAR"};
    if (m->model_type != 2) {
        snprintf(buf, size, "trainer_spec.model_type %s (only BPE models are implemented)",
                 m->model_type >= 1 && m->model_type <= 4 ? types[m->model_type] : "unknown");
        return buf;
    }
    int identity = m->norm_name_len == 8 && memcmp(m->norm_name, "identity", 8) == 0;
    if (m->charsmap_len && !identity) {
        snprintf(buf, size, "normalizer_spec \"%.*s\" with a precompiled_charsmap (a normalization)",
                 (int)(m->norm_name_len > 64 ? 64 : m->norm_name_len), m->norm_name ? m->norm_name : "");
        return buf;
    }
    if (m->rules_len) return "normalizer_spec.normalization_rule_tsv (a normalization)";
    if (!m->escape_ws) return "normalizer_spec.escape_whitespaces = false";
    if (m->ws_suffix) return "trainer_spec.treat_whitespace_as_suffix";
    if (!m->byte_fallback) return "trainer_spec.byte_fallback = false (unknown characters would become <unk>)";
    return NULL;
}

int lmp_spm_model_read(const char *path, lmp_spm_model **out)
{
    *out = NULL;
    spm_model *m = calloc(1, sizeof *m);
    if (!m) return lmp_fail(LMP_ENOMEM, "%s: out of memory reading a SentencePiece model", path);
    *m = (spm_model){.model_type = 1, .bos_id = 1, .eos_id = 2, .dummy_prefix = 1, .remove_extra_ws = 1,
                     .escape_ws = 1};
    size_t size;
    int rc = lmp_tok_read_file(path, &m->data, &size);
    if (rc) {
        lmp_spm_model_free(m);
        return rc;
    }
    rc = parse(m->data, size, m);
    char why[160];
    const char *no;
    if (rc == LMP_ENOMEM) {
        rc = lmp_fail(rc, "%s: out of memory reading a SentencePiece model", path);
    } else if (rc) {
        rc = lmp_fail(rc, "%s: not a SentencePiece model (the protobuf is malformed)", path);
    } else if (!rc && m->n == 0) {
        rc = lmp_fail(LMP_EINVAL, "%s: a SentencePiece model without pieces", path);
    } else if (!rc && (no = unsupported(m, why, sizeof why))) {
        rc = lmp_fail(LMP_EINVAL, "%s: %s is not supported; use the model's tokenizer.json (--tokenizer) "
                      "if it has one", path, no);
    }
    if (rc) {
        lmp_spm_model_free(m);
        return rc;
    }
    m->vocab = (lmp_sp_vocab){.n = m->n, .piece = m->piece, .piece_len = m->piece_len, .score = m->score,
                              .type = m->type, .bos_id = m->bos_id, .eos_id = m->eos_id, .unk_id = m->unk_id,
                              .adds_bos = m->bos_id >= 0, .dummy_prefix = m->dummy_prefix,
                              .remove_extra_ws = m->remove_extra_ws};
    *out = m;
    return 0;
}

const lmp_sp_vocab *lmp_spm_model_vocab(const lmp_spm_model *m) { return &m->vocab; }

void lmp_spm_model_free(lmp_spm_model *m)
{
    if (!m) return;
    free(m->piece);
    free(m->piece_len);
    free(m->score);
    free(m->type);
    free(m->data);
    free(m);
}
