/* ggml_quant_ref_stubs.c — the few ggml-base functions that ggml.c calls but that live in ggml's
 * C++ files (ggml-threading.cpp, ggml-backend.cpp), for the quantization harness
 * ggml_quant_ref.c.  Building ggml.c and ggml-quants.c alone keeps the fixture to two C files of
 * ggml's (seconds to compile) instead of the ggml-base library and a C++ toolchain.
 *
 * None of these takes part in quantizing: ggml_quantize_init/free take the critical section,
 * and the backend calls serve tensors in backend buffers, which the harness never makes. */
#include <stdio.h>
#include <stdlib.h>

#include "ggml-backend.h"
#include "ggml-threading.h"

/* The critical section guards ggml's lazily built IQ grid tables against concurrent threads;
 * the harness runs one thread, so there is nothing to exclude. */
void ggml_critical_section_start(void) {}
void ggml_critical_section_end(void) {}

static void unreachable(const char *what)
{
    fprintf(stderr, "ggml_quant_ref: %s called, but the harness builds no backend\n", what);
    abort();
}

enum ggml_backend_buffer_usage ggml_backend_buffer_get_usage(ggml_backend_buffer_t buffer)
{
    (void)buffer;
    unreachable("ggml_backend_buffer_get_usage");
    return GGML_BACKEND_BUFFER_USAGE_ANY;
}

void ggml_backend_tensor_set(struct ggml_tensor *tensor, const void *data, size_t offset, size_t size)
{
    (void)tensor, (void)data, (void)offset, (void)size;
    unreachable("ggml_backend_tensor_set");
}

void ggml_backend_tensor_memset(struct ggml_tensor *tensor, uint8_t value, size_t offset, size_t size)
{
    (void)tensor, (void)value, (void)offset, (void)size;
    unreachable("ggml_backend_tensor_memset");
}
