/* hf_tokenizer.h — tokenizer.json and tokenizer_config.json for a Hugging Face export whose
 * source has no tokenizer files to copy (a GGUF, a llama2.c checkpoint), made from the tokenizer
 * metadata the GGUF writer would store (gguf_tokenizer.h), so both exports describe one tokenizer.
 *
 *   "gpt2" (byte-level BPE), pre-tokenizer "gpt-2" or none: ByteLevel; "smollm": SmolLM2's
 *       Sequence[Digits(individual_digits), ByteLevel].  Vocab and merges as stored; tokens of
 *       type CONTROL or UNKNOWN are added special tokens, USER_DEFINED added non-special ones.
 *   "llama" (SentencePiece BPE, llama2.c's): Hugging Face's Llama layout — normalizer
 *       Prepend("▁") (when add_space_prefix) + Replace(" ", "▁"), BPE with byte_fallback, the
 *       decoder that undoes it.  SentencePiece keeps scores where HF keeps merges: every split
 *       a + b of a NORMAL token into two NORMAL tokens is a merge, ranked by the merged token's
 *       score, highest first — the order in which llama2.c's encoder would apply it.
 *   BOS: a TemplateProcessing post-processor when tokenizer.ggml.add_bos_token says so.
 *
 * tokenizer_config.json names bos/eos/unk, add_bos_token, the chat template when the source has
 * one, and tokenizer_class PreTrainedTokenizerFast.  Another tokenizer model or pre-tokenizer is
 * not guessed at: a warning says that no tokenizer was written, and the export goes on.
 * tools/ref/hf_tokenizer_check.py checks the files with the PyPI `tokenizers` package. */
#ifndef LMP_CORE_HF_TOKENIZER_H
#define LMP_CORE_HF_TOKENIZER_H

#include "base/ctx.h"
#include "export/out_dir.h"
#include "model/model.h"

/* Writes both files into od; 0 also when there is no tokenizer, or one of a kind it does not
 * translate (a warning says why: the weights are still worth having).  *written is set to 1 when the files were written. */
int lmp_hf_write_tokenizer(lmp_ctx *ctx, const lmp_model *m, const char *tokenizer_path, lmp_outdir *od,
                           int *written);

#endif
