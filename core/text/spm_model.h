/* spm_model.h — reading a SentencePiece tokenizer.model (spm_model.c says what is read and
 * what is refused). */
#ifndef LMP_CORE_SPM_MODEL_H
#define LMP_CORE_SPM_MODEL_H

#include "text/sp_vocab.h"

typedef struct lmp_spm_model lmp_spm_model;

/* Reads and checks the file: a malformed protobuf or a feature that changes the ids and is not
 * implemented is an error naming the file and the field. */
int lmp_spm_model_read(const char *path, lmp_spm_model **out);
/* Its vocabulary (valid until the free); adds_bos is set when the model has a BOS piece:
 * sentencepiece itself never adds one, Hugging Face's Llama and Gemma tokenizers do, and
 * tokenizer_config.json's add_bos_token says otherwise where it is false. */
const lmp_sp_vocab *lmp_spm_model_vocab(const lmp_spm_model *m);
void lmp_spm_model_free(lmp_spm_model *m);

#endif
