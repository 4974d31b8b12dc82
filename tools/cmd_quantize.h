/* cmd_quantize.h — `lmpress quantize MODEL OUT PRESET [options]`: compare's one-line shortcut.
 * It writes the config a preset stands for (llama-quantize's per-tensor recipe for a llama.cpp
 * type, compressed-tensors' conventions for W4A16 / W8A8) and runs it with `lmpress run CONFIG
 * --output OUT`, the caller's run function. */
#ifndef LMP_TOOLS_CMD_QUANTIZE_H
#define LMP_TOOLS_CMD_QUANTIZE_H

#include <stdint.h>

#include "base/ctx.h"

/* lmpress.c's cmd_compare: argv are `run`'s arguments (single = 1). */
typedef int (*lmp_cli_run_fn)(lmp_ctx *ctx, int argc, char **argv, int single, int64_t threads);

/* The usage text (for `lmpress --help`'s list and "did you mean"). */
extern const char *const lmp_usage_quantize;

/* argv: the arguments after "quantize".  Exit status: 0, 1 a failed run, 2 a usage error. */
int lmp_cmd_quantize(lmp_ctx *ctx, int argc, char **argv, int64_t threads, lmp_cli_run_fn run);

#endif
