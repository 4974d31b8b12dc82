/* test_cli.c — bad input never crashes: each case below runs the real `lmpress` binary and
 * expects a non-zero exit and exactly one error line naming the file, line or key at fault. */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"

#define MODEL LMP_SOURCE_DIR "/models/stories260K/stories260K.bin"
#define TOK LMP_SOURCE_DIR "/models/stories260K/tok512.bin"
#define EVAL_TEXT LMP_SOURCE_DIR "/models/stories260K/tinystories-synth-eval.txt"

static char tmpdir[256];
static char output[65536];

/* Runs `lmpress ARGS` (a shell fragment), capturing stdout+stderr; returns the exit code. */
static int run(const char *args)
{
    return lmp_test_cli_all(args, output, sizeof output);
}

static int count(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle)) n++;
    return n;
}

/* The run failed with exit code `code` and one error message containing both needles. */
static void expect_error(const char *args, int code, const char *needle1, const char *needle2)
{
    int rc = run(args);
    ck_assert_msg(rc == code, "lmpress %s: exit %d, expected %d\n%s", args, rc, code, output);
    if (code == 1) ck_assert_msg(count(output, "lmpress: error:") == 1, "not exactly one error line:\n%s", output);
    ck_assert_msg(strstr(output, needle1), "'%s' missing from:\n%s", needle1, output);
    if (needle2) ck_assert_msg(strstr(output, needle2), "'%s' missing from:\n%s", needle2, output);
}

static const char *write_file(const char *name, const char *content, size_t len)
{
    static char path[8][512];
    static int slot;
    char *p = path[slot++ % 8];
    snprintf(p, 512, "%s/%s", tmpdir, name);
    FILE *f = fopen(p, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq((int)fwrite(content, 1, len, f), (int)len);
    fclose(f);
    return p;
}

/* A valid config with `variant` as its one variant and `extra` settings appended. */
static const char *config(const char *variant, const char *extra)
{
    char text[8192];
    snprintf(text, sizeof text,
             "model = { path = \"%s\"; tokenizer = \"%s\"; };\n"
             "calibration = { text = \"%s\"; samples = 2; seq_len = 64; };\n"
             "eval = { texts = [ \"%s\" ]; seq_len = 64; max_windows = 2; };\n"
             "%s\n"
             "variants = (\n%s\n);\n",
             MODEL, TOK, EVAL_TEXT, EVAL_TEXT, extra, variant);
    return write_file("test.cfg", text, strlen(text));
}

static void setup(void)
{
    lmp_test_tmpdir(tmpdir, sizeof tmpdir, "cli");
}

static void teardown(void)
{
    lmp_test_rmtree(tmpdir);
}

static char args[4096];
#define ARGS(...) (snprintf(args, sizeof args, __VA_ARGS__), args)

START_TEST(missing_model_file)
{
    expect_error("eval /nonexistent/model.bin --text " EVAL_TEXT, 1, "/nonexistent/model.bin", "cannot open model");
}
END_TEST

START_TEST(truncated_model_file)
{
    static char buf[200000];
    FILE *f = fopen(MODEL, "rb");
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    const char *p = write_file("short.bin", buf, n);
    expect_error(ARGS("eval %s --tokenizer %s --text %s", p, TOK, EVAL_TEXT), 1, "truncated llama2.c checkpoint", p);
}
END_TEST

START_TEST(garbage_model_file)
{
    const char *p = write_file("garbage.bin", "this is not a model at all, just text\n", 38);
    expect_error(ARGS("eval %s --tokenizer %s --text %s", p, TOK, EVAL_TEXT), 1, "not a llama2.c checkpoint", p);
}
END_TEST

START_TEST(inconsistent_shapes_in_header)
{
    int32_t h[7] = {64, 172, 5, 7, 4, 512, 512}; /* 64 is not a multiple of 7 heads */
    const char *p = write_file("shape.bin", (const char *)h, sizeof h);
    expect_error(ARGS("eval %s --tokenizer %s --text %s", p, TOK, EVAL_TEXT), 1, "inconsistent llama2.c header", p);
}
END_TEST

START_TEST(gguf_truncated)
{
    const char *p = write_file("m.gguf", "GGUF\3\0\0\0", 8);
    expect_error(ARGS("eval %s --tokenizer %s --text %s", p, TOK, EVAL_TEXT), 1, "truncated", p);
}
END_TEST

START_TEST(gguf_unknown_architecture)
{
    /* A well-formed GGUF v3 with one metadata pair, general.architecture = "bert", no tensors. */
    unsigned char g[128];
    size_t n = 0;
#define PUT(v, bytes) (memcpy(g + n, &(v), bytes), n += bytes)
    uint32_t version = 3, type_string = 8;
    uint64_t n_tensors = 0, n_kv = 1, klen = 20, vlen = 4;
    memcpy(g, "GGUF", 4);
    n = 4;
    PUT(version, 4);
    PUT(n_tensors, 8);
    PUT(n_kv, 8);
    PUT(klen, 8);
    memcpy(g + n, "general.architecture", 20);
    n += 20;
    PUT(type_string, 4);
    PUT(vlen, 8);
    memcpy(g + n, "bert", 4);
    n += 4;
#undef PUT
    const char *p = write_file("bert.gguf", (const char *)g, n);
    expect_error(ARGS("eval %s --text %s", p, EVAL_TEXT), 1, "unknown architecture 'bert'", p);
}
END_TEST

START_TEST(missing_tokenizer)
{
    expect_error("eval " MODEL " --tokenizer /nonexistent/tok.bin --text " EVAL_TEXT, 1, "/nonexistent/tok.bin", NULL);
}
END_TEST

START_TEST(broken_tokenizer)
{
    const char *p = write_file("tok.bin", "\x10\0\0\0\0\0\0\0", 8);
    expect_error(ARGS("eval %s --tokenizer %s --text %s", MODEL, p, EVAL_TEXT), 1, p, NULL);
}
END_TEST

START_TEST(missing_text)
{
    expect_error("eval " MODEL " --text /nonexistent/text.txt", 1, "/nonexistent/text.txt", "cannot open");
}
END_TEST

START_TEST(text_too_short)
{
    const char *p = write_file("short.txt", "Once.", 5);
    expect_error(ARGS("eval %s --text %s --seq-len 256", MODEL, p), 1, "too short for one evaluation window", "short.txt");
    p = write_file("empty.txt", "", 0);
    expect_error(ARGS("eval %s --text %s --seq-len 256", MODEL, p), 1, "too short", "empty.txt");
}
END_TEST

START_TEST(text_any_bytes)
{
    /* Arbitrary bytes (invalid UTF-8, NUL, controls) tokenize through byte fallback. */
    char junk[3000];
    for (int i = 0; i < (int)sizeof junk; i++) junk[i] = (char)(i * 37 + 11);
    const char *p = write_file("junk.txt", junk, sizeof junk);
    ck_assert_int_eq(run(ARGS("eval %s --text %s --seq-len 64 --json", MODEL, p)), 0);
    ck_assert_ptr_nonnull(strstr(output, "\"ppl\": "));
}
END_TEST

START_TEST(seq_len_beyond_context)
{
    expect_error("eval " MODEL " --text " EVAL_TEXT " --seq-len 4096", 1, "exceeds the model's context of 512", NULL);
}
END_TEST

/* A usage error is one line (not the whole usage text) that names the command's --help. */
static void expect_usage_error(const char *args, const char *needle1, const char *needle2)
{
    expect_error(args, 2, needle1, needle2);
    ck_assert_msg(count(output, "\n") == 1, "lmpress %s: not one line:\n%s", args, output);
    ck_assert_msg(strstr(output, " --help'"), "lmpress %s: no pointer to --help:\n%s", args, output);
    ck_assert_msg(!strstr(output, "usage:"), "lmpress %s: the usage text was reprinted:\n%s", args, output);
}

START_TEST(usage_errors)
{
    expect_usage_error("frobnicate", "unknown command 'frobnicate'", "'lmpress --help'");
    ck_assert_msg(!strstr(output, "did you mean"), "no command is near frobnicate:\n%s", output);
    expect_usage_error("eval --frob", "unknown option --frob", "'lmpress eval --help'");
    expect_usage_error("compare", "a CONFIG file is required", "'lmpress compare --help'");
    expect_usage_error("--bogus", "unknown option --bogus", "'lmpress --help'");
    expect_error("eval --frob", 2, "unknown option --frob", NULL);
    expect_error("eval " MODEL, 2, "--text FILE or --lambada FILE is required", NULL);
    expect_error("eval --text x --seq-len abc", 2, "--seq-len wants an integer", NULL);
    expect_error("compare", 2, "a CONFIG file is required", NULL);
    ck_assert_int_eq(run(""), 2);
}
END_TEST

/* "did you mean": options (of the command's usage text), commands, strategies, backends and
 * variants, by edit distance; nothing when no candidate is near. */
START_TEST(did_you_mean)
{
    expect_usage_error("compre x.cfg", "unknown command 'compre' (did you mean compare?)", NULL);
    expect_usage_error("pluigns", "(did you mean plugins?)", NULL);
    expect_usage_error("compare x.cfg --jsn out.json", "unknown option --jsn (did you mean --json?)",
                       "'lmpress compare --help'");
    expect_usage_error("compare x.cfg --output-dri d", "(did you mean --output-dir?)", NULL);
    expect_usage_error("--verbos plugins", "unknown option --verbos (did you mean --verbose?)", NULL);
    expect_usage_error("eval --seqlen 64", "(did you mean --seq-len?)", NULL);
    expect_usage_error("analyze x.cfg --metrc kld", "(did you mean --metric?)", "'lmpress analyze --help'");
    expect_usage_error("eval --zzzzzz", "unknown option --zzzzzz", NULL);
    ck_assert_msg(!strstr(output, "did you mean"), "nothing is near --zzzzzz:\n%s", output);
    const char *p = config("{ name = \"a\";\n pipeline = ( { strategy = \"gtpq\"; } ); }", "");
    expect_error(ARGS("check %s", p), 1, "unknown strategy plugin 'gtpq' (did you mean 'gptq'?)", "test.cfg:7");
    p = config("{ name = \"a\"; pipeline = ( { strategy = \"rtn_msq\"; } ); }", "");
    expect_error(ARGS("check %s", p), 1, "(did you mean 'rtn_mse'?)", NULL);
    p = config("{ name = \"a\"; pipeline = ( { strategy = \"zzzzzz\"; } ); }", "");
    expect_error(ARGS("check %s", p), 1, "unknown strategy plugin 'zzzzzz': no lmp-strategy-zzzzzz.so", NULL);
    p = config("{ name = \"w4-g32\"; pipeline = ( { strategy = \"rtn\"; } ); },\n{ name = \"fp32\"; }", "");
    expect_error(ARGS("--quiet run %s --variant w4-g23", p), 1, "no variant named 'w4-g23' (did you mean 'w4-g32'?)",
                 NULL);
    expect_error(ARGS("--quiet compare %s --variant fp23", p), 1, "(did you mean 'fp32'?)", NULL);
    expect_error(ARGS("--quiet analyze %s --variant w4g32", p), 1, "no variant named 'w4g32' (did you mean 'w4-g32'?)",
                 NULL);
    expect_error(ARGS("--quiet compare %s --backend cpv", p), 1, "unknown backend plugin 'cpv' (did you mean 'cpu'?)",
                 NULL);
    /* and a stage's parameters and the config's settings */
    p = config("{ name = \"a\";\n pipeline = ( { strategy = \"rtn\";\n params = { bitz = 4; }; } ); }", "");
    expect_error(ARGS("check %s", p), 1, "unknown parameter of strategy 'rtn' (did you mean 'bits'?)", "test.cfg:8");
    p = config("{ name = \"a\"; }", "calibrtion = { samples = 2; };");
    expect_error(ARGS("check %s", p), 1, "calibrtion: unknown setting (did you mean 'calibration'?)", NULL);
}
END_TEST

/* -o is run's --output; --threads N sets the cpu backend's threads over the config's, before or
 * after the command, and is checked. */
START_TEST(short_output_and_threads)
{
    const char *p = config("{ name = \"w8\"; pipeline = ( { strategy = \"rtn\"; params = { bits = 8; }; } ); }",
                           "backend = { name = \"cpu\"; params = { threads = 1; }; };");
    char gguf[600];
    snprintf(gguf, sizeof gguf, "%s/w8.gguf", tmpdir);
    int rc = run(ARGS("--quiet run %s -o %s", p, gguf));
    ck_assert_msg(rc == 0, "run -o: exit %d\n%s", rc, output);
    struct stat sb;
    ck_assert_int_eq(stat(gguf, &sb), 0);
    ck_assert_int_gt((int)sb.st_size, 100000);
    expect_usage_error(ARGS("compare %s -o %s", p, gguf), "unknown option -o", NULL); /* run's alone */
    rc = run(ARGS("--quiet compare %s --threads 3 --json -", p));
    ck_assert_msg(rc == 0, "exit %d\n%s", rc, output);
    ck_assert_msg(strstr(output, "\"threads\": 3"), "--threads 3 not in the backend's params:\n%s", output);
    rc = run(ARGS("--threads 2 --quiet compare %s --json -", p));
    ck_assert_msg(rc == 0 && strstr(output, "\"threads\": 2"), "--threads before the command:\n%s", output);
    rc = run(ARGS("--quiet compare %s --json -", p));
    ck_assert_msg(rc == 0 && strstr(output, "\"threads\": 1"), "the config's threads without --threads:\n%s", output);
    expect_error("eval --threads 0 --text x", 2, "--threads wants an integer >= 1, not \"0\"", NULL);
    expect_error("eval --threads 999 --text x", 2, "--threads 999: at most 256", NULL);
    expect_error("eval --threads", 2, "option --threads needs a value", NULL);
    rc = run("eval " MODEL " --text " EVAL_TEXT " --seq-len 64 --max-windows 2 --threads 1 --json");
    ck_assert_msg(rc == 0 && strstr(output, "\"ppl\": "), "eval --threads 1: exit %d\n%s", rc, output);
}
END_TEST

/* The one-liners of issue 36: eval --kl-divergence-base, imatrix, plugins NAME: their usage
 * errors are one line with "did you mean", and plugins NAME lists that plugin alone. */
START_TEST(one_liners)
{
    expect_usage_error("eval " MODEL " --kl-divergence-bas " MODEL " --text " EVAL_TEXT,
                       "unknown option --kl-divergence-bas (did you mean --kl-divergence-base?)", "'lmpress eval --help'");
    expect_usage_error("eval " MODEL " --kl-divergence-base " MODEL, "--kl-divergence-base compares on --text FILE", NULL);
    expect_usage_error("imatrix " MODEL " --calb x -o y.gguf", "unknown option --calb (did you mean --calib?)",
                       "'lmpress imatrix --help'");
    expect_usage_error("imatrix " MODEL " --calib " EVAL_TEXT, "-o F.gguf is required", "'lmpress imatrix --help'");
    expect_usage_error("imatrx", "unknown command 'imatrx' (did you mean imatrix?)", NULL);
    expect_usage_error("plugins --frob", "unknown option --frob", "'lmpress plugins --help'");
    expect_usage_error("plugins gptq rtn", "unexpected argument rtn", NULL);
    expect_error("plugins gtpq", 1, "no plugin named 'gtpq' (did you mean 'gptq'?)", NULL);
    ck_assert_msg(count(output, "\n") == 1, "not one line:\n%s", output);
    ck_assert_int_eq(run("plugins gptq"), 0);
    ck_assert_msg(strstr(output, "strategy gptq ") && strstr(output, "act_order") && strstr(output, "Weight grids"),
                  "plugins gptq:\n%s", output);
    ck_assert_msg(!strstr(output, "strategy rtn ") && !strstr(output, "backend cpu ") && !strstr(output, "search path"),
                  "plugins gptq lists others:\n%s", output);
    const int gptq_lines = count(output, "\n");
    ck_assert_int_eq(run("plugins"), 0);
    ck_assert_msg(count(output, "\n") > 3 * gptq_lines, "the full listing (%d lines) vs gptq's (%d)",
                  count(output, "\n"), gptq_lines);
    ck_assert_int_eq(run("plugins cpu"), 0);
    ck_assert_msg(strstr(output, "backend cpu ") && !strstr(output, "Weight grids"), "plugins cpu:\n%s", output);
}
END_TEST

START_TEST(help_everywhere)
{
    const char *cmds[] = {"--help", "compare --help", "run --help", "check --help", "eval --help",
                          "generate --help", "plugins --help", "tokenize --help", "imatrix --help"};
    for (size_t i = 0; i < sizeof cmds / sizeof *cmds; i++) {
        ck_assert_int_eq(run(cmds[i]), 0);
        ck_assert_ptr_nonnull(strstr(output, "usage: lmpress"));
    }
}
END_TEST

/* `lmpress tokenize`: the ids of tests/fixtures/tokenizers/golden.json (PyPI tokenizers, made by
 * tools/ref/tok_fixtures.py), text from the command line or a file, and its usage errors. */
#define TOKFIX LMP_SOURCE_DIR "/tests/fixtures/tokenizers/"
START_TEST(tokenize_command)
{
    /* golden.json "qwen2"[2] and "mistral"[2]: texts.json[2] */
    ck_assert_int_eq(run("tokenize --tokenizer " TOKFIX "qwen2.tokenizer.json --no-bos 'Hello  world   with    spaces'"), 0);
    ck_assert_str_eq(output, "40 516 79 221 267 273 407 221 221 355 221 221 221 491 312 274\n");
    ck_assert_int_eq(run("tokenize --json --tokenizer " TOKFIX "mistral.tokenizer.json 'Hello  world   with    spaces'"), 0);
    ck_assert_str_eq(output, "[1, 659, 835, 336, 473, 580, 586, 725, 473, 473, 670, 473, 473, 473, 809, 626, 587]\n");
    /* the bundled model's tokenizer (llama2.c): BOS by its convention, --no-bos without */
    ck_assert_int_eq(run("tokenize 'Once upon a time'"), 0);
    ck_assert_msg(strncmp(output, "1 ", 2) == 0, "%s", output);
    static char with_bos[sizeof output];
    memcpy(with_bos, output, sizeof output);
    ck_assert_int_eq(run("tokenize --no-bos " MODEL " 'Once upon a time'"), 0);
    ck_assert_str_eq(output, with_bos + 2);
    ck_assert_int_eq(run("tokenize --tokenizer " TOK " 'Once upon a time'"), 0); /* sized by the default model */
    ck_assert_str_eq(output, with_bos);
    /* --file: any bytes; the whole file */
    const char *text = write_file("tok.txt", "Once upon a time", 16);
    char args[1024];
    snprintf(args, sizeof args, "tokenize --file %s", text);
    ck_assert_int_eq(run(args), 0);
    ck_assert_str_eq(output, with_bos);
    /* errors: one message naming the file or key */
    expect_error("tokenize", 2, "TEXT or --file F is required", NULL);
    expect_error("tokenize --tokenizer " TOKFIX "qwen2.tokenizer.json " MODEL " hi", 2, "not both", NULL);
    expect_error("tokenize a b c", 2, "unexpected argument", NULL);
    expect_error("tokenize --tokenizer /nonexistent/tokenizer.json hi", 1, "/nonexistent/tokenizer.json", NULL);
    expect_error("tokenize --file /nonexistent/t.txt", 1, "/nonexistent/t.txt", NULL);
    const char *bad = write_file("tokenizer.json",
                                 "{\"normalizer\":{\"type\":\"Lowercase\"},\"pre_tokenizer\":null,\"decoder\":null,"
                                 "\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]}}", 122);
    snprintf(args, sizeof args, "tokenize --tokenizer %s hi", bad);
    expect_error(args, 1, bad, "normalizer \"Lowercase\" is not supported");
}
END_TEST

START_TEST(missing_config)
{
    expect_error("check /nonexistent/x.cfg", 1, "/nonexistent/x.cfg", "cannot open config");
}
END_TEST

START_TEST(config_syntax_error)
{
    /* libconfig says only "syntax error" and the line: the message adds the token and column. */
    const char *p = write_file("bad.cfg", "model = { path = \"x\" \nvariants = ( ;\n", 37);
    expect_error(ARGS("check %s", p), 1, "bad.cfg:2: syntax error at ';' (column 14)", NULL);
    ck_assert_msg(!strstr(output, "syntax error: syntax error"), "libconfig's text repeated:\n%s", output);
    p = write_file("bad2.cfg", "seed = 1;\nvariants = ( { name = w4; } );\n", 41);
    expect_error(ARGS("check %s", p), 1, "bad2.cfg:2: syntax error at 'w4' (column 23)", NULL);
    p = write_file("bad3.cfg", "seed = 1;\nmodel = { path = \"a; }\n", 33);
    expect_error(ARGS("check %s", p), 1, "bad3.cfg:3: syntax error at the end of the file", "not closed");
}
END_TEST

START_TEST(config_unknown_setting)
{
    const char *p = config("{ name = \"a\"; }", "colour = \"blue\";");
    expect_error(ARGS("check %s", p), 1, "test.cfg:4: colour: unknown setting", NULL);
}
END_TEST

START_TEST(config_unknown_plugin)
{
    const char *p = config("{ name = \"a\";\n pipeline = ( { strategy = \"nosuch\"; } ); }", "");
    expect_error(ARGS("check %s", p), 1, "test.cfg:7: strategy", "unknown strategy plugin 'nosuch'");
}
END_TEST

START_TEST(config_unknown_parameter)
{
    const char *p = config("{ name = \"a\";\n pipeline = ( { strategy = \"rtn\";\n params = { bitz = 4; }; } ); }", "");
    expect_error(ARGS("check %s", p), 1, "test.cfg:8: variants[0].pipeline[0].params.bitz", "unknown parameter of strategy 'rtn'");
}
END_TEST

START_TEST(config_wrong_type_range_choice)
{
    const char *p = config("{ name = \"a\"; pipeline = ( { strategy = \"rtn\"; params = { bits = \"four\"; }; } ); }", "");
    expect_error(ARGS("check %s", p), 1, "params.bits", "expected an integer");
    p = config("{ name = \"a\"; pipeline = ( { strategy = \"rtn\"; params = { bits = 9; }; } ); }", "");
    expect_error(ARGS("check %s", p), 1, "params.bits", "9 is out of range [2, 8]");
    p = config("{ name = \"a\"; pipeline = ( { strategy = \"rtn\"; params = { granularity = \"row\"; }; } ); }", "");
    expect_error(ARGS("check %s", p), 1, "params.granularity", "\"row\" is not one of");
    p = config("{ name = \"a\"; pipeline = ( { strategy = \"rtn\"; params = { sym = 1; }; } ); }", "");
    expect_error(ARGS("check %s", p), 1, "params.sym", "expected true or false");
    p = config("{ name = \"a\"; }", "eval = 3;");
    expect_error(ARGS("check %s", p), 1, "test.cfg", NULL);
}
END_TEST

START_TEST(config_override_and_patterns)
{
    const char *p = config("{ name = \"a\"; pipeline = ( { strategy = \"rtn\"; targets = [ \"re:([\" ]; } ); }", "");
    expect_error(ARGS("check %s", p), 1, "targets", "bad regular expression");
    p = config("{ name = \"a\"; pipeline = ( { strategy = \"rtn\";\n overrides = ( { match = \"q_proj\"; params = { bits = 1; }; } ); } ); }", "");
    expect_error(ARGS("check %s", p), 1, "overrides[0].params.bits", "out of range");
    p = config("{ name = \"a\"; pipeline = ( { strategy = \"rtn\";\n overrides = ( { match = \"q_proj\"; } ); } ); }", "");
    expect_error(ARGS("check %s", p), 1, "overrides[0]", "needs 'params' or 'skip = true'");
}
END_TEST

START_TEST(config_duplicate_variant_and_missing_sections)
{
    const char *p = config("{ name = \"a\"; }, { name = \"a\"; }", "");
    expect_error(ARGS("check %s", p), 1, "variant name \"a\" is used twice", NULL);
    p = write_file("nomodel.cfg", "eval = { texts = [\"x\"]; }; variants = ( { name = \"a\"; } );\n", 59);
    expect_error(ARGS("check %s", p), 1, "missing required setting 'model'", NULL);
}
END_TEST

START_TEST(config_plugin_for_another_abi)
{
    /* The test plugins' folder is not trusted by default: the command line trusts it. */
    const char *p = config("{ name = \"a\"; }", "plugins = { strategies = [ \"" LMP_TEST_PLUGIN_DIR "/fake-wrong_major.so\" ]; };");
    expect_error(ARGS("check %s --allow-plugin " LMP_TEST_PLUGIN_DIR, p), 1, "fake-wrong_major.so", "major versions differ");
    p = config("{ name = \"a\"; pipeline = ( { strategy = \"" LMP_TEST_PLUGIN_DIR "/fake-wrong_kind.so\"; } ); }", "");
    expect_error(ARGS("check --allow-plugin " LMP_TEST_PLUGIN_DIR " %s", p), 1, "is a backend plugin, but is used here as a strategy", NULL);
    p = config("{ name = \"a\"; }", "backend = { name = \"nosuch\"; };");
    expect_error(ARGS("check %s", p), 1, "unknown backend plugin 'nosuch'", "backend.name");
    p = config("{ name = \"a\"; }", "backend = { name = \"cpu\"; params = { threads = -1; }; };");
    expect_error(ARGS("check %s", p), 1, "backend.params.threads", "out of range");
}
END_TEST

START_TEST(config_missing_calibration_text)
{
    char text[4096];
    snprintf(text, sizeof text,
             "model = { path = \"%s\"; };\ncalibration = { text = \"/nonexistent/calib.txt\"; };\n"
             "eval = { texts = [ \"%s\" ]; seq_len = 64; max_windows = 1; };\n"
             "variants = ( { name = \"a\"; pipeline = ( { strategy = \"rtn\"; params = { act = \"static_tensor\"; }; } ); } );\n",
             MODEL, EVAL_TEXT);
    const char *p = write_file("cal.cfg", text, strlen(text));
    expect_error(ARGS("compare %s", p), 1, "/nonexistent/calib.txt", "cannot open");
}
END_TEST

START_TEST(lambada_only_config)
{
    char text[4096];
    snprintf(text, sizeof text,
             "model = { path = \"%s\"; };\n"
             "eval = { lambada = \"%s/lambada/lambada_test.jsonl\"; lambada_max = 5; };\n"
             "variants = ( { name = \"fp32\"; }, { name = \"w4\"; pipeline = ( { strategy = \"rtn\"; } ); } );\n",
             MODEL, LMP_DATA_DIR);
    const char *p = write_file("lam.cfg", text, strlen(text));
    ck_assert_msg(run(ARGS("--quiet compare %s", p)) == 0, "%s", output);
    ck_assert_ptr_nonnull(strstr(output, "lambada %"));
    ck_assert_ptr_nonnull(strstr(output, "w4"));
    const char *none = "model = { path = \"x\"; };\neval = { seq_len = 64; };\nvariants = ( { name = \"a\"; } );\n";
    p = write_file("nolam.cfg", none, strlen(none));
    expect_error(ARGS("check %s", p), 1, "must name at least one evaluation text", NULL);
    /* Static activation scales without a calibration text: refused when the variant runs. */
    snprintf(text, sizeof text,
             "model = { path = \"%s\"; };\neval = { texts = [ \"%s\" ]; seq_len = 64; max_windows = 1; };\n"
             "variants = ( { name = \"a8\"; pipeline = ( { strategy = \"rtn\"; params = { act = \"static_tensor\"; }; } ); } );\n",
             MODEL, EVAL_TEXT);
    p = write_file("nocal.cfg", text, strlen(text));
    expect_error(ARGS("--quiet compare %s", p), 1, "variant 'a8'", "set calibration.text");
}
END_TEST

START_TEST(run_needs_a_variant)
{
    const char *p = config("{ name = \"a\"; }, { name = \"b\"; }", "");
    expect_error(ARGS("run %s", p), 1, "choose one with --variant NAME", "a, b");
    expect_error(ARGS("run %s --variant zz", p), 1, "no variant named 'zz'", NULL);
}
END_TEST

START_TEST(good_config_runs)
{
    const char *p = config("{ name = \"fp32\"; },\n{ name = \"w4\"; pipeline = ( { strategy = \"rtn\"; params = { bits = 4; };"
                           " ignore = [ \"re:layers\\\\.0\\\\.\" ]; overrides = ( { match = \"down_proj\"; skip = true; } ); } ); }", "");
    ck_assert_int_eq(run(ARGS("check %s", p)), 0);
    ck_assert_ptr_nonnull(strstr(output, "w4: rtn"));
    char json[600];
    snprintf(json, sizeof json, "%s/out.json", tmpdir);
    ck_assert_msg(run(ARGS("--quiet compare %s --json %s", p, json)) == 0, "%s", output);
    ck_assert_ptr_nonnull(strstr(output, "fp32"));
    struct stat sb;
    ck_assert_int_eq(stat(json, &sb), 0);
    ck_assert_int_gt((int)sb.st_size, 100);
    /* Unwritable report path: the run's table is printed, then one clear error. */
    expect_error(ARGS("--quiet compare %s --json /nonexistent/dir/out.json", p), 1, "/nonexistent/dir/out.json",
                 "No such file or directory");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("cli");
    TCase *tc = tcase_create("bad input");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, missing_model_file);
    tcase_add_test(tc, truncated_model_file);
    tcase_add_test(tc, garbage_model_file);
    tcase_add_test(tc, inconsistent_shapes_in_header);
    tcase_add_test(tc, gguf_truncated);
    tcase_add_test(tc, gguf_unknown_architecture);
    tcase_add_test(tc, missing_tokenizer);
    tcase_add_test(tc, broken_tokenizer);
    tcase_add_test(tc, missing_text);
    tcase_add_test(tc, text_too_short);
    tcase_add_test(tc, text_any_bytes);
    tcase_add_test(tc, seq_len_beyond_context);
    tcase_add_test(tc, usage_errors);
    tcase_add_test(tc, did_you_mean);
    tcase_add_test(tc, short_output_and_threads);
    tcase_add_test(tc, help_everywhere);
    tcase_add_test(tc, one_liners);
    tcase_add_test(tc, missing_config);
    tcase_add_test(tc, config_syntax_error);
    tcase_add_test(tc, config_unknown_setting);
    tcase_add_test(tc, config_unknown_plugin);
    tcase_add_test(tc, config_unknown_parameter);
    tcase_add_test(tc, config_wrong_type_range_choice);
    tcase_add_test(tc, config_override_and_patterns);
    tcase_add_test(tc, config_duplicate_variant_and_missing_sections);
    tcase_add_test(tc, config_plugin_for_another_abi);
    tcase_add_test(tc, config_missing_calibration_text);
    tcase_add_test(tc, lambada_only_config);
    tcase_add_test(tc, run_needs_a_variant);
    tcase_add_test(tc, good_config_runs);
    tcase_add_test(tc, tokenize_command);
    suite_add_tcase(s, tc);
    return lmp_test_main(s);
}
