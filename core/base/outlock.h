/* outlock.h — one writer per report: an advisory lock (flock) held for the whole run.
 *
 * A report is rewritten after every variant through a temporary file and a rename, so its own
 * inode changes; the lock is taken on a companion file beside it, REPORT.lock, which holds the
 * pid of the run that has it.  A second run on the same report (same path from any folder, any
 * user who can open the lock file) is refused at once, naming that pid, instead of both
 * rewriting the report and one losing the other's rows.  The lock file is removed when the run
 * ends; one left by a killed run holds no lock (the kernel drops flock locks with the process)
 * and is taken over.  On NFS, flock is emulated with fcntl locks (Linux 2.6.12+). */
#ifndef LMP_CORE_OUTLOCK_H
#define LMP_CORE_OUTLOCK_H

typedef struct lmp_outlock {
    int fd;                    /* -1: not held */
    char path[4200];           /* REPORT.lock */
} lmp_outlock;

/* Takes the lock of report `path` (what: the option, for messages).  LMP_EBUSY-like failure
 * (LMP_EINVAL) with "another lmpress run (pid N) is writing it" when another run holds it. */
int lmp_outlock_take(lmp_outlock *l, const char *path, const char *what);

/* Removes the lock file and drops the lock; safe on one never taken (fd -1) or zeroed. */
void lmp_outlock_release(lmp_outlock *l);

#endif
