/* file_hash.h — what an input file holds, folded into a run's fingerprint (issue 34 item 2):
 * `--resume` must not take results computed from another model, text, tokenizer or importance
 * matrix than the run's own. */
#ifndef LMP_CORE_FILE_HASH_H
#define LMP_CORE_FILE_HASH_H

#include <stdint.h>

/* Files up to this size are hashed whole; a larger one (a model) by its size, its modification
 * time and its first and last LMP_FILE_HASH_EDGE bytes, so that resuming a run does not read
 * gigabytes again. */
#define LMP_FILE_HASH_WHOLE ((int64_t)64 << 20)
#define LMP_FILE_HASH_EDGE ((int64_t)1 << 20)

/* Folds path's content into *h (FNV-1a 64): a regular file as above, a folder (a Hugging Face
 * model) as each regular file directly in it, in name order, with its name.  NULL path: a marker
 * of its own.  Errors (unreadable file) name the path. */
int lmp_file_hash_fold(const char *path, uint64_t *h);

#endif
