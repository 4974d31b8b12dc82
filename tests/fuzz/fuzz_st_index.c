/* fuzz_st_index.c — libFuzzer entry for the sharded-safetensors index reader
 * (core/formats/safetensors.c, lmp_st_open on a *.index.json).  Each input is written as
 * model.safetensors.index.json into a folder that also holds tests/golden/safetensors/sharded's
 * two shards (model-00001-of-00002.safetensors, model-00002-of-00002.safetensors) and
 * tests/golden/gpt2-tiny's model.safetensors, so a weight_map may name real shards, missing ones,
 * paths outside the folder, the same shard twice or a tensor in the wrong shard.  lmp_st_open must
 * refuse with a message or give a set in which every tensor is found by name and its first and
 * last elements convert (or are refused as a non-float dtype).  No crash, leak or hang. */
#include <string.h>

#include "base/error.h"
#include "formats/safetensors.h"
#include "fuzz_folder.h"

#ifndef LMP_SOURCE_DIR
#define LMP_SOURCE_DIR "."
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *links[] = {LMP_SOURCE_DIR "/tests/golden/safetensors/sharded/model-00001-of-00002.safetensors",
                           LMP_SOURCE_DIR "/tests/golden/safetensors/sharded/model-00002-of-00002.safetensors",
                           LMP_SOURCE_DIR "/tests/golden/gpt2-tiny/model.safetensors"};
    const char *dir = fuzz_folder(links, 3);
    const char *index = fuzz_folder_file(dir, "model.safetensors.index.json", data, size);
    lmp_safetensors *st = NULL;
    if (lmp_st_open(index, &st) != 0) {
        if (st != NULL || !lmp_last_error()[0]) __builtin_trap();
        return 0;
    }
    for (size_t i = 0; i < st->n_tensors; i++) {
        const lmp_st_tensor *t = &st->tensors[i];
        if (lmp_st_find(st, t->name) == NULL) __builtin_trap();
        if (t->shard < 0 || t->shard >= st->n_shards) __builtin_trap();
        float x;
        if (t->numel > 0) {
            lmp_st_to_f32(t, 0, 1, &x);
            lmp_st_to_f32(t, t->numel - 1, 1, &x);
        }
    }
    lmp_st_close(st);
    return 0;
}
