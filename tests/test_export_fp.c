/* test_export_fp.c — the Hugging Face (compressed-tensors) exports of the floating-point grids
 * (hf_plan.h: float-quantized for FP8 E4M3, nvfp4-pack-quantized, mxfp4-pack-quantized).
 *
 * stories260K through rtn (and gptq) on each grid, exported; then:
 *   - config.json names the format and the scheme compressed-tensors' presets write (type float,
 *     strategy tensor_group for NVFP4, scale_dtype), and the tensors have the dtypes and shapes of
 *     hf_plan.h (read back here with lmpress's safetensors reader);
 *   - with LMP_CT_PYTHON: tools/ref/ct_export_check.py parses the config with compressed-tensors,
 *     dequantizes every linear with its own CompressedTensorsDequantizer, and each must equal
 *     lmpress's in-memory weights bit for bit;
 *   - mxfp8 (MXFP8A16: mxfp8-quantized, E4M3 weights, uint8 E8M0 scales per 32) likewise;
 *   - FP8 in blocks (strategy "block", [ceil(out/n), ceil(in/n)] scales, partial tiles padded);
 *   - lmpress reads its own FP8 exports back (fp_exports_read_back_by_lmpress): the same up_proj
 *     weights bit for bit and the in-memory variant's perplexity;
 *   - the grids compressed-tensors has no export for here (fp8_e5m2) and FP weights with
 *     quantized activations are refused by name before anything is written. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "base/textfile.h"
#include "export/export.h"
#include "eval/eval.h"
#include "formats/json.h"
#include "formats/safetensors.h"
#include "model/model.h"
#include "text/tokenizer_open.h"
#include "teststage.h"
#include "testutil.h"

#define STORIES LMP_SOURCE_DIR "/models/stories260K/stories260K.bin"
#define CHECK LMP_SOURCE_DIR "/tools/ref/ct_export_check.py"
#define NOT_DOWN "re:\\.(q|k|v|o|gate|up)_proj$"

typedef struct variant {
    const char *name, *plugin, *target, *settings[6];
    const char *format;
    lmp_st_dtype wdtype, sdtype;
} variant;

static const variant VARIANTS[] = {
    {"fp8-channel", "rtn", NULL, {"format=fp8_e4m3", NULL}, "naive-quantized", LMP_ST_F8_E4M3, LMP_ST_F32},
    {"fp8-tensor-bf16", "rtn", NULL, {"format=fp8_e4m3", "granularity=tensor", "scale_dtype=bf16", NULL},
     "naive-quantized", LMP_ST_F8_E4M3, LMP_ST_BF16},
    {"fp8-g32-gptq", "gptq", NOT_DOWN, {"format=fp8_e4m3", "granularity=group", "group_size=32", NULL},
     "naive-quantized", LMP_ST_F8_E4M3, LMP_ST_F32},
    {"fp8-dynamic", "rtn", NULL, {"format=fp8_e4m3", "act=fp8_dynamic_token", NULL}, "float-quantized",
     LMP_ST_F8_E4M3, LMP_ST_F32},
    {"fp8-static", "rtn", NULL, {"format=fp8_e4m3", "granularity=tensor", "act=fp8_static_tensor", NULL},
     "float-quantized", LMP_ST_F8_E4M3, LMP_ST_F32},
    {"w4afp8", "rtn", NOT_DOWN, {"bits=4", "granularity=group", "group_size=32", "act=fp8_dynamic_token", NULL},
     "int-quantized", LMP_ST_I8, LMP_ST_F32},
    {"nvfp4-w4a4", "rtn", NOT_DOWN, {"format=nvfp4", "act=nvfp4", NULL}, "nvfp4-pack-quantized", LMP_ST_U8,
     LMP_ST_F8_E4M3},
    {"nvfp4", "rtn", NOT_DOWN, {"format=nvfp4", NULL}, "nvfp4-pack-quantized", LMP_ST_U8, LMP_ST_F8_E4M3},
    {"nvfp4-gptq", "gptq", NOT_DOWN, {"format=nvfp4", NULL}, "nvfp4-pack-quantized", LMP_ST_U8, LMP_ST_F8_E4M3},
    {"mxfp4", "rtn", NOT_DOWN, {"format=mxfp4", NULL}, "mxfp4-pack-quantized", LMP_ST_U8, LMP_ST_U8},
    {"mxfp8", "rtn", NOT_DOWN, {"format=mxfp8", NULL}, "mxfp8-quantized", LMP_ST_F8_E4M3, LMP_ST_U8},
    /* ABI 6.2: FP8 in tiles (strategy "block", block_structure [n, n]); every linear, so down_proj's
     * 64 x 172 and gate/up's 172 x 64 have partial tiles (compressed-tensors pads them) */
    {"fp8-block128", "rtn", NULL, {"format=fp8_e4m3", "granularity=block", "scale_dtype=bf16", NULL}, "naive-quantized",
     LMP_ST_F8_E4M3, LMP_ST_BF16},
    {"fp8-block16-gptq", "gptq", NULL, {"format=fp8_e4m3", "granularity=block", "group_size=16", NULL}, "naive-quantized",
     LMP_ST_F8_E4M3, LMP_ST_F32},
    {"fp8-block16-dyn", "rtn", NULL, {"format=fp8_e4m3", "granularity=block", "group_size=16", "act=fp8_dynamic_token",
     NULL}, "float-quantized", LMP_ST_F8_E4M3, LMP_ST_F32},
};
enum { N_VARIANTS = sizeof VARIANTS / sizeof *VARIANTS };

static char tmpdir[256];

static int export_to(const lmp_model *m, const lmp_block *blocks, const char *dir)
{
    lmp_export_opts o = {.path = dir, .variant = lmp_basename(dir), .pipeline = "test pipeline"};
    lmp_block_store *store;
    const lmp_block_source src = stored_blocks(blocks, m->arch.n_layers, &store);
    const int st = lmp_export_hf(&ctx, m, &src, &o);
    lmp_block_store_free(store);
    return st;
}

/* HF row r of q / k is lmpress's row of the adjacent-pair RoPE order (model_hf.c) */
static float *hf_order(const lmp_model *m, const lmp_linear *l)
{
    const int64_t hd = l->role == LMP_ROLE_Q || l->role == LMP_ROLE_K ? m->arch.head_dim : 0;
    float *o = malloc((size_t)(l->out * l->in) * sizeof *o);
    for (int64_t r = 0; r < l->out; r++) {
        const int64_t h = hd ? r / hd : 0, i = hd ? r % hd : r;
        const int64_t src = hd ? h * hd + (i < hd / 2 ? 2 * i : 2 * (i - hd / 2) + 1) : r;
        memcpy(o + r * l->in, l->w + src * l->in, (size_t)l->in * sizeof *o);
    }
    return o;
}

/* DIR.ref for ct_export_check.py: every tensor lmpress holds, in Hugging Face's layout. */
static void dump_ref(const lmp_model *m, const lmp_block *blocks, const char *dir)
{
    char refdir[600], path[1024];
    snprintf(refdir, sizeof refdir, "%s.ref", dir);
    ck_assert_int_eq(mkdir(refdir, 0777), 0);
    snprintf(path, sizeof path, "%s/manifest.txt", refdir);
    FILE *man = fopen(path, "w");
    ck_assert_ptr_nonnull(man);
#define DUMP(nm, x, rows, cols)                                                                             \
    do {                                                                                                   \
        snprintf(path, sizeof path, "%s/%s.f32", refdir, nm);                                               \
        lmp_test_spit(path, x, (size_t)((rows) * ((cols) ? (cols) : 1)) * sizeof(float));                   \
        fprintf(man, "%s %lld %lld\n", nm, (long long)(rows), (long long)(cols));                          \
    } while (0)
    const lmp_arch *a = &m->arch;
    DUMP("model.embed_tokens.weight", m->tok_emb, a->vocab, a->dim);
    char name[300];
    for (int64_t b = 0; b < a->n_layers; b++) {
        for (int i = 0; i < blocks[b].n_norms; i++) {
            snprintf(name, sizeof name, "%s.weight", blocks[b].norms[i].name);
            DUMP(name, blocks[b].norms[i].w, a->dim, 0);
        }
        for (int i = 0; i < blocks[b].n_linears; i++) {
            const lmp_linear *l = &blocks[b].linears[i];
            float *w = hf_order(m, l);
            snprintf(name, sizeof name, "%s.weight", l->name);
            DUMP(name, w, l->out, l->in);
            free(w);
        }
    }
    DUMP("model.norm.weight", m->final_norm_w, a->dim, 0);
#undef DUMP
    fclose(man);
}

static const char *cfg_format(const lmp_json *cfg)
{
    const char *s = NULL;
    ck_assert(lmp_json_get_string(lmp_json_get(cfg, "quantization_config"), "format", "config.json", &s) == 0);
    return s;
}

START_TEST(exports_equal_compressed_tensors)
{
    lmp_test_tmpdir(tmpdir, sizeof tmpdir, "export-fp");
    lmp_model *m;
    ck_assert_int_eq(lmp_model_load(STORIES, &m), 0);
    static char dirs[8192];
    for (int v = 0; v < N_VARIANTS; v++) {
        const variant *V = &VARIANTS[v];
        lmp_block *q = compress_stage(m, V->plugin, V->settings, V->target, 1);
        const char *dir = lmp_test_path(tmpdir, V->name);
        ck_assert_msg(export_to(m, q, dir) == 0, "%s: %s", V->name, lmp_last_error());
        char path[700];
        snprintf(path, sizeof path, "%s/config.json", dir);
        size_t n;
        char *text = (char *)lmp_test_slurp(path, &n);
        lmp_json *cfg = NULL;
        ck_assert_msg(lmp_json_parse(text, n, "config.json", &cfg) == 0, "%s", lmp_last_error());
        ck_assert_str_eq(cfg_format(cfg), V->format);
        ck_assert_msg(strstr(text, "\"type\": \"float\"") || strstr(text, "\"type\":\"float\""), "%s", text);
        int has_act = 0;
        for (int k = 0; V->settings[k]; k++) has_act |= strstr(V->settings[k], "act=") != NULL;
        ck_assert_msg(has_act == (strstr(text, "\"input_activations\": null") == NULL &&
                                  strstr(text, "\"input_activations\":null") == NULL),
                      "%s: input_activations in %s", V->name, text);
        if (!strcmp(V->format, "nvfp4-pack-quantized"))
            ck_assert(strstr(text, "tensor_group") && strstr(text, "torch.float8_e4m3fn"));
        free(text);
        lmp_json_free(cfg);
        lmp_safetensors *st = NULL;
        ck_assert_msg(lmp_st_open(dir, &st) == 0, "%s", lmp_last_error());
        const lmp_linear *l = &q[0].linears[0]; /* q_proj */
        char nm[300];
        snprintf(nm, sizeof nm, "%s.%s", l->name, V->wdtype == LMP_ST_U8 ? "weight_packed" : "weight");
        const lmp_st_tensor *w = lmp_st_find(st, nm);
        ck_assert_msg(w != NULL, "%s missing", nm);
        ck_assert_int_eq(w->dtype, V->wdtype);
        ck_assert_int_eq(w->shape[1], V->wdtype == LMP_ST_U8 ? l->in / 2 : l->in);
        snprintf(nm, sizeof nm, "%s.weight_scale", l->name);
        const lmp_st_tensor *s = lmp_st_find(st, nm);
        ck_assert_msg(s != NULL && s->dtype == V->sdtype, "%s", nm);
        if (strstr(V->name, "block")) { /* [ceil(out / n), ceil(in / n)] tiles */
            const int64_t bs = strstr(V->name, "block16") ? 16 : 128;
            ck_assert_int_eq(s->ndim, 2);
            ck_assert_int_eq(s->shape[0], (l->out + bs - 1) / bs);
            ck_assert_int_eq(s->shape[1], (l->in + bs - 1) / bs);
            snprintf(path, sizeof path, "%s/config.json", dir);
            char *cj = (char *)lmp_test_slurp(path, &n);
            ck_assert_msg(strstr(cj, "\"block\"") && strstr(cj, "block_structure"), "%s", cj);
            free(cj);
        }
        snprintf(nm, sizeof nm, "%s.weight_global_scale", l->name);
        ck_assert_int_eq(lmp_st_find(st, nm) != NULL, !strcmp(V->format, "nvfp4-pack-quantized"));
        lmp_st_close(st);
        dump_ref(m, q, dir);
        snprintf(dirs + strlen(dirs), sizeof dirs - strlen(dirs), " '%s'", dir);
        printf("  %-16s %-22s exported\n", V->name, V->format);
        lmp_blocks_free(q, m->arch.n_layers);
    }
    lmp_model_free(m);
    const char *py = getenv("LMP_CT_PYTHON");
    if (!py || !*py) {
        lmp_test_skip("SKIPPED exports_equal_compressed_tensors (compressed-tensors side): LMP_CT_PYTHON is not set\n");
    } else {
        static char cmd[16384];
        snprintf(cmd, sizeof cmd, "'%s' '%s' %s 2>&1", py, CHECK, dirs);
        FILE *p = popen(cmd, "r");
        ck_assert_ptr_nonnull(p);
        char line[4096];
        while (fgets(line, sizeof line, p)) fputs(line, stdout);
        ck_assert_msg(pclose(p) == 0, "failed: %s", cmd);
    }
    lmp_test_rmtree(tmpdir);
}
END_TEST

/* What the writer does not write is refused by name, before anything is written. */
START_TEST(refusals_by_name)
{
    lmp_test_tmpdir(tmpdir, sizeof tmpdir, "export-fp-no");
    lmp_model *m;
    ck_assert_int_eq(lmp_model_load(STORIES, &m), 0);
    static const struct {
        const char *set[4], *what;
    } cases[] = {{{"format=fp8_e5m2", NULL}, "fp8_e5m2"},
                 {{"format=mxfp8", "act=fp8_dynamic_token", NULL}, "activations"},
                 {{"format=fp8_e4m3", "act=dynamic_token", NULL}, "activations"},
                 {{"format=nvfp4", "act=fp8_dynamic_token", NULL}, "activations"},
                 /* blocks of 4 rows cut across stories260K's heads of 8, whose q/k rows the file reorders */
                 {{"format=fp8_e4m3", "granularity=block", "group_size=4", NULL}, "multiple of 8"}};
    for (int k = 0; k < 5; k++) {
        lmp_block *q = compress_stage(m, "rtn", cases[k].set, NOT_DOWN, 0);
        const char *dir = lmp_test_path(tmpdir, "out");
        ck_assert_int_ne(export_to(m, q, dir), 0);
        ck_assert_msg(strstr(lmp_last_error(), cases[k].what), "%s", lmp_last_error());
        struct stat sb;
        ck_assert_int_ne(stat(dir, &sb), 0);
        lmp_blocks_free(q, m->arch.n_layers);
    }
    lmp_model_free(m);
    lmp_test_rmtree(tmpdir);
}
END_TEST

/* lmpress reads its own FP8 exports (float-quantized / naive-quantized: per tensor, channel, group
 * and in blocks, with FP8 inputs per token or static per tensor) and its NVFP4 (with and without
 * NVFP4 inputs) and MXFP4 exports (nvfp4-pack-quantized, mxfp4-pack-quantized), and the model read
 * back has the in-memory variant's weights bit for bit and its perplexity. */
START_TEST(fp_exports_read_back_by_lmpress)
{
    lmp_test_tmpdir(tmpdir, sizeof tmpdir, "export-fp-back");
    lmp_model *m;
    ck_assert_int_eq(lmp_model_load(STORIES, &m), 0);
    lmp_tokenizer *tok = NULL;
    int32_t *ids = NULL;
    int64_t n = 0;
    ck_assert_msg(lmp_open_tokenizer(m, LMP_SOURCE_DIR "/models/stories260K/tok512.bin", &tok) == 0, "%s", lmp_last_error());
    ck_assert(lmp_tokenize_file(tok, LMP_SOURCE_DIR "/models/stories260K/tinystories-synth-eval.txt", &ids, &n) == 0);
    lmp_tokenizer_free(tok);
    int done = 0;
    for (int v = 0; v < N_VARIANTS; v++) {
        const variant *V = &VARIANTS[v];
        if (strncmp(V->name, "fp8", 3) != 0 && strncmp(V->name, "nvfp4", 5) != 0 && strncmp(V->name, "mxfp4", 5) != 0)
            continue;
        lmp_block *q = compress_stage(m, V->plugin, V->settings, V->target, 1);
        const char *dir = lmp_test_path(tmpdir, V->name);
        ck_assert_msg(export_to(m, q, dir) == 0, "%s: %s", V->name, lmp_last_error());
        lmp_model *m2 = NULL;
        ck_assert_msg(lmp_model_load(dir, &m2) == 0, "%s: %s", V->name, lmp_last_error());
        lmp_score s1, s2;
        ck_assert(lmp_eval_text(&ctx, &be, m, q, m, q, NULL, ids, n, 64, 4, "eval", &s1) == 0);
        ck_assert_msg(lmp_eval_text(&ctx, &be, m2, lmp_model_blocks(m2), m2, lmp_model_blocks(m2), NULL, ids, n, 64, 4,
                                    "eval", &s2) == 0, "%s", lmp_last_error());
        printf("  %-16s ppl in memory %.10f, read back by lmpress %.10f\n", V->name, lmp_score_ppl(&s1), lmp_score_ppl(&s2));
        ck_assert_int_eq(s1.scored, s2.scored);
        /* a bf16-scaled export is a bf16 checkpoint: its embedding and norms are rounded to bf16
         * (the quantized weights are not: checked below), which moves the nll a little */
        const double tol = V->sdtype == LMP_ST_BF16 ? 2e-3 : 1e-6;
        ck_assert_msg(fabs(s1.nll_sum - s2.nll_sum) <= tol * fabs(s1.nll_sum), "%s: nll %.17g vs %.17g", V->name,
                      s1.nll_sum, s2.nll_sum);
        /* the weights themselves: the HF reader's q_proj of block 0 is lmpress's, row for row */
        const lmp_linear *a = &q[0].linears[LMP_ROLE_UP], *b = &lmp_model_blocks(m2)[0].linears[LMP_ROLE_UP];
        ck_assert_int_eq(a->out, b->out);
        /* W4A4: the input's NVFP4 simulation with the global scale the export wrote */
        ck_assert_int_eq(a->act.mode, b->act.mode);
        ck_assert_msg(a->act.scale == b->act.scale, "%s: input scale %a vs %a", V->name, (double)a->act.scale,
                      (double)b->act.scale);
        for (int64_t i = 0; i < a->out * a->in; i++)
            ck_assert_msg(a->w[i] == b->w[i], "%s: up_proj w[%lld] %a vs %a", V->name, (long long)i, (double)a->w[i],
                          (double)b->w[i]);
        lmp_model_free(m2);
        lmp_blocks_free(q, m->arch.n_layers);
        done++;
    }
    ck_assert_int_ge(done, 12);
    free(ids);
    lmp_model_free(m);
    lmp_test_rmtree(tmpdir);
}
END_TEST

/* NVFP4 and MXFP4 folders written by compressed-tensors' own compressor (tools/ref/ct_fp4_fixture.py:
 * its presets, generate_gparam, calculate_qparams and NVFP4PackedCompressor / MXFP4PackedCompressor):
 * every weight lmpress dequantizes equals compressed-tensors' dequantize() in float32 bit for bit,
 * and its decompressor's output (bfloat16 for NVFP4) is lmpress's rounded to it. */
START_TEST(fp4_folders_of_compressed_tensors_read)
{
    const char *py = getenv("LMP_CT_PYTHON");
    if (!py || !*py) {
        lmp_test_skip("SKIPPED fp4_folders_of_compressed_tensors_read: LMP_CT_PYTHON is not set (a Python with torch and "
                      "the PyPI compressed-tensors package)\n");
        return;
    }
    lmp_test_tmpdir(tmpdir, sizeof tmpdir, "export-fp-ct4");
    static char cmd[4096];
    snprintf(cmd, sizeof cmd, "'%s' '%s/tools/ref/ct_fp4_fixture.py' '%s' 2>&1", py, LMP_SOURCE_DIR, tmpdir);
    ck_assert_msg(system(cmd) == 0, "failed: %s", cmd);
    static const char *const fmts[] = {"nvfp4", "mxfp4"};
    for (int f = 0; f < 2; f++) {
        char path[32];
        lmp_model *q = NULL, *d = NULL, *d32 = NULL;
        ck_assert_msg(lmp_model_load(lmp_test_path(tmpdir, fmts[f]), &q) == 0, "%s: %s", fmts[f], lmp_last_error());
        snprintf(path, sizeof path, "%s-deq", fmts[f]);
        ck_assert_msg(lmp_model_load(lmp_test_path(tmpdir, path), &d) == 0, "%s", lmp_last_error());
        snprintf(path, sizeof path, "%s-deq32", fmts[f]);
        ck_assert_msg(lmp_model_load(lmp_test_path(tmpdir, path), &d32) == 0, "%s", lmp_last_error());
        int64_t n = 0, narrowed = 0;
        for (int64_t b = 0; b < q->arch.n_layers; b++)
            for (int i = 0; i < lmp_model_blocks(q)[b].n_linears; i++) {
                const lmp_linear *a = &lmp_model_blocks(q)[b].linears[i], *x = &lmp_model_blocks(d)[b].linears[i],
                                 *y = &lmp_model_blocks(d32)[b].linears[i];
                ck_assert_int_eq(a->out * a->in, y->out * y->in);
                const int dense = strstr(a->name, "down_proj") != NULL; /* ignored: F32 in all three */
                for (int64_t k = 0; k < a->out * a->in; k++) {
                    ck_assert_msg(memcmp(&a->w[k], &y->w[k], sizeof(float)) == 0, "%s: %s w[%lld] %a, compressed-tensors' "
                                  "float32 dequantize %a", fmts[f], a->name, (long long)k, (double)a->w[k], (double)y->w[k]);
                    const float r = f == 0 && !dense ? lmp_bf16_round(a->w[k]) : a->w[k];
                    ck_assert_msg(memcmp(&r, &x->w[k], sizeof(float)) == 0, "%s: %s w[%lld] %a, compressed-tensors' "
                                  "decompress %a", fmts[f], a->name, (long long)k, (double)r, (double)x->w[k]);
                    narrowed += r != a->w[k];
                }
                n += !dense;
            }
        printf("  %s: %lld linears equal compressed-tensors' float32 dequantize bit for bit, and its decompress "
               "(%s) after rounding %lld weights\n", fmts[f], (long long)n, f == 0 ? "bfloat16" : "exact", (long long)narrowed);
        ck_assert_int_eq(n, 6 * q->arch.n_layers);
        lmp_model_free(q);
        lmp_model_free(d);
        lmp_model_free(d32);
    }
    /* what is not read is refused by name: another NVFP4 strategy, W4A4 inputs without their
     * input_global_scale, and 4-bit float inputs lmpress does not simulate */
    static const struct {
        const char *from, *to, *needle;
    } bad[] = {
        {"\"strategy\": \"tensor_group\"", "\"strategy\": \"group\"", "weights.strategy = \"group\" is not supported"},
        {"\"input_activations\": null", "\"input_activations\": {\"num_bits\": 4, \"type\": \"float\", \"strategy\": "
         "\"tensor_group\", \"group_size\": 16, \"dynamic\": \"local\"}", "input_global_scale is missing"},
        {"\"input_activations\": null", "\"input_activations\": {\"num_bits\": 4, \"type\": \"float\", \"strategy\": "
         "\"tensor_group\", \"group_size\": 16, \"dynamic\": true}", "4-bit float activations with strategy \"tensor_group\""},
    };
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
        char dir[32], src[700], dst[700];
        snprintf(dir, sizeof dir, "bad-%zu", k);
        const char *dd = lmp_test_path(tmpdir, dir);
        ck_assert_int_eq(mkdir(dd, 0755), 0);
        snprintf(src, sizeof src, "%s/nvfp4/model.safetensors", tmpdir);
        snprintf(dst, sizeof dst, "%s/model.safetensors", dd);
        ck_assert_int_eq(symlink(src, dst), 0);
        snprintf(src, sizeof src, "%s/nvfp4/config.json", tmpdir);
        size_t n;
        char *text = (char *)lmp_test_slurp(src, &n), *hit = strstr(text, bad[k].from);
        ck_assert_msg(hit != NULL, "no %s in %s", bad[k].from, src);
        snprintf(dst, sizeof dst, "%s/config.json", dd);
        FILE *o = fopen(dst, "w");
        ck_assert_ptr_nonnull(o);
        fprintf(o, "%.*s%s%s", (int)(hit - text), text, bad[k].to, hit + strlen(bad[k].from));
        fclose(o);
        free(text);
        lmp_model *m = NULL;
        ck_assert_msg(lmp_model_load(dd, &m) != 0, "case %zu loaded", k);
        ck_assert_msg(strstr(lmp_last_error(), bad[k].needle), "case %zu: %s", k, lmp_last_error());
    }
    lmp_test_rmtree(tmpdir);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("export_fp");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, exports_equal_compressed_tensors);
    tcase_add_test(tc, refusals_by_name);
    tcase_add_test(tc, fp_exports_read_back_by_lmpress);
    tcase_add_test(tc, fp4_folders_of_compressed_tensors_read);
    suite_add_tcase(s, tc);
    return lmp_test_main(s);
}
