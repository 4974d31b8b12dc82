/* lambada.h — LAMBADA accuracy with lm-evaluation-harness's `lambada_openai` definition.
 *
 * Per passage {"text": ...} of the JSONL file: context = the text without its last
 * space-separated word (Python's split(' ')), target = " " + that word; trailing spaces of the
 * context move to the target.  context+target is tokenized jointly and the target tokens are
 * those beyond len(tokenize(context)), so merges across the boundary match what the model sees.
 * A passage counts as correct when every target token is the argmax at its position given the
 * true prefix.  An empty context uses BOS (or EOS) as the only context token, and the target is
 * then tokenized alone, without BOS.  The tokenizer's
 * own BOS convention applies (lmp_tokenizer_adds_bos).  Longer inputs keep their last seq_len
 * tokens. */
#ifndef LMP_CORE_LAMBADA_H
#define LMP_CORE_LAMBADA_H

#include "base/ctx.h"
#include "model/model.h"
#include "plugin/backend.h"
#include "text/tokenizer.h"

typedef struct lmp_lambada_item {
    int32_t *ids;      /* context + target, tokenized jointly (BOS first when the tokenizer adds one) */
    int64_t n_ids;
    int64_t n_target;  /* the last n_target ids are the target */
} lmp_lambada_item;

typedef struct lmp_lambada {
    lmp_lambada_item *items;
    int64_t n;
} lmp_lambada;

typedef struct lmp_lambada_score {
    int64_t passages, correct;
} lmp_lambada_score;

/* Reads and tokenizes the JSONL file (max > 0: only the first max passages). */
int lmp_lambada_load(const char *path, const lmp_tokenizer *t, int64_t max, lmp_lambada *out);
void lmp_lambada_free(lmp_lambada *l);

/* Scores n_var block sets run as model m (its embedding, final norm, head and hyper-parameters;
 * for an external variant its own file; a passage longer than m's context keeps its last
 * seq_len tokens); out[n_var] is overwritten.  Progress goes to ctx's line; stops with
 * LMP_EABORTED when lmp_host_interrupted(ctx). */
int lmp_lambada_eval(lmp_ctx *ctx, const lmp_backend *be, const lmp_model *m, lmp_block *const *variants,
                     int n_var, const lmp_lambada *l, lmp_lambada_score *out);

/* The tokens a passage runs on: ids[start .. start + T) (all ids but the last; a passage longer
 * than m's context keeps its last seq_len). */
void lmp_lambada_span(const lmp_model *m, const lmp_lambada_item *it, int64_t *start, int64_t *T);
/* One passage from block first_block on: x[T, dim] holds block first_block's input (it is
 * overwritten), logits has room for n_target rows.  *correct: every target token is the argmax.
 * lmp_lambada_eval is lmp_embed + this from block 0; core/analyze starts it from a cached
 * block boundary, so both judge a passage with the same code. */
int lmp_lambada_judge_from(const lmp_backend *be, const lmp_model *m, const lmp_block *blocks, int64_t first_block,
                           const lmp_lambada_item *it, float *x, float *logits, int *correct);

double lmp_lambada_acc(const lmp_lambada_score *s);
/* Standard error of the accuracy, as the harness reports it: sqrt(acc (1-acc) / (n-1)). */
double lmp_lambada_stderr(const lmp_lambada_score *s);

#endif
