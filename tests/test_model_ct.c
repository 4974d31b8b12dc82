/* test_model_ct.c — compressed-tensors checkpoints (core/model/model_hf_quant.c) against
 * tools/ref/ct_fixtures.py, a numpy reference sharing no code with the loader, which quantizes
 * stories260K's linears (int8 per channel with W8A8 inputs, int4 groups symmetric and
 * asymmetric with packed zero-points, int3 the same (codes straddling int32 words), activation order with g_idx and an int8 head, naive int4
 * per channel and int8 per tensor) and writes each model twice: in compressed-tensors' layout and
 * dense with the dequantized weights.  (With LMP_CT_PYTHON naming a Python that has the PyPI
 * compressed-tensors package, the script also checks its files against that package's own
 * decompress and compress; it says so, or why it skipped that.)
 *   - every weight lmpress dequantizes equals numpy's, bit for bit, and so do the embedding,
 *     norms and head; the storage bits per weight and the format name are the script's;
 *   - in a compare run a compressed-tensors folder is an external variant that scores exactly
 *     as its dense twin (W8A8: its inputs quantized per token, recorded per linear);
 *   - configs lmpress does not read are refused naming config.json and the key, or the tensor;
 *     so are a g_idx that is no activation order of full groups and a wrong weight_shape. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "formats/json.h"
#include "formats/safetensors.h"
#include "model/model.h"
#include "testutil.h"

#define SDIR LMP_SOURCE_DIR "/models/stories260K"
#define EVAL_TEXT SDIR "/tinystories-synth-eval.txt"
#define LAMBADA LMP_DATA_DIR "/lambada/lambada_test.jsonl"

static const char *const fixtures[] = {"w8a8-int", "w4-g32", "w4-asym", "w3-asym", "w4-actorder", "w4-naive"};
enum { N_FIXTURES = sizeof fixtures / sizeof *fixtures };

static char fxdir[256];    /* the script's output, made once for the suite */
static char tmpdir[256];   /* each test's own scratch folder */
static char output[1 << 20];

static const char *fx(const char *name) { return lmp_test_path(fxdir, name); }
static const char *tmp(const char *name) { return lmp_test_path(tmpdir, name); }

static void make_fixtures(void)
{
    lmp_test_tmpdir(fxdir, sizeof fxdir, "ct-fixtures");
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "'%s' '%s/tools/ref/ct_fixtures.py' '%s' 2>&1", lmp_test_python(), LMP_SOURCE_DIR, fxdir);
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    size_t n = fread(output, 1, sizeof output - 1, p);
    output[n] = 0;
    int rc = pclose(p);
    fputs(output, stdout); /* says whether compressed-tensors cross-checked the files */
    ck_assert_msg(rc == 0, "tools/ref/ct_fixtures.py failed:\n%s", output);
    for (const char *line = output; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL)
        if (strncmp(line, "SKIPPED", 7) == 0) /* the cross-check did not run: the suite says so to ctest */
            lmp_test_skip("%.*s", (int)(strchr(line, '\n') ? strchr(line, '\n') - line : (long)strlen(line)), line);
}

static void drop_fixtures(void) { lmp_test_rmtree(fxdir); }
static void setup(void) { lmp_test_tmpdir(tmpdir, sizeof tmpdir, "ct"); }
static void teardown(void) { lmp_test_rmtree(tmpdir); }

static lmp_json *read_json(const char *path, char **text)
{
    size_t n;
    *text = (char *)lmp_test_slurp(path, &n);
    lmp_json *j = NULL;
    ck_assert_msg(lmp_json_parse(*text, n, path, &j) == 0, "%s", lmp_last_error());
    return j;
}

static double num(const lmp_json *j, const char *key)
{
    double v;
    ck_assert_msg(lmp_json_get_number(j, key, "json", &v) == 0, "%s", lmp_last_error());
    return v;
}

static lmp_model *load_ok(const char *path)
{
    lmp_model *m = NULL;
    ck_assert_msg(lmp_model_load(path, &m) == 0, "loading %s: %s", path, lmp_last_error());
    return m;
}

static void same_floats(const float *a, const float *b, int64_t n, const char *what, const char *fixture)
{
    ck_assert_msg(a && b, "%s/%s: missing", fixture, what);
    for (int64_t i = 0; i < n; i++)
        ck_assert_msg(memcmp(&a[i], &b[i], sizeof *a) == 0, "%s/%s[%lld]: %.9g, numpy %.9g", fixture, what,
                      (long long)i, (double)a[i], (double)b[i]);
}

/* ---- the loaded weights are numpy's ---------------------------------------------------- */
START_TEST(weights_equal_numpy_dequantized)
{
    char *text;
    lmp_json *manifest = read_json(fx("manifest.json"), &text);
    for (int f = 0; f < N_FIXTURES; f++) {
        const char *name = fixtures[f];
        char twin[64];
        snprintf(twin, sizeof twin, "%s-dequant", name);
        lmp_model *m = load_ok(fx(name)), *d = load_ok(fx(twin));
        const lmp_json *info = lmp_json_get(manifest, name);
        ck_assert_ptr_nonnull(info);
        const char *format;
        ck_assert_int_eq(lmp_json_get_string(info, "format", name, &format), 0);
        ck_assert_str_eq(m->format, format);
        ck_assert_str_eq(d->format, "safetensors");
        const lmp_arch *a = &m->arch;
        same_floats(m->tok_emb, d->tok_emb, a->vocab * a->dim, "embed_tokens", name);
        same_floats(m->final_norm_w, d->final_norm_w, a->dim, "norm", name);
        same_floats(m->lm_head, d->lm_head, a->vocab * a->dim, "lm_head", name);
        ck_assert_int_eq(m->lm_head == m->tok_emb, strcmp(name, "w4-actorder") != 0); /* its head is its own */
        lmp_block *qb = lmp_model_blocks(m), *db = lmp_model_blocks(d);
        ck_assert_msg(qb && db, "%s", lmp_last_error());
        const lmp_json *lins = lmp_json_get(info, "linears");
        for (int64_t b = 0; b < a->n_layers; b++) {
            for (int i = 0; i < qb[b].n_linears; i++) {
                const lmp_linear *l = &qb[b].linears[i];
                same_floats(l->w, db[b].linears[i].w, l->out * l->in, l->name, name);
                ck_assert_ptr_null(l->b);
                /* W8A8: inputs quantized per token at run time; the dense twin has no grid */
                const int w8a8 = strcmp(name, "w8a8-int") == 0;
                ck_assert_int_eq(l->act.mode, w8a8 ? LMP_ACT_DYN_TOKEN : LMP_ACT_NONE);
                if (w8a8) ck_assert_int_eq(l->act.bits, 8);
                ck_assert_int_eq(db[b].linears[i].act.mode, LMP_ACT_NONE);
                /* the storage the script wrote: codes, scales, zero-points, g_idx */
                const lmp_json *li = lmp_json_get(lins, l->name);
                ck_assert_msg(li != NULL, "%s: %s not in the manifest", name, l->name);
                double bits = lmp_model_linear_bits(m, b, l);
                ck_assert_msg(fabs(bits - num(li, "bits")) < 1e-12, "%s/%s: %.17g bits, the script %.17g", name,
                              l->name, bits, num(li, "bits"));
                ck_assert_msg(lmp_model_linear_bits(d, b, &db[b].linears[i]) == 32, "dense twin");
                ck_assert_msg(l->weight_bits == 32, "the f32 views keep 32 (what compression starts from)");
            }
            for (int i = 0; i < qb[b].n_norms; i++)
                same_floats(qb[b].norms[i].w, db[b].norms[i].w, a->dim, qb[b].norms[i].name, name);
        }
        /* a block copy (what compression reads) dequantizes the same way */
        lmp_block copy;
        ck_assert_int_eq(lmp_model_block_copy(m, 2, &copy), 0);
        for (int i = 0; i < copy.n_linears; i++)
            same_floats(copy.linears[i].w, db[2].linears[i].w, copy.linears[i].out * copy.linears[i].in, "copy", name);
        lmp_block_free(&copy);
        lmp_model_free(m);
        lmp_model_free(d);
    }
    lmp_json_free(manifest);
    free(text);
}
END_TEST

/* ---- a compare run takes a compressed-tensors folder as an external variant ------------- */

static const lmp_json *scores(const lmp_json *j, const char *name)
{
    const lmp_json *e = lmp_json_get(lmp_json_get(lmp_test_variant(j, name), "eval"), "tinystories-synth-eval.txt");
    ck_assert_ptr_nonnull(e);
    return e;
}

START_TEST(compare_evaluates_external_ct)
{
    char cfg[8192];
    snprintf(cfg, sizeof cfg,
             "model = { path = \"%s/stories260K.bin\"; tokenizer = \"%s/tok512.bin\"; };\n"
             "eval = { texts = [ \"%s\" ]; seq_len = 64; max_windows = 6; lambada = \"%s\"; lambada_max = 20; };\n"
             "variants = (\n"
             "  { name = \"fp32\"; },\n"
             "  { name = \"ct-w4-asym\"; model = \"%s\"; },\n"
             "  { name = \"dq-w4-asym\"; model = \"%s-dequant\"; },\n"
             "  { name = \"ct-w8a8\"; model = \"%s\"; },\n"
             "  { name = \"dq-w8a8\"; model = \"%s-dequant\"; }\n"
             ");\n",
             SDIR, SDIR, EVAL_TEXT, LAMBADA, fx("w4-asym"), fx("w4-asym"), fx("w8a8-int"), fx("w8a8-int"));
    lmp_test_spit(tmp("ct.cfg"), cfg, strlen(cfg));
    char args[1024];
    snprintf(args, sizeof args, "compare %s --json %s 2>&1", tmp("ct.cfg"), tmp("r.json"));
    ck_assert_msg(lmp_test_cli(args, output, sizeof output) == 0, "%s", output);
    char *text, *mtext;
    lmp_json *j = read_json(tmp("r.json"), &text), *manifest = read_json(fx("manifest.json"), &mtext);
    /* the folder scores exactly as its dense twin, and not as the base */
    const lmp_json *ct = scores(j, "ct-w4-asym"), *dq = scores(j, "dq-w4-asym"), *fp = scores(j, "fp32");
    ck_assert_msg(num(ct, "nll_sum") == num(dq, "nll_sum"), "%.17g vs %.17g", num(ct, "nll_sum"), num(dq, "nll_sum"));
    ck_assert_msg(num(ct, "kld_sum") == num(dq, "kld_sum"), "kld");
    ck_assert_msg(num(ct, "kld") > 0 && num(ct, "ppl") < 2 * num(fp, "ppl"), "kld %g ppl %g vs %g", num(ct, "kld"),
                  num(ct, "ppl"), num(fp, "ppl"));
    const lmp_json *vct = lmp_test_variant(j, "ct-w4-asym");
    const char *s;
    ck_assert_int_eq(lmp_json_get_string(vct, "format", "ct-w4-asym", &s), 0);
    ck_assert_str_eq(s, "compressed-tensors int4-g16-asym/int4-g4-asym mix");
    ck_assert_int_eq(lmp_json_get_string(lmp_test_variant(j, "dq-w4-asym"), "format", "dq", &s), 0);
    ck_assert_str_eq(s, "safetensors");
    ck_assert_msg(num(lmp_test_variant(j, "dq-w4-asym"), "bits_per_weight") == 32, "dense twin: F32");
    /* bits per weight: the block linears' storage, weighted by their parameters */
    const lmp_json *lins = lmp_json_get(lmp_json_get(manifest, "w4-asym"), "linears");
    const lmp_json *mj = lmp_json_get(j, "model");
    const double d = num(mj, "dim"), h = num(mj, "hidden"), kv = d / num(mj, "heads") * num(mj, "kv_heads");
    double bits = 0, params = 0;
    for (size_t i = 0; i < lins->n; i++) {
        const char *k = lins->keys[i];
        double p = strstr(k, "k_proj") || strstr(k, "v_proj")   ? kv * d
                   : strstr(k, "q_proj") || strstr(k, "o_proj") ? d * d
                                                                 : h * d;
        bits += num(&lins->items[i], "bits") * p;
        params += p;
    }
    ck_assert_msg(fabs(num(vct, "bits_per_weight") - bits / params) < 1e-9, "%.17g vs %.17g",
                  num(vct, "bits_per_weight"), bits / params);
    /* per linear too; W8A8 records its input quantization there */
    const lmp_json *rl = lmp_json_get(vct, "linears");
    for (size_t i = 0; i < rl->n; i++) {
        const char *name;
        ck_assert_int_eq(lmp_json_get_string(&rl->items[i], "name", "linear", &name), 0);
        ck_assert_msg(fabs(num(&rl->items[i], "weight_bits") - num(lmp_json_get(lins, name), "bits")) < 1e-12, "%s", name);
    }
    rl = lmp_json_get(lmp_test_variant(j, "ct-w8a8"), "linears");
    ck_assert_msg(rl && rl->n == 35, "linears");
    const lmp_json *act = lmp_json_get(&rl->items[0], "act");
    ck_assert_int_eq(lmp_json_get_string(act, "mode", "act", &s), 0);
    ck_assert_str_eq(s, "dynamic-token");
    ck_assert_msg(num(act, "bits") == 8, "act bits");
    /* the same int8 weights, but the inputs quantized: close to the twin, not equal */
    const lmp_json *w8 = scores(j, "ct-w8a8"), *w8d = scores(j, "dq-w8a8");
    ck_assert_msg(num(w8, "nll_sum") != num(w8d, "nll_sum"), "the inputs were not quantized");
    ck_assert_msg(fabs(num(w8, "ppl") / num(w8d, "ppl") - 1) < 0.05, "ppl %g vs %g", num(w8, "ppl"), num(w8d, "ppl"));
    ck_assert_ptr_nonnull(lmp_json_get(vct, "lambada"));
    lmp_json_free(j);
    lmp_json_free(manifest);
    free(text);
    free(mtext);
}
END_TEST

/* ---- what is not read is refused, naming config.json and the key (or the tensor) -------- */
/* A copy of fixture `name` whose config.json has every `from` replaced by `to`. */
static const char *edited(const char *name, const char *from, const char *to, int k)
{
    char dir[64], *text;
    size_t n;
    snprintf(dir, sizeof dir, "bad-%d", k);
    const char *d = tmp(dir);
    ck_assert_int_eq(mkdir(d, 0755), 0);
    char src[512], dst[512];
    snprintf(src, sizeof src, "%s/%s/model.safetensors", fxdir, name);
    snprintf(dst, sizeof dst, "%s/model.safetensors", d);
    ck_assert_int_eq(symlink(src, dst), 0);
    snprintf(src, sizeof src, "%s/%s/config.json", fxdir, name);
    text = (char *)lmp_test_slurp(src, &n);
    char *outp = malloc(n * 2 + 4096), *o = outp;
    int hits = 0;
    for (const char *p = text; *p;) {
        if (strncmp(p, from, strlen(from)) == 0) {
            o += sprintf(o, "%s", to);
            p += strlen(from);
            hits++;
        } else {
            *o++ = *p++;
        }
    }
    *o = 0;
    ck_assert_msg(hits > 0, "%s/config.json has no %s", name, from);
    snprintf(dst, sizeof dst, "%s/config.json", d);
    lmp_test_spit(dst, outp, strlen(outp));
    free(outp);
    free(text);
    return d;
}

START_TEST(unsupported_configs_refused)
{
    static const struct {
        const char *fixture, *from, *to, *needle1, *needle2;
    } cases[] = {
        {"w4-g32", "\"format\": \"pack-quantized\"", "\"format\": \"float-quantized\"",
         "quantization_config.format = \"float-quantized\" is not supported", NULL},
        {"w4-g32", "\"num_bits\": 4", "\"num_bits\": 16", "quantization_config.config_groups.group_0.weights.num_bits = 16",
         "2 to 8"},
        {"w4-g32", "\"type\": \"int\"", "\"type\": \"float\"", "config_groups.group_0.weights.type = \"float\"", NULL},
        /* 3-bit codes written before compressed-tensors 0.19 were packed 10 to a word */
        {"w3-asym", "\"version\": \"0.20.0\"", "\"version\": \"0.17.0\"", "weights.num_bits = 3",
         "from compressed-tensors 0.19 on"},
        {"w4-g32", "\"sparsity_config\": {}", "\"sparsity_config\": {\"format\": \"sparse-24-bitmask\"}",
         "quantization_config.sparsity_config.format = \"sparse-24-bitmask\"", NULL},
        {"w4-g32", "\"strategy\": \"group\"", "\"strategy\": \"block\"",
         "config_groups.group_0.weights.strategy = \"block\"", NULL},
        /* a KV-cache scheme lmpress does not simulate, and one whose scales are not in the file */
        {"w4-g32", "\"kv_cache_scheme\": null", "\"kv_cache_scheme\": {\"num_bits\": 8, \"dynamic\": true}",
         "quantization_config.kv_cache_scheme.dynamic = true is not supported", NULL},
        {"w4-g32", "\"kv_cache_scheme\": null", "\"kv_cache_scheme\": {\"num_bits\": 8, \"strategy\": \"token\"}",
         "quantization_config.kv_cache_scheme.strategy = \"token\" is not supported", NULL},
        {"w4-g32", "\"kv_cache_scheme\": null", "\"kv_cache_scheme\": {\"num_bits\": 8, \"type\": \"float\"}",
         "tensor model.layers.0.self_attn.k_scale is missing", "kv_cache_scheme needs it"},
        {"w4-g32", "\"quant_method\": \"compressed-tensors\"", "\"quant_method\": \"gptq\"",
         "quantization_config.quant_method = \"gptq\"", NULL},
        {"w8a8-int", "\"strategy\": \"token\"", "\"strategy\": \"group\"",
         "config_groups.group_0.input_activations.strategy = \"group\"", NULL},
        {"w8a8-int", "\"strategy\": \"token\"", "\"strategy\": \"token\", \"symmetric\": false",
         "config_groups.group_0.input_activations.symmetric = false", NULL},
        {"w4-actorder", "\"format\": \"pack-quantized\"", "\"zformat\": \"pack-quantized\"",
         "quantization_config.config_groups.group_0.format is missing", "mixed-precision"},
        {"w4-g32", "\"re:.*down_proj$\"", "\"re:(.*down_proj$\"", "quantization_config.ignore: \"re:(.*down_proj$\"",
         "offset"},
        /* down_proj no longer ignored: its codes are not in the file */
        {"w4-g32", "\"re:.*down_proj$\"", "\"re:.*nothing$\"",
         "tensor model.layers.0.mlp.down_proj.weight_packed is missing", "config_groups.group_0 quantizes"},
        /* q_proj ignored: the file holds codes where a dense weight is expected */
        {"w4-g32", "\"lm_head\"", "\"re:.*q_proj$\"", "tensor model.layers.0.self_attn.q_proj.weight is missing",
         "q_proj.weight_packed"},
        /* QuIP's "v": an online rotation of every linear's input (its inverse fused into the weight) */
        {"w4-g32", "\"transform_config\": {}",
         "\"transform_config\": {\"config_groups\": {\"v\": {\"type\": \"random-hadamard\", \"apply\": ["
         "{\"targets\": [\"Linear\"], \"location\": \"input\"}, "
         "{\"targets\": [\"Linear\"], \"location\": \"weight_input\", \"inverse\": true}]}}}",
         "quantization_config.transform_config.config_groups.v.apply[0].location = \"input\" is not supported",
         "online transform"},
        /* SpinQuant's R4: fused on down_proj's weight, online on its input (the second entry) */
        {"w4-g32", "\"transform_config\": {}",
         "\"transform_config\": {\"config_groups\": {\"R4\": {\"type\": \"hadamard\", \"apply\": ["
         "{\"targets\": [\"re:.*down_proj$\"], \"location\": \"weight_input\", \"inverse\": true}, "
         "{\"targets\": [\"re:.*down_proj$\"], \"location\": \"input\"}]}}}",
         "transform_config.config_groups.R4.apply[1].location = \"input\"", NULL},
        {"w4-g32", "\"transform_config\": {}", "\"transform_config\": {\"config_groups\": {\"R1\": {\"apply\": 3}}}",
         "transform_config.config_groups.R1 must be an object with an \"apply\" list", NULL},
        /* another group size: the scales have the wrong shape */
        {"w4-g32", "\"group_size\": 32", "\"group_size\": 16",
         "model.layers.0.self_attn.q_proj.weight_scale is F16 [64, 2]", "expected F32, F16 or BF16 [64, 4]"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        const char *d = edited(cases[k].fixture, cases[k].from, cases[k].to, (int)k);
        lmp_model *m = NULL;
        lmp_clear_error();
        ck_assert_msg(lmp_model_load(d, &m) != 0, "case %zu: %s loaded", k, d);
        const char *e = lmp_last_error();
        ck_assert_msg(strstr(e, d) != NULL, "case %zu: the message does not name the folder: %s", k, e);
        ck_assert_msg(strstr(e, cases[k].needle1), "case %zu: message lacks \"%s\": %s", k, cases[k].needle1, e);
        ck_assert_msg(!cases[k].needle2 || strstr(e, cases[k].needle2), "case %zu: message lacks \"%s\": %s", k,
                      cases[k].needle2, e);
    }
}
END_TEST

/* SpinQuant's R1 and R2 as llm-compressor saves them: "weight_input" / "weight_output" transforms
 * were multiplied into the weights before the save, so the folder reads as if the config had none. */
START_TEST(fused_transforms_read)
{
    const char *d = edited("w4-g32", "\"transform_config\": {}",
                           "\"transform_config\": {\"config_groups\": {"
                           "\"R1\": {\"type\": \"random-hadamard\", \"apply\": ["
                           "{\"targets\": [\"re:.*embed_tokens$\", \"re:.*o_proj$\", \"re:.*down_proj$\"], "
                           "\"location\": \"weight_output\"}, "
                           "{\"targets\": [\"re:.*q_proj$\", \"lm_head\"], \"location\": \"weight_input\", "
                           "\"inverse\": true}]}, "
                           "\"R2\": {\"type\": \"random-hadamard\", \"head_dim\": 64, \"apply\": ["
                           "{\"targets\": [\"re:.*v_proj$\"], \"location\": \"weight_output\"}, "
                           "{\"targets\": [\"re:.*o_proj$\"], \"location\": \"weight_input\", \"inverse\": true}]}}}",
                           900);
    lmp_model *m = load_ok(d), *plain = load_ok(fx("w4-g32"));
    const lmp_arch *a = &m->arch;
    same_floats(m->tok_emb, plain->tok_emb, a->vocab * a->dim, "embed_tokens", d);
    lmp_block *mb = lmp_model_blocks(m), *pb = lmp_model_blocks(plain);
    ck_assert_msg(mb && pb, "%s", lmp_last_error());
    for (int64_t b = 0; b < a->n_layers; b++)
        for (int i = 0; i < mb[b].n_linears; i++)
            same_floats(mb[b].linears[i].w, pb[b].linears[i].w, mb[b].linears[i].out * mb[b].linears[i].in,
                        mb[b].linears[i].name, d);
    lmp_model_free(m);
    lmp_model_free(plain);
}
END_TEST

/* A copy of fixture `name` (config.json and tokenizer linked) whose model.safetensors has element
 * `index` of the integer tensor `tensor` set to `value`. */
static const char *patched(const char *name, const char *tensor, int64_t index, int64_t value, int k)
{
    char dir[64], src[512], dst[512];
    snprintf(dir, sizeof dir, "patched-%d", k);
    const char *d = tmp(dir);
    ck_assert_int_eq(mkdir(d, 0755), 0);
    snprintf(src, sizeof src, "%s/%s/config.json", fxdir, name);
    snprintf(dst, sizeof dst, "%s/config.json", d);
    ck_assert_int_eq(symlink(src, dst), 0);
    snprintf(src, sizeof src, "%s/%s/model.safetensors", fxdir, name);
    size_t n;
    unsigned char *bytes = lmp_test_slurp(src, &n);
    uint64_t header = 0;
    for (int i = 7; i >= 0; i--) header = header << 8 | bytes[i];
    lmp_safetensors *st = NULL;
    ck_assert_msg(lmp_st_open(src, &st) == 0, "%s", lmp_last_error());
    const lmp_st_tensor *t = lmp_st_find(st, tensor);
    ck_assert_msg(t != NULL, "%s: no %s", src, tensor);
    const size_t size = lmp_st_dtype_size(t->dtype);
    unsigned char *p = bytes + 8 + header + t->offset + (size_t)index * size;
    for (size_t i = 0; i < size; i++) p[i] = (unsigned char)((uint64_t)value >> (8 * i));
    lmp_st_close(st);
    snprintf(dst, sizeof dst, "%s/model.safetensors", d);
    lmp_test_spit(dst, bytes, n);
    free(bytes);
    return d;
}

START_TEST(bad_tensors_refused)
{
    const char *q = "model.layers.1.self_attn.q_proj";
    char gidx[128], shape[128];
    snprintf(gidx, sizeof gidx, "%s.weight_g_idx", q);
    snprintf(shape, sizeof shape, "%s.weight_shape", q);
    static const struct {
        int which;          /* 0: g_idx, 1: weight_shape */
        int64_t index, value;
        const char *needle;
    } cases[] = {
        {0, 3, 99, ".weight_g_idx[3] = 99 is not a group (0 to 3)"},
        {0, 3, -2, ".weight_g_idx[3] = -2 is not a group"},
        {0, 5, 0, "weight_g_idx gives group"}, /* value: set below to a group column 5 is not in */
        {1, 1, 63, ".weight_shape is I64 [2], expected the integers [64, 64]"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        int64_t value = cases[k].value;
        if (k == 2) { /* move column 5 to a group it is not in */
            lmp_safetensors *st = NULL;
            char src[512];
            snprintf(src, sizeof src, "%s/w4-actorder/model.safetensors", fxdir);
            ck_assert_int_eq(lmp_st_open(src, &st), 0);
            const lmp_st_tensor *t = lmp_st_find(st, gidx);
            const unsigned char *p = (const unsigned char *)t->data + 5 * 4;
            value = (p[0] + 1) % 4;
            lmp_st_close(st);
        }
        const char *d = patched("w4-actorder", cases[k].which ? shape : gidx, cases[k].index, value, (int)k);
        lmp_model *m = NULL;
        lmp_clear_error();
        ck_assert_msg(lmp_model_load(d, &m) != 0, "case %zu: %s loaded", k, d);
        const char *e = lmp_last_error();
        ck_assert_msg(strstr(e, d) && strstr(e, q) && strstr(e, cases[k].needle), "case %zu: %s", k, e);
    }
}
END_TEST

/* Issue 34, items 3 and 4: values no scheme can hold are refused at load, naming the tensor and
 * the element, where before they were read as they came: a g_idx with one -1 among groups (read
 * as "no activation order"), an int4 code of 127 stored in an int8, a zero-point outside int4, a
 * NaN, infinite or negative scale (a NaN scale printed "ppl nan" with exit 0). */
START_TEST(bad_values_refused)
{
    /* bit patterns by scale dtype: [0] NaN, [1] +inf, [2] -1 */
    static const int64_t f16[3] = {0x7e00, 0x7c00, 0xbc00}, bf16[3] = {0x7fc0, 0x7f80, 0xbf80},
                         f32[3] = {0x7fc00000, 0x7f800000, 0xbf800000};
    static const struct {
        const char *fixture, *leaf;
        int64_t index, value; /* value < 0 for a scale: -1 - (pattern number above) */
        const char *needle;
    } cases[] = {
        {"w4-actorder", "q_proj.weight_g_idx", 3, -1, ".weight_g_idx[3] = -1 is not a group (0 to 3)"},
        {"w4-naive", "q_proj.weight", 5, 127, "q_proj.weight[0, 5] = 127 is not an int4 code (-8 to 7)"},
        {"w4-naive", "q_proj.weight", 70, -9, "q_proj.weight[1, 6] = -9 is not an int4 code"},
        {"w4-naive", "q_proj.weight_zero_point", 2, 8, "q_proj.weight_zero_point[2] = 8 is not an int4 zero-point"},
        {"w4-g32", "q_proj.weight_scale", 2, -1, "q_proj.weight_scale[2] = nan is not a finite scale"},
        {"w4-asym", "q_proj.weight_scale", 1, -2, "q_proj.weight_scale[1] = inf is not a finite scale"},
        {"w4-naive", "q_proj.weight_scale", 3, -3, "q_proj.weight_scale[3] = -1 is not a scale (negative)"},
        {"w4-g32", "q_proj.weight_scale", 0, -3, "q_proj.weight_scale[0] = -1 is not a scale (negative)"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        char name[256], src[512];
        snprintf(name, sizeof name, "model.layers.1.self_attn.%s", cases[k].leaf);
        int64_t value = cases[k].value;
        if (strstr(cases[k].leaf, "scale")) {
            lmp_safetensors *st = NULL;
            snprintf(src, sizeof src, "%s/%s/model.safetensors", fxdir, cases[k].fixture);
            ck_assert_int_eq(lmp_st_open(src, &st), 0);
            const lmp_st_tensor *t = lmp_st_find(st, name);
            ck_assert_msg(t != NULL, "%s: no %s", src, name);
            const int64_t *pat = t->dtype == LMP_ST_F16 ? f16 : t->dtype == LMP_ST_BF16 ? bf16 : f32;
            value = pat[-1 - value];
            lmp_st_close(st);
        }
        const char *d = patched(cases[k].fixture, name, cases[k].index, value, 100 + (int)k);
        lmp_model *m = NULL;
        lmp_clear_error();
        ck_assert_msg(lmp_model_load(d, &m) != 0, "case %zu: %s loaded", k, d);
        const char *e = lmp_last_error();
        ck_assert_msg(strstr(e, d) && strstr(e, name) && strstr(e, cases[k].needle), "case %zu: %s", k, e);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("model_ct");
    TCase *tc = tcase_create("model_ct");
    tcase_add_unchecked_fixture(tc, make_fixtures, drop_fixtures);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, weights_equal_numpy_dequantized);
    tcase_add_test(tc, compare_evaluates_external_ct);
    tcase_add_test(tc, unsupported_configs_refused);
    tcase_add_test(tc, fused_transforms_read);
    tcase_add_test(tc, bad_tensors_refused);
    tcase_add_test(tc, bad_values_refused);
    suite_add_tcase(s, tc);
    return lmp_test_main(s);
}
