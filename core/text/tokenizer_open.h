/* tokenizer_open.h — finding a model's tokenizer, and tokenizing a text file with it. */
#ifndef LMP_CORE_TOKENIZER_OPEN_H
#define LMP_CORE_TOKENIZER_OPEN_H

#include "model/model.h"
#include "text/tokenizer.h"

/* path: a tokenizer file given by the user (NULL: look beside the model, see the .c).  Refuses a
 * tokenizer that can produce an id (token, BOS or EOS) at or past the model's vocabulary size,
 * whatever its source: such an id would index past the embedding and the head. */
int lmp_open_tokenizer(const lmp_model *m, const char *path, lmp_tokenizer **out);
/* The tokenizer file lmp_open_tokenizer uses when given none and the model is not a GGUF: the
 * tokenizer.json of a Hugging Face model's folder, else its tokenizer.model, else tokenizer.bin
 * or tok<vocab>.bin beside the model, into file[size] (an exporter copies that file's vocabulary).  None there: an error
 * naming the places looked at. */
int lmp_tokenizer_beside(const lmp_model *m, char *file, size_t size);
/* For a tokenizer.model: whether the model prepends BOS, as the tokenizer_config.json beside it
 * says (add_bos_token); yes when it does not say (Hugging Face's Llama and Gemma tokenizers). */
int lmp_tokenizer_config_adds_bos(const char *tokenizer_model_path);
/* The whole file as token ids (with BOS when the tokenizer adds one); *ids is malloc'd. */
int lmp_tokenize_file(const lmp_tokenizer *t, const char *path, int32_t **ids, int64_t *n);

#endif
