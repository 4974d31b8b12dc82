/* test_model.c — the bundled model end to end against independent references:
 *  - greedy generation reproduces llama2.c's own output byte for byte;
 *  - `lmpress eval` perplexities match tools/ref/llama2c_ref.py (numpy) to 1e-4 relative;
 *  - the quickstart table shows what RTN must show: W8 and W8A8 close to fp32, W3 worse than W4. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "model/model.h"

#include "testutil.h"

#define MODEL_DIR LMP_SOURCE_DIR "/models/stories260K"

static char output[1 << 16];

static int run(const char *args) { return lmp_test_cli(args, output, sizeof output); }

START_TEST(header_of_stories260K)
{
    lmp_model *m;
    ck_assert_int_eq(lmp_model_load(MODEL_DIR "/stories260K.bin", &m), 0);
    /* The numbers assets/README.md publishes for this checkpoint. */
    ck_assert_int_eq(m->arch.dim, 64);
    ck_assert_int_eq(m->arch.n_layers, 5);
    ck_assert_int_eq(m->arch.n_heads, 8);
    ck_assert_int_eq(m->arch.n_kv_heads, 4);
    ck_assert_int_eq(m->arch.hidden, 172);
    ck_assert_int_eq(m->arch.vocab, 512);
    ck_assert_int_eq(m->arch.seq_len, 512);
    ck_assert_ptr_eq(m->lm_head, m->tok_emb); /* tied classifier */
    ck_assert_str_eq(m->blocks[2].linears[LMP_ROLE_DOWN].name, "model.layers.2.mlp.down_proj");
    ck_assert_int_eq(m->blocks[2].linears[LMP_ROLE_DOWN].in, 172);
    ck_assert_int_eq(m->blocks[2].linears[LMP_ROLE_K].out, 32);
    /* Per block: q, o [64,64]; k, v [32,64]; gate, up [172,64]; down [64,172]. */
    ck_assert_int_eq(lmp_model_block_linear_params(m), 5 * (2 * 64 * 64 + 2 * 32 * 64 + 3 * 172 * 64));
    lmp_model_free(m);
}
END_TEST

START_TEST(greedy_matches_llama2c)
{
    ck_assert_int_eq(run("generate --steps 256"), 0);
    FILE *f = fopen(MODEL_DIR "/reference_greedy_t0.txt", "rb");
    ck_assert_ptr_nonnull(f);
    static char ref[1 << 16];
    size_t n = fread(ref, 1, sizeof ref - 1, f);
    fclose(f);
    ref[n] = 0;
    ck_assert_uint_eq(strlen(output), n);
    ck_assert_msg(memcmp(output, ref, n) == 0, "greedy output differs:\n%s", output);
}
END_TEST

/* Looks up `name seq_len` in the golden file written by tools/ref/llama2c_ref.py. */
static void golden(const char *name, int L, long long *tokens, long long *windows, double *ppl)
{
    FILE *f = fopen(LMP_SOURCE_DIR "/tests/golden/ppl_stories260K.txt", "r");
    ck_assert_ptr_nonnull(f);
    char line[512], n[256];
    int l, found = 0;
    while (!found && fgets(line, sizeof line, f))
        found = line[0] != '#' && sscanf(line, "%255s %d %lld %lld %lf", n, &l, tokens, windows, ppl) == 5 &&
                strcmp(n, name) == 0 && l == L;
    fclose(f);
    ck_assert_msg(found, "no golden entry for %s L=%d", name, L);
}

static void check_eval(const char *path, const char *name)
{
    long long tokens, windows;
    double ref_ppl;
    golden(name, 256, &tokens, &windows, &ref_ppl);
    char args[1024];
    snprintf(args, sizeof args, "--quiet eval --text %s --seq-len 256 --json", path);
    ck_assert_int_eq(run(args), 0);
    long long got_tokens = -1, got_windows = -1;
    double got_ppl = -1;
    const char *p = strstr(output, "\"tokens\": ");
    ck_assert_ptr_nonnull(p);
    ck_assert_int_eq(sscanf(p, "\"tokens\": %lld, \"windows\": %lld, \"scored\": %*d, \"ppl\": %lf", &got_tokens, &got_windows, &got_ppl), 3);
    ck_assert_int_eq(got_tokens, tokens);
    ck_assert_int_eq(got_windows, windows);
    double rel = fabs(got_ppl - ref_ppl) / ref_ppl;
    ck_assert_msg(rel < 1e-4, "%s: ppl %.8f vs reference %.8f (rel %.2e)", name, got_ppl, ref_ppl, rel);
}

START_TEST(eval_matches_reference_in_domain) { check_eval(MODEL_DIR "/tinystories-synth-eval.txt", "tinystories-synth-eval.txt"); }
END_TEST

START_TEST(eval_matches_reference_wikitext) { check_eval(LMP_DATA_DIR "/wikitext-2/wiki.test.raw", "wiki.test.raw"); }
END_TEST

/* Reads the quickstart CSV: variant -> (bits/w, ppl, kld, top1). */
typedef struct row { char name[64]; double bits, ppl, ratio, kld, top1; } row;

static int find(const row *rows, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (strcmp(rows[i].name, name) == 0) return i;
    ck_abort_msg("variant %s missing from the quickstart table", name);
    return -1;
}

START_TEST(quickstart_table_shows_rtn_behaviour)
{
    char csv[] = "/tmp/lmpress-quickstart-XXXXXX";
    int fd = mkstemp(csv);
    ck_assert_int_ge(fd, 0);
    char args[1024];
    snprintf(args, sizeof args, "--quiet compare %s/configs/quickstart.cfg --csv %s > /dev/null", LMP_SOURCE_DIR, csv);
    ck_assert_int_eq(run(args), 0);
    close(fd); /* compare replaces the file (temporary file, then rename): read it by name */
    FILE *f = fopen(csv, "r");
    ck_assert_ptr_nonnull(f);
    char line[1024];
    row rows[16];
    int n = 0;
    ck_assert_ptr_nonnull(fgets(line, sizeof line, f)); /* header */
    while (n < 16 && fgets(line, sizeof line, f)) {
        row *r = &rows[n];
        ck_assert_int_eq(sscanf(line, "%63[^,],%lf,%lf,%lf,%lf,%lf", r->name, &r->bits, &r->ppl, &r->ratio, &r->kld, &r->top1), 6);
        n++;
    }
    fclose(f);
    unlink(csv);
    const row *fp = &rows[find(rows, n, "fp32")], *w8 = &rows[find(rows, n, "w8-channel")],
              *w8a8 = &rows[find(rows, n, "w8a8-static")], *w4 = &rows[find(rows, n, "w4-g32")],
              *w3 = &rows[find(rows, n, "w3-g32")];
    ck_assert_double_eq(fp->kld, 0.0);
    ck_assert_double_eq(fp->top1, 1.0); /* CSV: a fraction */
    ck_assert_msg(w8->kld < 0.01, "W8 per-channel KLD %g", w8->kld);
    ck_assert_msg(w8a8->kld < 0.05, "W8A8 KLD %g", w8a8->kld);
    ck_assert_msg(w3->kld > 2 * w4->kld && w3->ppl > w4->ppl * 1.5, "W3 (kld %g, ppl %g) not clearly worse than W4 (kld %g, ppl %g)",
                  w3->kld, w3->ppl, w4->kld, w4->ppl);
    ck_assert_msg(w4->kld > w8->kld, "W4 not worse than W8");
    /* b bits + an fp16 scale per group of 32; rows of 172 end in a ragged group (6 per row). */
    double weights = 5.0 * (2 * 64 * 64 + 2 * 32 * 64 + 3 * 172 * 64);
    double scales = 5.0 * 16 * ((64 + 64 + 32 + 32 + 172 + 172) * 2 + 64 * 6);
    ck_assert_double_eq_tol(w4->bits, 4.0 + scales / weights, 0.005); /* the table prints 2 decimals */
    ck_assert_double_eq_tol(w3->bits, 3.0 + scales / weights, 0.005);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("model");
    TCase *tc = tcase_create("stories260K");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, header_of_stories260K);
    tcase_add_test(tc, greedy_matches_llama2c);
    tcase_add_test(tc, eval_matches_reference_in_domain);
    tcase_add_test(tc, eval_matches_reference_wikitext);
    tcase_add_test(tc, quickstart_table_shows_rtn_behaviour);
    suite_add_tcase(s, tc);
    return lmp_test_main(s);
}
