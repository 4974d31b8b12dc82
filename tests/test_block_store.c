/* test_block_store.c — a variant's blocks kept as codes give back the blocks that were put.
 *
 * Each case compresses stories260K with one stage, puts every block in a block store, reads it
 * back and compares every array bit for bit (memcmp, so -0 and +0 differ): weights, biases, the
 * grid's scales, zero points and g_idx, input affines, masks, norms.  The cases cover 4-bit
 * symmetric INT codes (which leave -0 weights), 8-bit asymmetric codes with act-order g_idx, a
 * GGUF block format, a k-quant, a linear edited off its grid (kept as f32), 2:4 masks, and
 * Shift's input affines and norm biases.  A W4 g32 variant must take under a fifth of its f32
 * size, and a block never stored is an error naming the store. */
#include <math.h>

#include "testutil.h"
#include "teststage.h"

#include "model/block_store.h"
#include "model/model.h"

#define MODEL LMP_SOURCE_DIR "/models/stories260K/stories260K.bin"

static lmp_model *g_m;

static void same_array(const char *what, const char *name, const void *a, const void *b, size_t bytes)
{
    ck_assert_msg((a == NULL) == (b == NULL), "%s %s: present in one block only", name, what);
    if (a) ck_assert_msg(memcmp(a, b, bytes) == 0, "%s %s: differs after the store", name, what);
}

static void same_block(const lmp_block *x, const lmp_block *y)
{
    ck_assert_int_eq(x->index, y->index);
    ck_assert_int_eq(x->n_linears, y->n_linears);
    ck_assert_int_eq(x->n_norms, y->n_norms);
    for (int i = 0; i < x->n_linears; i++) {
        const lmp_linear *a = &x->linears[i], *b = &y->linears[i];
        ck_assert_str_eq(a->name, b->name);
        ck_assert(a->role == b->role && a->out == b->out && a->in == b->in);
        ck_assert(a->weight_bits == b->weight_bits && a->sparse_n == b->sparse_n && a->sparse_m == b->sparse_m);
        ck_assert(memcmp(&a->act, &b->act, sizeof a->act) == 0);
        const size_t n = (size_t)(a->out * a->in);
        same_array("w", a->name, a->w, b->w, n * 4);
        same_array("b", a->name, a->b, b->b, (size_t)a->out * 4);
        same_array("in_shift", a->name, a->in_shift, b->in_shift, (size_t)a->in * 4);
        same_array("in_scale", a->name, a->in_scale, b->in_scale, (size_t)a->in * 4);
        same_array("mask", a->name, a->mask, b->mask, n);
        same_array("shift_bias", a->name, a->shift_bias, b->shift_bias, (size_t)a->out * 8);
        ck_assert_msg((a->grid == NULL) == (b->grid == NULL), "%s: grid", a->name);
        if (a->grid) {
            ck_assert(memcmp(&a->grid->spec, &b->grid->spec, sizeof a->grid->spec) == 0);
            ck_assert_int_eq(a->grid->n_scales, b->grid->n_scales);
            same_array("scales", a->name, a->grid->scales, b->grid->scales, (size_t)a->grid->n_scales * 4);
            same_array("zeros", a->name, a->grid->zeros, b->grid->zeros, (size_t)a->grid->n_scales * 4);
            same_array("g_idx", a->name, a->grid->g_idx, b->grid->g_idx, (size_t)a->in * 4);
        }
    }
    for (int i = 0; i < x->n_norms; i++) {
        const lmp_norm *a = &x->norms[i], *b = &y->norms[i];
        ck_assert_str_eq(a->name, b->name);
        ck_assert(a->dim == b->dim && a->n_fed == b->n_fed);
        ck_assert(a->n_fed == 0 || (a->fed != b->fed && memcmp(a->fed, b->fed, (size_t)a->n_fed * sizeof *a->fed) == 0));
        same_array("w", a->name, a->w, b->w, (size_t)a->dim * 4);
        same_array("b", a->name, a->b, b->b, (size_t)a->dim * 4);
    }
}

/* Puts every block, reads each back, compares; the store's size over the blocks' f32 size. */
static double round_trip(lmp_block *blocks)
{
    const int64_t n = g_m->arch.n_layers;
    lmp_block_store *store;
    const lmp_block_source src = stored_blocks(blocks, n, &store);
    for (int64_t b = n - 1; b >= 0; b--) { /* any order */
        lmp_block back;
        ck_assert_msg(src.get(src.self, b, &back) == 0, "%s", lmp_last_error());
        same_block(&blocks[b], &back);
        lmp_block_free(&back);
    }
    const double ratio = (double)lmp_block_store_bytes(store) / (double)lmp_block_store_f32_bytes(store);
    lmp_block_store_free(store);
    lmp_blocks_free(blocks, n);
    return ratio;
}

static int64_t count_negative_zeros(const lmp_block *blocks)
{
    int64_t k = 0;
    for (int64_t b = 0; b < g_m->arch.n_layers; b++)
        for (int i = 0; i < blocks[b].n_linears; i++) {
            const lmp_linear *l = &blocks[b].linears[i];
            for (int64_t j = 0; j < l->out * l->in; j++) k += l->w[j] == 0.0f && signbit(l->w[j]);
        }
    return k;
}

static void setup_model(void)
{
    setup();
    ck_assert_int_eq(lmp_model_load(MODEL, &g_m), 0);
}

static void teardown_model(void)
{
    lmp_model_free(g_m);
    teardown();
}

START_TEST(int4_symmetric_with_negative_zeros)
{
    const char *const set[] = {"bits=4", "granularity=group", "group_size=32", NULL};
    lmp_block *blocks = compress_stage(g_m, "rtn", set, NULL, 0);
    const int64_t negz = count_negative_zeros(blocks);
    printf("rtn int4 g32: %lld weights are -0\n", (long long)negz);
    ck_assert_msg(negz > 0, "the case is meant to have -0 weights");
    const double ratio = round_trip(blocks);
    printf("rtn int4 g32: the store takes %.3f of the f32 size\n", ratio);
    ck_assert_msg(ratio < 0.2, "%.3f of the f32 size", ratio);
}
END_TEST

START_TEST(int8_asymmetric_act_order)
{
    const char *const set[] = {"bits=8", "sym=false", "granularity=group", "group_size=16", "act_order=true", NULL};
    lmp_block *blocks = compress_stage(g_m, "gptq", set, NULL, 1);
    int with_gidx = 0;
    for (int i = 0; i < blocks[0].n_linears; i++) with_gidx += blocks[0].linears[i].grid && blocks[0].linears[i].grid->g_idx;
    ck_assert_msg(with_gidx > 0, "the case is meant to have g_idx");
    round_trip(blocks);
}
END_TEST

START_TEST(gguf_formats)
{
    static const char *const formats[] = {"format=q4_0", "format=q5_1", "format=q6_k"};
    for (int k = 0; k < 3; k++) {
        const char *const set[] = {formats[k], NULL};
        lmp_block *blocks = compress_stage(g_m, "rtn", set, "re:\\.(q|k|v|o|gate|up)_proj$", 0);
        round_trip(blocks);
    }
}
END_TEST

START_TEST(off_grid_weight_kept_in_f32)
{
    const char *const set[] = {"bits=4", NULL};
    lmp_block *blocks = compress_stage(g_m, "rtn", set, NULL, 0);
    blocks[1].linears[2].w[5] += 1e-3f; /* off the grid it still records */
    round_trip(blocks);
}
END_TEST

START_TEST(sparse_masks_and_shift_affines)
{
    const char *const wanda[] = {"method=wanda", NULL};
    round_trip(compress_stage(g_m, "sparse24", wanda, NULL, 1));
    const char *const shift[] = {"all_linears=true", NULL};
    lmp_block *blocks = compress_stage(g_m, "shift", shift, NULL, 1);
    int affine = 0, norm_b = 0;
    for (int i = 0; i < blocks[0].n_linears; i++) affine += blocks[0].linears[i].in_shift != NULL;
    for (int i = 0; i < blocks[0].n_norms; i++) norm_b += blocks[0].norms[i].b != NULL;
    ck_assert_msg(affine && norm_b, "the case is meant to have input affines and norm biases");
    round_trip(blocks);
}
END_TEST

START_TEST(missing_block_is_an_error)
{
    lmp_block_store *store;
    ck_assert_int_eq(lmp_block_store_open(&ctx, 3, "the blocks to export", &store), 0);
    const lmp_block_source src = lmp_block_store_source(store);
    lmp_block out;
    ck_assert_int_ne(src.get(src.self, 1, &out), 0);
    ck_assert_msg(strstr(lmp_last_error(), "the blocks to export: block 1 was not stored"), "%s", lmp_last_error());
    lmp_block_store_free(store);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("block_store");
    TCase *tc = tcase_create("round trip");
    tcase_add_checked_fixture(tc, setup_model, teardown_model);
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, int4_symmetric_with_negative_zeros);
    tcase_add_test(tc, int8_asymmetric_act_order);
    tcase_add_test(tc, gguf_formats);
    tcase_add_test(tc, off_grid_weight_kept_in_f32);
    tcase_add_test(tc, sparse_masks_and_shift_affines);
    tcase_add_test(tc, missing_block_is_an_error);
    suite_add_tcase(s, tc);
    return lmp_test_main(s);
}
