/* test_export_gguf.c — lmp_export_gguf: a compressed variant as a GGUF file llama.cpp loads.
 *
 * stories260K compressed through the library (rtn with format q8_0, q4_0, q4_1, and q5_0 with
 * importance; gptq with format q4_0, and q5_1 and iq4_nl with importance; rtn on an int grid,
 * which GGUF stores as F32) is exported, then:
 *   - tools/ref/gguf_export_check.py reads the file with the PyPI gguf package (GGUFReader,
 *     gguf.quants.dequantize) and compares every tensor bit for bit against the weights the test
 *     dumps from memory, checks llama.cpp's metadata keys and types, the lmpress.* keys, the
 *     tensor types (Q4_0 where expected, F32 for ffn_down's 172 inputs) and that the vocabulary
 *     is llama2c_to_gguf.py's rendering of tok512.bin;
 *   - lmpress loads the file and, with the file's own tokenizer, gives the very tokens and the
 *     very perplexity of the in-memory blocks (also through the CLI: `run --output` then
 *     `eval FILE`);
 *   - refusals: an input affine (SmoothQuant all_linears) and an RMSNorm bias (Shift) name the
 *     linear or norm, act-order groups (g_idx) name the linear, a missing folder is refused, and
 *     an interrupted export leaves neither its temporary file nor a change at PATH.
 * SmolLM2-135M (a GGUF source, skipped when models/cache lacks it): exported unmodified (F32,
 * every tensor equal to the source's dequantized by gguf-py, every tokenizer.* key copied) and
 * with rtn q4_0 on all linears, and with rtn q4_k and q6_k: ffn_down's rows of 1536 inputs in
 * the k-quant, the others in llama-quantize's fallback type (Q5_0, Q8_0).
 *
 * The Python side runs with lmp_test_python() (LMP_PYTHON to try another numpy) and
 * PYTHONPATH=build/pydeps; without gguf the checks that need it print SKIPPED. */
#include <check.h>
#include <dirent.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/error.h"
#include "base/textfile.h"
#include "compress/block_edit.h"
#include "eval/eval.h"
#include "export/export.h"
#include "formats/json.h"
#include "model/model.h"
#include "text/tokenizer_open.h"
#include "teststage.h"
#include "testutil.h"

#define SDIR LMP_SOURCE_DIR "/models/stories260K"
#define MODEL SDIR "/stories260K.bin"
#define TOK SDIR "/tok512.bin"
#define EVAL_TEXT SDIR "/tinystories-synth-eval.txt"
#define SMOL LMP_SOURCE_DIR "/models/cache/SmolLM2-135M-Instruct.Q4_1.gguf"
#define PYDEPS LMP_BINARY_DIR "/pydeps"
#define CHECK LMP_SOURCE_DIR "/tools/ref/gguf_export_check.py"
/* every linear of stories260K but down_proj (172 inputs: not whole blocks of 32) */
#define NOT_DOWN "re:\\.(q|k|v|o|gate|up)_proj$"
#define SEQ 64
#define WINDOWS 8

static char tmpdir[256];
static lmp_model *g_m;

static void open_fixture(void)
{
    setup();
    lmp_test_tmpdir(tmpdir, sizeof tmpdir, "export-gguf");
}

static void close_fixture(void)
{
    lmp_model_free(g_m);
    g_m = NULL;
    lmp_test_rmtree(tmpdir);
    teardown();
}

static const char *tmp(const char *name) { return lmp_test_path(tmpdir, name); }

static lmp_model *load(const char *path)
{
    lmp_model *m = NULL;
    ck_assert_msg(lmp_model_load(path, &m) == 0, "%s", lmp_last_error());
    return m;
}

/* One stage on the model under test (teststage.h's compress_stage). */
static lmp_block *compress(const char *plugin, const char *const *settings, const char *target, int calibrate)
{
    return compress_stage(g_m, plugin, settings, target, calibrate);
}

static int export(const lmp_block *blocks, const char *path, const char *variant)
{
    lmp_export_opts o = {.path = path, .variant = variant, .pipeline = "[{\"strategy\":\"test\"}]",
                         .config_path = "/some/where/my-run.cfg"};
    lmp_block_store *store;
    const lmp_block_source src = stored_blocks(blocks, g_m->arch.n_layers, &store);
    const int st = lmp_export_model(&ctx, g_m, &src, &o);
    lmp_block_store_free(store);
    return st;
}

/* ---- the weights lmpress holds, for the reference script -------------------------------------- */

static const char *g_emb_type = "F32"; /* the token embedding's type in the file */

typedef struct dump {
    FILE *manifest;
    int n;
} dump;

/* A tensor the file must hold: its expected type and shape, and either the raw f32 values (v) or,
 * v NULL, "the same tensor of --ref-gguf". */
static void dump_tensor(dump *d, const char *name, const char *type, const float *v, int64_t ne0, int64_t ne1)
{
    char file[64] = "=", ref[80] = "=";
    if (v) {
        snprintf(file, sizeof file, "t%04d.f32", d->n++);
        /* an embedding stored as Q8_0 or F16: its reference is those values as gguf-py stores them */
        snprintf(ref, sizeof ref, "%s%s", strcmp(type, "Q8_0") == 0 ? "q8_0:" : strcmp(type, "F16") == 0 ? "f16:" : "", file);
        FILE *f = fopen(tmp(file), "wb");
        ck_assert_ptr_nonnull(f);
        ck_assert_uint_eq(fwrite(v, sizeof *v, (size_t)(ne0 * ne1), f), (size_t)(ne0 * ne1));
        fclose(f);
    }
    fprintf(d->manifest, "%s %s %lld %lld %s\n", name, type, (long long)ne0, (long long)ne1, ref);
}

static const char *const gguf_linear[LMP_ROLE_COUNT] = {"attn_q", "attn_k", "attn_v", "attn_output",
                                                        "ffn_gate", "ffn_up", "ffn_down"};

/* The manifest of the model with these blocks: linears of `qtype` except those type_of says
 * F32; raw: the linears' (and, with all, every tensor's) values from memory, the rest "=". */
static void write_manifest(const lmp_model *m, const lmp_block *blocks, const char *(*type_of)(const lmp_linear *),
                           int linears_raw, int all_raw)
{
    dump d = {fopen(tmp("manifest.txt"), "w"), 0};
    ck_assert_ptr_nonnull(d.manifest);
    const lmp_arch *a = &m->arch;
    dump_tensor(&d, "token_embd.weight", g_emb_type, all_raw ? m->tok_emb : NULL, a->dim, a->vocab);
    dump_tensor(&d, "output_norm.weight", "F32", all_raw ? m->final_norm_w : NULL, a->dim, 1);
    if (m->lm_head != m->tok_emb) dump_tensor(&d, "output.weight", "F32", all_raw ? m->lm_head : NULL, a->dim, a->vocab);
    char name[96];
    for (int64_t b = 0; b < a->n_layers; b++) {
        static const char *const norms[2] = {"attn_norm", "ffn_norm"};
        for (int i = 0; i < 2; i++) {
            snprintf(name, sizeof name, "blk.%lld.%s.weight", (long long)b, norms[i]);
            dump_tensor(&d, name, "F32", all_raw ? blocks[b].norms[i].w : NULL, a->dim, 1);
        }
        for (int i = 0; i < blocks[b].n_linears; i++) {
            const lmp_linear *l = &blocks[b].linears[i];
            snprintf(name, sizeof name, "blk.%lld.%s.weight", (long long)b, gguf_linear[l->role]);
            dump_tensor(&d, name, type_of(l), linears_raw ? l->w : NULL, l->in, l->out);
            ck_assert_ptr_null(l->b); /* neither model has biases */
        }
    }
    fclose(d.manifest);
}

/* Runs the reference script on path; extra: its options past --manifest. */
static void check_file(const char *path, const char *extra)
{
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "PYTHONPATH='%s' '%s' '%s' '%s' --manifest '%s' %s 2>&1", PYDEPS, lmp_test_python(), CHECK,
             path, tmp("manifest.txt"), extra);
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    static char out[1 << 16];
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = 0;
    const int rc = pclose(p);
    printf("%s", out);
    ck_assert_msg(rc == 0, "%s\n%s", cmd, out);
}

/* ---- the perplexity of the blocks in memory and of the file -------------------------------- */

static int32_t *tokens(const lmp_model *m, const char *tokenizer, int64_t *n)
{
    lmp_tokenizer *t = NULL;
    int32_t *ids = NULL;
    ck_assert_msg(lmp_open_tokenizer(m, tokenizer, &t) == 0, "%s", lmp_last_error());
    ck_assert_msg(lmp_tokenize_file(t, EVAL_TEXT, &ids, n) == 0, "%s", lmp_last_error());
    lmp_tokenizer_free(t);
    return ids;
}

static lmp_score score(const lmp_model *m, const lmp_block *blocks, const int32_t *ids, int64_t n, int64_t windows)
{
    lmp_score s;
    ck_assert_msg(lmp_eval_text(&ctx, &be, m, blocks, m, blocks, NULL, ids, n, SEQ, windows, "eval", &s) == 0, "%s",
                  lmp_last_error());
    return s;
}

/* The exported file, loaded by lmpress with its own tokenizer, scores as the blocks did (on the
 * first `windows` windows of SEQ tokens). */
static void same_perplexity(const lmp_block *blocks, const char *path, const char *tokenizer, int64_t windows)
{
    int64_t n1, n2;
    int32_t *ids1 = tokens(g_m, tokenizer, &n1);
    lmp_model *m2 = load(path);
    ck_assert_msg(strncmp(m2->format, "GGUF v3 ", 8) == 0, "%s", m2->format); /* then its tensor types */
    int32_t *ids2 = tokens(m2, NULL, &n2);
    ck_assert_int_eq(n1, n2);
    for (int64_t i = 0; i < n1; i++) ck_assert_msg(ids1[i] == ids2[i], "token %lld: %d vs %d", (long long)i, ids1[i], ids2[i]);
    const lmp_block *b2 = lmp_model_blocks(m2);
    ck_assert_ptr_nonnull(b2);
    const lmp_score s1 = score(g_m, blocks, ids1, n1, windows), s2 = score(m2, b2, ids2, n2, windows);
    printf("%s: ppl in memory %.10f, from the file %.10f\n", lmp_basename(path), lmp_score_ppl(&s1), lmp_score_ppl(&s2));
    ck_assert_int_eq(s1.scored, s2.scored);
    ck_assert_msg(fabs(s1.nll_sum - s2.nll_sum) <= 1e-6 * fabs(s1.nll_sum), "nll %.17g vs %.17g", s1.nll_sum, s2.nll_sum);
    lmp_model_free(m2);
    free(ids1);
    free(ids2);
}

/* ---- stories260K ------------------------------------------------------------------------------- */

static const char *g_qtype; /* the type every targeted linear must have */

static const char *not_down_type(const lmp_linear *l) { return l->role == LMP_ROLE_DOWN ? "F32" : g_qtype; }
static const char *all_type(const lmp_linear *l) { (void)l; return g_qtype; }

/* Compresses, exports, checks the file against memory and lmpress's perplexity of it. */
static void stories_case(const char *variant, const char *plugin, const char *const *settings, const char *target,
                         int calibrate, const char *qtype, int ftype)
{
    g_m = load(MODEL);
    lmp_block *blocks = compress(plugin, settings, target, calibrate);
    char file[128];
    snprintf(file, sizeof file, "%s.gguf", variant);
    ck_assert_msg(export(blocks, tmp(file), variant) == 0, "%s", lmp_last_error());
    if (lmp_test_have_gguf(variant)) {
        g_qtype = qtype;
        write_manifest(g_m, blocks, target ? not_down_type : all_type, 1, 1);
        char extra[1024];
        snprintf(extra, sizeof extra,
                 "--llama2c-tok '%s' --expect general.name=%s --expect lmpress.variant=%s --expect lmpress.config=my-run.cfg "
                 "--expect 'lmpress.pipeline=[{\"strategy\":\"test\"}]' --expect lmpress.version=%s "
                 "--expect general.file_type=%d --expect llama.block_count=%lld --expect llama.context_length=%lld "
                 "--expect llama.rope.dimension_count=%lld --expect llama.attention.head_count_kv=%lld",
                 TOK, variant, variant, LMP_VERSION, ftype, (long long)g_m->arch.n_layers, (long long)g_m->arch.seq_len,
                 (long long)g_m->arch.head_dim, (long long)g_m->arch.n_kv_heads);
        check_file(tmp(file), extra);
    }
    same_perplexity(blocks, tmp(file), TOK, WINDOWS);
    lmp_blocks_free(blocks, g_m->arch.n_layers);
}

START_TEST(rtn_q8_0)
{
    const char *const set[] = {"format=q8_0", NULL};
    stories_case("rtn-q8_0", "rtn", set, NOT_DOWN, 0, "Q8_0", 7);
}
END_TEST

START_TEST(rtn_q4_0)
{
    const char *const set[] = {"format=q4_0", NULL};
    stories_case("rtn-q4_0", "rtn", set, NOT_DOWN, 0, "Q4_0", 2);
}
END_TEST

START_TEST(rtn_q4_1)
{
    const char *const set[] = {"format=q4_1", NULL};
    stories_case("rtn-q4_1", "rtn", set, NOT_DOWN, 0, "Q4_1", 3);
}
END_TEST

START_TEST(gptq_q4_0)
{
    const char *const set[] = {"format=q4_0", NULL};
    stories_case("gptq-q4_0", "gptq", set, NOT_DOWN, 1, "Q4_0", 2);
}
END_TEST

/* Learned rounding and clipping (ABI 4.3) on Q4_1's blocks: each block's scale and min as learned. */
START_TEST(autoround_q4_1)
{
    const char *const set[] = {"format=q4_1", "steps=10", "batch=4", NULL};
    stories_case("autoround-q4_1", "autoround", set, NOT_DOWN, 1, "Q4_1", 3);
}
END_TEST

/* The formats and searches of ABI 4.1 written as their GGUF types. */
START_TEST(rtn_q5_0_importance)
{
    const char *const set[] = {"format=q5_0", "importance=calibration", NULL};
    stories_case("rtn-q5_0-imp", "rtn", set, NOT_DOWN, 1, "Q5_0", 8);
}
END_TEST

START_TEST(gptq_q5_1_importance)
{
    const char *const set[] = {"format=q5_1", "importance=calibration", NULL};
    stories_case("gptq-q5_1-imp", "gptq", set, NOT_DOWN, 1, "Q5_1", 9);
}
END_TEST

START_TEST(gptq_iq4_nl_importance)
{
    const char *const set[] = {"format=iq4_nl", "importance=calibration", "act_order=true", "static_groups=true", NULL};
    stories_case("gptq-iq4_nl-imp", "gptq", set, NOT_DOWN, 1, "IQ4_NL", 25);
}
END_TEST

/* An int grid has no GGUF type: every linear is written F32, exactly what lmpress evaluated. */
START_TEST(rtn_int_grid_is_f32)
{
    const char *const set[] = {"bits=4", "granularity=group", "group_size=32", NULL};
    stories_case("rtn-int4", "rtn", set, NULL, 0, "F32", 0);
}
END_TEST

/* ---- through the CLI: run --output, then eval of the file --------------------------------------- */

static char cli_out[1 << 16];

static int cli(const char *fmt, const char *a, const char *b)
{
    char args[4096];
    snprintf(args, sizeof args, fmt, a, b);
    const int rc = lmp_test_cli(args, cli_out, sizeof cli_out);
    ck_assert_msg(rc >= 0, "lmpress %s did not exit normally\n%s", args, cli_out);
    return rc;
}

static double json_number(const char *text, const char *what, const char *const *path)
{
    lmp_json *j = NULL;
    ck_assert_msg(lmp_json_parse(text, strlen(text), what, &j) == 0, "%s", lmp_last_error());
    const lmp_json *v = j;
    for (int i = 0; path[i]; i++) {
        if (v && v->type == LMP_JSON_ARRAY) v = &v->items[atoi(path[i])];
        else v = lmp_json_get(v, path[i]);
        ck_assert_msg(v != NULL, "%s: no %s", what, path[i]);
    }
    ck_assert_int_eq(v->type, LMP_JSON_NUMBER);
    const double x = v->number;
    lmp_json_free(j);
    return x;
}

static const char *write_config(const char *name, const char *pipeline)
{
    char text[4096];
    snprintf(text, sizeof text,
             "model = { path = \"%s\"; tokenizer = \"%s\"; };\n"
             "calibration = { text = \"%s/tinystories-synth-calib.txt\"; samples = 4; seq_len = 64; };\n"
             "eval = { texts = [ \"%s\" ]; seq_len = %d; max_windows = %d; };\n"
             "variants = ( { name = \"v\"; pipeline = ( %s ); } );\n",
             MODEL, TOK, SDIR, EVAL_TEXT, SEQ, WINDOWS, pipeline);
    const char *p = tmp(name);
    lmp_test_spit(p, text, strlen(text));
    return p;
}

START_TEST(cli_run_output_then_eval)
{
    const char *cfg = write_config("q.cfg", "{ strategy = \"rtn\"; params = { format = \"q4_0\"; }; "
                                            "targets = [ \"re:\\\\.(q|k|v|o|gate|up)_proj$\" ]; }");
    ck_assert_msg(cli("run %s --output %s --json - 2>/dev/null", cfg, tmp("v.gguf")) == 0, "%s", cli_out);
    static const char *const ppl_path[] = {"variants", "0", "eval", "tinystories-synth-eval.txt", "ppl", NULL};
    const double run_ppl = json_number(cli_out, "run --json", ppl_path);
    char eval_args[1024];
    snprintf(eval_args, sizeof eval_args, "%s --text %s --seq-len %d --max-windows %d --json", tmp("v.gguf"), EVAL_TEXT,
             SEQ, WINDOWS);
    ck_assert_msg(cli("eval %s%s", eval_args, "") == 0, "%s", cli_out);
    static const char *const eval_ppl[] = {"ppl", NULL};
    const double file_ppl = json_number(cli_out, "eval --json", eval_ppl);
    printf("CLI: run's ppl %.10g, eval of the file %.10g\n", run_ppl, file_ppl);
    ck_assert_msg(fabs(run_ppl - file_ppl) <= 1e-6 * run_ppl, "%.10g vs %.10g", run_ppl, file_ppl);

    /* int grid and activation quantization: exported with one warning each */
    cfg = write_config("a.cfg", "{ strategy = \"rtn\"; params = { bits = 8; act = \"dynamic_token\"; }; }");
    ck_assert_msg(cli("run %s --output %s 2>&1 >/dev/null", cfg, tmp("a.gguf")) == 0, "%s", cli_out);
    g_m = load(MODEL);
    char want[2][96];
    snprintf(want[0], sizeof want[0], "%lld linears are on an int or nf4 grid", (long long)(7 * g_m->arch.n_layers));
    snprintf(want[1], sizeof want[1], "%lld linears quantize their activations", (long long)(7 * g_m->arch.n_layers));
    ck_assert_msg(strstr(cli_out, "warning") && strstr(cli_out, want[0]) && strstr(cli_out, "written as F32"), "%s",
                  cli_out);
    ck_assert_msg(strstr(cli_out, want[1]) && strstr(cli_out, "only the weights"), "%s", cli_out);
    ck_assert_int_eq(access(tmp("a.gguf"), F_OK), 0);
}
END_TEST

/* --embedding-type q8_0 / f16: the embedding is stored as gguf-py's Q8_0 quantizer and numpy's
 * float16 store it; everything else as before; a bad type is refused before writing. */
START_TEST(embedding_types)
{
    g_m = load(MODEL);
    const char *const set[] = {"format=q4_0", NULL};
    lmp_block *blocks = compress("rtn", set, NOT_DOWN, 0);
    const lmp_block_source src = lmp_block_source_array(blocks, g_m->arch.n_layers);
    static const char *const types[2][2] = {{"q8_0", "Q8_0"}, {"f16", "F16"}};
    for (int k = 0; k < 2; k++) {
        lmp_export_opts o = {.path = tmp("emb.gguf"), .variant = "emb", .pipeline = "[]", .embedding_type = types[k][0]};
        ck_assert_msg(lmp_export_model(&ctx, g_m, &src, &o) == 0, "%s", lmp_last_error());
        if (lmp_test_have_gguf("embedding_types")) {
            g_qtype = "Q4_0";
            g_emb_type = types[k][1];
            write_manifest(g_m, blocks, not_down_type, 1, 1);
            g_emb_type = "F32";
            char extra[512];
            snprintf(extra, sizeof extra, "--llama2c-tok '%s'", TOK);
            check_file(tmp("emb.gguf"), extra);
        }
    }
    lmp_export_opts bad = {.path = tmp("bad.gguf"), .variant = "x", .pipeline = "[]", .embedding_type = "q4_x"};
    ck_assert_int_ne(lmp_export_model(&ctx, g_m, &src, &bad), 0);
    ck_assert_msg(strstr(lmp_last_error(), "embedding type 'q4_x'"), "%s", lmp_last_error());
    ck_assert_int_ne(access(tmp("bad.gguf"), F_OK), 0);
    lmp_blocks_free(blocks, g_m->arch.n_layers);
}
END_TEST

/* compare --output-dir: every variant is written (a GGUF each, or a folder each with
 * --output-format hf); one that cannot be written is reported by name, the others still run and
 * are written, and the exit status is 1. */
START_TEST(cli_compare_output_dir)
{
    char text[4096];
    snprintf(text, sizeof text,
             "model = { path = \"%s\"; tokenizer = \"%s\"; };\n"
             "calibration = { text = \"%s/tinystories-synth-calib.txt\"; samples = 4; seq_len = 64; };\n"
             "eval = { texts = [ \"%s\" ]; seq_len = %d; max_windows = %d; };\n"
             "variants = ( { name = \"base\"; },\n"
             "  { name = \"shifted\"; pipeline = ( { strategy = \"shift\"; } ); },\n"
             "  { name = \"w4\"; pipeline = ( { strategy = \"rtn\"; params = { bits = 4; scale_dtype = \"bf16\"; }; } ); } );\n",
             MODEL, TOK, SDIR, EVAL_TEXT, SEQ, WINDOWS);
    const char *cfg = tmp("c.cfg");
    lmp_test_spit(cfg, text, strlen(text));
    ck_assert_int_eq(cli("compare %s --output-dir %s 2>&1", cfg, tmp("out")), 1);
    ck_assert_msg(strstr(cli_out, "variant 'shifted': not exported") && strstr(cli_out, "1 variant could not be exported"),
                  "%s", cli_out);
    ck_assert_int_eq(access(tmp("out/base.gguf"), F_OK), 0);
    ck_assert_int_eq(access(tmp("out/w4.gguf"), F_OK), 0);
    ck_assert_int_ne(access(tmp("out/shifted.gguf"), F_OK), 0);
    /* the same run as Hugging Face folders */
    ck_assert_int_eq(cli("compare %s --output-dir %s --output-format hf --variant w4 2>&1", cfg, tmp("hf")), 0);
    ck_assert_int_eq(access(tmp("hf/w4/config.json"), F_OK), 0);
    ck_assert_int_eq(access(tmp("hf/w4/model.safetensors"), F_OK), 0);
    /* usage errors before any work */
    ck_assert_int_eq(cli("compare %s --output %s", cfg, tmp("x.gguf")), 2);
    ck_assert_int_eq(cli("compare %s --output-format onnx --output-dir %s", cfg, tmp("out")), 2);
    ck_assert_int_eq(cli("run %s --output %s/none/x.gguf --variant w4 2>&1", cfg, tmpdir), 1);
    ck_assert_msg(strstr(cli_out, "does not exist"), "%s", cli_out);
}
END_TEST

/* ---- refusals ------------------------------------------------------------------------------------ */

/* Nothing but the names in `keep` is left in the test's folder (no temporary file). */
static void folder_holds_only(const char *const *keep)
{
    DIR *d = opendir(tmpdir);
    ck_assert_ptr_nonnull(d);
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        int kept = 0;
        for (int i = 0; keep[i]; i++) kept |= strcmp(e->d_name, keep[i]) == 0;
        ck_assert_msg(kept, "%s/%s was left behind", tmpdir, e->d_name);
    }
    closedir(d);
}

START_TEST(input_affine_refused_naming_the_linear)
{
    g_m = load(MODEL);
    const char *const set[] = {"all_linears=true", NULL};
    lmp_block *blocks = compress("smoothquant", set, NULL, 1);
    ck_assert_int_ne(export(blocks, tmp("sq.gguf"), "sq"), 0);
    ck_assert_msg(strstr(lmp_last_error(), "sq.gguf") && strstr(lmp_last_error(), "model.layers.0.self_attn.o_proj") &&
                      strstr(lmp_last_error(), "input affine") && strstr(lmp_last_error(), "all_linears = false"),
                  "%s", lmp_last_error());
    static const char *const none[] = {NULL};
    folder_holds_only(none);
    lmp_blocks_free(blocks, g_m->arch.n_layers);
}
END_TEST

START_TEST(norm_bias_refused_naming_the_norm)
{
    g_m = load(MODEL);
    lmp_block *blocks = compress("shift", NULL, NULL, 1);
    ck_assert_int_ne(export(blocks, tmp("shift.gguf"), "shift"), 0);
    ck_assert_msg(strstr(lmp_last_error(), "model.layers.0.input_layernorm") && strstr(lmp_last_error(), "bias"),
                  "%s", lmp_last_error());
    lmp_blocks_free(blocks, g_m->arch.n_layers);
}
END_TEST

/* gptq itself refuses act-order's dynamic groups on a GGUF format; a grid given one anyway (a
 * g_idx naming the consecutive groups) is refused by the writer too. */
START_TEST(act_order_groups_refused_naming_the_linear)
{
    g_m = load(MODEL);
    const char *const set[] = {"format=q4_0", NULL};
    lmp_block *blocks = compress("rtn", set, NOT_DOWN, 0);
    const int q = lmp_block_find(&blocks[0], LMP_ROLE_Q);
    lmp_linear *l = &blocks[0].linears[q];
    int32_t *g_idx = malloc((size_t)l->in * sizeof *g_idx);
    for (int64_t c = 0; c < l->in; c++) g_idx[c] = (int32_t)(c / 32);
    const lmp_wgrid *g = l->grid;
    ck_assert_int_eq(lmp_set_weight_grid(&blocks[0], q, &g->spec, g->scales, g->zeros, g_idx), 0);
    ck_assert_int_ne(export(blocks, tmp("g.gguf"), "g"), 0);
    ck_assert_msg(strstr(lmp_last_error(), "model.layers.0.self_attn.q_proj") && strstr(lmp_last_error(), "g_idx") &&
                      strstr(lmp_last_error(), "static_groups = true"), "%s", lmp_last_error());
    free(g_idx);
    lmp_blocks_free(blocks, g_m->arch.n_layers);
}
END_TEST

START_TEST(off_grid_weight_refused_before_writing)
{
    g_m = load(MODEL);
    const char *const set[] = {"format=q8_0", NULL};
    lmp_block *blocks = compress("rtn", set, NOT_DOWN, 0);
    lmp_linear *l = &blocks[1].linears[lmp_block_find(&blocks[1], LMP_ROLE_UP)];
    l->w[7] = nextafterf(l->w[7], INFINITY);
    ck_assert_int_ne(export(blocks, tmp("x.gguf"), "x"), 0);
    ck_assert_msg(strstr(lmp_last_error(), "model.layers.1.mlp.up_proj: weight [0, 7]"), "%s", lmp_last_error());
    static const char *const none[] = {NULL};
    folder_holds_only(none);
    lmp_blocks_free(blocks, g_m->arch.n_layers);
}
END_TEST

START_TEST(missing_folder_and_interrupt_leave_nothing)
{
    g_m = load(MODEL);
    lmp_block *blocks = lmp_model_blocks(g_m);
    ck_assert_int_ne(export(blocks, tmp("nope/x.gguf"), "x"), 0);
    ck_assert_msg(strstr(lmp_last_error(), "nope") && strstr(lmp_last_error(), "does not exist"), "%s", lmp_last_error());
    /* an earlier file at PATH stays as it was when the export is interrupted */
    lmp_test_spit(tmp("x.gguf"), "old", 3);
    volatile sig_atomic_t flag = SIGINT;
    lmp_host_set_interrupt_flag(&ctx, &flag);
    ck_assert_int_ne(export(blocks, tmp("x.gguf"), "x"), 0);
    ck_assert_msg(strstr(lmp_last_error(), "x.gguf") && strstr(lmp_last_error(), "interrupted"), "%s", lmp_last_error());
    lmp_host_set_interrupt_flag(&ctx, NULL);
    static const char *const keep[] = {"x.gguf", NULL};
    folder_holds_only(keep);
    size_t n;
    unsigned char *old = lmp_test_slurp(tmp("x.gguf"), &n);
    ck_assert_int_eq(n, 3);
    free(old);
    /* and the same export, not interrupted, replaces it */
    ck_assert_msg(export(blocks, tmp("x.gguf"), "x") == 0, "%s", lmp_last_error());
    folder_holds_only(keep);
}
END_TEST

/* GPT-2 is written (test_export_arch.c); one whose LayerNorms have no bias (here stories260K
 * relabelled) cannot be, since llama.cpp's gpt2 requires them: refused naming the norm, nothing
 * left at the path. */
START_TEST(gpt2_family_refused)
{
    g_m = load(MODEL);
    g_m->arch.family = LMP_FAMILY_GPT2;
    ck_assert_int_ne(export(lmp_model_blocks(g_m), tmp("g2.gguf"), "g2"), 0);
    ck_assert_msg(strstr(lmp_last_error(), "LayerNorm without its bias") && strstr(lmp_last_error(), "g2.gguf"), "%s",
                  lmp_last_error());
    ck_assert_msg(access(tmp("g2.gguf"), F_OK) != 0, "g2.gguf exists after a refusal");
    g_m->arch.family = LMP_FAMILY_LLAMA;
}
END_TEST

/* ---- a Hugging Face tokenizer.json, given as the run's tokenizer ----------------------------------- */

/* A byte-level BPE over the printable ASCII characters, space (Ġ) and newline (Ċ), with merges in
 * both spellings ("a b" and ["a", "b"]), a hole in the ids and two added tokens (one special);
 * add_prefix_space as given. */
static void write_tokenizer_json(const char *path, int add_prefix_space)
{
    char buf[8192];
    int n = snprintf(buf, sizeof buf,
                     "{\"version\":\"1.0\",\"added_tokens\":["
                     "{\"id\":120,\"content\":\"<|endoftext|>\",\"special\":true},"
                     "{\"id\":121,\"content\":\"<pad_x>\",\"special\":false}],\"normalizer\":null,"
                     "\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":%s,\"trim_offsets\":true,"
                     "\"use_regex\":true},\"post_processor\":null,\"decoder\":{\"type\":\"ByteLevel\"},"
                     "\"model\":{\"type\":\"BPE\",\"vocab\":{", add_prefix_space ? "true" : "false");
    int id = 0;
    for (int ch = '!'; ch <= '~'; ch++, id++) {
        if (ch == '"' || ch == '\\') n += snprintf(buf + n, sizeof buf - n, "\"\\%c\":%d,", ch, id);
        else n += snprintf(buf + n, sizeof buf - n, "\"%c\":%d,", ch, id);
    }
    n += snprintf(buf + n, sizeof buf - n,
                  "\"\xc4\xa0\":%d,\"\xc4\x8a\":%d,\"\xc4\xa0t\":%d,\"he\":%d,\"\xc4\xa0the\":%d,\"at\":%d},"
                  "\"merges\":[\"\xc4\xa0 t\",[\"h\",\"e\"],\"\xc4\xa0t he\",[\"a\",\"t\"]]}}",
                  id, id + 1, id + 2, id + 3, id + 4, id + 5);
    lmp_test_spit(path, buf, (size_t)n);
}

START_TEST(hf_tokenizer_json)
{
    g_m = load(MODEL);
    write_tokenizer_json(tmp("tokenizer.json"), 0);
    const lmp_block_source from_file = lmp_block_source_model(g_m);
    lmp_export_opts o = {.path = tmp("hf.gguf"), .variant = "hf", .tokenizer_path = tmp("tokenizer.json")};
    ck_assert_msg(lmp_export_model(&ctx, g_m, &from_file, &o) == 0, "%s", lmp_last_error());
    if (lmp_test_have_gguf("hf_tokenizer_json")) {
        g_qtype = "F32";
        write_manifest(g_m, lmp_model_blocks(g_m), all_type, 1, 1);
        char extra[1024];
        snprintf(extra, sizeof extra,
                 "--hf-tokenizer '%s' --expect tokenizer.ggml.pre=gpt-2 --expect tokenizer.ggml.bos_token_id=120 "
                 "--expect tokenizer.ggml.eos_token_id=120 --expect tokenizer.ggml.add_bos_token=False",
                 tmp("tokenizer.json"));
        check_file(tmp("hf.gguf"), extra);
    }
    /* lmpress reads the file's vocabulary back as the same tokenizer */
    const char *text = "the cat sat on the mat <pad_x> and <|endoftext|> then\nthe hat";
    lmp_tokenizer *t1 = NULL, *t2 = NULL;
    lmp_model *m2 = load(tmp("hf.gguf"));
    ck_assert_msg(lmp_open_tokenizer(g_m, tmp("tokenizer.json"), &t1) == 0, "%s", lmp_last_error());
    ck_assert_msg(lmp_open_tokenizer(m2, NULL, &t2) == 0, "%s", lmp_last_error());
    ck_assert_int_eq(lmp_tokenizer_vocab_size(t2), g_m->arch.vocab);
    ck_assert_int_eq(lmp_tokenizer_adds_bos(t1), lmp_tokenizer_adds_bos(t2));
    for (unsigned flags = 0; flags < 2; flags++) {
        int32_t *a = NULL, *b = NULL;
        int64_t na, nb;
        const unsigned f = flags ? LMP_TOKENIZE_PARSE_SPECIAL : 0u;
        ck_assert_int_eq(lmp_tokenize_ex(t1, text, strlen(text), f, &a, &na), 0);
        ck_assert_int_eq(lmp_tokenize_ex(t2, text, strlen(text), f, &b, &nb), 0);
        ck_assert_int_eq(na, nb);
        for (int64_t i = 0; i < na; i++) ck_assert_msg(a[i] == b[i], "token %lld: %d vs %d", (long long)i, a[i], b[i]);
        free(a);
        free(b);
    }
    lmp_tokenizer_free(t1);
    lmp_tokenizer_free(t2);
    lmp_model_free(m2);
}
END_TEST

START_TEST(unwritable_tokenizers_refused_naming_the_file)
{
    g_m = load(MODEL);
    write_tokenizer_json(tmp("prefix.json"), 1);
    const lmp_block_source from_file = lmp_block_source_model(g_m);
    lmp_export_opts o = {.path = tmp("t.gguf"), .variant = "t", .tokenizer_path = tmp("prefix.json")};
    ck_assert_int_ne(lmp_export_model(&ctx, g_m, &from_file, &o), 0);
    ck_assert_msg(strstr(lmp_last_error(), "prefix.json") && strstr(lmp_last_error(), "add_prefix_space"), "%s",
                  lmp_last_error());
    const char *wp = "{\"model\":{\"type\":\"WordPiece\",\"vocab\":{\"a\":0}}}";
    lmp_test_spit(tmp("wp.json"), wp, strlen(wp));
    o.tokenizer_path = tmp("wp.json");
    ck_assert_int_ne(lmp_export_model(&ctx, g_m, &from_file, &o), 0);
    ck_assert_msg(strstr(lmp_last_error(), "wp.json") && strstr(lmp_last_error(), "WordPiece"), "%s", lmp_last_error());
    lmp_test_spit(tmp("junk.bin"), "\x10\x00\x00\x00\x00\x00\x00\x00\xff\xff\x00\x00", 12);
    o.tokenizer_path = tmp("junk.bin");
    ck_assert_int_ne(lmp_export_model(&ctx, g_m, &from_file, &o), 0);
    ck_assert_msg(strstr(lmp_last_error(), "junk.bin") && strstr(lmp_last_error(), "llama2.c tokenizer"), "%s",
                  lmp_last_error());
    static const char *const keep[] = {"prefix.json", "wp.json", "junk.bin", NULL};
    folder_holds_only(keep);
}
END_TEST

/* ---- SmolLM2: a GGUF source, its tokenizer copied ------------------------------------------------ */

static int have_smol(const char *test)
{
    /* the source's token embedding is Q8_0, which an export keeps by default (it reads back
     * exactly: gguf_write.c's source_type) */
    g_emb_type = "Q8_0";
    if (access(SMOL, R_OK) == 0) return 1;
    lmp_test_skip("SKIPPED %s: %s is missing (tools/fetch_smollm2.sh fetches it)\n", test, SMOL);
    return 0;
}

START_TEST(smollm2_unmodified_f32)
{
    if (!have_smol("smollm2_unmodified_f32")) return;
    g_m = load(SMOL);
    const lmp_block *blocks = lmp_model_blocks(g_m);
    ck_assert_ptr_nonnull(blocks);
    ck_assert_msg(export(blocks, tmp("smol-f32.gguf"), "fp32") == 0, "%s", lmp_last_error());
    if (lmp_test_have_gguf("smollm2_unmodified_f32")) {
        g_qtype = "F32";
        write_manifest(g_m, blocks, all_type, 0, 0);
        check_file(tmp("smol-f32.gguf"), "--ref-gguf '" SMOL "' --tokenizer-from '" SMOL "' --expect general.file_type=0 "
                                          "--expect llama.block_count=30 --expect llama.embedding_length=576");
    }
    same_perplexity(blocks, tmp("smol-f32.gguf"), NULL, 2);
}
END_TEST

START_TEST(smollm2_rtn_q4_0)
{
    if (!have_smol("smollm2_rtn_q4_0")) return;
    g_m = load(SMOL);
    const char *const set[] = {"format=q4_0", NULL};
    lmp_block *blocks = compress("rtn", set, NULL, 0);
    ck_assert_msg(export(blocks, tmp("smol-q4_0.gguf"), "rtn-q4_0") == 0, "%s", lmp_last_error());
    if (lmp_test_have_gguf("smollm2_rtn_q4_0")) {
        g_qtype = "Q4_0";
        write_manifest(g_m, blocks, all_type, 1, 0);
        check_file(tmp("smol-q4_0.gguf"), "--ref-gguf '" SMOL "' --tokenizer-from '" SMOL "' --expect general.file_type=2");
    }
    same_perplexity(blocks, tmp("smol-q4_0.gguf"), NULL, 2);
    lmp_blocks_free(blocks, g_m->arch.n_layers);
}
END_TEST

/* The k-quants on SmolLM2: only ffn_down's rows (1536 inputs) are whole super-blocks of 256;
 * every other linear (576 inputs) takes llama-quantize's fallback type (Q4_K -> Q5_0, Q6_K ->
 * Q8_0), so the file holds both, each tensor as lmpress held it, and reads back to the same
 * perplexity. */
static const char *g_down_type;
static const char *down_or_fallback(const lmp_linear *l) { return l->role == LMP_ROLE_DOWN ? g_down_type : g_qtype; }

static void smollm2_kquant(const char *test, const char *format, const char *down_type, const char *fallback,
                           const char *fallback_type, const char *expect_ftype)
{
    if (!have_smol(test)) return;
    g_m = load(SMOL);
    char set0[32], path[64], expect[512];
    snprintf(set0, sizeof set0, "format=%s", format);
    const char *const set[] = {set0, NULL};
    lmp_block *blocks = compress("rtn", set, NULL, 0);
    for (int i = 0; i < blocks[0].n_linears; i++) {
        const lmp_linear *l = &blocks[0].linears[i];
        ck_assert_ptr_nonnull(l->grid);
        ck_assert_str_eq(lmp_wformat_name(l->grid->spec.format), l->role == LMP_ROLE_DOWN ? format : fallback);
    }
    snprintf(path, sizeof path, "smol-%s.gguf", format);
    ck_assert_msg(export(blocks, tmp(path), format) == 0, "%s", lmp_last_error());
    if (lmp_test_have_gguf(test)) {
        g_qtype = fallback_type;
        g_down_type = down_type;
        write_manifest(g_m, blocks, down_or_fallback, 1, 0);
        snprintf(expect, sizeof expect, "--ref-gguf '" SMOL "' --expect general.file_type=%s", expect_ftype);
        check_file(tmp(path), expect);
    }
    same_perplexity(blocks, tmp(path), NULL, 2);
    lmp_blocks_free(blocks, g_m->arch.n_layers);
}

START_TEST(smollm2_rtn_q4_k_and_fallback) { smollm2_kquant("smollm2_rtn_q4_k_and_fallback", "q4_k", "Q4_K", "q5_0", "Q5_0", "8"); }
END_TEST

START_TEST(smollm2_rtn_q6_k_and_fallback) { smollm2_kquant("smollm2_rtn_q6_k_and_fallback", "q6_k", "Q6_K", "q8_0", "Q8_0", "7"); }
END_TEST

int main(void)
{
    Suite *s = suite_create("export_gguf");
    TCase *tc = tcase_create("stories260K");
    tcase_add_checked_fixture(tc, open_fixture, close_fixture);
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, rtn_q8_0);
    tcase_add_test(tc, rtn_q4_0);
    tcase_add_test(tc, rtn_q4_1);
    tcase_add_test(tc, rtn_q5_0_importance);
    tcase_add_test(tc, gptq_q5_1_importance);
    tcase_add_test(tc, gptq_iq4_nl_importance);
    tcase_add_test(tc, gptq_q4_0);
    tcase_add_test(tc, autoround_q4_1);
    tcase_add_test(tc, rtn_int_grid_is_f32);
    tcase_add_test(tc, cli_run_output_then_eval);
    tcase_add_test(tc, cli_compare_output_dir);
    tcase_add_test(tc, embedding_types);
    tcase_add_test(tc, input_affine_refused_naming_the_linear);
    tcase_add_test(tc, norm_bias_refused_naming_the_norm);
    tcase_add_test(tc, act_order_groups_refused_naming_the_linear);
    tcase_add_test(tc, off_grid_weight_refused_before_writing);
    tcase_add_test(tc, missing_folder_and_interrupt_leave_nothing);
    tcase_add_test(tc, gpt2_family_refused);
    tcase_add_test(tc, hf_tokenizer_json);
    tcase_add_test(tc, unwritable_tokenizers_refused_naming_the_file);
    suite_add_tcase(s, tc);
    TCase *smol = tcase_create("SmolLM2");
    tcase_add_checked_fixture(smol, open_fixture, close_fixture);
    tcase_set_timeout(smol, 600);
    tcase_add_test(smol, smollm2_unmodified_f32);
    tcase_add_test(smol, smollm2_rtn_q4_0);
    tcase_add_test(smol, smollm2_rtn_q4_k_and_fallback);
    tcase_add_test(smol, smollm2_rtn_q6_k_and_fallback);
    suite_add_tcase(s, smol);
    return lmp_test_main(s);
}
