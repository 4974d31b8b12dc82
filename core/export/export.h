/* export.h — writing a compressed variant as a file another runtime loads.
 *
 *   GGUF (PATH ends in .gguf)   llama.cpp's format: architecture metadata, the tokenizer, every
 *                               tensor; a linear on a GGUF grid (q8_0, q4_0, ...) in that type,
 *                               from the codes and scales the strategy chose (gguf_write.c).
 *   Hugging Face folder (else)  config.json with a compressed-tensors quantization_config,
 *                               model.safetensors (sharded above a size), the tokenizer files;
 *                               a linear on an int grid stored as compressed-tensors'
 *                               pack-quantized (weight-only; 2, 4 or 8 bits) or int-quantized (with
 *                               int8 activations), as compressed-tensors itself picks the format
 *                               for a scheme (hf_write.c; the layout is in hf_plan.h).
 *
 * What a file holds is what lmpress evaluated: every quantized weight is written as its code on
 * the grid the strategy recorded (lmp_linear.grid), and each code is checked to dequantize to the
 * weight bit for bit (grid_codes.h); a weight that does not is an error naming the linear, not a
 * silently different file.  A linear no stage quantized is written exactly (f32; in a Hugging
 * Face folder whose every grid has bf16 or f16 scales, that dtype, rounded, with a log line
 * saying so: hf_write.c).  What a format
 * cannot hold (an input affine of Shift/SmoothQuant's o/down, a bias on an RMSNorm, a grid the
 * format has no type for where that would lose bits) is refused before anything is written, with
 * the linear's name and what to change.
 *
 * Everything is written under a temporary name beside PATH and renamed when complete, so an
 * interrupted or failed export leaves no file that looks finished.  Memory: one block and one
 * tensor's encoding at a time. */
#ifndef LMP_CORE_EXPORT_H
#define LMP_CORE_EXPORT_H

#include <stdint.h>

#include "base/ctx.h"
#include "model/block_source.h"
#include "model/model.h"

typedef struct lmp_export_opts {
    const char *path;            /* a .gguf file, or a folder for a Hugging Face checkpoint */
    const char *variant;         /* the variant's name (metadata) */
    const char *pipeline;        /* the variant's pipeline, as text (metadata) */
    const char *config_path;     /* the run's config file (metadata), or NULL */
    const char *tokenizer_path;  /* the tokenizer the run used (llama2.c .bin, tokenizer.json),
                                  * or NULL: the model's own (a GGUF's, a folder's tokenizer.json) */
    int64_t shard_bytes;         /* Hugging Face: largest safetensors shard (0: 5 GB) */
    const char *embedding_type;  /* GGUF: the token embedding's type (and the head's when tied or
                                  * output_type is NULL): NULL (and output_type NULL): the source
                                  * GGUF's own types when they give the values back exactly, else
                                  * F32; "f32", "f16",
                                  * or a GGUF block type "q8_0", "q4_0", "q4_1", "q5_0", "q5_1",
                                  * "iq4_nl", "q2_k" .. "q6_k", quantized as llama-quantize does
                                  * without an importance matrix, a k-quant falling back as
                                  * llama-quantize's on rows it does not divide (rounded: the
                                  * file's model then differs from the evaluated one there, and
                                  * says so) */
    const char *output_type;     /* GGUF: an untied head's type (NULL: embedding_type's) */
    const char *config_text;     /* the run's config as text (metadata: GGUF lmpress.config_text,
                                  * config.json's lmpress.config_text); NULL: read from config_path */
} lmp_export_opts;

/* Which writer a path gets: 1 GGUF (ends in ".gguf"), 0 a Hugging Face folder. */
int lmp_export_is_gguf(const char *path);

/* Before any work: the destination can be written (its folder exists and is writable; a .gguf
 * path is not a folder; a folder path is not a file).  `what` names the option for messages. */
int lmp_export_check_path(const char *path, const char *what);

/* What the writer for path (.gguf or a folder) cannot carry is refused, naming it (the list is
 * docs/architectures.md's "Refused by name"): a GGUF of any family with a llama.cpp architecture,
 * less what that llama.cpp model would run differently (a sliding window outside Gemma 2/3,
 * LongRoPE outside phi3, llama3 RoPE outside llama, YaRN with other than llama.cpp's defaults,
 * untied Gemma / Gemma 2 heads, soft-caps and q scales llama.cpp does not apply or assumes otherwise); a
 * Hugging Face folder of Llama, Mistral, Qwen2, Qwen3, Gemma from any source, of Phi-3, Gemma 2/3,
 * GLM, GLM-4, ERNIE 4.5 from a Hugging Face source only; in a config.json made here (a GGUF or
 * llama2.c source), llama3 RoPE (its parameters are not in a GGUF), a YaRN that
 * max_position_embeddings cannot say, partial rotary, a window.  A Hugging Face source's own
 * config.json is copied, so its RoPE is carried whatever it is.  Needs only the model's header:
 * compare calls it before any variant runs. */
int lmp_export_check_arch(const lmp_model *m, const char *path);

/* Before any work: DIR, which will hold one export per variant, is a writable folder (created
 * when missing, its parent must exist). */
int lmp_export_check_dir(const char *dir, const char *what);

/* Writes the model with its blocks replaced by those of `blocks` (the variant's compressed
 * blocks from a block store, or the model's own for the unmodified one), read one at a time: the
 * writer plans every tensor on a first pass and writes on a second.  m gives the architecture, the embedding,
 * final norm and head, and the tokenizer when the opts name none.  Logs and progress go through
 * ctx; on failure nothing is left at o->path (an earlier file there stays as it was). */
int lmp_export_model(lmp_ctx *ctx, const lmp_model *m, const lmp_block_source *blocks, const lmp_export_opts *o);

/* "PATH: 98.4 MB, 5.53 bits per weight over all 134,515,008 weights (embeddings included)": the
 * line every export ends with, data_bytes the tensors' bytes, n_weights their elements. */
void lmp_export_log_size(lmp_ctx *ctx, const char *path, uint64_t file_bytes, uint64_t data_bytes, uint64_t n_weights);

/* The two writers (lmp_export_model picks one by path). */
int lmp_export_gguf(lmp_ctx *ctx, const lmp_model *m, const lmp_block_source *blocks, const lmp_export_opts *o);
int lmp_export_hf(lmp_ctx *ctx, const lmp_model *m, const lmp_block_source *blocks, const lmp_export_opts *o);

#endif
