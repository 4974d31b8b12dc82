/* spill.h — an array of floats kept in memory while small and in an unlinked temporary file
 * when large, read and written a range at a time.
 *
 * What the run holds across blocks or variants (the reference's log-probabilities, the
 * evaluation windows' hidden states, the unmodified model's calibration activations) grows with
 * the number of windows; on disk it costs no resident memory, and the file ($TMPDIR or /tmp) is
 * unlinked at once, so it is gone with the process however the process ends.  The floats read
 * back are the floats written: nothing is rounded. */
#ifndef LMP_CORE_SPILL_H
#define LMP_CORE_SPILL_H

#include <stdint.h>

#include "base/ctx.h"

typedef struct lmp_spill {
    int64_t n;        /* floats */
    float *mem;       /* [n], or NULL when in the file */
    int fd;           /* the temporary file, or -1 */
    const char *what; /* for messages: "reference log-probabilities" */
} lmp_spill;

/* n floats, in memory when n * 4 <= budget_bytes, else in a file (ctx: its debug line saying
 * where).  $LMPRESS_SPILL_MB, when set, replaces every budget (0: everything on disk).  what
 * must outlive the store. */
int lmp_spill_init(lmp_ctx *ctx, lmp_spill *s, int64_t n, int64_t budget_bytes, const char *what);
void lmp_spill_free(lmp_spill *s);

/* buf[count] <- s[off .. off + count), and back. */
int lmp_spill_read(const lmp_spill *s, int64_t off, int64_t count, float *buf);
int lmp_spill_write(lmp_spill *s, int64_t off, int64_t count, const float *buf);

/* An unlinked temporary file in $TMPDIR (or /tmp) for about `bytes` of `what`: its descriptor,
 * or -1 with the error set.  For stores that grow as they are written (block_store.h). */
int lmp_spill_tmpfile(lmp_ctx *ctx, double bytes, const char *what);
/* Before any work: that a temporary file can be made in $TMPDIR (or /tmp) and that its
 * filesystem has `bytes` free for `what`; otherwise an error naming the folder and the size. */
int lmp_spill_check_dir(double bytes, const char *what);
/* Reads (writing 0) or writes bytes at offset `at` of fd, all of them or an error naming what. */
int lmp_spill_fd_io(int fd, int writing, void *buf, size_t bytes, int64_t at, const char *what);

/* In memory: a pointer to s[off] that callers may work on in place; in a file: NULL. */
static inline float *lmp_spill_at(const lmp_spill *s, int64_t off) { return s->mem ? s->mem + off : 0; }

#endif
