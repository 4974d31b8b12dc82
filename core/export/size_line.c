/* size_line.c — see export.h (lmp_export_log_size): the line every export ends with. */
#include "export/export.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "base/log.h"

/* 1234567 -> "1,234,567" */
static void with_commas(uint64_t v, char *buf, size_t n)
{
    char digits[32];
    snprintf(digits, sizeof digits, "%" PRIu64, v);
    size_t len = strlen(digits), k = 0;
    for (size_t i = 0; i < len && k + 2 < n; i++) {
        if (i && (len - i) % 3 == 0) buf[k++] = ',';
        buf[k++] = digits[i];
    }
    buf[k] = 0;
}

void lmp_export_log_size(lmp_ctx *ctx, const char *path, uint64_t file_bytes, uint64_t data_bytes, uint64_t n_weights)
{
    char count[40];
    with_commas(n_weights, count, sizeof count);
    /* llama.cpp's "model size = ... (... BPW)": the tensors' bytes over their elements */
    lmp_log(ctx, LMP_LOG_INFO, "%s: %.1f MB (%.2f MiB), %.3f bits per weight over all %s weights (embeddings included)",
            path, (double)file_bytes / 1e6, (double)file_bytes / 1048576.0,
            n_weights ? 8.0 * (double)data_bytes / (double)n_weights : 0.0, count);
}
