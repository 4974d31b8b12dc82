/* tmpname.h — the temporary names an output is written under, and removing those a killed run
 * left behind.
 *
 * Every output (a report, a GGUF file, a Hugging Face folder) is written under a name beside it,
 *     DEST.tmp-HOST-PID-XXXXXX      (the file or folder being written)
 *     DEST.old-HOST-PID-XXXXXX      (an earlier folder moved aside while a new one takes its place)
 * where HOST is this machine's name (letters and digits; others become '_'), PID the writing
 * process and XXXXXX mkstemp's / mkdtemp's unique tail.  A process killed outright (SIGKILL, power
 * loss, the OOM killer) cannot remove its own; so before a run writes DEST it removes every
 * DEST.tmp-* and DEST.old-* whose HOST is this machine and whose PID is no longer running
 * (kill(PID, 0) answers ESRCH).  One on another machine (a shared folder) or of a live process is
 * left alone: it may still be in use. */
#ifndef LMP_CORE_TMPNAME_H
#define LMP_CORE_TMPNAME_H

#include <stddef.h>

/* Creates DEST.KIND-HOST-PID-XXXXXX (kind "tmp" or "old"): a file opened read-write (the
 * descriptor is returned, O_CLOEXEC) when folder is 0, an empty folder (0 is returned) when 1.
 * Its path goes to buf[n].  -1 with errno set when it cannot be created. */
int lmp_tmpname_create(const char *dest, const char *kind, int folder, char *buf, size_t n);

/* Removes the leftovers of dead processes of this machine beside dest (see above).  Returns how
 * many it removed; one it cannot remove is left (the run does not depend on it). */
int lmp_tmpname_sweep(const char *dest);

/* 1 when `name` (a file name, no folder) is one of dest's temporary names written by a process of
 * this machine that is no longer running; *pid gets its PID.  For the tests and the sweep. */
int lmp_tmpname_is_stale(const char *dest_base, const char *name, long *pid);

/* Removes path and, if it is a folder, everything under it (links are removed, not followed). */
int lmp_rmtree(const char *path);

#endif
