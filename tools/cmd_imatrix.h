/* cmd_imatrix.h — `lmpress imatrix [MODEL] --calib TEXT -o F.gguf`: an importance matrix of
 * MODEL on TEXT in llama.cpp's GGUF form (core/compress/imatrix_collect.h, export/imatrix_write.h)
 * for llama-quantize --imatrix, or for lmpress's own importance = "imatrix". */
#ifndef LMP_TOOLS_CMD_IMATRIX_H
#define LMP_TOOLS_CMD_IMATRIX_H

#include "base/ctx.h"

extern const char *const usage_imatrix;

/* argv: the arguments after "imatrix"; returns the exit status. */
int cmd_imatrix(lmp_ctx *ctx, int argc, char **argv, const char *default_model);

#endif
