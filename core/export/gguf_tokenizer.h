/* gguf_tokenizer.h — the tokenizer.* metadata of an exported GGUF, from the tokenizer the run
 * used: tokenizer_path when given, else the model's own (a GGUF's vocabulary; the tokenizer.json
 * of a Hugging Face folder; tokenizer.bin or tok<vocab>.bin beside a llama2.c checkpoint).
 *
 *   a GGUF (the model, or a file given as the tokenizer)  every tokenizer.* pair copied verbatim
 *   a llama2.c tokenizer .bin   "llama": tokens (spaces as SentencePiece's U+2581), scores,
 *                               token_type (0 UNKNOWN, 1 and 2 CONTROL, "<0xXX>" BYTE, the rest
 *                               NORMAL: tools/ref/llama2c_to_gguf.py's choices), bos 1, eos 2,
 *                               unk 0, add_bos_token and add_space_prefix (llama2.c does both)
 *   a Hugging Face tokenizer.json (byte-level BPE)   "gpt2": tokens by id (added tokens
 *                               included; holes and the rows up to the model's vocabulary as
 *                               "[PADn]", UNUSED), merges, token_type (added special CONTROL,
 *                               other added USER_DEFINED, as llama.cpp's converter types them;
 *                               the rest NORMAL), the pre-tokenizer's GGUF name, bos/eos
 *                               (tokenizer_config.json, else config.json), add_bos_token
 * Anything else is refused with a message naming the tokenizer file. */
#ifndef LMP_CORE_GGUF_TOKENIZER_H
#define LMP_CORE_GGUF_TOKENIZER_H

#include "base/ctx.h"
#include "export/gguf_meta.h"
#include "model/model.h"

int lmp_gguf_meta_tokenizer(lmp_ctx *ctx, const lmp_model *m, const char *tokenizer_path, lmp_gguf_meta *b);

#endif
