/* rotate.c — see rotate.h.  A rotation is kept as the map of a row x <- x Q, applied to every
 * row (or column, through a gather) it turns: Q = diag(signs) K with K = H_a/sqrt(a) ⊗ R_m for
 * "hadamard" (x viewed as X[a, m]: X <- H X R, a fast Walsh-Hadamard over a, then R on the right;
 * R_m random orthogonal) and "full_hadamard" (R_m a Paley Hadamard matrix over sqrt(m)), or K = a
 * dense random orthogonal matrix for "orthogonal". */
#include "model/rotate.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "plugin/backend.h"

struct lmp_rotation {
    lmp_rot_kind kind;
    int64_t n, a, m; /* n = a * m */
    float *signs;    /* [n] */
    double *R;       /* [m, m] (hadamard) or [n, n] (orthogonal), row-major */
    double *buf;     /* [n] scratch */
    double *row;     /* [m] scratch */
};

const char *lmp_rot_kind_name(lmp_rot_kind k)
{
    return k == LMP_ROT_HADAMARD     ? "hadamard"
           : k == LMP_ROT_ORTHOGONAL ? "orthogonal"
           : k == LMP_ROT_LEARNED    ? "learned"
           : k == LMP_ROT_FULL_HADAMARD ? "full_hadamard"
                                     : "none";
}

int lmp_rot_kind_parse(const char *name)
{
    for (int k = LMP_ROT_NONE; k <= LMP_ROT_FULL_HADAMARD; k++)
        if (strcmp(name, lmp_rot_kind_name((lmp_rot_kind)k)) == 0) return k;
    return -1;
}

/* splitmix64: a seeded stream (the rotation depends on the seed alone). */
static uint64_t next_u64(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double next_normal(uint64_t *s)
{
    const double u1 = ((double)(next_u64(s) >> 11) + 0.5) / 9007199254740992.0;
    const double u2 = (double)(next_u64(s) >> 11) / 9007199254740992.0;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* A random orthogonal n×n matrix: modified Gram-Schmidt on the rows of a Gaussian one, twice
 * (so the rows are orthonormal to double precision). */
static void random_orthogonal(double *R, int64_t n, uint64_t *s)
{
    for (int64_t i = 0; i < n * n; i++) R[i] = next_normal(s);
    for (int pass = 0; pass < 2; pass++)
        for (int64_t i = 0; i < n; i++) {
            double *r = R + i * n;
            for (int64_t k = 0; k < i; k++) {
                const double *q = R + k * n;
                double d = 0;
                for (int64_t j = 0; j < n; j++) d += r[j] * q[j];
                for (int64_t j = 0; j < n; j++) r[j] -= d * q[j];
            }
            double nn = 0;
            for (int64_t j = 0; j < n; j++) nn += r[j] * r[j];
            nn = 1.0 / sqrt(nn);
            for (int64_t j = 0; j < n; j++) r[j] *= nn;
        }
}

static int is_prime(int64_t q)
{
    if (q < 2) return 0;
    for (int64_t d = 2; d * d <= q; d++)
        if (q % d == 0) return 0;
    return 1;
}

/* Legendre's symbol of x mod the odd prime q: 0, 1 (a square) or -1. */
static int legendre(int64_t x, int64_t q)
{
    x = ((x % q) + q) % q;
    if (x == 0) return 0;
    int64_t r = 1, b = x, e = (q - 1) / 2;
    for (; e; e >>= 1, b = b * b % q)
        if (e & 1) r = r * b % q;
    return r == 1 ? 1 : -1;
}

/* The prime q of a Paley Hadamard matrix of order p (p = q + 1 with q ≡ 3 mod 4: construction I;
 * p = 2(q + 1) with q ≡ 1 mod 4: II), or 0.  Order 1 and 2 are Sylvester's: q = 1. */
static int64_t paley_prime(int64_t p)
{
    if (p == 1 || p == 2) return 1;
    if (p % 4) return 0;
    if (is_prime(p - 1) && (p - 1) % 4 == 3) return p - 1;
    if (is_prime(p / 2 - 1) && (p / 2 - 1) % 4 == 1) return p / 2 - 1;
    return 0;
}

/* H[p, p] / sqrt(p), H a Hadamard matrix (H H^T = p I) by Paley's construction from q:
 * Q[i][j] = legendre(j - i), the Jacobsthal matrix; I: H = I + S, S = [[0, 1^T], [-1, Q]] (skew);
 * II: C = [[0, 1^T], [1, Q]] (symmetric), H = [[C + I, C - I], [C - I, -C - I]]. */
static void paley(int64_t p, int64_t q, double *H)
{
    const double s = 1.0 / sqrt((double)p);
    if (q == 1) { /* H_1 = [1], H_2 = [[1, 1], [1, -1]] */
        for (int64_t i = 0; i < p * p; i++) H[i] = (i == p * p - 1 && p == 2 ? -1.0 : 1.0) * s;
        return;
    }
    const int64_t c = q + 1; /* the order of S (I) or C (II) */
    for (int64_t i = 0; i < c; i++)
        for (int64_t j = 0; j < c; j++) {
            const double e = i == 0 ? (j == 0 ? 0.0 : 1.0)
                             : j == 0 ? (p == c ? -1.0 : 1.0)
                                      : (double)legendre(j - i, q);
            if (p == c) {
                H[i * p + j] = (e + (i == j)) * s;
            } else {
                const double d = i == j;
                H[i * p + j] = (e + d) * s;
                H[i * p + c + j] = (e - d) * s;
                H[(c + i) * p + j] = (e - d) * s;
                H[(c + i) * p + c + j] = (-e - d) * s;
            }
        }
}

int lmp_rotation_make(lmp_rot_kind kind, int64_t n, uint64_t seed, lmp_rotation **out)
{
    *out = NULL;
    if (kind != LMP_ROT_HADAMARD && kind != LMP_ROT_ORTHOGONAL && kind != LMP_ROT_FULL_HADAMARD)
        return lmp_fail(LMP_EINVAL, "rotate: no rotation kind %d", (int)kind);
    int64_t a = 1, q = 0;
    while (kind != LMP_ROT_ORTHOGONAL && n % (a * 2) == 0) a *= 2;
    if (kind == LMP_ROT_FULL_HADAMARD) { /* the odd factor times the fewest powers of 2 Paley takes */
        while (a > 1 && !(q = paley_prime(n / a))) a /= 2;
        if (!q && !(q = paley_prime(n / a)))
            return lmp_fail(LMP_EUNSUPPORTED, "rotate: no full Hadamard matrix of width %lld here (it needs 2^k times 1, "
                            "2 or a Paley order q + 1 or 2(q + 1), q prime): use \"hadamard\"", (long long)n);
    }
    lmp_rotation *r = calloc(1, sizeof *r);
    if (!r) return lmp_fail(LMP_ENOMEM, "out of memory");
    r->kind = kind;
    r->n = n;
    r->a = a;
    r->m = n / a;
    r->signs = malloc((size_t)n * sizeof *r->signs);
    r->R = malloc((size_t)(r->m * r->m) * sizeof *r->R);
    r->buf = malloc((size_t)n * sizeof *r->buf);
    r->row = malloc((size_t)r->m * sizeof *r->row);
    if (!r->signs || !r->R || !r->buf || !r->row) {
        lmp_rotation_free(r);
        return lmp_fail(LMP_ENOMEM, "out of memory for a %lld-wide rotation", (long long)n);
    }
    uint64_t s = seed ^ ((uint64_t)n * 0x2545F4914F6CDD1Dull);
    for (int64_t i = 0; i < n; i++) r->signs[i] = (next_u64(&s) >> 63) ? -1.0f : 1.0f;
    if (kind == LMP_ROT_FULL_HADAMARD) paley(r->m, q, r->R);
    else random_orthogonal(r->R, r->m, &s);
    *out = r;
    return 0;
}

int lmp_rotation_from_matrix(int64_t n, const double *R, lmp_rotation **out)
{
    *out = NULL;
    lmp_rotation *r = calloc(1, sizeof *r);
    if (!r) return lmp_fail(LMP_ENOMEM, "out of memory");
    r->kind = LMP_ROT_ORTHOGONAL;
    r->n = r->m = n;
    r->a = 1;
    r->signs = malloc((size_t)n * sizeof *r->signs);
    r->R = malloc((size_t)(n * n) * sizeof *r->R);
    r->buf = malloc((size_t)n * sizeof *r->buf);
    r->row = malloc((size_t)n * sizeof *r->row);
    if (!r->signs || !r->R || !r->buf || !r->row) {
        lmp_rotation_free(r);
        return lmp_fail(LMP_ENOMEM, "out of memory for a %lld-wide rotation", (long long)n);
    }
    for (int64_t i = 0; i < n; i++) r->signs[i] = 1.0f;
    memcpy(r->R, R, (size_t)(n * n) * sizeof *r->R);
    *out = r;
    return 0;
}

void lmp_rotation_free(lmp_rotation *r)
{
    if (!r) return;
    free(r->signs);
    free(r->R);
    free(r->buf);
    free(r->row);
    free(r);
}

/* x[i * stride], i < n  <-  (x Q)[i], in double inside.  Hadamard: Q = diag(signs) (R_m ⊗ H_a/sqrt(a)),
 * x viewed as Z[m, a] (segment i = x[i*a .. i*a+a)): Z <- R^T Z, then each segment through H. */
void lmp_rotation_apply(const lmp_rotation *r, float *x, int64_t stride)
{
    const int64_t n = r->n, a = r->a, m = r->m;
    double *t = r->buf, *col = r->row;
    for (int64_t i = 0; i < n; i++) t[i] = (double)x[i * stride] * r->signs[i];
    if (r->kind == LMP_ROT_ORTHOGONAL) { /* y = t R, R dense n×n (m == n), R read row by row */
        double *y = col;
        memset(y, 0, (size_t)n * sizeof *y);
        for (int64_t i = 0; i < n; i++) {
            const double ti = t[i], *Ri = r->R + i * n;
            for (int64_t j = 0; j < n; j++) y[j] += ti * Ri[j];
        }
        for (int64_t j = 0; j < n; j++) x[j * stride] = (float)y[j];
        return;
    }
    if (m > 1) /* Z'[k, j] = sum_i R[i, k] Z[i, j] */
        for (int64_t j = 0; j < a; j++) {
            for (int64_t k = 0; k < m; k++) {
                double d = 0;
                for (int64_t i = 0; i < m; i++) d += r->R[i * m + k] * t[i * a + j];
                col[k] = d;
            }
            for (int64_t k = 0; k < m; k++) t[k * a + j] = col[k];
        }
    for (int64_t seg = 0; seg < m; seg++) { /* Walsh-Hadamard over each segment */
        double *z = t + seg * a;
        for (int64_t h = 1; h < a; h *= 2)
            for (int64_t i = 0; i < a; i += 2 * h)
                for (int64_t k = i; k < i + h; k++) {
                    const double u = z[k], v = z[k + h];
                    z[k] = u + v;
                    z[k + h] = u - v;
                }
    }
    const double norm = 1.0 / sqrt((double)a);
    for (int64_t i = 0; i < n; i++) x[i * stride] = (float)(t[i] * norm);
}

/* Rows of x[T, n] through a hadamard rotation on the backend: x Q (transpose 0) or x Q^T. */
static int online_rows(const lmp_backend *be, const lmp_rotation *r, int64_t T, float *x, int transpose)
{
    const int64_t n = r->n, a = r->a, m = r->m;
    float col[64];
    if (m > 64) return lmp_fail(LMP_EUNSUPPORTED, "rotate: an online rotation of %lld = %lld x %lld: the odd factor is "
                                "larger than 64", (long long)n, (long long)a, (long long)m);
    int st = 0;
    if (!transpose)
        for (int64_t t = 0; t < T; t++)
            for (int64_t i = 0; i < n; i++) x[t * n + i] *= r->signs[i];
    if (transpose) st = lmp_be_hadamard(be, T * m, a, x);
    for (int64_t t = 0; !st && m > 1 && t < T; t++) /* R^T Z (forward) or R Z (transpose) */
        for (int64_t j = 0; j < a; j++) {
            float *z = x + t * n + j;
            for (int64_t k = 0; k < m; k++) {
                double d = 0;
                for (int64_t i = 0; i < m; i++) d += (transpose ? r->R[k * m + i] : r->R[i * m + k]) * z[i * a];
                col[k] = (float)d;
            }
            for (int64_t k = 0; k < m; k++) z[k * a] = col[k];
        }
    if (!st && !transpose) st = lmp_be_hadamard(be, T * m, a, x);
    if (!st && transpose)
        for (int64_t t = 0; t < T; t++)
            for (int64_t i = 0; i < n; i++) x[t * n + i] *= r->signs[i];
    return st;
}

int lmp_rotate_online(const lmp_backend *be, const lmp_arch *a, const lmp_block_step *s, int64_t T, float *const *slot,
                      int transpose)
{
    if (s->heads[0]) { /* R3: H/sqrt(hd) per head of q and k; symmetric, so its own transpose */
        int st = lmp_be_hadamard(be, T * s->heads[0], a->head_dim, slot[s->in[0]]);
        return st ? st : lmp_be_hadamard(be, T * s->heads[1], a->head_dim, slot[s->in[1]]);
    }
    if (!a->online_r4) return lmp_fail(LMP_EINVAL, "rotate: an online R4 step without its rotation");
    return online_rows(be, a->online_r4, T, slot[s->in[0]], transpose);
}

/* ---- the rotated model ----------------------------------------------------------------------- */
typedef struct rotated_source {
    const lmp_model_source *inner;
    lmp_rotation *r4;
    /* the model's blocks when they were views into the file (llama2.c) at rotate time: the
     * file's source clones m->blocks, which now holds the rotated copies, so they are cloned from
     * here instead */
    lmp_block *views;
    int64_t n_views;
    lmp_rotation *r1, *r2;
    int64_t head_dim;
    /* learned (lmp_model_rotate_set_learned), composed after r1 and r2: l1 on the stream, l2[layer]
     * on each layer's values; NULL: none */
    lmp_rotation *l1, **l2;
    int64_t n_l2;
} rotated_source;

static rotated_source *state_of(const lmp_model *m) { return (rotated_source *)m->rotation; }


/* Every row of w[rows, cols] (stride cols) or every column (stride 1 along... gathered). */
static void rotate_rows(const lmp_rotation *r, float *w, int64_t rows, int64_t cols, int64_t col0)
{
    for (int64_t i = 0; i < rows; i++) lmp_rotation_apply(r, w + i * cols + col0, 1);
}

static void rotate_cols(const lmp_rotation *r, float *w, int64_t cols, int64_t row0, int64_t col_from, int64_t col_to)
{
    for (int64_t j = col_from; j < col_to; j++) lmp_rotation_apply(r, w + row0 * cols + j, cols);
}

/* A linear's turn by one stream rotation r (reader: W Q; writer: Q^T W, b Q) and one value
 * rotation r2 (v: each head's rows by Q2^T; o: each head's columns by Q2), either NULL. */
static void turn_linear(const rotated_source *rs, const lmp_rotation *r, const lmp_rotation *r2, lmp_linear *l)
{
    const int writer = l->role == LMP_ROLE_O || l->role == LMP_ROLE_DOWN;
    if (r) {
        if (writer) {
            rotate_cols(r, l->w, l->in, 0, 0, l->in);
            if (l->b) lmp_rotation_apply(r, l->b, 1);
        } else {
            rotate_rows(r, l->w, l->out, l->in, 0);
        }
    }
    if (r2 && l->role == LMP_ROLE_V)
        for (int64_t h = 0; h < l->out / rs->head_dim; h++) {
            rotate_cols(r2, l->w, l->in, h * rs->head_dim, 0, l->in);
            if (l->b) lmp_rotation_apply(r2, l->b + h * rs->head_dim, 1);
        }
    if (r2 && l->role == LMP_ROLE_O)
        for (int64_t h = 0; h < l->in / rs->head_dim; h++) rotate_rows(r2, l->w, l->out, l->in, h * rs->head_dim);
}

static int rotate_block(const rotated_source *rs, const lmp_model *m, int64_t index, lmp_block *b)
{
    const lmp_arch *a = &m->arch;
    /* plain RMSNorms: each weight folded into the columns of what the norm feeds */
    for (int n = 0; n < b->n_norms; n++) {
        lmp_norm *nm = &b->norms[n];
        if (nm->n_fed == 0) continue;
        if (nm->b) return lmp_fail(LMP_EINVAL, "rotate: %s has a bias: a rotation does not commute with it", nm->name);
        for (int f = 0; f < nm->n_fed; f++) {
            lmp_linear *l = &b->linears[nm->fed[f]];
            for (int64_t o = 0; o < l->out; o++)
                for (int64_t j = 0; j < l->in; j++) l->w[o * l->in + j] *= nm->w[j];
        }
        for (int64_t j = 0; j < nm->dim; j++) nm->w[j] = 1.0f;
    }
    const lmp_rotation *l2 = rs->l2 && index >= 0 && index < rs->n_l2 ? rs->l2[index] : NULL;
    for (int i = 0; i < b->n_linears; i++) {
        lmp_linear *l = &b->linears[i];
        turn_linear(rs, rs->r1, rs->r2, l);    /* the fixed rotations */
        if (rs->r4 && l->role == LMP_ROLE_DOWN) /* W Q4: the forward turns its input by Q4 online */
            rotate_rows(rs->r4, l->w, l->out, l->in, 0);
        if (rs->l1 || l2) turn_linear(rs, rs->l1, l2, l); /* then the learned ones */
    }
    (void)a;
    return 0;
}

static int rotated_block_copy(const lmp_model *m, int64_t b, lmp_block *out)
{
    const rotated_source *rs = state_of(m);
    int st = rs->views ? lmp_block_clone(&rs->views[b], out) : rs->inner->block_copy(m, b, out);
    if (!st) st = rotate_block(rs, m, b, out);
    if (st) lmp_block_free(out);
    return st;
}

static void rotated_close(lmp_model *m)
{
    rotated_source *rs = state_of(m);
    if (!rs) return;
    m->src = rs->inner;
    m->rotation = NULL;
    for (int64_t l = 0; rs->views && l < rs->n_views; l++) lmp_block_free_tables(&rs->views[l]);
    free(rs->views);
    m->arch.online_r3 = 0;
    m->arch.online_r4 = NULL;
    lmp_rotation_free(rs->r1);
    lmp_rotation_free(rs->r2);
    lmp_rotation_free(rs->r4);
    lmp_rotation_free(rs->l1);
    for (int64_t l = 0; rs->l2 && l < rs->n_l2; l++) lmp_rotation_free(rs->l2[l]);
    free(rs->l2);
    free(rs);
    if (m->src && m->src->close) m->src->close(m);
}

static double rotated_linear_bits(const lmp_model *m, int64_t b, const lmp_linear *l)
{
    const rotated_source *rs = state_of(m);
    (void)b, (void)l, (void)rs;
    return 32.0; /* the rotated weights are f32, whatever the file stored */
}

static void rotated_release_pages(const lmp_model *m)
{
    const rotated_source *rs = state_of(m);
    if (rs->inner->release_pages) rs->inner->release_pages(m);
}

static const lmp_model_source rotated_src = {
    .block_copy = rotated_block_copy,
    .close = rotated_close,
    .linear_bits = rotated_linear_bits,
    .release_pages = rotated_release_pages,
};

const lmp_model_source *lmp_model_unrotated_source(const lmp_model *m)
{
    return m->src == &rotated_src ? state_of(m)->inner : m->src;
}

/* An owned copy of src[rows, cols] kept with the model. */
static float *owned_copy(lmp_model *m, const float *src, int64_t n)
{
    if (m->n_owned >= (int)(sizeof m->owned / sizeof *m->owned)) return NULL;
    float *p = malloc((size_t)n * sizeof *p);
    if (!p) return NULL;
    if (src) memcpy(p, src, (size_t)n * sizeof *p);
    m->owned[m->n_owned++] = p;
    return p;
}

int lmp_model_rotate(lmp_model *m, const lmp_rotate_opts *o)
{
    if (o->r1 == LMP_ROT_NONE && o->r2 == LMP_ROT_NONE && !o->r3 && !o->r4) return 0;
    const lmp_arch *a = &m->arch;
    const char *fam = a->desc ? a->desc->name : "this model";
    if (m->rotation) return lmp_fail(LMP_EINVAL, "rotate: %s is rotated already", m->path);
    if (m->blocks && m->blocks_owned)
        return lmp_fail(LMP_EINVAL, "rotate: %s: rotate before its blocks are read", m->path);
    if (a->family == LMP_FAMILY_GPT2 || a->layer_norm)
        return lmp_fail(LMP_EUNSUPPORTED, "rotate: %s's LayerNorm subtracts each row's mean, which a rotation of the "
                        "residual stream does not commute with (QuaRot first folds it into an RMSNorm; lmpress does not)", fam);
    if (a->post_norms)
        return lmp_fail(LMP_EUNSUPPORTED, "rotate: %s has post-norms (a weighted RMSNorm on the attention's and the MLP's "
                        "outputs): their weights cannot be folded into a linear, so the stream cannot be turned", fam);
    if (a->mla)
        return lmp_fail(LMP_EUNSUPPORTED, "rotate: %s's multi-head latent attention (q_a/q_b, kv_a/kv_b and their "
                        "latent norms) is not rotated yet", fam);
    if (a->attn_sinks || a->swiglu_limit > 0)
        return lmp_fail(LMP_EUNSUPPORTED, "rotate: %s (attention sinks, fused biased experts, clamped SwiGLU) is not "
                        "rotated yet", fam);
    /* routed experts: R4's width is not theirs (expert_hidden), the online R4 step does not run
     * inside the MoE, and paged experts are read after the block is turned */
    if (a->n_experts > 0)
        return lmp_fail(LMP_EUNSUPPORTED, "rotate: %s's routed experts (a mixture of experts) are not rotated yet", fam);
    if (m->pos_emb) return lmp_fail(LMP_EUNSUPPORTED, "rotate: %s has learned positions", fam);
    if (m->final_norm_b) return lmp_fail(LMP_EUNSUPPORTED, "rotate: %s's final norm has a bias", fam);
    if (o->r2 != LMP_ROT_NONE && a->n_heads * a->head_dim != a->dim && a->head_dim <= 0)
        return lmp_fail(LMP_EINVAL, "rotate: %s: no head_dim", fam);
    if (o->r3 && (a->head_dim & (a->head_dim - 1)))
        return lmp_fail(LMP_EUNSUPPORTED, "rotate: r3 turns each head by the Walsh-Hadamard op, which needs a power of "
                        "2; %s's head_dim is %lld", fam, (long long)a->head_dim);
    if (m->n_owned + 3 > (int)(sizeof m->owned / sizeof *m->owned))
        return lmp_fail(LMP_EINVAL, "rotate: %s: the loader keeps too many buffers to add the rotated ones", m->path);
    rotated_source *rs = calloc(1, sizeof *rs);
    if (!rs) return lmp_fail(LMP_ENOMEM, "out of memory");
    rs->inner = m->src;
    rs->head_dim = a->head_dim;
    int st = 0;
    /* a learned rotation starts from the Hadamard (SpinQuant); the learned part comes later */
    const lmp_rot_kind k1 = o->r1 == LMP_ROT_LEARNED ? LMP_ROT_HADAMARD : o->r1;
    const lmp_rot_kind k2 = o->r2 == LMP_ROT_LEARNED ? LMP_ROT_HADAMARD : o->r2;
    if (!st && k1 != LMP_ROT_NONE) st = lmp_rotation_make(k1, a->dim, o->seed, &rs->r1);
    if (!st && k2 != LMP_ROT_NONE) st = lmp_rotation_make(k2, a->head_dim, o->seed + 1, &rs->r2);
    if (!st && o->r4) st = lmp_rotation_make(LMP_ROT_HADAMARD, a->hidden, o->seed + 2, &rs->r4);
    if (!st && rs->r4 && rs->r4->m > 64)
        st = lmp_fail(LMP_EUNSUPPORTED, "rotate: r4 on %s's hidden size %lld = %lld x %lld: the odd factor is larger "
                      "than 64", fam, (long long)a->hidden, (long long)rs->r4->a, (long long)rs->r4->m);
    if (!st && rs->r1) {
        /* embeddings E Q; head (W diag(final norm)) Q; the final norm plain; the head untied */
        const int64_t V = a->vocab, d = a->dim;
        float *emb = owned_copy(m, m->tok_emb, V * d), *head = owned_copy(m, m->lm_head, V * d);
        float *fn = owned_copy(m, NULL, d);
        if (!emb || !head || !fn) st = lmp_fail(LMP_ENOMEM, "out of memory for the rotated embeddings and head");
        for (int64_t v = 0; !st && v < V; v++) {
            lmp_rotation_apply(rs->r1, emb + v * d, 1);
            for (int64_t j = 0; j < d; j++) head[v * d + j] *= m->final_norm_w[j];
            lmp_rotation_apply(rs->r1, head + v * d, 1);
        }
        for (int64_t j = 0; !st && j < d; j++) fn[j] = 1.0f;
        if (!st) m->tok_emb = emb, m->lm_head = head, m->final_norm_w = fn;
    }
    if (st) {
        lmp_rotation_free(rs->r1);
        lmp_rotation_free(rs->r2);
        lmp_rotation_free(rs->r4);
        free(rs);
        return st;
    }
    if (m->blocks) { /* views into the file: kept for the wrapper, which makes rotated copies */
        rs->views = m->blocks;
        rs->n_views = a->n_layers;
        m->blocks = NULL;
    }
    m->rotation = rs;
    m->src = &rotated_src;
    m->arch.online_r3 = o->r3;
    m->arch.online_r4 = rs->r4;
    return 0;
}

int lmp_model_rotate_set_learned(lmp_model *m, const double *R1, const double *R2)
{
    rotated_source *rs = m->src == &rotated_src ? state_of(m) : NULL;
    if (!rs) return lmp_fail(LMP_EINVAL, "rotate: %s: learned rotations go on a rotated model", m->path);
    if (rs->l1 || rs->l2) return lmp_fail(LMP_EINVAL, "rotate: %s has its learned rotations already", m->path);
    if (R1 && !rs->r1) return lmp_fail(LMP_EINVAL, "rotate: a learned R1 on a model without r1");
    const int64_t d = m->arch.dim, hd = rs->head_dim, L = m->arch.n_layers;
    int st = R1 ? lmp_rotation_from_matrix(d, R1, &rs->l1) : 0;
    if (!st && R2) {
        rs->l2 = calloc((size_t)L, sizeof *rs->l2);
        if (!rs->l2) st = lmp_fail(LMP_ENOMEM, "out of memory");
        for (int64_t l = 0; !st && l < L; l++, rs->n_l2++) st = lmp_rotation_from_matrix(hd, R2 + l * hd * hd, &rs->l2[l]);
    }
    if (st) return st;
    /* the embeddings and the head are the rotated copies lmp_model_rotate owns: turned in place */
    for (int64_t v = 0; rs->l1 && v < m->arch.vocab; v++) {
        lmp_rotation_apply(rs->l1, (float *)m->tok_emb + v * d, 1);
        lmp_rotation_apply(rs->l1, (float *)m->lm_head + v * d, 1);
    }
    lmp_model_blocks_release(m); /* f32 blocks with the fixed rotations only */
    return 0;
}

void lmp_model_rotation_learned(const lmp_model *m, int64_t layer, const lmp_rotation **r1, const lmp_rotation **r2)
{
    const rotated_source *rs = m->src == &rotated_src ? state_of(m) : NULL;
    *r1 = rs ? rs->l1 : NULL;
    *r2 = rs && rs->l2 && layer >= 0 && layer < rs->n_l2 ? rs->l2[layer] : NULL;
}
