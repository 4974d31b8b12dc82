/* outfile.h — writing an output file so that its path always holds a complete document, and the
 * checks every output path passes before any work.
 *
 * The content goes to a temporary file in the destination's folder (base/tmpname.h: its name
 * carries this process's pid, and a later run removes one a killed run left), is flushed and
 * fsync'd, and is renamed over the destination only when every byte is written: a full disk, a
 * file size limit or an interrupt leaves the previous file (or none) in place, never a truncated
 * one.
 *
 * What may be at an output path: nothing, or a regular file (replaced).  Anything else is
 * refused before any work, as inputs of the wrong kind are refused:
 *  - a FIFO, a character or block device, a socket: replacing it would replace the node itself
 *    (as root, `--json /dev/null` would replace the system's /dev/null);
 *  - a symbolic link, even to a regular file: lmpress does not follow it (the rename would
 *    replace the link, not its target, and following it would write where the path does not
 *    say); name the target itself;
 *  - a folder.
 * "-" is standard output: the callers write that format there instead (never a file named "-"). */
#ifndef LMP_CORE_OUTFILE_H
#define LMP_CORE_OUTFILE_H

#include <stdio.h>

/* 1 when path is "-" (standard output). */
int lmp_outfile_is_stdout(const char *path);

/* What is at `path` now may be replaced: nothing, or a regular file (lstat: a link is refused).
 * The message names `what` (e.g. "--json") and the kind found. */
int lmp_outfile_check_kind(const char *path, const char *what);

/* Before any work: the folder that will hold `path` exists and is writable, and what is at
 * `path` may be replaced (lmp_outfile_check_kind).  The message names `what` (e.g. "--json"). */
int lmp_outfile_check(const char *path, const char *what);

/* Writes `path` through write(arg, f).  Failures name the path and give errno's text.  What is
 * at the path is checked again just before the rename (lmp_outfile_check_kind). */
int lmp_outfile_write(const char *path, void (*write)(const void *arg, FILE *f), const void *arg);

/* One path of a run and the option or key that named it, for lmp_outfile_distinct. */
typedef struct lmp_named_path {
    const char *path;
    const char *what;          /* "--json", "the model", "eval.texts[1]", "--output-dir: variant 'x'" */
} lmp_named_path;

/* No output is the same file as an input or as another output: the same device and inode when
 * both exist, else the same path once resolved (realpath of what exists: "x", "./x" and
 * "d/../x" are one).  "-" and NULL entries are skipped.  The message names both. */
int lmp_outfile_distinct(const lmp_named_path *outputs, int n_outputs, const lmp_named_path *inputs, int n_inputs);

#endif
