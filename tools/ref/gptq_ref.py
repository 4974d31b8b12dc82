#!/usr/bin/env python3
"""gptq_ref.py: an independent numpy reference of lmpress's GPTQ and N:M-sparsity plugins.

Written from docs/algorithms.md (sections 1.2, 3.7, 3.9) and the grid of quant_grid_ref.py, for
tests that dump one real layer into a case folder and compare the C plugin with this script:

    /usr/bin/python3 tools/ref/gptq_ref.py CASE_DIR    # reads CASE_DIR/case.txt, writes ref_*
    /usr/bin/python3 tools/ref/gptq_ref.py selftest    # its own checks, exit status 0 / 1

Only numpy (Debian python3-numpy).  Methods:
  gptq       per column (in act-order if asked): q = Q(w_j) on the current, error-compensated
             column; e = (w_j - q)/U_jj; W[:, j+1:i2] -= e U[j, j+1:i2] inside the lazy batch
             [i1, i2) of `block` columns, W[:, i2:] -= E_batch U[i1:i2, i2:] after it;
             loss += (w_j - q)^2 / U_jj^2 / 2.  bits = 16: W comes back unchanged, loss 0.
  sparsegpt  the same loop in original column order; at batch positions (j - i1) % M == 0 the
             N lowest w^2/U_jj^2 of each row among columns [j, j+M) (current W) are pruned
             (ties: lower column first); q_j = w_j with pruned entries 0, survivors quantized
             when quantize = 1 and bits < 16.  Needs cols % M == 0 and block % M == 0.
  magnitude  per row and group of M consecutive columns prune the N smallest |w| (stable).
  wanda      the same with score |W_ij| * xnorm_j.  No update, no Hessian.
Common steps (gptq, sparsegpt): dead inputs (H_jj == 0) get H_jj = 1 and W[:, j] = 0;
act_order = stable sort by decreasing diag(H) after that; H += float32(damp * mean(diag H)) I
on the permuted H; U = upper Cholesky factor of H^-1 (H = L L^T, H^-1 = L^-T L^-1 = U^T U).
If H is not positive definite, damp is raised tenfold (at most 8 tries, noted on stderr).

Grid (lmpress's RTN grid, one per row slice; quant_grid_ref.quant_weight does the float32 math):
  sym  scale = max|w|/(2^(b-1)-1) (max 0 -> 1e-8), code = clip(round(w/scale), -2^(b-1), 2^(b-1)-1)
  asym scale = (hi-lo)/(2^b-1), lo/hi = min/max(0, w) ([0,0] -> [-1,1]), zero = round(-lo/scale),
       code = clip(round(w/scale) + zero, 0, 2^b-1), w' = scale*(code-zero)
  gran=channel: one grid per row from the weights before any update (channel_grid key below).
  gran=group, dynamic: grid of group k from columns [k g, k g + g) of processing order, as they
       stand when the loop reaches position k g (group_grid key below).
  gran=group, static_groups=1: all grids from W (after dead zeroing) in ORIGINAL column order;
       column c uses group c // g.

Precision: U is computed in float64 (Cholesky, triangular inverse, Cholesky) and then cast to
float32; everything else (grid, column loop, rank-1 updates, batch GEMM) is float32 like the
torch reference.  The loss is summed in float64 from float32 differences.  The C plugin
factorises in float32, so expect ~1e-6 relative differences and a few code flips at near-ties.

Fixed order (the same bits with any numpy): given U (U.f32, or our own), every step of the
column loop is elementwise IEEE arithmetic in an order written here, never numpy's `@`, which
goes to whatever BLAS numpy links (OpenBLAS, reference BLAS, MKL, the wheel's own OpenBLAS,
each with its own summation order, blocking and FMA use).  The batch update
W[:, i2:] -= E U[i1:i2, i2:] (and the `current` group grid's look-ahead) sums the products
E[:, k] U[k, :], exact in float64 for float32 factors, over k = i1, i1+1, ... in float64,
rounds the sum once to float32 and subtracts it in float32 (gemm_sub below); the loss sums each
column with math.fsum (exactly rounded).  Why it matters: on an ill-conditioned H (SmolLM2's
down_proj, act-order) one ulp of a GEMM result can move a near-tie w/scale across a half step;
the flipped code's error then spreads through U and the rest of the loop takes another path
(hundreds of codes, group scales ~1%), so with `@` the answer depended on numpy's BLAS.
Our own U (ref_U.f32, and the loop's U when no U.f32 is given) still comes from LAPACK in
float64 (a fixed-order factorisation of a 1536-wide H in numpy takes ~10 s per Cholesky); cast
to float32 it agrees between LAPACK builds to the last bit nearly everywhere.  Pass U.f32 to
make every output a function of the files alone.

case.txt: `key = value` lines, '#' comments.  Keys (default): method (gptq), rows, cols,
  bits (4; 2..8 or 16), sym (0), gran (channel), group (128), rounding (half_even|half_away),
  act_order (0), static_groups (0), damp (0.01), block (128), prune_n (2), prune_m (4),
  quantize (0; sparsegpt only).  Extra keys for the two places where the IST-DASLab code
  differs from the brief (defaults = the brief):
    channel_grid = after_dead | before_dead   (reference gptq.py: grid before dead zeroing)
    group_grid   = current | batch_start      (reference: W as at the start of the lazy batch
                   that reaches the group, i.e. without that batch's rank-1 updates)
Inputs: W.f32 (rows*cols float32 LE, W[out, in]); H.f32 (cols*cols, gptq/sparsegpt);
  xnorm.f32 (cols, wanda); optional mask.u8 (rows*cols, gptq only: 0 entries stay 0);
  optional U.f32 (cols*cols, visiting order): the column loop uses it instead of our own U, so
  a caller can compare the loop on its own factor and the factorisation (ref_U.f32) apart.
Outputs (also ref_U.f32: our own U, visiting order, float32): ref_W.f32, ref_codes.i32 (0 where pruned / not quantized), ref_mask.u8, ref_perm.i32
  (perm[p] = original column at position p), ref_scales.f32 and ref_zeros.f32 (asym) as
  rows x n_groups (only when quantizing; stale ones are removed), ref_loss.txt (repr of the
  float64 loss, then `dead N`), ref_ties.txt and stdout: `near_ties N` = quantized entries whose
  w/scale lies within 1e-4 of a half step where the two neighbouring codes differ; ref_tie.u8
  (rows*cols, original column order): 1 for those entries, so a caller can tell a code that
  differs at a near-tie from one that differs for a reason; bit 2 (sparsegpt): the entry is one
  of a row's N:M group whose N-th and next lowest scores lie within 1e-4 (relative), so an ulp
  may swap which is pruned.
"""
import math
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import quant_grid_ref as qg  # noqa: E402

F = np.float32
TIE_EPS = 1e-4
DEFAULTS = dict(method="gptq", bits=4, sym=0, gran="channel", group=128, rounding="half_even",
                act_order=0, static_groups=0, damp=0.01, block=128, prune_n=2, prune_m=4,
                quantize=0, channel_grid="after_dead", group_grid="current")


class Case(dict):
    __getattr__ = dict.__getitem__

    @property
    def rmode(self):
        return {"half_even": "even", "half_away": "away"}[self.rounding]

    @property
    def quantizing(self):
        if self.method == "gptq":
            return self.bits != 16
        return self.method == "sparsegpt" and bool(self.quantize) and self.bits != 16


def make_case(**kw):
    c = Case(DEFAULTS)
    for k, v in kw.items():
        if k not in DEFAULTS and k not in ("rows", "cols"):
            raise ValueError("unknown key %r" % k)
        c[k] = type(DEFAULTS[k])(v) if k in DEFAULTS else int(v)
    bad = []
    if c.method not in ("gptq", "sparsegpt", "wanda", "magnitude"): bad.append("method")
    if not (2 <= c.bits <= 8 or c.bits == 16): bad.append("bits")
    if c.gran not in ("channel", "group") or (c.gran == "group" and c.group < 1): bad.append("gran/group")
    if c.rounding not in ("half_even", "half_away"): bad.append("rounding")
    if c.channel_grid not in ("after_dead", "before_dead"): bad.append("channel_grid")
    if c.group_grid not in ("current", "batch_start"): bad.append("group_grid")
    if c.block < 1 or not c.damp >= 0: bad.append("block/damp")
    if c.method != "gptq":
        if not (0 <= c.prune_n <= c.prune_m and c.prune_m >= 1): bad.append("prune_n/prune_m")
        if "cols" in c and c.cols % c.prune_m: bad.append("cols % prune_m")
    if c.method == "sparsegpt" and (c.block % c.prune_m or c.act_order): bad.append("block % prune_m / act_order")
    if bad:
        raise ValueError("bad case: " + ", ".join(bad))
    return c


# ---- grid ------------------------------------------------------------------------------------

def grid(S, c):
    """Per-row grid of S[rows, k] -> (scale[rows], zero[rows]) float32, zero = 0 for sym."""
    _, scale, zero = qg.quant_weight(np.ascontiguousarray(S, dtype=F), c.bits, c.sym, "channel", 0, c.rmode)
    return scale, (np.zeros_like(scale) if zero is None else zero)


def quantize(w, scale, zero, c):
    """Column w[rows] on per-row grids -> (w' float32, codes int32, near-tie flags)."""
    x = w / scale
    assert x.dtype == F
    if c.sym:
        lo, hi = -F(2 ** (c.bits - 1)), F(2 ** (c.bits - 1) - 1)
        z = np.zeros_like(zero)
    else:
        lo, hi, z = F(0), F(2 ** c.bits - 1), zero
    code = np.clip(qg.rnd(x, c.rmode) + z, lo, hi)
    wq = code * scale if c.sym else scale * (code - z)
    f = np.floor(x.astype(np.float64))
    tie = (np.abs(x - f - 0.5) < TIE_EPS) & (np.clip(f + z, lo, hi) != np.clip(f + 1 + z, lo, hi))
    return wq.astype(F), code.astype(np.int32), tie


def nm_keep(score, n_prune, m):
    """keep mask [rows, cols]: in each group of m columns of a row prune the n_prune lowest
    scores; stable, so equal scores prune the lower column first."""
    rows, cols = score.shape
    S = score.reshape(rows, cols // m, m)
    idx = np.argsort(S, axis=2, kind="stable")[:, :, :n_prune]
    keep = np.ones(S.shape, dtype=np.uint8)
    np.put_along_axis(keep, idx, 0, axis=2)
    return keep.reshape(rows, cols)


def nm_near_tie(score, n_prune, m):
    """[rows, cols] bool: entries of the groups whose n_prune-th and next lowest scores lie
    within TIE_EPS (relative) of each other, and that lie in that band: an ulp of w may swap
    which of them is pruned."""
    rows, cols = score.shape
    if not 0 < n_prune < m:
        return np.zeros((rows, cols), bool)
    S = score.reshape(rows, cols // m, m).astype(np.float64)
    srt = np.sort(S, axis=2)
    lo, hi = srt[:, :, n_prune - 1:n_prune], srt[:, :, n_prune:n_prune + 1]
    band = TIE_EPS * hi
    near = (hi - lo <= band) & (S >= lo - band) & (S <= hi + band)
    return near.reshape(rows, cols)


# ---- the solver ------------------------------------------------------------------------------

def gemm_sub(Wr, E, Ub):
    """Wr - E @ Ub (float32 [rows, n], [rows, K], [K, n]) in a fixed order, whatever BLAS numpy
    links: the products E[:, k] Ub[k, :] are exact in float64 (24-bit factors), summed over
    k = 0, 1, ... K-1 in float64, the sum rounded once to float32 and subtracted in float32."""
    rows, n = Wr.shape
    if n == 0 or E.shape[1] == 0:
        return Wr.copy()
    E64, U64 = E.astype(np.float64), Ub.astype(np.float64)
    acc = np.empty((rows, n), np.float64)
    tmp = np.empty((rows, n), np.float64)
    np.multiply.outer(E64[:, 0], U64[0], out=acc)
    for k in range(1, E.shape[1]):
        np.multiply.outer(E64[:, k], U64[k], out=tmp)
        acc += tmp
    return Wr - acc.astype(F)


def factor_u(Hp, damp):
    """U (float32, upper) with (Hp + lambda I)^-1 = U^T U, lambda = damp * mean(diag Hp)."""
    mean = float(np.mean(np.diag(Hp).astype(np.float64)))
    for _ in range(8):
        Hd = Hp.copy()
        Hd[np.diag_indices_from(Hd)] += F(damp * mean)
        try:
            L = np.linalg.cholesky(Hd.astype(np.float64))
            Linv = np.linalg.solve(L, np.eye(len(L)))
            U = np.linalg.cholesky(Linv.T @ Linv).T
            return U.astype(F), Hd, damp
        except np.linalg.LinAlgError:
            sys.stderr.write("gptq_ref: H + %g*mean(diag H) I is not positive definite; trying %g\n"
                             % (damp, damp * 10))
            damp *= 10
    raise np.linalg.LinAlgError("H is not positive definite even with damping %g" % (damp / 10))


def solve(W0, H0, c, keep_in=None, U_in=None):
    """GPTQ / SparseGPT on W0[rows, cols] with Hessian H0[cols, cols] (float32).  Returns a dict:
    W, codes, mask (original column order), scales, zeros [rows, n_groups] (or None), perm, loss,
    dead, ties, U and Hd (processing order, damped), W_in (W0 after dead zeroing).
    U_in (optional, processing order): run the column loop with this U instead of our own (the
    C test passes its f32 factor, so that the loop and the grids are compared on one U; the
    returned U is still ours, for comparing the factorisations separately)."""
    W = np.array(W0, dtype=F)
    H = np.array(H0, dtype=F)
    rows, cols = W.shape
    quant, prune = c.quantizing, c.method == "sparsegpt"
    g = c.group if c.gran == "group" else cols
    ng = -(-cols // g) if c.gran == "group" else 1
    sc = np.zeros((rows, ng), F)
    zc = np.zeros((rows, ng), F)
    if quant and c.gran == "channel" and c.channel_grid == "before_dead":
        sc[:, 0], zc[:, 0] = grid(W, c)
    dead = np.diag(H) == 0
    H[dead, dead] = 1
    W[:, dead] = 0
    W_in = W.copy()
    if quant and c.gran == "channel" and c.channel_grid == "after_dead":
        sc[:, 0], zc[:, 0] = grid(W, c)
    static = quant and c.gran == "group" and bool(c.static_groups)
    if static:
        _, s, z = qg.quant_weight(W, c.bits, c.sym, "group", g, c.rmode)
        sc[:] = s.reshape(rows, ng)
        zc[:] = 0 if z is None else z.reshape(rows, ng)
    dyn = quant and c.gran == "group" and not static
    perm = np.argsort(-np.diag(H), kind="stable") if c.act_order else np.arange(cols)
    W, H = W[:, perm], H[perm][:, perm]
    keep = np.ones((rows, cols), np.uint8) if keep_in is None else keep_in[:, perm].astype(np.uint8)
    U_own, Hd, _ = factor_u(H, c.damp)
    U = U_own if U_in is None else np.asarray(U_in, dtype=F).reshape(cols, cols)
    codes = np.zeros((rows, cols), np.int32)
    tie_map = np.zeros((rows, cols), np.uint8)
    loss, ties, B = 0.0, 0, c.block
    for i1 in range(0, cols, B):
        i2 = min(i1 + B, cols)
        if dyn and c.group_grid == "batch_start":   # every group starting in this batch, from W now
            for p in range(-(-i1 // g) * g, i2, g):
                sc[:, p // g], zc[:, p // g] = grid(W[:, p:p + g], c)
        W1 = W[:, i1:i2].copy()
        E = np.zeros((rows, i2 - i1), F)
        for i in range(i2 - i1):
            j = i1 + i
            if prune and i % c.prune_m == 0:
                d2 = np.diag(U)[j:j + c.prune_m] ** 2
                score = W1[:, i:i + c.prune_m] ** 2 / d2
                keep[:, j:j + c.prune_m] = nm_keep(score, c.prune_n, c.prune_m)
                tie_map[:, j:j + c.prune_m] |= 2 * nm_near_tie(score, c.prune_n, c.prune_m).astype(np.uint8)
            if dyn and c.group_grid == "current" and j % g == 0:
                hi = min(j + g, cols)                 # columns past i2 still owe this batch's update
                S = np.concatenate([W1[:, i:hi - i1], gemm_sub(W[:, i2:hi], E[:, :i], U[i1:j, i2:hi])],
                                   axis=1)
                sc[:, j // g], zc[:, j // g] = grid(S, c)
            w, d, k = W1[:, i], U[j, j], keep[:, j] != 0
            if quant:
                gi = perm[j] // g if static else j // g
                wq, code, tie = quantize(w, sc[:, gi], zc[:, gi], c)
                q = np.where(k, wq, F(0))
                codes[:, j] = np.where(k, code, 0)
                ties += int(np.sum(tie & k))
                tie_map[:, j] |= tie & k
            else:
                q = np.where(k, w, F(0))
            diff = w - q
            loss += math.fsum((diff.astype(np.float64) ** 2).tolist()) / (float(d) ** 2) / 2
            e = diff / d
            W1[:, i] = q
            W1[:, i + 1:] -= np.outer(e, U[j, j + 1:i2])
            E[:, i] = e
        W[:, i1:i2] = W1
        W[:, i2:] = gemm_sub(W[:, i2:], E, U[i1:i2, i2:])
    inv = np.argsort(perm)
    return dict(W=W[:, inv], codes=codes[:, inv], mask=keep[:, inv], perm=perm.astype(np.int32),
                tie=tie_map[:, inv], scales=sc if quant else None, zeros=zc if quant and not c.sym else None,
                loss=loss, dead=int(dead.sum()), ties=ties, U=U_own, Hd=Hd, W_in=W_in)


def run_case(c, W, H=None, xnorm=None, keep_in=None, U_in=None):
    """Dispatch on c.method; the result dict has at least W, codes, mask, perm, scales, zeros,
    loss, dead, ties, tie."""
    rows, cols = W.shape
    if c.method == "gptq" and c.bits == 16:   # nothing to do: the plugin leaves the weights alone
        dead = 0 if H is None else int(np.sum(np.diag(H) == 0))
        mask = np.ones((rows, cols), np.uint8) if keep_in is None else keep_in.astype(np.uint8)
        return dict(W=W.copy(), codes=np.zeros((rows, cols), np.int32), mask=mask,
                    tie=np.zeros((rows, cols), np.uint8), perm=np.arange(cols, dtype=np.int32), scales=None,
                    zeros=None, loss=0.0, dead=dead, ties=0)
    if c.method in ("gptq", "sparsegpt"):
        return solve(W, H, c, keep_in if c.method == "gptq" else None, U_in)
    score = np.abs(W) if c.method == "magnitude" else np.abs(W) * xnorm.astype(F)[None, :]
    keep = nm_keep(score, c.prune_n, c.prune_m)
    return dict(W=np.where(keep != 0, W, F(0)).astype(F), codes=np.zeros((rows, cols), np.int32), mask=keep,
                tie=np.zeros((rows, cols), np.uint8), perm=np.arange(cols, dtype=np.int32), scales=None,
                zeros=None, loss=0.0, dead=0, ties=0)


# ---- files -----------------------------------------------------------------------------------

def read_case_txt(path):
    kv = {}
    with open(path) as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if line:
                k, v = (s.strip() for s in line.split("=", 1))
                kv[k] = v
    return make_case(**kv)


def load(d, name, dtype, n, required=True):
    p = os.path.join(d, name)
    if not os.path.exists(p):
        if required:
            raise FileNotFoundError(p)
        return None
    a = np.fromfile(p, dtype=dtype)
    if a.size != n:
        raise ValueError("%s: %d values, expected %d" % (p, a.size, n))
    return a


def main_case(d):
    c = read_case_txt(os.path.join(d, "case.txt"))
    rows, cols = c.rows, c.cols
    W = load(d, "W.f32", "<f4", rows * cols).reshape(rows, cols).astype(F)
    H = load(d, "H.f32", "<f4", cols * cols, c.method == "sparsegpt" or (c.method == "gptq" and c.bits != 16))
    H = None if H is None else H.reshape(cols, cols).astype(F)
    xn = load(d, "xnorm.f32", "<f4", cols, c.method == "wanda")
    keep = load(d, "mask.u8", np.uint8, rows * cols, False)
    keep = None if keep is None else keep.reshape(rows, cols)
    U_in = load(d, "U.f32", "<f4", cols * cols, False)
    r = run_case(c, W, H, xn, keep, U_in)
    out = lambda name: os.path.join(d, name)  # noqa: E731
    r["W"].astype("<f4").tofile(out("ref_W.f32"))
    r["codes"].astype("<i4").tofile(out("ref_codes.i32"))
    r["mask"].astype(np.uint8).tofile(out("ref_mask.u8"))
    r["tie"].astype(np.uint8).tofile(out("ref_tie.u8"))
    r["perm"].astype("<i4").tofile(out("ref_perm.i32"))
    if "U" in r:
        r["U"].astype("<f4").tofile(out("ref_U.f32"))
    for key, name in (("scales", "ref_scales.f32"), ("zeros", "ref_zeros.f32")):
        if r[key] is not None:
            r[key].astype("<f4").tofile(out(name))
        elif os.path.exists(out(name)):
            os.remove(out(name))
    with open(out("ref_loss.txt"), "w") as f:
        f.write("%r\ndead %d\n" % (float(r["loss"]), r["dead"]))
    with open(out("ref_ties.txt"), "w") as f:
        f.write("near_ties %d\n" % r["ties"])
    print("near_ties %d" % r["ties"])
    return 0


# ---- selftest --------------------------------------------------------------------------------

def problem(rows, cols, seed, n=None, dead=()):
    """W[rows, cols] with a few outliers and H = 2/n X^T X from an X with correlated columns
    (an AR(1) chain along the columns) and uneven column scales."""
    rs = np.random.RandomState(seed)
    n = n or 2 * cols
    Z = rs.standard_normal((n, cols))
    X = np.empty_like(Z)
    X[:, 0] = Z[:, 0]
    for j in range(1, cols):
        X[:, j] = 0.8 * X[:, j - 1] + 0.6 * Z[:, j]
    X *= np.exp(rs.standard_normal(cols) * 0.5)
    X[:, list(dead)] = 0
    W = rs.standard_normal((rows, cols)) * 0.05
    W[rs.randint(0, rows, 5), rs.randint(0, cols, 5)] = 0.4
    return W.astype(F), (2.0 / n * X.T @ X).astype(F)


def objective(W, Q, H):
    D = (W - Q).astype(np.float64)
    return float(np.einsum("ij,jk,ik->", D, H.astype(np.float64), D))


def loss_identity(r, Q=None):
    """W_in - Q = E U with E[:, j] = (w_j - q_j)/U_jj, so tr(D Hd D^T) = sum e^2 = 2 loss."""
    D = (r["W_in"] - (r["W"] if Q is None else Q))[:, r["perm"]]
    return objective(D, np.zeros_like(D), r["Hd"]) / 2, r["loss"]


def selftest():
    fails = []

    def check(name, ok, info):
        print("%s  %-58s %s" % ("ok  " if ok else "FAIL", name, info))
        if not ok:
            fails.append(name)

    W, H = problem(64, 300, 1)
    # 1. bits = 16 leaves W alone
    r = run_case(make_case(bits=16), W, H)
    check("gptq bits=16 returns W unchanged", np.array_equal(r["W"], W) and r["loss"] == 0, "")
    # 2. lazy batching only reorders the arithmetic
    for kw in (dict(bits=4), dict(bits=3, sym=1, gran="group", group=32, act_order=1),
               dict(bits=4, gran="group", group=100, rounding="half_away"),
               dict(method="sparsegpt", quantize=1, bits=4, gran="group", group=64)):
        a = run_case(make_case(block=128, **kw), W, H)
        b = run_case(make_case(block=300, **kw), W, H)
        flips = int(np.sum(a["codes"] != b["codes"])) + int(np.sum(a["mask"] != b["mask"]))
        rel = float(np.max(np.abs(a["W"] - b["W"])) / np.max(np.abs(W)))
        check("block 128 == block 300 %s" % " ".join("%s=%s" % kv for kv in kw.items()),
              rel < 1e-5 and flips <= a["ties"], "max rel dW %.2g, %d flips, %d near-ties" % (rel, flips, a["ties"]))
    # the reference's batch-start group grids: the same as "current" when every group starts a
    # batch (group a multiple of block), different otherwise
    c = dict(bits=3, gran="group", group=64)
    a = run_case(make_case(group_grid="batch_start", block=32, **c), W, H)
    b = run_case(make_case(block=128, **c), W, H)
    d = run_case(make_case(group_grid="batch_start", block=128, **c), W, H)
    rel = float(np.max(np.abs(a["W"] - b["W"])) / np.max(np.abs(W)))
    check("group_grid=batch_start: block 32 == current; block 128 differs",
          rel < 1e-5 and not np.array_equal(d["scales"], b["scales"]),
          "max rel dW %.2g; %d of %d scales differ" % (rel, np.sum(d["scales"] != b["scales"]), d["scales"].size))
    # 3. GPTQ beats RTN on the same grid; 4. the loss identity
    for seed in (2, 3, 4):
        Ws, Hs = problem(48, 192, seed)
        for bits in (4, 3):
            for kw in (dict(), dict(sym=1, gran="group", group=64)):
                c = make_case(bits=bits, **kw)
                r = run_case(c, Ws, Hs)
                rtn = qg.quant_weight(Ws, bits, c.sym, c.gran, c.group, c.rmode)[0]
                og, orr = objective(Ws, r["W"], Hs), objective(Ws, rtn, Hs)
                check("gptq < rtn seed %d bits %d %s" % (seed, bits, c.gran), og < orr,
                      "tr(DHD^T) gptq %.4g rtn %.4g (%.2fx)" % (og, orr, orr / og))
                half, loss = loss_identity(r)
                check("  loss == tr(D Hd D^T)/2", abs(half - loss) < 1e-4 * loss, "%.6g vs %.6g" % (loss, half))
    Q = r["W"].copy()
    Q[0, 0] += 0.1
    half, loss = loss_identity(r, Q)
    check("negative control: loss identity sees a changed weight", abs(half - loss) > 1e-4 * loss,
          "%.6g vs %.6g" % (loss, half))
    # 5. N:M masks; 6. SparseGPT beats magnitude
    Ws, Hs = problem(32, 256, 5)
    xn = np.sqrt(np.diag(Hs)).astype(F)
    res = {}
    for m, kw in (("magnitude", {}), ("wanda", {}), ("sparsegpt", {}), ("sparsegpt", dict(quantize=1, bits=4))):
        for n_, m_ in ((2, 4), (4, 8)):
            c = make_case(method=m, prune_n=n_, prune_m=m_, cols=256, **kw)
            r = run_case(c, Ws, Hs, xn)
            k = r["mask"].reshape(32, -1, m_)
            ok = np.all(k.sum(axis=2) == m_ - n_) and np.all(r["W"][r["mask"] == 0] == 0)
            if m != "sparsegpt":
                ok = ok and np.array_equal(r["W"][r["mask"] == 1], Ws[r["mask"] == 1])
            if c.quantizing:
                deq = r["scales"] * (r["codes"] - r["zeros"])   # one asym grid per row
                ok = ok and np.array_equal(np.where(r["mask"] == 1, deq, 0).astype(F), r["W"])
            check("%d:%d %s%s mask exact" % (m_ - n_, m_, m, " +4bit" if kw else ""), ok, "")
            res[m, n_, bool(kw)] = objective(Ws, r["W"], Hs)
            if m == "sparsegpt":
                half, loss = loss_identity(r)
                check("  loss == tr(D Hd D^T)/2", abs(half - loss) < 1e-4 * loss, "%.6g vs %.6g" % (loss, half))
    for n_ in (2, 4):
        a, b, w = res["sparsegpt", n_, False], res["magnitude", n_, False], res["wanda", n_, False]
        check("sparsegpt < wanda < magnitude objective, prune %d" % n_, a < w < b, "%.4g %.4g %.4g" % (a, w, b))
    keep = nm_keep(np.array([[1, -1, 1, 2, 0, 0, 0, 0]], F) ** 2, 2, 4)
    check("tie rule: equal scores prune the lower column", keep.tolist() == [[0, 0, 1, 1, 0, 0, 1, 1]], str(keep))
    # 7. dead inputs
    Wd, Hd = problem(16, 64, 6, dead=(5, 17, 40))
    for m in ("gptq", "sparsegpt"):
        r = run_case(make_case(method=m, quantize=1, act_order=int(m == "gptq")), Wd, Hd)
        half, loss = loss_identity(r)
        ok = r["dead"] == 3 and np.all(r["W"][:, [5, 17, 40]] == 0) and np.all(np.isfinite(r["W"]))
        check("%s dead inputs zeroed, counted, loss identity" % m, ok and abs(half - loss) < 1e-4 * loss,
              "dead %d, loss %.6g vs %.6g" % (r["dead"], loss, half))
    Wd[3, 17] = 1.0                            # a dead input holding the row's maximum
    b = run_case(make_case(channel_grid="before_dead"), Wd, Hd)
    a = run_case(make_case(), Wd, Hd)
    ok = np.array_equal(b["scales"][:, 0], qg.quant_weight(Wd, 4, 0, "channel", 0, "even")[1])
    check("channel_grid=before_dead: grid of W before zeroing", ok and b["scales"][3, 0] > a["scales"][3, 0],
          "row 3 scale %.4g vs %.4g after" % (b["scales"][3, 0], a["scales"][3, 0]))
    # 8. act_order with a diagonal H: no updates, so GPTQ is RTN exactly
    Wg, _ = problem(24, 96, 7)
    diag = np.exp(np.random.RandomState(8).standard_normal(96)).astype(F)
    diag[10:14] = diag[50]                     # ties keep original order
    Hg = np.diag(diag).astype(F)
    perm = np.argsort(-diag, kind="stable")
    for kw, gran, g in ((dict(), "channel", 0), (dict(gran="group", group=32, static_groups=1), "group", 32)):
        for sym in (0, 1):
            c = make_case(bits=3, sym=sym, act_order=1, **kw)
            r = run_case(c, Wg, Hg)
            rtn, s, z = qg.quant_weight(Wg, 3, sym, gran, g, c.rmode)
            ok = sorted(r["perm"]) == list(range(96)) and np.array_equal(r["perm"], perm)
            ok = ok and np.array_equal(r["W"], rtn) and np.array_equal(r["scales"].ravel(), s)
            check("diag H, act_order, %s sym=%d: perm ok, W == RTN" % (gran, sym), ok,
                  "perm[:6] %s" % r["perm"][:6].tolist())
    r = run_case(make_case(act_order=1), np.zeros((2, 5), F), np.diag([1, 3, 3, 2, 0]).astype(F))
    check("act_order perm of diag [1,3,3,2,0] is [1,2,3,0,4]", r["perm"].tolist() == [1, 2, 3, 0, 4], "")
    Wt = np.array([[1.75, 0.125, 0.375, -0.625, 0.5, -1.0]], F)   # w/scale = 7, .5, 1.5, -2.5, 2, -4
    e, a = (run_case(make_case(bits=4, sym=1, rounding=rm), Wt, np.eye(6, dtype=F)) for rm in ("half_even", "half_away"))
    check("exact half steps: 3 near-ties, the two roundings differ there",
          e["ties"] == 3 and e["codes"].tolist() == [[7, 0, 2, -2, 2, -4]] and a["codes"].tolist() == [[7, 1, 2, -3, 2, -4]],
          "codes even %s away %s" % (e["codes"].tolist(), a["codes"].tolist()))
    # 9. static groups: scales are RTN's group scales of the original W (non-diagonal H)
    c = make_case(bits=4, gran="group", group=64, static_groups=1, act_order=1)
    r = run_case(c, W, H)
    _, s, z = qg.quant_weight(W, 4, 0, "group", 64, "even")
    ok = np.array_equal(r["scales"].ravel(), s) and np.array_equal(r["zeros"].ravel(), z)
    check("static_groups scales/zeros == RTN group grid of W", ok and not np.array_equal(r["perm"], np.arange(300)), "")
    # 10. the file interface round trip
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "case.txt"), "w") as f:
            f.write("# selftest\nmethod = gptq\nrows = 64\ncols = 300\nbits = 3\nsym = 0\ngran = group\n"
                    "group = 64\nact_order = 1\nrounding = half_away\n")
        W.tofile(os.path.join(d, "W.f32"))
        H.tofile(os.path.join(d, "H.f32"))
        main_case(d)
        r = run_case(make_case(bits=3, gran="group", group=64, act_order=1, rounding="half_away"), W, H)
        rd = lambda n, t: np.fromfile(os.path.join(d, n), t)  # noqa: E731
        lines = open(os.path.join(d, "ref_loss.txt")).read().split("\n")
        ok = (np.array_equal(rd("ref_W.f32", "<f4"), r["W"].ravel()) and
              np.array_equal(rd("ref_codes.i32", "<i4"), r["codes"].ravel()) and
              np.array_equal(rd("ref_perm.i32", "<i4"), r["perm"]) and
              np.array_equal(rd("ref_zeros.f32", "<f4"), r["zeros"].ravel()) and
              rd("ref_scales.f32", "<f4").size == 64 * 5 and rd("ref_mask.u8", np.uint8).min() == 1 and
              float(lines[0]) == r["loss"] and lines[1] == "dead 0")
        check("CASE_DIR round trip", ok, "loss %s" % lines[0])
    # 11. the batch GEMM in a fixed order: bit for bit a plain float64 loop over k, whatever the
    #     operands' layout (so no BLAS in it), and within float32 rounding of numpy's own `@`
    rs = np.random.RandomState(9)
    Wr, Eb, Ub = (rs.standard_normal(shape).astype(F) for shape in ((7, 11), (7, 13), (13, 11)))
    loop = np.empty_like(Wr)
    for i in range(7):
        for n in range(11):
            acc = 0.0
            for k in range(13):
                acc += float(Eb[i, k]) * float(Ub[k, n])
            loop[i, n] = Wr[i, n] - F(acc)
    a = gemm_sub(Wr, Eb, Ub)
    b = gemm_sub(np.asfortranarray(Wr), np.asfortranarray(Eb), np.asfortranarray(Ub))
    blas = Wr - Eb @ Ub
    rel = float(np.max(np.abs(a - blas)) / np.max(np.abs(blas)))
    check("gemm_sub == a plain float64 loop bit for bit, any layout",
          np.array_equal(a, loop) and np.array_equal(b, loop) and rel < 1e-6, "vs numpy's @: %.2g" % rel)
    print("selftest: %d failed" % len(fails) + (": " + ", ".join(fails) if fails else ""))
    return 1 if fails else 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: gptq_ref.py CASE_DIR | selftest  (see the module docstring)")
    sys.exit(selftest() if sys.argv[1] == "selftest" else main_case(sys.argv[1]))
