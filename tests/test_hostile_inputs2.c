/* test_hostile_inputs2.c — hostile and unlucky inputs, round two (issue 34):
 *
 *  - item 1: a tokenizer.json with more tokens than the model's vocabulary (given with
 *    --tokenizer, or found in a Hugging Face folder) is refused at load by `eval` and `check`,
 *    naming both files; before, `eval` read past the embedding (a crash, or a ppl with exit 0);
 *  - item 3: a NaN in a model's weights is refused at load naming the tensor; an importance
 *    matrix of 1e38s (finite, but its sums overflow) fails its variant with a message, not a
 *    "nan" row with exit 0 (the compressed-tensors values are in test_model_ct.c);
 *  - item 2: `--resume` refuses a report made from another evaluation text or tokenizer;
 *  - item 11: `check` refuses a block format on rows it does not divide, seq_lens beyond the
 *    model's context and a qat seq_len beyond the calibration windows; a variant that fails
 *    mid-run is reported and the next one still runs (exit 1);
 *  - item 12: calibration windows beyond the memory budget are refused before work; a SIGTERM
 *    during a calibration pass is answered within one window;
 *  - item 13: an unusable $TMPDIR under --output-dir is refused before any work;
 *  - item 17: "variant 'x':" once, PCRE2's match limit reported as such, the JSON's samples
 *    are the windows used.
 * The CLI cases run the real `lmpress` binary, never a mock. */
#include <check.h>
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/ctx.h"
#include "base/error.h"
#include "compress/pipeline.h"
#include "config/config.h"
#include "model/model.h"
#include "plugin/backend.h"
#include "testutil.h"

#define MODEL LMP_SOURCE_DIR "/models/stories260K/stories260K.bin"
#define TOK LMP_SOURCE_DIR "/models/stories260K/tok512.bin"
#define EVAL_TEXT LMP_SOURCE_DIR "/models/stories260K/tinystories-synth-eval.txt"
#define CALIB_TEXT LMP_SOURCE_DIR "/models/stories260K/tinystories-synth-calib.txt"
#define GPT2_TINY LMP_SOURCE_DIR "/tests/golden/gpt2-tiny"

static char tmpdir[256];
static char output[65536];
static char args[8192];
#define ARGS(...) (snprintf(args, sizeof args, __VA_ARGS__), args)

static void setup(void) { lmp_test_tmpdir(tmpdir, sizeof tmpdir, "hostile2"); }
static void teardown(void) { lmp_test_rmtree(tmpdir); }

/* tmpdir/name (testutil.h's lmp_test_path) */
static const char *tmp_path(const char *name) { return lmp_test_path(tmpdir, name); }

static const char *write_file(const char *name, const void *content, size_t len)
{
    const char *p = tmp_path(name);
    lmp_test_spit(p, content, len);
    return p;
}

static int count(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle)) n++;
    return n;
}

/* Runs `lmpress ARGS` bounded by `timeout 60`, stdout+stderr into output; the exit code (a
 * crash: 128 + the signal, as the shell reports it). */
static int run_env(const char *env, const char *a)
{
    static char cmd[16384];
    snprintf(cmd, sizeof cmd, "sh -c 'exec env %s timeout 60 %s %s' 2>&1", env, LMP_CLI, a);
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    size_t got = fread(output, 1, sizeof output - 1, p);
    output[got] = 0;
    int status = pclose(p);
    ck_assert_msg(WIFEXITED(status), "lmpress %s did not exit normally\n%s", a, output);
    return WEXITSTATUS(status);
}

static int run(const char *a) { return run_env("", a); }

/* Exit 1, exactly one error line, naming needle1 (and needle2). */
static void expect_error(const char *a, const char *needle1, const char *needle2)
{
    int rc = run(a);
    ck_assert_msg(rc == 1, "lmpress %s: exit %d, expected 1\n%s", a, rc, output);
    ck_assert_msg(count(output, "lmpress: error:") == 1, "not exactly one error line:\n%s", output);
    ck_assert_msg(strstr(output, needle1), "'%s' missing from:\n%s", needle1, output);
    if (needle2) ck_assert_msg(strstr(output, needle2), "'%s' missing from:\n%s", needle2, output);
}

/* ---- item 1: a tokenizer larger than the model ------------------------------------------- */

/* GPT-2's byte-to-character map (the printable bytes stand for themselves, the others are
 * moved to U+0100 and up), as a JSON string for byte b. */
static void byte_char(int b, char *out)
{
    static int map[256], made;
    if (!made) {
        int n = 0;
        for (int c = 0; c < 256; c++) {
            int printable = (c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF);
            map[c] = printable ? c : 256 + n++;
        }
        made = 1;
    }
    int u = map[b];
    if (u == '"' || u == '\\') sprintf(out, "\\%c", u);
    else sprintf(out, "\\u%04x", u);
}

/* A byte-level BPE tokenizer.json: the 256 byte tokens, then `extra` tokens "x0", "x1", ...
 * that no merge makes (ids up to 255 + extra). */
static const char *big_tokenizer(const char *name, int extra)
{
    size_t cap = 64 * (size_t)(256 + extra) + 4096, n = 0;
    char *j = malloc(cap);
    n += (size_t)snprintf(j + n, cap - n,
                          "{\"normalizer\":null,\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":false,"
                          "\"trim_offsets\":true,\"use_regex\":true},\"decoder\":{\"type\":\"ByteLevel\"},"
                          "\"model\":{\"type\":\"BPE\",\"vocab\":{");
    for (int b = 0; b < 256; b++) {
        char c[16];
        byte_char(b, c);
        n += (size_t)snprintf(j + n, cap - n, "%s\"%s\":%d", b ? "," : "", c, b);
    }
    for (int i = 0; i < extra; i++) n += (size_t)snprintf(j + n, cap - n, ",\"x%d\":%d", i, 256 + i);
    n += (size_t)snprintf(j + n, cap - n, "},\"merges\":[]}}");
    const char *p = write_file(name, j, n);
    free(j);
    return p;
}

static void copy_file(const char *from, const char *to)
{
    size_t n;
    unsigned char *b = lmp_test_slurp(from, &n);
    lmp_test_spit(to, b, n);
    free(b);
}

START_TEST(tokenizer_larger_than_model_refused)
{
    /* stories260K has 512 tokens; this tokenizer 656 (ids 0..655) */
    const char *big = big_tokenizer("big-tokenizer.json", 400);
    expect_error(ARGS("eval %s --tokenizer %s --text %s", MODEL, big, EVAL_TEXT), big, "vocabulary of 512");
    ck_assert_msg(strstr(output, "655"), "the largest id is not named:\n%s", output);

    /* a Hugging Face folder (gpt2-tiny: 96 tokens) whose own tokenizer.json has 256 + 4 */
    const char *dir = tmp_path("gpt2-tiny-bigtok");
    ck_assert_int_eq(mkdir(dir, 0755), 0);
    char from[512], to[600];
    const char *const files[] = {"config.json", "model.safetensors"};
    for (int i = 0; i < 2; i++) {
        snprintf(from, sizeof from, "%s/%s", GPT2_TINY, files[i]);
        snprintf(to, sizeof to, "%s/%s", dir, files[i]);
        copy_file(from, to);
    }
    const char *tok = big_tokenizer("gpt2-tiny-bigtok/tokenizer.json", 4);
    expect_error(ARGS("eval %s --text %s", dir, EVAL_TEXT), tok, "vocabulary of 96");

    /* `check` refuses it as well (it passed before) */
    char cfg[4096];
    int n = snprintf(cfg, sizeof cfg,
                     "model = { path = \"%s\"; };\n"
                     "eval = { texts = [ \"%s\" ]; seq_len = 32; max_windows = 2; };\n"
                     "variants = ( { name = \"fp32\"; } );\n",
                     dir, EVAL_TEXT);
    const char *c = write_file("bigtok.cfg", cfg, (size_t)n);
    expect_error(ARGS("check %s", c), tok, "vocabulary of 96");
    expect_error(ARGS("compare %s", c), tok, "vocabulary of 96");
}
END_TEST

/* The same model with its own tokenizer still runs (the check refuses only what does not fit). */
START_TEST(tokenizer_that_fits_still_runs)
{
    int rc = run(ARGS("eval %s --tokenizer %s --text %s --max-windows 1", MODEL, TOK, EVAL_TEXT));
    ck_assert_msg(rc == 0, "exit %d\n%s", rc, output);
    ck_assert_msg(strstr(output, "ppl"), "no ppl in:\n%s", output);
}
END_TEST

/* ---- item 3: non-finite numbers -------------------------------------------------------- */

/* A copy of stories260K with the float at byte `offset` replaced by `value`. */
static const char *poked_model(const char *name, size_t offset, float value)
{
    size_t n;
    unsigned char *b = lmp_test_slurp(MODEL, &n);
    ck_assert(offset + 4 <= n);
    memcpy(b + offset, &value, 4);
    const char *p = write_file(name, b, n);
    free(b);
    return p;
}

START_TEST(nonfinite_weights_refused_at_load)
{
    /* llama2.c v0: 7 int32 of header, then the token embedding [512, 64], then the attention
     * norms [layers, 64] */
    const size_t emb = 28, norm0 = 28 + 512 * 64 * 4;
    const char *a = poked_model("nan-emb.bin", emb + 4 * 70, NAN);
    expect_error(ARGS("eval %s --tokenizer %s --text %s", a, TOK, EVAL_TEXT), "token embedding", "non-finite");
    ck_assert_msg(strstr(output, a) && strstr(output, "element 70"), "%s", output);
    const char *b = poked_model("inf-norm.bin", norm0 + 4 * 3, INFINITY);
    expect_error(ARGS("eval %s --tokenizer %s --text %s", b, TOK, EVAL_TEXT),
                 "model.layers.0.input_layernorm.weight", "non-finite");
    ck_assert_msg(strstr(output, "element 3"), "%s", output);
}
END_TEST

static void put32(unsigned char *p, int32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)((uint32_t)v >> (8 * i));
}

/* A legacy llama.cpp imatrix with one entry, blk.0.attn_q.weight: 64 values of `v`. */
static const char *imatrix_of(const char *name, float v)
{
    static const char entry[] = "blk.0.attn_q.weight";
    unsigned char buf[1024];
    size_t at = 0;
    put32(buf + at, 1), at += 4;
    put32(buf + at, (int32_t)sizeof entry - 1), at += 4;
    memcpy(buf + at, entry, sizeof entry - 1), at += sizeof entry - 1;
    put32(buf + at, 1), at += 4;  /* ncall */
    put32(buf + at, 64), at += 4; /* nval */
    for (int i = 0; i < 64; i++) memcpy(buf + at, &v, 4), at += 4;
    put32(buf + at, 1), at += 4; /* trailer: last call, then the dataset name */
    put32(buf + at, 4), at += 4;
    memcpy(buf + at, "test", 4), at += 4;
    return write_file(name, buf, at);
}

START_TEST(overflowing_imatrix_fails_its_variant)
{
    const char *im = imatrix_of("huge.dat", 1e38f);
    char cfg[4096];
    int n = snprintf(cfg, sizeof cfg,
                     "model = { path = \"%s\"; tokenizer = \"%s\"; };\n"
                     "eval = { texts = [ \"%s\" ]; seq_len = 32; max_windows = 2; };\n"
                     "variants = ( { name = \"fp32\"; },\n"
                     "  { name = \"huge-imp\"; imatrix = \"%s\";\n"
                     "    pipeline = ( { strategy = \"rtn\"; targets = [ \"re:layers\\\\.0\\\\.self_attn\\\\.q_proj$\" ];\n"
                     "                   params = { format = \"q4_0\"; importance = \"imatrix\"; }; } ); },\n"
                     "  { name = \"after\"; pipeline = ( { strategy = \"rtn\"; params = { bits = 8; }; } ); } );\n",
                     MODEL, TOK, EVAL_TEXT, im);
    const char *c = write_file("huge-imp.cfg", cfg, (size_t)n);
    const char *json = tmp_path("huge-imp.json");
    int rc = run(ARGS("compare %s --json %s", c, json));
    ck_assert_msg(rc == 1, "exit %d, expected 1\n%s", rc, output);
    ck_assert_msg(!strstr(output, "\nhuge-imp "), "a row is printed for the failed variant:\n%s", output);
    ck_assert_msg(strstr(output, "huge-imp") && strstr(output, "non-finite"), "%s", output);
    ck_assert_msg(!strstr(output, "variant 'huge-imp': variant 'huge-imp'"), "the prefix twice:\n%s", output);
    /* item 11: the failure is reported and the variant after it still runs */
    ck_assert_msg(strstr(output, "\nafter "), "the variant after the failed one did not run:\n%s", output);
    ck_assert_msg(strstr(output, "1 variant failed"), "%s", output);
    size_t len;
    char *j = (char *)lmp_test_slurp(json, &len);
    ck_assert_msg(strstr(j, "\"after\"") && !strstr(j, "\"huge-imp\""), "%s", j);
    free(j);
}
END_TEST

/* ---- item 2: --resume across changed inputs ---------------------------------------------- */

/* A report resumed after the evaluation text, the tokenizer or the imatrix changed (same config
 * bytes) is refused: before, its rows were taken as they were (a ppl ratio of 1.18 for 1.01). */
START_TEST(resume_refuses_other_inputs)
{
    const char *text = tmp_path("eval.txt"), *tok = tmp_path("tok.bin"), *json = tmp_path("r.json");
    copy_file(EVAL_TEXT, text);
    copy_file(TOK, tok);
    char cfg[4096];
    int n = snprintf(cfg, sizeof cfg,
                     "model = { path = \"%s\"; tokenizer = \"%s\"; };\n"
                     "eval = { texts = [ \"%s\" ]; seq_len = 32; max_windows = 2; };\n"
                     "variants = ( { name = \"fp32\"; } );\n",
                     MODEL, tok, text);
    const char *c = write_file("resume.cfg", cfg, (size_t)n);
    int rc = run(ARGS("compare %s --json %s", c, json));
    ck_assert_msg(rc == 0, "exit %d\n%s", rc, output);
    rc = run(ARGS("compare %s --json %s --resume", c, json)); /* nothing changed: resumed */
    ck_assert_msg(rc == 0, "exit %d\n%s", rc, output);
    /* the text: a few words replaced, same size */
    size_t len;
    unsigned char *b = lmp_test_slurp(text, &len);
    ck_assert(len > 100);
    memcpy(b + 10, "zzzz zzzz", 9);
    lmp_test_spit(text, b, len);
    free(b);
    expect_error(ARGS("compare %s --json %s --resume", c, json), json, "written by another run");
    ck_assert_msg(strstr(output, "input file"), "%s", output);
    copy_file(EVAL_TEXT, text); /* back: resumed again */
    rc = run(ARGS("compare %s --json %s --resume", c, json));
    ck_assert_msg(rc == 0, "exit %d\n%s", rc, output);
    /* the tokenizer: one score changed */
    b = lmp_test_slurp(tok, &len);
    b[len - 20] ^= 1;
    lmp_test_spit(tok, b, len);
    free(b);
    expect_error(ARGS("compare %s --json %s --resume", c, json), json, "written by another run");
}
END_TEST

/* ---- item 11: `check` refuses what compare would refuse ---------------------------------- */

static const char *config_with(const char *name, int64_t eval_seq_len, int64_t calib_seq_len, const char *variants)
{
    char cfg[8192];
    int n = snprintf(cfg, sizeof cfg,
                     "model = { path = \"%s\"; tokenizer = \"%s\"; };\n"
                     "calibration = { text = \"%s\"; samples = 4; seq_len = %lld; };\n"
                     "eval = { texts = [ \"%s\" ]; seq_len = %lld; max_windows = 2; };\n"
                     "variants = ( %s );\n",
                     MODEL, TOK, CALIB_TEXT, (long long)calib_seq_len, EVAL_TEXT, (long long)eval_seq_len, variants);
    return write_file(name, cfg, (size_t)n);
}

START_TEST(check_refuses_what_compare_refuses)
{
    /* stories260K's down_proj has 172 inputs: no q4_0 block grid fits them (nor q4_k's fallback) */
    const char *g = config_with("grid.cfg", 32, 32,
                                "{ name = \"fp32\"; }, { name = \"q4\"; pipeline = ( { strategy = \"rtn\"; "
                                "params = { format = \"q4_k\"; }; } ); }");
    expect_error(ARGS("check %s", g), "variant 'q4'", "model.layers.0.mlp.down_proj to format q5_0");
    ck_assert_msg(strstr(output, "blocks of 32 inputs; its rows have 172"), "%s", output);
    expect_error(ARGS("compare %s", g), "variant 'q4'", "rows have 172"); /* before any variant runs */
    ck_assert_msg(!strstr(output, "\nfp32 "), "compare ran a variant first:\n%s", output);
    /* leaving the down_proj out makes it fine */
    const char *ok = config_with("grid-ok.cfg", 32, 32,
                                 "{ name = \"q4\"; pipeline = ( { strategy = \"rtn\"; ignore = [ \"re:down_proj$\" ]; "
                                 "params = { format = \"q4_0\"; }; } ); }");
    int rc = run(ARGS("check %s", ok));
    ck_assert_msg(rc == 0, "exit %d\n%s", rc, output);
    /* the contexts: stories260K's is 512 */
    expect_error(ARGS("check %s", config_with("eval-ctx.cfg", 600, 32, "{ name = \"fp32\"; }")),
                 "eval.seq_len 600 exceeds the model's context of 512", NULL);
    expect_error(ARGS("check %s", config_with("calib-ctx.cfg", 32, 1024, "{ name = \"fp32\"; }")),
                 "calibration.seq_len 1024 exceeds the model's context of 512", NULL);
    /* a qat stage's sequences longer than the calibration windows they are cut from */
    const char *q = config_with("qat.cfg", 32, 32,
                                "{ name = \"qat\"; pipeline = ( { strategy = \"rtn\"; params = { bits = 8; }; }, "
                                "{ strategy = \"qat\"; params = { steps = 1; seq_len = 64; }; } ); }");
    expect_error(ARGS("check %s", q), "variant 'qat'", "seq_len 64 is longer than the calibration windows");
}
END_TEST

/* ---- item 17: messages and records ----------------------------------------------------- */

/* A pattern that backtracks exponentially is refused within the match limit, with a message
 * that says so (before: 12.7 s, then "matches no linear"). */
START_TEST(regex_match_limit_reported)
{
    const char *c = config_with("re.cfg", 32, 32,
                                "{ name = \"r\"; pipeline = ( { strategy = \"rtn\"; targets = [ \"re:^(.+)+\\\\d$\" ]; "
                                "params = { bits = 8; }; } ); }");
    expect_error(ARGS("check %s", c), "gave up on model.layers.0", "match limit");
    ck_assert_msg(!strstr(output, "matches no linear"), "%s", output);
}
END_TEST

/* The JSON's calibration "samples" is the number of windows used, not the number asked for. */
START_TEST(json_records_samples_used)
{
    char cfg[4096];
    int n = snprintf(cfg, sizeof cfg,
                     "model = { path = \"%s\"; tokenizer = \"%s\"; };\n"
                     "calibration = { text = \"%s\"; samples = 1000000; seq_len = 256; };\n"
                     "eval = { texts = [ \"%s\" ]; seq_len = 32; max_windows = 2; };\n"
                     "variants = ( { name = \"fp32\"; } );\n",
                     MODEL, TOK, CALIB_TEXT, EVAL_TEXT);
    const char *c = write_file("samples.cfg", cfg, (size_t)n);
    const char *json = tmp_path("samples.json");
    int rc = run(ARGS("compare %s --json %s", c, json));
    ck_assert_msg(rc == 0, "exit %d\n%s", rc, output);
    size_t len;
    char *j = (char *)lmp_test_slurp(json, &len);
    const char *at = strstr(j, "\"samples\": ");
    ck_assert_msg(at, "%s", j);
    long long used = atoll(at + 11);
    ck_assert_msg(used > 0 && used < 1000000, "samples %lld\n%s", used, j);
    ck_assert_msg(strstr(j, "\"samples_requested\": 1000000"), "%s", j);
    /* the warning says the same number */
    char said[64];
    snprintf(said, sizeof said, "using %lld (asked for 1000000)", used);
    ck_assert_msg(strstr(output, said), "'%s' not in:\n%s", said, output);
    free(j);
}
END_TEST

/* ---- item 12: calibration windows capped --------------------------------------------- */

START_TEST(calibration_memory_capped)
{
    char cfg[4096];
    const char *const modes[] = {"random", "sequential"};
    for (int k = 0; k < 2; k++) {
        int n = snprintf(cfg, sizeof cfg,
                         "model = { path = \"%s\"; tokenizer = \"%s\"; };\n"
                         "calibration = { text = \"%s\"; samples = 2000; seq_len = 64; sampling = \"%s\"; };\n"
                         "eval = { texts = [ \"%s\" ]; seq_len = 32; max_windows = 2; };\n"
                         "variants = ( { name = \"g\"; pipeline = ( { strategy = \"gptq\"; params = { bits = 4; }; } ); } );\n",
                         MODEL, TOK, CALIB_TEXT, modes[k], EVAL_TEXT);
        const char *c = write_file(k ? "seq.cfg" : "random.cfg", cfg, (size_t)n);
        /* 2000 windows of 64 tokens: 33 MB of block inputs, over a budget of 8 MB */
        if (k == 0) { /* random: exactly `samples` windows, refused by check as well */
            int rc = run_env("LMPRESS_CALIB_MB=8", ARGS("check %s", c));
            ck_assert_msg(rc == 1 && strstr(output, "2000 windows of 64 tokens") &&
                              strstr(output, "lower calibration.samples"), "exit %d\n%s", rc, output);
        }
        int rc = run_env("LMPRESS_CALIB_MB=8", ARGS("compare %s", c));
        ck_assert_msg(rc == 1 && strstr(output, "windows of 64 tokens keep") && strstr(output, "LMPRESS_CALIB_MB"),
                      "%s: exit %d\n%s", modes[k], rc, output);
        ck_assert_msg(!strstr(output, "\ng "), "a variant ran:\n%s", output);
    }
}
END_TEST

/* A SIGTERM during a calibration pass over many windows is answered at the next window, not at
 * the next block (before: 100000 windows answered after 4 minutes).  The observer of the pass
 * raises the flag at its first call and counts the calls after it: within one window's forward
 * (4 inputs at most), not every window's.  No clock is read. */
typedef struct interrupter {
    volatile sig_atomic_t flag;
    int64_t calls_after;
} interrupter;

static int raise_then_count(void *ud, const int *lins, int n_lins, const float *x, int64_t T, int64_t C)
{
    (void)lins, (void)n_lins, (void)x, (void)T, (void)C;
    interrupter *it = ud;
    if (it->flag) it->calls_after++;
    else it->flag = SIGTERM;
    return 0;
}

static int drop_block(void *ud, int64_t b, const lmp_block *blk)
{
    (void)ud, (void)b, (void)blk;
    return 0;
}

START_TEST(interrupt_answered_within_a_window)
{
    const char *c = config_with("intr.cfg", 32, 32,
                                "{ name = \"w8\"; pipeline = ( { strategy = \"rtn\"; params = { bits = 8; }; } ); }");
    lmp_ctx ctx;
    lmp_ctx_init(&ctx);
    lmp_host_set_verbosity(&ctx, LMP_LOG_ERROR);
    lmp_run_config *cfg;
    ck_assert_msg(lmp_config_load(&ctx, c, &cfg) == 0, "%s", lmp_last_error());
    lmp_backend be;
    ck_assert_msg(lmp_backend_open(&ctx, &cfg->reg, "cpu", cfg->backend_params, &be) == 0, "%s", lmp_last_error());
    lmp_host_set_backend(&ctx, &be);
    lmp_model *m;
    ck_assert_msg(lmp_model_load(MODEL, &m) == 0, "%s", lmp_last_error());
    enum { N = 64, T = 32 };
    lmp_windows w = {.tokens = malloc(sizeof(int32_t) * N * T), .n = N, .T = T};
    for (int i = 0; i < N * T; i++) w.tokens[i] = (int32_t)(1 + (i * 7919) % 511);
    interrupter it = {0};
    lmp_host_set_interrupt_flag(&ctx, &it.flag);
    lmp_compress_watch watch = {.observe = raise_then_count, .block_done = drop_block, .ud = &it};
    int st = lmp_compress_watched(&ctx, &be, m, &cfg->variants[0], &w, &watch, NULL);
    ck_assert_msg(st == LMP_EABORTED, "status %d: %s", st, lmp_last_error());
    ck_assert_msg(it.calls_after < 4, "%lld observer calls after the interrupt (the pass went on over the windows)",
                  (long long)it.calls_after);
    free(w.tokens);
    lmp_model_free(m);
    lmp_host_set_backend(&ctx, NULL);
    lmp_backend_close(&be);
    lmp_config_free(cfg);
    lmp_ctx_clear(&ctx);
}
END_TEST

/* ---- item 13: an unusable $TMPDIR under --output-dir ------------------------------------ */

START_TEST(unusable_tmpdir_refused_before_work)
{
    const char *c = config_with("tmpdir.cfg", 32, 32,
                                "{ name = \"fp32\"; }, { name = \"w8\"; pipeline = ( { strategy = \"rtn\"; "
                                "params = { bits = 8; }; } ); }");
    const char *out = tmp_path("exports");
    int rc = run_env("TMPDIR=/nonexistent-lmpress-tmp", ARGS("compare %s --output-dir %s", c, out));
    ck_assert_msg(rc == 1, "exit %d\n%s", rc, output);
    ck_assert_msg(count(output, "lmpress: error:") == 1, "not exactly one error line:\n%s", output);
    ck_assert_msg(strstr(output, "$TMPDIR /nonexistent-lmpress-tmp: cannot create a temporary file there") &&
                      strstr(output, "MB of the blocks of each variant to export"), "%s", output);
    ck_assert_msg(!strstr(output, "\nfp32 ") && !strstr(output, "written to"), "work was done first:\n%s", output);
    /* without an export nothing is kept there for so small a run: it runs */
    rc = run_env("TMPDIR=/nonexistent-lmpress-tmp", ARGS("compare %s", c));
    ck_assert_msg(rc == 0, "exit %d\n%s", rc, output);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("hostile_inputs2");
    TCase *tc = tcase_create("hostile_inputs2");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, tokenizer_larger_than_model_refused);
    tcase_add_test(tc, tokenizer_that_fits_still_runs);
    tcase_add_test(tc, nonfinite_weights_refused_at_load);
    tcase_add_test(tc, overflowing_imatrix_fails_its_variant);
    tcase_add_test(tc, resume_refuses_other_inputs);
    tcase_add_test(tc, check_refuses_what_compare_refuses);
    tcase_add_test(tc, regex_match_limit_reported);
    tcase_add_test(tc, json_records_samples_used);
    tcase_add_test(tc, unusable_tmpdir_refused_before_work);
    tcase_add_test(tc, calibration_memory_capped);
    tcase_add_test(tc, interrupt_answered_within_a_window);
    suite_add_tcase(s, tc);
    return lmp_test_main(s);
}
