/* out_dir.h — writing a folder so that its path only ever holds a complete one (base/outfile.h
 * does the same for one file).
 *
 * Every file goes into a temporary folder beside the destination, DEST.tmp-HOST-PID-XXXXXX
 * (base/tmpname.h; mkdtemp, so two exports never share one), each flushed and fsync'd as it is
 * closed.  Commit puts the temporary folder at DEST: when DEST is absent or an empty folder that
 * is one rename; when it holds an earlier export (the caller decides that it may be replaced) the
 * two folders are swapped in one step with renameat2(RENAME_EXCHANGE) and the earlier one, now
 * under the temporary name, is removed.  Where the kernel or filesystem has no RENAME_EXCHANGE
 * the earlier folder is first renamed aside to DEST.old-HOST-PID-XXXXXX, then the new one takes
 * its place (if that fails the old folder is put back), then the old one is removed: a kill
 * between those two renames leaves no DEST, only DEST.old-* (and DEST.tmp-*).  Abort removes
 * the temporary folder with everything in it.  A process killed outright (SIGKILL, power loss)
 * can leave a DEST.tmp-* or DEST.old-* folder behind, never a half-written DEST; the next export
 * to DEST removes those whose process is gone (lmp_tmpname_sweep). */
#ifndef LMP_CORE_OUT_DIR_H
#define LMP_CORE_OUT_DIR_H

#include <stdio.h>

#include "base/tmpname.h" /* lmp_rmtree */

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


/* The file name (no folder, no extension) a variant's export gets under --output-dir:
 * DIR/<this>.gguf or DIR/<this>/.  Variant names are free text, so this is the one mapping from
 * a name to a path: letters, digits and . _ - + = , @ : stay; every other byte ('/', a space,
 * a control or non-ASCII byte) becomes '_'; a leading '.' becomes '_' (so ".", "..", "../x" and
 * "./x" can neither leave the folder nor hide in it); an empty name is "_"; at most
 * LMP_VARIANT_FILE_MAX bytes are kept (the temporary names beside it must fit NAME_MAX).  Two
 * names that map to one file ("a/b" and "a_b") are refused when the config is loaded.  Returns
 * buf. */
#define LMP_VARIANT_FILE_MAX 160
const char *lmp_variant_file_name(const char *name, char *buf, size_t n);

#endif
