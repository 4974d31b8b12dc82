/* out_dir.h — writing a folder so that its path only ever holds a complete one (base/outfile.h
 * does the same for one file).
 *
 * Every file goes into a temporary folder beside the destination, DEST.tmp-XXXXXX (mkdtemp, so
 * two exports never share one), each flushed and fsync'd as it is closed.  Commit renames the
 * temporary folder onto DEST: when DEST is absent or an empty folder that is one rename; when it
 * holds an earlier export (the caller decides that it may be replaced) it is first renamed aside
 * to DEST.old-XXXXXX, then the new folder takes its place, then the old one is removed, and if the
 * second rename fails the old folder is put back.  Abort removes the temporary folder with
 * everything in it.  A process killed outright (SIGKILL, power loss) can leave a DEST.tmp-* or
 * DEST.old-* folder behind, never a half-written DEST. */
#ifndef LMP_CORE_OUT_DIR_H
#define LMP_CORE_OUT_DIR_H

#include <stdio.h>

typedef struct lmp_outdir {
    char dest[4096];           /* the destination, without trailing slashes */
    char tmp[4200];            /* the temporary folder; "" when there is none */
} lmp_outdir;

/* What is at a destination path now. */
typedef enum {
    LMP_OUTDIR_ABSENT = 0,
    LMP_OUTDIR_EMPTY = 1,      /* an empty folder */
    LMP_OUTDIR_FULL = 2,       /* a folder with something in it */
    LMP_OUTDIR_OTHER = 3,      /* not a folder (a file, a link, a device) */
} lmp_outdir_state;

/* The state of `path` (a symbolic link counts as OTHER, even to a folder: a commit would replace
 * the link, not the folder).  -1 with a message when it cannot be examined. */
int lmp_outdir_state_of(const char *path, lmp_outdir_state *state);

/* Creates the temporary folder beside dest (whose parent must exist), with the permissions of a
 * folder made by mkdir under the process's umask. */
int lmp_outdir_begin(lmp_outdir *od, const char *dest);
/* The path of `name` inside the temporary folder, in buf[n]. */
const char *lmp_outdir_path(const lmp_outdir *od, const char *name, char *buf, size_t n);
/* A new file `name` in the temporary folder, opened for writing. */
int lmp_outdir_create(lmp_outdir *od, const char *name, FILE **f);
/* Flushes, fsyncs and closes f (always closed); a write error that happened on it is reported
 * here, naming the file. */
int lmp_outdir_close(lmp_outdir *od, const char *name, FILE *f);
/* Copies the regular file src into the temporary folder as `name`. */
int lmp_outdir_copy(lmp_outdir *od, const char *src, const char *name);
/* Puts the temporary folder in dest's place (see above); on failure the temporary folder is
 * removed and dest is as it was. */
int lmp_outdir_commit(lmp_outdir *od);
/* Removes the temporary folder (if any) and everything in it. */
void lmp_outdir_abort(lmp_outdir *od);

/* Removes path and, if it is a folder, everything under it (links are removed, not followed). */
int lmp_rmtree(const char *path);

#endif
