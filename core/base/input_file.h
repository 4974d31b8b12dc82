/* input_file.h — checking, opening and reading a file the user named as an input (a model, a
 * tokenizer, a config or one it @includes, a text, LAMBADA, a report given to `lmpress diff`),
 * so that a hostile or mistaken path fails at once with one clear message:
 *
 *  - a FIFO, a device, a socket or a folder where a file is expected is refused without blocking:
 *    the kind is read with stat() first (a device is never opened), the open itself is
 *    O_NONBLOCK (a FIFO cannot block it) and fstat() checks what was really opened;
 *  - a file larger than its kind may sensibly be (a tokenizer over 256 MiB, a config over
 *    16 MiB, a text or an importance matrix over 4 GiB) is refused before anything is allocated, and a stream is read
 *    no further than that cap (so /dev/zero cannot exhaust memory).
 *
 * Special files on purpose: with the environment variable LMP_ALLOW_SPECIAL_FILES=1 (the only
 * switch; any other value or none means off) every input that is read as a stream (all kinds
 * but LMP_INPUT_MODEL, which is memory-mapped and must be a regular file) may also be a FIFO,
 * a pipe or a character device: `lmpress eval --text /dev/stdin`, `--text <(zcat t.gz)`.
 * The open is still non-blocking, so a named FIFO that no writer holds open reads as empty
 * instead of hanging; the cap still applies.  Folders are never accepted as files. */
#ifndef LMP_CORE_INPUT_FILE_H
#define LMP_CORE_INPUT_FILE_H

#include <stddef.h>
#include <stdint.h>

/* What an input is: it chooses the size cap and the words of the messages. */
typedef enum lmp_input_kind {
    LMP_INPUT_TEXT = 0,  /* evaluation / calibration text, LAMBADA .jsonl: cap 4 GiB */
    LMP_INPUT_MODEL,     /* a model file (memory-mapped): regular files only, no cap */
    LMP_INPUT_TOKENIZER, /* tokenizer.bin, tokenizer.json, encoder.json, vocab.bpe: 256 MiB */
    LMP_INPUT_CONFIG,    /* an lmpress config or a file it @includes: 16 MiB */
    LMP_INPUT_JSON,      /* config.json, a safetensors index, tokenizer_config.json, a report: 256 MiB */
    LMP_INPUT_IMATRIX,   /* a llama.cpp importance matrix (.gguf or legacy .dat), read whole: 4 GiB, as
                          * a MoE model's per-expert sums run to a gigabyte */
} lmp_input_kind;

#define LMP_ALLOW_SPECIAL_FILES_ENV "LMP_ALLOW_SPECIAL_FILES"

/* 1 when LMP_ALLOW_SPECIAL_FILES=1 is set (read at each call). */
int lmp_input_special_allowed(void);
/* The largest size accepted for an input of that kind (UINT64_MAX: none). */
uint64_t lmp_input_cap(lmp_input_kind kind);

/* Opens `path` read-only if it is a readable regular file; the descriptor is returned in
 * blocking mode.  Otherwise returns -1 when it cannot be reached or opened (why[n] gets
 * strerror's text: "No such file or directory", "Permission denied"), or -2 when it is the wrong
 * kind of file (why: "is a FIFO, not a regular file"); errno is set either way.  Records no
 * error message (see lmp_input_open_kind for that). */
int lmp_input_open(const char *path, char *why, size_t n);

/* 0 if `path` is a readable regular file (it is opened and closed again), else -1 or -2 and why[]. */
int lmp_input_check_file(const char *path, char *why, size_t n);

/* 0 if `path` is a folder that can be read, else -1 or -2 (not a folder) and why[]. */
int lmp_input_check_dir(const char *path, char *why, size_t n);

/* Opens an input of the given kind: a regular file, or (kinds other than MODEL, with
 * LMP_ALLOW_SPECIAL_FILES=1) a FIFO / pipe / character device.  Never blocks.  On success
 * returns 0, *fd (blocking mode, O_CLOEXEC) and *size (the file's size; UINT64_MAX for a stream
 * whose size is unknown).  A regular file over the kind's cap is refused here.  On failure
 * records a message naming the path ("PATH: cannot open tokenizer file: No such file or
 * directory", "PATH: is a FIFO, not a regular file (...)", "PATH: tokenizer file of N bytes is
 * larger than the 256 MiB accepted") and returns LMP_EIO or LMP_EINVAL. */
int lmp_input_open_kind(const char *path, lmp_input_kind kind, int *fd, uint64_t *size);

/* Reads a whole input of the given kind (opened with lmp_input_open_kind) into *data, malloc'd
 * and NUL-terminated (the NUL is not counted in *len).  A stream is read up to the cap and
 * refused past it.  Returns 0, or an LMP_E* status with a message naming the path. */
int lmp_input_read(const char *path, lmp_input_kind kind, char **data, size_t *len);

#endif
