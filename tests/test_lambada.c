/* test_lambada.c — LAMBADA with lm-evaluation-harness's lambada_openai definition: the split of
 * each passage, joint tokenization, and the accuracy of stories260K on the first 1000 passages
 * against tools/ref/llama2c_ref.py (numpy, independent of this code). */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/error.h"
#include "base/ctx.h"
#include "eval/lambada.h"
#include "plugin/registry.h"
#include "testutil.h"

#define MODEL_DIR LMP_SOURCE_DIR "/models/stories260K"

static lmp_tokenizer *tok;

static void setup(void) { ck_assert_int_eq(lmp_tokenizer_load_llama2c(MODEL_DIR "/tok512.bin", 512, &tok), 0); }
static void teardown(void) { lmp_tokenizer_free(tok); }

static const char *write_jsonl(const char *content)
{
    static char path[] = "/tmp/lmp-lambada-XXXXXX";
    strcpy(path, "/tmp/lmp-lambada-XXXXXX");
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq((int)write(fd, content, strlen(content)), (int)strlen(content));
    close(fd);
    return path;
}

/* ids of text tokenized the llama2.c way (BOS first). */
static int64_t encode(const char *text, int32_t **ids)
{
    int64_t n;
    ck_assert_int_eq(lmp_tokenize(tok, text, strlen(text), 1, ids, &n), 0);
    return n;
}

START_TEST(split_and_joint_tokenization)
{
    const char *path = write_jsonl("{\"text\": \"The cat sat on the mat\"}\n"
                                   "{\"text\": \"a b  c\"}\n"
                                   "{\"text\": \"alone\"}\n");
    lmp_lambada l;
    ck_assert_int_eq(lmp_lambada_load(path, tok, 0, &l), 0);
    unlink(path);
    ck_assert_int_eq(l.n, 3);
    /* 1: target " mat"; the ids are the whole text's, the target is what follows the context's. */
    int32_t *whole, *ctx;
    int64_t nw = encode("The cat sat on the mat", &whole), nc = encode("The cat sat on the", &ctx);
    ck_assert_int_eq(l.items[0].n_ids, nw);
    ck_assert_int_eq(memcmp(l.items[0].ids, whole, (size_t)nw * sizeof *whole), 0);
    ck_assert_int_eq(l.items[0].n_target, nw - nc);
    free(whole);
    free(ctx);
    /* 2: split(' ') gives context "a b " whose trailing space moves: context "a b", target "  c". */
    nw = encode("a b  c", &whole);
    nc = encode("a b", &ctx);
    ck_assert_int_eq(l.items[1].n_target, nw - nc);
    free(whole);
    free(ctx);
    /* 3: no context: BOS stands in for it, the passage (encoded without BOS) is the target. */
    nw = encode("alone", &whole); /* BOS + the pieces */
    ck_assert_int_eq(l.items[2].ids[0], 1);
    ck_assert_int_eq(l.items[2].n_ids, nw);
    ck_assert_int_eq(l.items[2].n_target, nw - 1);
    ck_assert_int_eq(memcmp(l.items[2].ids + 1, whole + 1, (size_t)(nw - 1) * sizeof *whole), 0);
    free(whole);
    lmp_lambada_free(&l);
}
END_TEST

START_TEST(malformed_files)
{
    lmp_lambada l;
    const char *path = write_jsonl("{\"text\": \"fine passage here\"}\n{\"text\": oops}\n");
    ck_assert_int_lt(lmp_lambada_load(path, tok, 0, &l), 0);
    char where[64];
    snprintf(where, sizeof where, "%s:2", path);
    ck_assert_msg(strstr(lmp_last_error(), where), "%s", lmp_last_error());
    unlink(path);
    path = write_jsonl("{\"txt\": \"no text key\"}\n");
    ck_assert_int_lt(lmp_lambada_load(path, tok, 0, &l), 0);
    ck_assert_ptr_nonnull(strstr(lmp_last_error(), "text"));
    unlink(path);
    /* an empty passage has no target word (its tokens were once leaked here: the ASan build's
     * leak check holds it) */
    path = write_jsonl("{\"text\": \"a b\"}\n{\"text\": \"\"}\n");
    ck_assert_int_lt(lmp_lambada_load(path, tok, 0, &l), 0);
    ck_assert_msg(strstr(lmp_last_error(), ":2: the passage has no target word"), "%s", lmp_last_error());
    unlink(path);
    path = write_jsonl("\n\n");
    ck_assert_int_lt(lmp_lambada_load(path, tok, 0, &l), 0);
    ck_assert_ptr_nonnull(strstr(lmp_last_error(), "no passages"));
    unlink(path);
    ck_assert_int_lt(lmp_lambada_load("/nonexistent/lambada.jsonl", tok, 0, &l), 0);
    ck_assert_ptr_nonnull(strstr(lmp_last_error(), "/nonexistent/lambada.jsonl"));
}
END_TEST

START_TEST(stories260K_matches_reference)
{
    FILE *f = fopen(LMP_SOURCE_DIR "/tests/golden/lambada_stories260K.txt", "r");
    ck_assert_ptr_nonnull(f);
    char line[512];
    long long passages = -1, correct = -1;
    while (fgets(line, sizeof line, f))
        if (line[0] != '#') ck_assert_int_eq(sscanf(line, "%lld %lld", &passages, &correct), 2);
    fclose(f);
    ck_assert_int_gt(passages, 0);

    lmp_ctx ctx;
    lmp_ctx_init(&ctx);
    lmp_host_set_verbosity(&ctx, LMP_LOG_ERROR);
    lmp_registry reg;
    lmp_backend be;
    lmp_model *m;
    lmp_lambada l;
    lmp_lambada_score s;
    ck_assert_int_eq(lmp_registry_init(&reg, &ctx, NULL, 0), 0);
    ck_assert_int_eq(lmp_backend_open(&ctx, &reg, "cpu", NULL, &be), 0);
    ck_assert_int_eq(lmp_model_load(MODEL_DIR "/stories260K.bin", &m), 0);
    ck_assert_int_eq(lmp_lambada_load(LMP_DATA_DIR "/lambada/lambada_test.jsonl", tok, passages, &l), 0);
    lmp_block *blocks = lmp_model_blocks(m);
    ck_assert_int_eq(lmp_lambada_eval(&ctx, &be, m, &blocks, 1, &l, &s), 0);
    ck_assert_int_eq(s.passages, passages);
    ck_assert_int_eq(s.correct, correct);
    lmp_lambada_free(&l);
    lmp_model_free(m);
    lmp_backend_close(&be);
    lmp_registry_free(&reg);
    lmp_ctx_clear(&ctx);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("lambada");
    TCase *tc = tcase_create("lambada");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, split_and_joint_tokenization);
    tcase_add_test(tc, malformed_files);
    tcase_add_test(tc, stories260K_matches_reference);
    suite_add_tcase(s, tc);
    return lmp_test_main(s);
}
