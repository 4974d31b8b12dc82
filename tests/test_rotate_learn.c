/* test_rotate_learn.c — learned rotations (train/rotation_learn.c, model.rotate r1/r2 "learned"),
 * on stories260K and its bundled calibration text:
 *   - the gradient with respect to R1 and R2 (every linear's pullback, the embeddings', the
 *     head's) equals central finite differences of the loss, along random directions, at a
 *     non-orthogonal R (where the model's function does depend on R; unquantized, so the loss is
 *     smooth); and along a Cayley curve R(t) = C(tA) R0, d/dt L = -<G, A R0> (stories260K, and
 *     the Qwen2 fixture: biased q/k/v, grouped heads);
 *   - the Cayley step keeps R orthogonal (|R^T R - I| < 1e-10 after 20 steps in double);
 *   - learning at W4A4 lowers the quantized model's loss on the training windows below the
 *     Hadamard's, leaves the learned R1 and R2 orthogonal (|R R^T - I| < 1e-5 as they are
 *     applied) and away from the identity, and the learned, rotated unquantized model gives the
 *     unrotated one's log-probabilities to 1e-5 (of the largest |log-prob|) and its perplexity,
 *     also once exported to GGUF and read back;
 *   - learn { } without a learned rotation, and learned rotations without calibration text, are
 *     refused by the config, naming why. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/error.h"
#include "export/export.h"
#include "model/forward.h"
#include "model/rotate.h"
#include "text/tokenizer_open.h"
#include "train/rotation_learn.h"

#include "teststage.h"
#include "testutil.h"

#define STORIES LMP_SOURCE_DIR "/models/stories260K/stories260K.bin"
#define TOK LMP_SOURCE_DIR "/models/stories260K/tok512.bin"
#define CALIB LMP_SOURCE_DIR "/models/stories260K/tinystories-synth-calib.txt"
#define QWEN2 LMP_SOURCE_DIR "/tests/golden/qwen2-tiny"

/* n windows of T tokens of the bundled calibration text, cut in order. */
static lmp_windows calib_windows(const lmp_model *m, int64_t n, int64_t T)
{
    lmp_tokenizer *tok;
    ck_assert_msg(lmp_open_tokenizer(m, TOK, &tok) == 0, "%s", lmp_last_error());
    int32_t *ids;
    int64_t n_ids;
    ck_assert_msg(lmp_tokenize_file(tok, CALIB, &ids, &n_ids) == 0, "%s", lmp_last_error());
    lmp_windows w = {0};
    ck_assert_msg(lmp_windows_cut(&ctx, ids, n_ids, n, T, 0, CALIB, &w) == 0, "%s", lmp_last_error());
    ck_assert_int_eq(w.n, n);
    free(ids);
    lmp_tokenizer_free(tok);
    return w;
}

static lmp_model *rotated_stories(lmp_rot_kind r1, lmp_rot_kind r2, int r4)
{
    lmp_model *m;
    ck_assert_int_eq(lmp_model_load(STORIES, &m), 0);
    const lmp_rotate_opts o = {.r1 = r1, .r2 = r2, .r4 = r4, .seed = 0};
    ck_assert_msg(lmp_model_rotate(m, &o) == 0, "%s", lmp_last_error());
    return m;
}

static uint64_t rng_state = 42;
static double uniform(void) /* in [-1, 1) */
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(rng_state >> 11) / 4503599627370496.0 - 1.0;
}

/* s's loss (cross-entropy, no reference) on the window at its current R. */
static double loss_at(lmp_rotlearn *s, const int32_t *tok)
{
    double l;
    lmp_rotlearn_touch(s);
    ck_assert_msg(lmp_rotlearn_loss(s, tok, NULL, &l) == 0, "%s", lmp_last_error());
    return l;
}

/* The gradient check on the model at path (rotated R1 + R2 learned, R4 online), on the window w. */
static void check_gradient(const char *path, int64_t T, int real_text)
{
    lmp_model *m;
    ck_assert_int_eq(lmp_model_load(path, &m), 0);
    const lmp_rotate_opts ro = {.r1 = LMP_ROT_LEARNED, .r2 = LMP_ROT_LEARNED, .r4 = 1}; /* through the online R4 too */
    ck_assert_msg(lmp_model_rotate(m, &ro) == 0, "%s", lmp_last_error());
    const int64_t d = m->arch.dim, hd = m->arch.head_dim, L = m->arch.n_layers;
    lmp_windows w = real_text ? calib_windows(m, 1, T) : windows(1, (int)T, m->arch.vocab, 5);
    printf("%s:\n", path);
    rng_state = 42; /* the same directions whichever tests ran before (CK_FORK=no) */
    lmp_rotlearn *s;
    ck_assert_msg(lmp_rotlearn_init(&be, m, 1, 1, 0, 0, T, &s) == 0, "%s", lmp_last_error());
    double *R1 = lmp_rotlearn_r1(s), *R2 = lmp_rotlearn_r2(s);
    const int64_t n1 = d * d, n2 = L * hd * hd;
    for (int64_t i = 0; i < n1; i++) R1[i] += 0.05 * uniform(); /* off the manifold: L depends on R */
    for (int64_t i = 0; i < n2; i++) R2[i] += 0.05 * uniform();
    double *R1_0 = malloc((size_t)n1 * sizeof *R1_0), *R2_0 = malloc((size_t)n2 * sizeof *R2_0);
    double *E1 = malloc((size_t)n1 * sizeof *E1), *E2 = malloc((size_t)n2 * sizeof *E2);
    memcpy(R1_0, R1, (size_t)n1 * sizeof *R1), memcpy(R2_0, R2, (size_t)n2 * sizeof *R2);
    lmp_rotlearn_touch(s);
    lmp_rotlearn_zero_grad(s);
    double l0;
    ck_assert_msg(lmp_rotlearn_loss_grad(s, w.tokens, NULL, 1, &l0) == 0, "%s", lmp_last_error());
    const float *G1 = lmp_rotlearn_grad_r1(s), *G2 = lmp_rotlearn_grad_r2(s);
    for (int which = 0; which < 3; which++) { /* R1 alone, R2 alone, both */
        double analytic = 0;
        for (int64_t i = 0; i < n1; i++) E1[i] = which != 1 ? uniform() : 0, analytic += G1[i] * E1[i];
        for (int64_t i = 0; i < n2; i++) E2[i] = which != 0 ? uniform() : 0, analytic += G2[i] * E2[i];
        /* central differences at h and h/2, Richardson-extrapolated: the loss curves fast along R1
         * (at h = 1e-3 alone the truncation error is ~1e-2), and a smaller h drowns a small
         * derivative in the loss's f32 rounding */
        double D[2];
        for (int k = 0; k < 2; k++) {
            const double h = k ? 1e-3 : 2e-3;
            for (int64_t i = 0; i < n1; i++) R1[i] = R1_0[i] + h * E1[i];
            for (int64_t i = 0; i < n2; i++) R2[i] = R2_0[i] + h * E2[i];
            const double lp = loss_at(s, w.tokens);
            for (int64_t i = 0; i < n1; i++) R1[i] = R1_0[i] - h * E1[i];
            for (int64_t i = 0; i < n2; i++) R2[i] = R2_0[i] - h * E2[i];
            D[k] = (lp - loss_at(s, w.tokens)) / (2 * h);
        }
        const double fd = (4 * D[1] - D[0]) / 3;
        printf("dL along a random direction (%s): analytic %.6f, finite differences %.6f (loss %.5f)\n",
               which == 0 ? "R1" : which == 1 ? "R2" : "R1 and R2", analytic, fd, l0);
        ck_assert_msg(fabs(analytic) > 1e-3, "the gradient is nearly zero: %g", analytic);
        ck_assert_msg(fabs(analytic - fd) < 0.02 * fabs(fd) + 1e-4, "analytic %g vs finite differences %g", analytic, fd);
    }
    /* the Cayley curve R1(t) = C(tA) R1_0: dL/dt at 0 = <G1, -A R1_0> */
    double *A = calloc((size_t)n1, sizeof *A), *work = malloc((size_t)(2 * n1) * sizeof *work);
    for (int64_t i = 0; i < d; i++)
        for (int64_t j = 0; j < i; j++) A[i * d + j] = uniform(), A[j * d + i] = -A[i * d + j];
    double analytic = 0;
    for (int64_t i = 0; i < d; i++)
        for (int64_t j = 0; j < d; j++) {
            double ar = 0;
            for (int64_t k = 0; k < d; k++) ar += A[i * d + k] * R1_0[k * d + j];
            analytic -= G1[i * d + j] * ar;
        }
    memcpy(R2, R2_0, (size_t)n2 * sizeof *R2);
    double D[2];
    for (int k = 0; k < 2; k++) { /* as above */
        const double t = k ? 1e-3 : 2e-3;
        memcpy(R1, R1_0, (size_t)n1 * sizeof *R1);
        lmp_cayley_apply(d, A, t, R1, work);
        const double lp = loss_at(s, w.tokens);
        memcpy(R1, R1_0, (size_t)n1 * sizeof *R1);
        lmp_cayley_apply(d, A, -t, R1, work);
        D[k] = (lp - loss_at(s, w.tokens)) / (2 * t);
    }
    const double fd = (4 * D[1] - D[0]) / 3;
    printf("dL/dt along the Cayley curve C(tA) R1: analytic %.6f, finite differences %.6f\n", analytic, fd);
    ck_assert_msg(fabs(analytic) > 1e-3, "the Cayley derivative is nearly zero: %g", analytic);
    ck_assert_msg(fabs(analytic - fd) < 0.02 * fabs(fd) + 1e-4, "analytic %g vs finite differences %g", analytic, fd);
    free(A), free(work), free(R1_0), free(R2_0), free(E1), free(E2);
    lmp_rotlearn_free(s);
    lmp_windows_free(&w);
    lmp_model_free(m);
}

START_TEST(gradient_matches_finite_differences)
{
    check_gradient(STORIES, 32, 1);
    check_gradient(QWEN2, 16, 0); /* biased q/k/v (v's bias turns with R2), grouped heads */
}
END_TEST

START_TEST(cayley_steps_stay_orthogonal)
{
    const int64_t n = 48;
    double *R = calloc((size_t)(n * n), sizeof *R), *G = malloc((size_t)(n * n) * sizeof *G);
    double *A = malloc((size_t)(n * n) * sizeof *A), *work = malloc((size_t)(2 * n * n) * sizeof *work);
    for (int64_t i = 0; i < n; i++) R[i * n + i] = 1;
    rng_state = 7;
    for (int step = 0; step < 20; step++) {
        for (int64_t i = 0; i < n * n; i++) G[i] = uniform();
        lmp_cayley_skew(n, G, R, A);
        lmp_cayley_apply(n, A, 0.3, R, work);
    }
    double worst = 0, moved = 0;
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < n; j++) {
            double dot = 0;
            for (int64_t k = 0; k < n; k++) dot += R[k * n + i] * R[k * n + j];
            worst = fmax(worst, fabs(dot - (i == j)));
            moved = fmax(moved, fabs(R[i * n + j] - (i == j)));
        }
    printf("20 Cayley steps: |R^T R - I| <= %.2e, R moved by %.3f\n", worst, moved);
    ck_assert_msg(worst < 1e-10, "not orthogonal: %g", worst);
    ck_assert_msg(moved > 0.1, "R did not move: %g", moved);
    free(R), free(G), free(A), free(work);
}
END_TEST

/* |Q Q^T - I| of a rotation as it is applied (each row of the identity through it), and how far
 * it is from the identity. */
static void orthogonality(const lmp_rotation *r, int64_t n, double *worst, double *moved)
{
    float *Q = calloc((size_t)(n * n), sizeof *Q);
    for (int64_t i = 0; i < n; i++) {
        Q[i * n + i] = 1.0f;
        lmp_rotation_apply(r, Q + i * n, 1);
    }
    *worst = 0, *moved = 0;
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < n; j++) {
            double dot = 0;
            for (int64_t k = 0; k < n; k++) dot += (double)Q[i * n + k] * Q[j * n + k];
            *worst = fmax(*worst, fabs(dot - (i == j)));
            *moved = fmax(*moved, fabs((double)Q[i * n + j] - (i == j)));
        }
    free(Q);
}

static float *logprobs(lmp_model *m, const int32_t *tok, int64_t T, double *ppl)
{
    const int64_t V = m->arch.vocab;
    float *out = malloc((size_t)(T * V) * sizeof *out);
    lmp_block *blocks = lmp_model_blocks(m);
    ck_assert_msg(blocks != NULL, "%s", lmp_last_error());
    ck_assert_int_eq(lmp_forward(&be, m, blocks, tok, T, 1, out), 0);
    double nll = 0;
    for (int64_t t = 0; t + 1 < T; t++) nll -= out[t * V + tok[t + 1]];
    *ppl = exp(nll / (double)(T - 1));
    return out;
}

START_TEST(learning_lowers_the_quantized_loss)
{
    /* without R4, so that it can be exported (an online rotation cannot) */
    lmp_model *m = rotated_stories(LMP_ROT_LEARNED, LMP_ROT_LEARNED, 0);
    lmp_windows w = calib_windows(m, 8, 64);
    lmp_rotate_opts o = {.r1 = LMP_ROT_LEARNED, .r2 = LMP_ROT_LEARNED};
    o.learn = (lmp_rotate_learn_opts){.steps = 20, .lr = 1.5, .w_bits = 4, .a_bits = 4, .loss = LMP_LOSS_KL};
    lmp_learn_result res;
    ck_assert_msg(lmp_rotation_learn(&ctx, &be, m, &w, &o, &res) == 0, "%s", lmp_last_error());
    printf("W4A4 KL to the unquantized model on the 8 training windows: Hadamard %.6f -> learned %.6f "
           "(best batch %.6f at step %lld, %.1f s)\n",
           res.loss_first, res.loss_final, res.best_batch_loss, (long long)res.best_step, res.seconds);
    ck_assert_msg(res.loss_final < 0.97 * res.loss_first, "the loss did not go down: %g -> %g", res.loss_first,
                  res.loss_final);
    const lmp_rotation *r1, *r2;
    lmp_model_rotation_learned(m, 0, &r1, &r2);
    ck_assert_ptr_nonnull(r1);
    ck_assert_ptr_nonnull(r2);
    double worst, moved;
    orthogonality(r1, m->arch.dim, &worst, &moved);
    printf("learned R1: |R R^T - I| <= %.2e, moved from the identity by %.3f\n", worst, moved);
    ck_assert_msg(worst < 1e-5 && moved > 1e-3, "R1: %g, %g", worst, moved);
    for (int64_t l = 0; l < m->arch.n_layers; l++) {
        lmp_model_rotation_learned(m, l, &r1, &r2);
        orthogonality(r2, m->arch.head_dim, &worst, &moved);
        printf("learned R2 of layer %lld: |R R^T - I| <= %.2e, moved by %.3f\n", (long long)l, worst, moved);
        ck_assert_msg(worst < 1e-5, "R2 %lld: %g", (long long)l, worst);
    }
    /* exact in float: the learned, rotated model is the unrotated one */
    lmp_model *m0;
    ck_assert_int_eq(lmp_model_load(STORIES, &m0), 0);
    const int64_t T = 64, V = m->arch.vocab;
    double ppl0, ppl1;
    float *a = logprobs(m0, w.tokens + T, T, &ppl0), *b = logprobs(m, w.tokens + T, T, &ppl1);
    double diff = 0, scale = 1;
    for (int64_t i = 0; i < T * V; i++) diff = fmax(diff, fabs((double)a[i] - b[i])), scale = fmax(scale, fabs((double)a[i]));
    printf("learned rotations: log-probs differ by <= %.2e (of up to %.1f), ppl %.6f -> %.6f\n", diff, scale, ppl0, ppl1);
    ck_assert_msg(diff < 1e-5 * scale, "log-probs differ by %g", diff);
    ck_assert_msg(fabs(ppl1 / ppl0 - 1) < 1e-5, "ppl %g vs %g", ppl1, ppl0);
    /* exported (fused weights, like fixed R1/R2) and read back: still the unrotated model */
    char out[] = "/tmp/lmp_rotlearn_XXXXXX.gguf";
    const int fd = mkstemps(out, 5);
    ck_assert_int_ge(fd, 0);
    close(fd);
    const lmp_block_source src = lmp_block_source_model(m);
    const lmp_export_opts eo = {.path = out, .variant = "learned", .pipeline = "[]", .tokenizer_path = TOK};
    ck_assert_msg(lmp_export_model(&ctx, m, &src, &eo) == 0, "%s", lmp_last_error());
    lmp_model *e;
    ck_assert_msg(lmp_model_load(out, &e) == 0, "%s", lmp_last_error());
    double ppl2, back = 0;
    float *c = logprobs(e, w.tokens + T, T, &ppl2);
    for (int64_t i = 0; i < T * V; i++) back = fmax(back, fabs((double)a[i] - c[i]));
    printf("exported and read back: log-probs differ from the unrotated model's by <= %.2e, ppl %.6f\n", back, ppl2);
    ck_assert_msg(back < 1e-5 * scale, "the export read back differs by %g", back);
    unlink(out);
    free(c);
    lmp_model_free(e);
    free(a), free(b);
    lmp_model_free(m0);
    lmp_windows_free(&w);
    lmp_model_free(m);
}
END_TEST

/* A config from text, and the message it is refused with (NULL: loaded). */
static const char *config_error(const char *text)
{
    char path[] = "/tmp/lmp_rotlearn_XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    FILE *f = fdopen(fd, "w");
    fprintf(f, "%s", text);
    fclose(f);
    lmp_run_config *c = NULL;
    int st = lmp_config_load(&ctx, path, &c);
    unlink(path);
    if (!st) {
        lmp_config_free(c);
        return NULL;
    }
    return lmp_last_error();
}

START_TEST(config_refuses_what_cannot_learn)
{
    const char *head = "model = { path = \"" STORIES "\"; tokenizer = \"" TOK "\";\n";
    const char *tail = "eval = { texts = [ \"" CALIB "\" ]; seq_len = 64; };\nvariants = ( { name = \"fp32\"; } );\n";
    char text[2048];
    snprintf(text, sizeof text, "%s rotate = { r1 = \"hadamard\"; learn = { steps = 5; }; }; };\n%s", head, tail);
    const char *e = config_error(text);
    printf("learn without a learned rotation: %s\n", e ? e : "(loaded)");
    ck_assert_ptr_nonnull(e);
    ck_assert_ptr_nonnull(strstr(e, "must be \"learned\""));
    snprintf(text, sizeof text, "%s rotate = { r1 = \"learned\"; }; };\n%s", head, tail);
    e = config_error(text);
    printf("learned without calibration: %s\n", e ? e : "(loaded)");
    ck_assert_ptr_nonnull(e);
    ck_assert_ptr_nonnull(strstr(e, "calibration.text"));
    snprintf(text, sizeof text, "%s rotate = { r1 = \"learned\"; r2 = \"learned\"; learn = { steps = 5; lr = 0.5; w_bits = 4; "
             "a_bits = 4; loss = \"ce\"; keep_best = true; }; }; };\ncalibration = { text = \"" CALIB "\"; samples = 2; seq_len = 64; };\n%s",
             head, tail);
    e = config_error(text);
    ck_assert_msg(e == NULL, "%s", e);
}
END_TEST

int main(void)
{
    setvbuf(stdout, NULL, _IONBF, 0);
    Suite *s = suite_create("rotate_learn");
    TCase *tc = tcase_create("rotate_learn");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, cayley_steps_stay_orthogonal);
    tcase_add_test(tc, gradient_matches_finite_differences);
    tcase_add_test(tc, learning_lowers_the_quantized_loss);
    tcase_add_test(tc, config_refuses_what_cannot_learn);
    suite_add_tcase(s, tc);
    return lmp_test_main(s);
}
