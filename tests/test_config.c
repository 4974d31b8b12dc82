/* test_config.c — a config's mistakes are reported when it is loaded, before any work, each with
 * the config file, the line and the setting at fault: files that are missing or of the wrong kind
 * (a FIFO must not block), patterns that match no linear of the model, invalid regexes; and the
 * regexes accept the Perl/Python syntax recipes are written in. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "config/config.h"
#include "base/error.h"
#include "model/model.h"
#include "testutil.h"

#define MODEL_DIR LMP_SOURCE_DIR "/models/stories260K"
#define MODEL MODEL_DIR "/stories260K.bin"
#define TOK MODEL_DIR "/tok512.bin"
#define CALIB MODEL_DIR "/tinystories-synth-calib.txt"
#define EVAL_TEXT MODEL_DIR "/tinystories-synth-eval.txt"
#define LAMBADA LMP_DATA_DIR "/lambada/lambada_test.jsonl"

static char tmpdir[256];
static lmp_model *model; /* stories260K, opened once per test (forked) for the pattern checks */
static lmp_ctx ctx;      /* the run the configs are loaded for (their registries' context) */

/* What the config template below is filled with; the line of each setting is fixed. */
typedef struct cfg_spec {
    const char *model, *tok, *calib, *eval0, *eval1, *lambada; /* files */
    const char *target, *ignore, *match;                         /* patterns of variant "w4" */
    const char *calib_extra, *fp32_extra, *w4_extra; /* settings appended to lines 7, 16 and 17 */
} cfg_spec;

enum { /* the template's lines */
    LINE_MODEL = 2, LINE_TOK = 3, LINE_CALIB = 6, LINE_EVAL0 = 10, LINE_EVAL1 = 11, LINE_LAMBADA = 12,
    LINE_TARGET = 19, LINE_IGNORE = 20, LINE_MATCH = 21, LINE_CALIB_EXTRA = 7, LINE_FP32 = 16, LINE_W4 = 17
};

static cfg_spec defaults(void)
{
    return (cfg_spec){MODEL, TOK, CALIB, EVAL_TEXT, EVAL_TEXT, LAMBADA, "re:.*", "model.layers.0.*", "down_proj", "", "", ""};
}

/* Writes the config (test.cfg in the test's folder) and returns its path. */
static const char *write_cfg(const cfg_spec *s)
{
    static char path[512];
    char text[8192];
    snprintf(text, sizeof text,
             "model = {\n"                                                          /* 1 */
             "  path = \"%s\";\n"                                                   /* 2 */
             "  tokenizer = \"%s\";\n"                                              /* 3 */
             "};\n"                                                                 /* 4 */
             "calibration = {\n"                                                    /* 5 */
             "  text = \"%s\";\n"                                                   /* 6 */
             "  samples = 2; seq_len = 64;%s\n"                                     /* 7 */
             "};\n"                                                                 /* 8 */
             "eval = {\n"                                                           /* 9 */
             "  texts = [ \"%s\",\n"                                                /* 10 */
             "            \"%s\" ];\n"                                              /* 11 */
             "  lambada = \"%s\";\n"                                                /* 12 */
             "  seq_len = 64; max_windows = 1;\n"                                   /* 13 */
             "};\n"                                                                 /* 14 */
             "variants = (\n"                                                       /* 15 */
             "  { name = \"fp32\";%s },\n"                                          /* 16 */
             "  { name = \"w4\";%s\n"                                               /* 17 */
             "    pipeline = ( { strategy = \"rtn\"; params = { bits = 4; };\n"     /* 18 */
             "      targets = [ \"%s\" ];\n"                                        /* 19 */
             "      ignore = [ \"%s\" ];\n"                                         /* 20 */
             "      overrides = ( { match = \"%s\"; params = { bits = 8; }; } ); } ); }\n" /* 21 */
             ");\n",
             s->model, s->tok, s->calib, s->calib_extra, s->eval0, s->eval1, s->lambada, s->fp32_extra, s->w4_extra,
             s->target, s->ignore, s->match);
    snprintf(path, sizeof path, "%s/test.cfg", tmpdir);
    lmp_test_spit(path, text, strlen(text));
    return path;
}

static char *in_tmp(const char *name)
{
    static char path[4][512];
    static int slot;
    char *p = path[slot++ % 4];
    snprintf(p, sizeof path[0], "%s/%s", tmpdir, name);
    return p;
}

/* Loading fails, and the one message holds "test.cfg:LINE: KEY: " and `needle`. */
static void expect_load_error(const cfg_spec *s, int line, const char *key, const char *needle)
{
    lmp_run_config *c = NULL;
    int st = lmp_config_load(&ctx, write_cfg(s), &c);
    ck_assert_msg(st != 0, "loaded, expected an error at line %d (%s: %s)", line, key, needle);
    ck_assert_ptr_null(c);
    char where[512];
    snprintf(where, sizeof where, "test.cfg:%d: %s: ", line, key);
    const char *msg = lmp_last_error();
    ck_assert_msg(strstr(msg, where), "'%s' missing from: %s", where, msg);
    ck_assert_msg(strstr(msg, needle), "'%s' missing from: %s", needle, msg);
}

static lmp_run_config *load_ok(const cfg_spec *s)
{
    lmp_run_config *c = NULL;
    int st = lmp_config_load(&ctx, write_cfg(s), &c);
    ck_assert_msg(st == 0, "%s", lmp_last_error());
    return c;
}

/* Loads the config (which must load) and checks its patterns against stories260K's linears;
 * returns the status, the message in lmp_last_error(). */
static int check_patterns(const cfg_spec *s)
{
    lmp_run_config *c = load_ok(s);
    int st = lmp_config_check_model_patterns(c, model);
    lmp_config_free(c);
    return st;
}

static void expect_pattern_error(const cfg_spec *s, int line, const char *key, const char *pattern)
{
    ck_assert_msg(check_patterns(s) != 0, "pattern '%s' was accepted", pattern);
    char where[512], what[512];
    snprintf(where, sizeof where, "test.cfg:%d: %s: ", line, key);
    snprintf(what, sizeof what, "pattern '%s' matches no linear of the model", pattern);
    const char *msg = lmp_last_error();
    ck_assert_msg(strstr(msg, where), "'%s' missing from: %s", where, msg);
    ck_assert_msg(strstr(msg, what), "'%s' missing from: %s", what, msg);
    ck_assert_msg(strstr(msg, "optional:"), "no hint of 'optional:' in: %s", msg);
}

static void setup(void)
{
    lmp_ctx_init(&ctx);
    lmp_test_tmpdir(tmpdir, sizeof tmpdir, "config");
    ck_assert_msg(lmp_model_load(MODEL, &model) == 0, "%s", lmp_last_error());
}

static void teardown(void)
{
    lmp_model_free(model);
    model = NULL;
    lmp_ctx_clear(&ctx);
    lmp_test_rmtree(tmpdir);
}

/* ---- files ------------------------------------------------------------------------------- */
START_TEST(good_config_loads_and_keeps_origins)
{
    cfg_spec s = defaults();
    lmp_run_config *c = load_ok(&s);
    ck_assert_int_eq(c->model_at.line, LINE_MODEL);
    ck_assert_str_eq(c->model_at.key, "model.path");
    ck_assert_int_eq(c->tokenizer_at.line, LINE_TOK);
    ck_assert_int_eq(c->calib_at.line, LINE_CALIB);
    ck_assert_int_eq(c->eval_text_at[1].line, LINE_EVAL1);
    ck_assert_str_eq(c->eval_text_at[1].key, "eval.texts[1]");
    ck_assert_int_eq(c->lambada_at.line, LINE_LAMBADA);
    const lmp_stage *st = &c->variants[1].stages[0];
    ck_assert_int_eq(st->ignore_patterns[0].at.line, LINE_IGNORE);
    ck_assert_str_eq(st->ignore_patterns[0].at.key, "variants[1].pipeline[0].ignore[0]");
    ck_assert_int_eq(st->overrides[0].pattern.at.line, LINE_MATCH);
    ck_assert_int_eq(lmp_config_check_model_patterns(c, model), 0);
    lmp_config_free(c);
}
END_TEST

START_TEST(model_missing)
{
    cfg_spec s = defaults();
    s.model = in_tmp("nosuch.bin");
    expect_load_error(&s, LINE_MODEL, "model.path", "nosuch.bin: cannot open: No such file or directory");
}
END_TEST

START_TEST(model_folder_without_config_json)
{
    cfg_spec s = defaults();
    s.model = in_tmp("hf");
    ck_assert_int_eq(mkdir(s.model, 0755), 0);
    expect_load_error(&s, LINE_MODEL, "model.path", "not a Hugging Face model folder");
    /* With its config.json the folder passes the file check (the loader reads the rest). */
    lmp_test_spit(in_tmp("hf/config.json"), "{}", 2);
    lmp_config_free(load_ok(&s));
}
END_TEST

START_TEST(model_is_a_fifo)
{
    cfg_spec s = defaults();
    s.model = in_tmp("model.fifo");
    ck_assert_int_eq(mkfifo(s.model, 0644), 0);
    expect_load_error(&s, LINE_MODEL, "model.path", "is a FIFO, not a regular file");
}
END_TEST

START_TEST(tokenizer_missing)
{
    cfg_spec s = defaults();
    s.tok = in_tmp("tok.bin");
    expect_load_error(&s, LINE_TOK, "model.tokenizer", "tok.bin: cannot open: No such file or directory");
}
END_TEST

START_TEST(calibration_missing)
{
    cfg_spec s = defaults();
    s.calib = in_tmp("calib.txt");
    expect_load_error(&s, LINE_CALIB, "calibration.text", "calib.txt: cannot open: No such file or directory");
}
END_TEST

/* ---- calibration.inputs: where each block's statistics are measured ------------------------- */
START_TEST(calibration_inputs_default_and_override)
{
    cfg_spec s = defaults();
    lmp_run_config *c = load_ok(&s);
    ck_assert_int_eq(c->calib_inputs, LMP_CALIB_INPUTS_COMPRESSED); /* today's behaviour */
    ck_assert_int_eq(c->variants[1].calib_inputs, LMP_CALIB_INPUTS_COMPRESSED);
    lmp_config_free(c);
    s.calib_extra = " inputs = \"original\";";
    c = load_ok(&s);
    ck_assert_int_eq(c->calib_inputs, LMP_CALIB_INPUTS_ORIGINAL);
    ck_assert_int_eq(c->variants[1].calib_inputs, LMP_CALIB_INPUTS_ORIGINAL); /* inherited */
    lmp_config_free(c);
    s.w4_extra = " calibration = { inputs = \"compressed\"; };"; /* a variant's own wins */
    c = load_ok(&s);
    ck_assert_int_eq(c->calib_inputs, LMP_CALIB_INPUTS_ORIGINAL);
    ck_assert_int_eq(c->variants[1].calib_inputs, LMP_CALIB_INPUTS_COMPRESSED);
    ck_assert_str_eq(lmp_calib_inputs_name(c->variants[1].calib_inputs), "compressed");
    lmp_config_free(c);
}
END_TEST

START_TEST(calibration_inputs_bad_values_refused)
{
    cfg_spec s = defaults();
    s.calib_extra = " inputs = \"orignal\";";
    expect_load_error(&s, LINE_CALIB_EXTRA, "calibration.inputs", "\"orignal\" is not \"compressed\" or \"original\"");
    s.calib_extra = " inputs = 1;";
    expect_load_error(&s, LINE_CALIB_EXTRA, "calibration.inputs", "expected a string");
    s = defaults();
    s.w4_extra = " calibration = { inputs = \"fp32\"; };";
    expect_load_error(&s, LINE_W4, "variants[1].calibration.inputs", "\"fp32\" is not \"compressed\" or \"original\"");
    /* a variant sets the source only: the windows are cut once for every variant */
    s.w4_extra = " calibration = { samples = 8; };";
    expect_load_error(&s, LINE_W4, "variants[1].calibration.samples", "unknown setting (expected one of: inputs, experts, expert_min_tokens)");
    s.w4_extra = " calibration = { };";
    expect_load_error(&s, LINE_W4, "variants[1].calibration", "an empty calibration group");
    /* a mixture of experts' settings (issue 37): checked, and carried to the variants */
    s.w4_extra = " calibration = { experts = \"every\"; };";
    expect_load_error(&s, LINE_W4, "variants[1].calibration.experts", "\"every\" is not \"routed\" or \"all\"");
    s.w4_extra = " calibration = { expert_min_tokens = -1; };";
    expect_load_error(&s, LINE_W4, "variants[1].calibration.expert_min_tokens", "out of range");
    s = defaults();
    s.calib_extra = " experts = \"all\"; expert_min_tokens = 4;";
    s.w4_extra = " calibration = { experts = \"routed\"; };";
    lmp_run_config *c = load_ok(&s);
    ck_assert_int_eq(c->calib_experts_all, 1);
    ck_assert_int_eq(c->expert_min_tokens, 4);
    ck_assert_int_eq(c->variants[0].calib_experts_all, 1); /* the config's default */
    ck_assert_int_eq(c->variants[1].calib_experts_all, 0);  /* its own */
    ck_assert_int_eq(c->variants[1].expert_min_tokens, 4);
    lmp_config_free(c);
    /* the unmodified model is not calibrated: the setting would do nothing */
    s = defaults();
    s.fp32_extra = " calibration = { inputs = \"original\"; };";
    expect_load_error(&s, LINE_FP32, "variants[0].calibration", "only a variant with a pipeline is calibrated");
}
END_TEST

START_TEST(eval_text_missing)
{
    cfg_spec s = defaults();
    s.eval1 = in_tmp("x.txt");
    expect_load_error(&s, LINE_EVAL1, "eval.texts[1]", "x.txt: cannot open: No such file or directory");
    /* A relative path is resolved against the config's folder, and reported so. */
    s.eval1 = "data/x.txt";
    char where[600];
    snprintf(where, sizeof where, "%s/data/x.txt: cannot open", tmpdir);
    expect_load_error(&s, LINE_EVAL1, "eval.texts[1]", where);
}
END_TEST

/* The tcase's timeout fails this test if the check opens the FIFO and waits for a writer. */
START_TEST(eval_text_is_a_fifo)
{
    cfg_spec s = defaults();
    s.eval0 = in_tmp("eval.fifo");
    ck_assert_int_eq(mkfifo(s.eval0, 0644), 0);
    expect_load_error(&s, LINE_EVAL0, "eval.texts[0]", "is a FIFO, not a regular file");
}
END_TEST

START_TEST(eval_text_is_a_device_or_a_folder)
{
    cfg_spec s = defaults();
    s.eval1 = "/dev/null";
    expect_load_error(&s, LINE_EVAL1, "eval.texts[1]", "/dev/null: is a character device, not a regular file");
    s.eval1 = tmpdir;
    expect_load_error(&s, LINE_EVAL1, "eval.texts[1]", "is a directory, not a regular file");
}
END_TEST

START_TEST(eval_text_unreadable)
{
    if (geteuid() == 0) return; /* root reads a file whatever its mode */
    cfg_spec s = defaults();
    s.eval1 = in_tmp("secret.txt");
    lmp_test_spit(s.eval1, "text", 4);
    ck_assert_int_eq(chmod(s.eval1, 0), 0);
    expect_load_error(&s, LINE_EVAL1, "eval.texts[1]", "cannot open: Permission denied");
}
END_TEST

START_TEST(lambada_missing)
{
    cfg_spec s = defaults();
    s.lambada = in_tmp("lambada.jsonl");
    expect_load_error(&s, LINE_LAMBADA, "eval.lambada", "lambada.jsonl: cannot open: No such file or directory");
}
END_TEST

/* ---- patterns against the model's linears -------------------------------------------------- */
START_TEST(unmatched_target)
{
    cfg_spec s = defaults();
    s.target = "model.layer.0.*";
    expect_pattern_error(&s, LINE_TARGET, "variants[1].pipeline[0].targets[0]", "model.layer.0.*");
    /* The example is the nearest name, a hint at the typo. */
    ck_assert_ptr_nonnull(strstr(lmp_last_error(), "(e.g. model.layers.0."));
}
END_TEST

START_TEST(unmatched_ignore)
{
    cfg_spec s = defaults();
    s.ignore = "model.layers.30.*";
    expect_pattern_error(&s, LINE_IGNORE, "variants[1].pipeline[0].ignore[0]", "model.layers.30.*");
    s.ignore = "re:layers\\\\.3\\\\d\\\\.";
    expect_pattern_error(&s, LINE_IGNORE, "variants[1].pipeline[0].ignore[0]", "re:layers\\.3\\d\\.");
}
END_TEST

START_TEST(unmatched_override)
{
    cfg_spec s = defaults();
    s.match = "down_projj";
    expect_pattern_error(&s, LINE_MATCH, "variants[1].pipeline[0].overrides[0].match", "down_projj");
}
END_TEST

START_TEST(optional_prefix_opts_out)
{
    cfg_spec s = defaults();
    s.target = "optional:re:layers\\\\.3[0-9]\\\\..*";
    s.ignore = "optional:model.layers.30.*";
    s.match = "optional:lm_head";
    ck_assert_msg(check_patterns(&s) == 0, "%s", lmp_last_error());
    /* The prefix is not part of the pattern: an optional pattern that matches still applies. */
    s.target = "re:.*";
    s.ignore = "optional:re:layers\\\\.1\\\\.";
    s.match = "optional:down_proj";
    lmp_run_config *c = load_ok(&s);
    const lmp_stage *st = &c->variants[1].stages[0];
    ck_assert_ptr_null(lmp_stage_params_for(st, "model.layers.1.self_attn.q_proj"));
    ck_assert_ptr_eq(lmp_stage_params_for(st, "model.layers.2.self_attn.q_proj"), st->params);
    ck_assert_ptr_eq(lmp_stage_params_for(st, "model.layers.2.mlp.down_proj"), st->overrides[0].params);
    ck_assert_int_eq(lmp_pattern_match("optional:re:layers\\.1\\.", "model.layers.1.mlp.up_proj"), 1);
    ck_assert_int_eq(lmp_config_check_model_patterns(c, model), 0);
    lmp_config_free(c);
}
END_TEST

START_TEST(check_patterns_against_given_names)
{
    cfg_spec s = defaults();
    lmp_run_config *c = load_ok(&s);
    const char *const names[] = {"model.layers.0.self_attn.q_proj", "model.layers.1.mlp.down_proj"};
    ck_assert_int_eq(lmp_config_check_patterns(c, names, 2), 0);
    ck_assert_int_ne(lmp_config_check_patterns(c, names + 1, 1), 0); /* ignore model.layers.0.* */
    ck_assert_ptr_nonnull(strstr(lmp_last_error(), "test.cfg:20: variants[1].pipeline[0].ignore[0]: "));
    ck_assert_int_ne(lmp_config_check_patterns(c, NULL, 0), 0);
    lmp_config_free(c);
}
END_TEST

/* ---- the regex flavour --------------------------------------------------------------------- */
START_TEST(python_style_regexes_match)
{
    /* \d, \w, \s, non-greedy, lookahead, searched (not anchored) */
    ck_assert_int_eq(lmp_pattern_match("re:layers\\.\\d\\.self_attn", "model.layers.3.self_attn.q_proj"), 1);
    ck_assert_int_eq(lmp_pattern_match("re:layers\\.\\d\\.self_attn", "model.layers.12.self_attn.q_proj"), 0);
    ck_assert_int_eq(lmp_pattern_match("re:\\.\\w+_proj$", "model.layers.3.mlp.gate_proj"), 1);
    ck_assert_int_eq(lmp_pattern_match("re:\\s", "model.layers.3.mlp.gate_proj"), 0);
    ck_assert_int_eq(lmp_pattern_match("re:^model\\..*?\\.mlp\\.(gate|up)_proj$", "model.layers.3.mlp.up_proj"), 1);
    ck_assert_int_eq(lmp_pattern_match("re:layers\\.(?!0\\.)\\d+\\.mlp\\.down", "model.layers.0.mlp.down_proj"), 0);
    ck_assert_int_eq(lmp_pattern_match("re:layers\\.(?!0\\.)\\d+\\.mlp\\.down", "model.layers.4.mlp.down_proj"), 1);
    ck_assert_int_eq(lmp_pattern_match("re:q_proj", "model.layers.0.self_attn.q_proj"), 1);
    /* globs are unchanged: the whole name, or its tail after a dot */
    ck_assert_int_eq(lmp_pattern_match("q_proj", "model.layers.0.self_attn.q_proj"), 1);
    ck_assert_int_eq(lmp_pattern_match("mlp.*", "model.layers.0.mlp.up_proj"), 1);
    ck_assert_int_eq(lmp_pattern_match("model.layers.1*", "model.layers.0.mlp.up_proj"), 0);
    ck_assert_int_eq(lmp_pattern_match("proj", "model.layers.0.mlp.up_proj"), 0);

    /* The same through a loaded config, whose regexes are compiled once. */
    cfg_spec s = defaults();
    s.target = "re:layers\\\\.\\\\d\\\\.(self_attn|mlp)\\\\.\\\\w+?_proj";
    s.ignore = "re:layers\\\\.(?=0\\\\.).*?q_proj";
    s.match = "re:\\\\d\\\\.mlp\\\\.down";
    lmp_run_config *c = load_ok(&s);
    const lmp_stage *st = &c->variants[1].stages[0];
    ck_assert_ptr_nonnull(st->target_patterns[0].re);
    ck_assert_ptr_null(lmp_stage_params_for(st, "model.layers.0.self_attn.q_proj"));
    ck_assert_ptr_eq(lmp_stage_params_for(st, "model.layers.0.self_attn.k_proj"), st->params);
    ck_assert_ptr_eq(lmp_stage_params_for(st, "model.layers.3.mlp.down_proj"), st->overrides[0].params);
    ck_assert_ptr_null(lmp_stage_params_for(st, "lm_head"));
    ck_assert_int_eq(lmp_config_check_model_patterns(c, model), 0);
    lmp_config_free(c);
}
END_TEST

START_TEST(invalid_regex_names_file_and_line)
{
    cfg_spec s = defaults();
    s.ignore = "re:layers\\\\.([0-9]";
    expect_load_error(&s, LINE_IGNORE, "variants[1].pipeline[0].ignore[0]", "bad regular expression 'layers\\.([0-9]'");
    ck_assert_ptr_nonnull(strstr(lmp_last_error(), "at offset"));
    s = defaults();
    s.match = "optional:re:*_proj"; /* a glob's habit; "optional:" does not excuse a bad regex */
    expect_load_error(&s, LINE_MATCH, "variants[1].pipeline[0].overrides[0].match",
                      "bad regular expression '*_proj': quantifier does not follow a repeatable item at offset 0");
}
END_TEST

/* ---- the CLI: check reports it all without running anything -------------------------------- */
START_TEST(cli_check_reports_unmatched_pattern)
{
    static char out[65536];
    char args[1024];
    cfg_spec s = defaults();
    snprintf(args, sizeof args, "check %s 2>&1", write_cfg(&s));
    ck_assert_msg(lmp_test_cli(args, out, sizeof out) == 0, "%s", out);
    ck_assert_ptr_nonnull(strstr(out, ": ok: "));
    s.ignore = "model.layer.0.*";
    snprintf(args, sizeof args, "check %s 2>&1", write_cfg(&s));
    ck_assert_int_eq(lmp_test_cli(args, out, sizeof out), 1);
    ck_assert_msg(strstr(out, "test.cfg:20: variants[1].pipeline[0].ignore[0]: pattern 'model.layer.0.*' matches no linear"),
                  "%s", out);
    s = defaults();
    s.eval1 = in_tmp("missing.txt");
    snprintf(args, sizeof args, "check %s 2>&1", write_cfg(&s));
    ck_assert_int_eq(lmp_test_cli(args, out, sizeof out), 1);
    ck_assert_msg(strstr(out, "test.cfg:11: eval.texts[1]: ") && strstr(out, "missing.txt: cannot open"), "%s", out);
}
END_TEST

/* memory.expert_group_mb (a group of experts at a time, model/expert_pager.h): 1024 unless set, a
 * number of MiB (integer or not), 0 allowed, a negative or a string refused naming the key. */
START_TEST(memory_expert_group_mb)
{
    cfg_spec s = defaults();
    lmp_run_config *c = load_ok(&s);
    ck_assert(c->expert_group_mb == LMP_EXPERT_GROUP_MB_DEFAULT);
    lmp_config_free(c);
    /* the memory group on line 7, after the calibration group is closed there */
    s.calib_extra = " }; memory = { expert_group_mb = 0.5;";
    c = load_ok(&s);
    ck_assert(c->expert_group_mb == 0.5);
    lmp_config_free(c);
    s.calib_extra = " }; memory = { expert_group_mb = 0;";
    c = load_ok(&s);
    ck_assert(c->expert_group_mb == 0);
    lmp_config_free(c);
    s.calib_extra = " }; memory = { expert_group_mb = -1;";
    expect_load_error(&s, LINE_CALIB_EXTRA, "memory.expert_group_mb", "out of range");
    s.calib_extra = " }; memory = { expert_group_mb = \"1G\";";
    expect_load_error(&s, LINE_CALIB_EXTRA, "memory.expert_group_mb", "expected a number");
    s.calib_extra = " }; memory = { expert_groups = 4;";
    expect_load_error(&s, LINE_CALIB_EXTRA, "memory.expert_groups", "unknown setting");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("config");
    TCase *tc = tcase_create("config");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 30); /* a check that blocks on a FIFO fails here instead of hanging */
    tcase_add_test(tc, good_config_loads_and_keeps_origins);
    tcase_add_test(tc, memory_expert_group_mb);
    tcase_add_test(tc, model_missing);
    tcase_add_test(tc, model_folder_without_config_json);
    tcase_add_test(tc, model_is_a_fifo);
    tcase_add_test(tc, tokenizer_missing);
    tcase_add_test(tc, calibration_missing);
    tcase_add_test(tc, calibration_inputs_default_and_override);
    tcase_add_test(tc, calibration_inputs_bad_values_refused);
    tcase_add_test(tc, eval_text_missing);
    tcase_add_test(tc, eval_text_is_a_fifo);
    tcase_add_test(tc, eval_text_is_a_device_or_a_folder);
    tcase_add_test(tc, eval_text_unreadable);
    tcase_add_test(tc, lambada_missing);
    tcase_add_test(tc, unmatched_target);
    tcase_add_test(tc, unmatched_ignore);
    tcase_add_test(tc, unmatched_override);
    tcase_add_test(tc, optional_prefix_opts_out);
    tcase_add_test(tc, check_patterns_against_given_names);
    tcase_add_test(tc, python_style_regexes_match);
    tcase_add_test(tc, invalid_regex_names_file_and_line);
    tcase_add_test(tc, cli_check_reports_unmatched_pattern);
    suite_add_tcase(s, tc);
    return lmp_test_main(s);
}
