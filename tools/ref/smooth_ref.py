#!/usr/bin/python3
"""smooth_ref.py: an independent numpy reference of SmoothQuant's scales and PaddleSlim's
PieceWiseSearch (docs/algorithms.md sections 1.1, 3.2, 3.3, 3.6), for the C tests to compare against.

Run it with Debian's /usr/bin/python3 (it has python3-numpy; the python3 first on PATH may not):

    /usr/bin/python3 tools/ref/smooth_ref.py CASE_DIR     # reads a case, writes the results there
    /usr/bin/python3 tools/ref/smooth_ref.py selftest     # checks of this script itself

Nothing here is taken from the C code; it is written from the formulas.

Case directory (written by a C test):
  case.txt      lines `key value`: C, O, S, alpha, k_piece, search_piece (0/1), alpha_min,
                alpha_max, scale_min, scale_max (the last two may be the word `none`)
  absmax.f32    float32 [C], little-endian: a_j, per-input-channel abs-max of the linears' input
  weight.f32    float32 [O, C] row-major: every linear fed by one norm, concatenated along the
                output dimension (PyTorch layout W[out, in], y = x W^T)
  sample.f32    float32 [S, C]: a token sample of that input
Results, into the same directory:
  ref_alpha.f32      float32 [C]: s_j = max(a_j^alpha / max(w_j, 1e-5)^(1-alpha), 1e-5) with
                     w_j = max_o |W[o, j]| over all O rows (mit-han-lab: the max over every linear
                     sharing the norm); computed in float64, stored as float32
  ref_piecewise.f32  float32 [C]: the PieceWiseSearch scales
  ref_losses.txt     alpha_loss <%.17g>      search loss of ref_alpha (the case's alpha)
                     piecewise_loss <%.17g>  search loss of ref_piecewise
                     pieces <K>              the K whose scales were chosen
                     candidates <n>          candidate evaluations in total (all K, all pieces)
and one summary line on stdout.

Search loss of a full scale vector s [C] (float32; every step is one float32 numpy op, so the
quantized values match a C implementation bit for bit):
  Xs = X / s (per column), Ws = W * s (per column)
  activations, per tensor abs_max:   T = max|Xs| (0 -> 1e-8), q = clip(rha((Xs / T) * 127),
                                     -128, 127), x^ = (q * T) / 127
  weights, per output row abs-max:   T_o = max_j |Ws[o, j]| (0 -> 1e-8), the same with T_o
  rha = round half away from zero (paddle.round), sign(v) * floor(|v| + 0.5) evaluated in
  float64: in float32, 0.49999997 + 0.5 already rounds up to 1.0.
  loss = mean over S x O of (x^ w^T - X W^T)^2, both products in float64 from the float32 values.
  (The loss itself is a float64 sum, so C can only match it to rounding, not bit for bit.)

PieceWiseSearch, section 3.6 after PaddleSlim's fix cafd9859, with these decisions:
  pieces: exact optimal 1-D k-means of the a_j (float64) by dynamic programming over the values
    sorted ascending (stable: ties in channel order); clusters are contiguous runs of that order
    and are visited in it (= ascending centroid).  K is clipped to C.  DP details in kmeans_1d().
  candidates per piece g: alpha runs from alpha_min, and while alpha <= (scale_max, or alpha_max
    when scale_max is none): alpha < 1 -> alpha += 0.01 and on reaching alpha_max jump to
    scale_min (stop if none); else alpha += 0.5; then alpha = round(alpha, 2).  alpha < 1 gives
    the formula scales on the piece, otherwise the constant alpha on the piece.  The defaults
    (0.2, 0.8, 1.0, 5.0) give 69 candidates: 0.21 .. 0.79, then 1.0, 1.5 .. 5.5.
    full = S_out + cand + (1 - in_g) * [S_out == 0]: decided pieces keep their scale, undecided
    ones use 1.  The lowest loss wins, ties to the later candidate; S_out += the winner.
  K: with search_piece, K = 1 .. min(k_piece, C), S_out reset to zero for every K (the corrected
    behaviour; PaddleSlim keeps adding to the previous K's scales); a K replaces the earlier
    choice only if its last piece's best loss is strictly lower.  Without search_piece, K = k_piece.
  With alpha 0.5 the alpha scales are candidate 0.50 of the single piece at K = 1, so with
  search_piece the piecewise loss can never exceed alpha_loss; the script asserts it.
"""
import itertools
import os
import sys
import tempfile
import time

import numpy as np

F = np.float32
SCALE_FLOOR = 1e-5   # clamp of w_j and of s_j in the SmoothQuant formula
ZERO_T = F(1e-8)     # an all-zero tensor/row gets this threshold (section 1.1)
BNT = F(127)         # 8-bit: 2^(8-1) - 1


# ---- case I/O --------------------------------------------------------------------------------

def read_case(case_dir):
    """Returns (params dict, a [C] float32, W [O, C] float32, X [S, C] float32)."""
    p = {}
    with open(os.path.join(case_dir, "case.txt")) as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 2:
                p[parts[0]] = parts[1]
    C, O, S = int(p["C"]), int(p["O"]), int(p["S"])

    def opt(key, default):
        v = p.get(key, default)
        return None if v is None or str(v).lower() == "none" else float(v)

    params = {
        "alpha": float(p.get("alpha", 0.5)),
        "k_piece": int(p.get("k_piece", 1)),
        "search_piece": int(p.get("search_piece", 0)) != 0,
        "alpha_min": float(p.get("alpha_min", 0.2)),
        "alpha_max": float(p.get("alpha_max", 0.8)),
        "scale_min": opt("scale_min", 1.0),
        "scale_max": opt("scale_max", 5.0),
    }

    def load(name, n):
        v = np.fromfile(os.path.join(case_dir, name), dtype="<f4").astype(F)
        assert v.size == n, "%s: %d floats, expected %d" % (name, v.size, n)
        return v

    a = load("absmax.f32", C)
    W = load("weight.f32", O * C).reshape(O, C)
    X = load("sample.f32", S * C).reshape(S, C)
    return params, a, W, X


def write_case(case_dir, params, a, W, X):
    """The inverse of read_case (used by the selftest and for hand-made cases)."""
    os.makedirs(case_dir, exist_ok=True)
    with open(os.path.join(case_dir, "case.txt"), "w") as f:
        f.write("C %d\nO %d\nS %d\n" % (a.size, W.shape[0], X.shape[0]))
        for k in ("alpha", "k_piece", "alpha_min", "alpha_max", "scale_min", "scale_max"):
            v = params[k]
            f.write("%s %s\n" % (k, "none" if v is None else repr(v)))
        f.write("search_piece %d\n" % int(bool(params["search_piece"])))
    a.astype("<f4").tofile(os.path.join(case_dir, "absmax.f32"))
    W.astype("<f4").tofile(os.path.join(case_dir, "weight.f32"))
    X.astype("<f4").tofile(os.path.join(case_dir, "sample.f32"))


# ---- SmoothQuant formula ---------------------------------------------------------------------

def weight_absmax(W):
    """w_j = max over all output rows of |W[o, j]| (float32 max is exact)."""
    return np.abs(W).max(axis=0)


def smooth_scales(a, w, alpha):
    """s_j = max(a_j^alpha / max(w_j, 1e-5)^(1-alpha), 1e-5), float64 math, float32 result."""
    a64 = a.astype(np.float64)
    w64 = np.maximum(w.astype(np.float64), SCALE_FLOOR)
    s = np.power(a64, alpha) / np.power(w64, 1.0 - alpha)
    return np.maximum(s, SCALE_FLOOR).astype(F)


# ---- search loss -----------------------------------------------------------------------------

def round_half_away(v):
    """paddle.round on float32 v; float64 so that |v| + 0.5 cannot round up (see docstring)."""
    v64 = v.astype(np.float64)
    return (np.sign(v64) * np.floor(np.abs(v64) + 0.5)).astype(F)


def fake_quant(x, T):
    """Section 1.1 abs-max fake quant at 8 bits with threshold(s) T broadcast against x."""
    q = np.clip(round_half_away((x / T) * BNT), F(-128), F(127))
    out = (q * T) / BNT
    assert out.dtype == F, out.dtype
    return out


def search_loss(full, X, W, Y0):
    """MSE between the fake-quantized product and Y0 = X W^T (float64), for scales `full`."""
    full = full.astype(F)
    Xs = X / full[None, :]
    Ws = W * full[None, :]
    T = np.abs(Xs).max()
    T = ZERO_T if T == 0 else F(T)
    To = np.abs(Ws).max(axis=1)
    To = np.where(To == 0, ZERO_T, To).astype(F)[:, None]
    Xq = fake_quant(Xs, T)
    Wq = fake_quant(Ws, To)
    Y = Xq.astype(np.float64) @ Wq.astype(np.float64).T
    d = Y - Y0
    return float(np.mean(d * d))


def reference_product(X, W):
    return X.astype(np.float64) @ W.astype(np.float64).T


# ---- pieces: exact 1-D k-means ---------------------------------------------------------------

def kmeans_1d(values, K):
    """Optimal 1-D k-means (least within-cluster sum of squares) of `values` into min(K, n)
    clusters.  Returns a list of channel-index arrays, clusters in ascending order.

    Sorted v (stable argsort), prefix sums P[i] = v_0 + .. + v_{i-1}, Q[i] = sum of squares.
    cost(i, j) of the run v_i .. v_{j-1} = (Q[j] - Q[i]) - (P[j] - P[i])^2 / (j - i).
    D[1][j] = cost(0, j); D[k][j] = min over i in [k-1, j-1] of D[k-1][i] + cost(i, j), the
    smallest i on equal sums (earliest boundary); the split points are traced back from D[K][n].
    """
    v = np.asarray(values, dtype=np.float64)
    n = v.size
    K = max(1, min(int(K), n))
    order = np.argsort(v, kind="stable")
    vs = v[order]
    P = np.concatenate(([0.0], np.cumsum(vs)))
    Q = np.concatenate(([0.0], np.cumsum(vs * vs)))

    def cost(i, j):  # i or j may be an array
        s = P[j] - P[i]
        return (Q[j] - Q[i]) - s * s / (j - i)

    D = np.full((K + 1, n + 1), np.inf)
    arg = np.zeros((K + 1, n + 1), dtype=np.int64)
    D[1, 1:] = cost(0, np.arange(1, n + 1))
    for k in range(2, K + 1):
        for j in range(k, n + 1):
            i = np.arange(k - 1, j)
            tot = D[k - 1, i] + cost(i, j)
            b = int(np.argmin(tot))            # argmin: the first of equal minima
            D[k, j] = tot[b]
            arg[k, j] = i[b]
    bounds = [n]
    for k in range(K, 1, -1):
        bounds.append(int(arg[k, bounds[-1]]))
    bounds.append(0)
    bounds.reverse()
    return [order[bounds[c]:bounds[c + 1]] for c in range(K)]


def partition_cost(values, clusters):
    v = np.asarray(values, dtype=np.float64)
    return float(sum(np.sum((v[c] - v[c].mean()) ** 2) for c in clusters))


# ---- PieceWiseSearch -------------------------------------------------------------------------

def candidate_alphas(alpha_min, alpha_max, scale_min, scale_max):
    """The alpha sequence of one piece (section 3.6 loop after cafd9859), as Python floats."""
    out = []
    alpha = alpha_min
    top = scale_max if scale_max is not None else alpha_max
    while alpha <= top:
        if alpha < 1:
            alpha += 0.01
            if alpha >= alpha_max:
                if scale_min is None:
                    break
                alpha = scale_min
        else:
            alpha += 0.5
        alpha = round(alpha, 2)
        out.append(alpha)
    return out


def piecewise_search(a, W, X, prm, Y0=None, log=None):
    """Returns (scales [C] float32, chosen K, best loss of its last piece, evaluations)."""
    C = a.size
    w = weight_absmax(W)
    if Y0 is None:
        Y0 = reference_product(X, W)
    alphas = candidate_alphas(prm["alpha_min"], prm["alpha_max"], prm["scale_min"], prm["scale_max"])
    # the formula scales per alpha do not depend on the piece: compute each once
    formula = {al: smooth_scales(a, w, al) for al in alphas if al < 1}
    kmax = max(1, min(prm["k_piece"], C))
    K_list = list(range(1, kmax + 1)) if prm["search_piece"] else [kmax]

    best_scale, best_K, global_loss, n_eval = None, None, np.inf, 0
    for K in K_list:
        S_out = np.zeros(C, dtype=F)                 # reset per K (corrected behaviour)
        best_g = np.inf
        for idx in kmeans_1d(a, K):
            in_g = np.zeros(C, dtype=F)
            in_g[idx] = 1
            # pieces not decided yet keep scale 1; decided pieces' scales are >= 1e-5, never 0
            other = (F(1) - in_g) * (S_out == 0).astype(F)
            best_g, keep_g, keep_al = np.inf, None, None
            for al in alphas:
                cand = formula[al] * in_g if al < 1 else F(al) * in_g
                full = S_out + cand + other
                loss = search_loss(full, X, W, Y0)
                n_eval += 1
                if loss <= best_g:                   # ties go to the later candidate
                    best_g, keep_g, keep_al = loss, cand, al
            if keep_g is None:                       # no candidate at all (empty alpha range)
                keep_g = in_g.copy()
            S_out = S_out + keep_g
            if log:
                log("  K=%d piece of %d channels: alpha %s, loss %.6g" % (K, idx.size, keep_al, best_g))
        if best_g < global_loss:                     # strict: the first K wins ties
            global_loss, best_scale, best_K = best_g, S_out.copy(), K
    if best_scale is None:                           # every loss inf/NaN: keep the last K
        best_scale, best_K = S_out, K_list[-1]
    return best_scale, best_K, global_loss, n_eval


def run_case(case_dir):
    t0 = time.time()
    prm, a, W, X = read_case(case_dir)
    Y0 = reference_product(X, W)
    s_alpha = smooth_scales(a, weight_absmax(W), prm["alpha"])
    alpha_loss = search_loss(s_alpha, X, W, Y0)
    s_pw, K, best_g, n_eval = piecewise_search(a, W, X, prm, Y0)
    pw_loss = search_loss(s_pw, X, W, Y0)
    # the chosen scales are exactly the `full` vector of the winning candidate of the last piece
    assert np.isinf(best_g) or pw_loss == best_g, (pw_loss, best_g)
    if prm["search_piece"] and prm["alpha"] == 0.5 and 0.5 in candidate_alphas(
            prm["alpha_min"], prm["alpha_max"], prm["scale_min"], prm["scale_max"]):
        # alpha 0.5 scales = candidate 0.50 of the single piece at K = 1
        assert pw_loss <= alpha_loss, ("piecewise loss above the alpha=0.5 loss", pw_loss, alpha_loss)

    s_alpha.astype("<f4").tofile(os.path.join(case_dir, "ref_alpha.f32"))
    s_pw.astype("<f4").tofile(os.path.join(case_dir, "ref_piecewise.f32"))
    with open(os.path.join(case_dir, "ref_losses.txt"), "w") as f:
        f.write("alpha_loss %.17g\npiecewise_loss %.17g\npieces %d\ncandidates %d\n"
                % (alpha_loss, pw_loss, K, n_eval))
    print("smooth_ref: C=%d O=%d S=%d alpha=%g k_piece=%d search_piece=%d: alpha_loss=%.9g "
          "piecewise_loss=%.9g pieces=%d candidates=%d (%.2fs)"
          % (a.size, W.shape[0], X.shape[0], prm["alpha"], prm["k_piece"], prm["search_piece"],
             alpha_loss, pw_loss, K, n_eval, time.time() - t0))
    return alpha_loss, pw_loss, K, n_eval


# ---- selftest --------------------------------------------------------------------------------

DEFAULTS = {"alpha": 0.5, "k_piece": 3, "search_piece": True, "alpha_min": 0.2,
            "alpha_max": 0.8, "scale_min": 1.0, "scale_max": 5.0}


def brute_kmeans(v, K):
    """Minimum within-cluster SS over every labelling with K non-empty clusters."""
    best = np.inf
    for lab in itertools.product(range(K), repeat=v.size):
        lab = np.array(lab)
        if len(set(lab.tolist())) != K:
            continue
        best = min(best, partition_cost(v, [np.nonzero(lab == c)[0] for c in range(K)]))
    return best


def selftest():
    fails = []

    def check(ok, what):
        print("%s: %s" % ("ok  " if ok else "FAIL", what))
        if not ok:
            fails.append(what)

    # (1) the candidate sequence
    seq = candidate_alphas(0.2, 0.8, 1.0, 5.0)
    want = [round(0.21 + 0.01 * i, 2) for i in range(59)] + [1.0 + 0.5 * i for i in range(10)]
    check(len(seq) == 69 and seq == want, "defaults give 69 candidates 0.21..0.79, 1.0..5.5 (%d)" % len(seq))
    check(0.5 in seq and 0.2 not in seq and 0.8 not in seq, "0.50 is a candidate, 0.20 and 0.80 are not")
    s2 = candidate_alphas(0.2, 0.8, 1.0, None)
    check(s2 == want[:59] + [1.0], "scale_max none: 0.21..0.79 then scale_min only (%d)" % len(s2))
    s3 = candidate_alphas(0.2, 0.8, None, None)
    check(s3 == want[:59], "both scale bounds none: 0.21..0.79 only (%d)" % len(s3))

    # (2) k-means DP against brute force
    rs = np.random.RandomState(7)
    n_cases = 0
    for C in (1, 2, 3, 5, 7, 9):
        for K in (1, 2, 3):
            for trial in range(2):
                v = rs.standard_normal(C) ** 2 * rs.choice([1.0, 10.0], C)
                cl = kmeans_1d(v, K)
                Kc = min(K, C)
                ok = len(cl) == Kc and sorted(np.concatenate(cl).tolist()) == list(range(C))
                ok = ok and all(c.size > 0 for c in cl)
                ok = ok and all(v[cl[i]].max() <= v[cl[i + 1]].min() for i in range(Kc - 1))
                dp, bf = partition_cost(v, cl), brute_kmeans(v, Kc)
                ok = ok and abs(dp - bf) <= 1e-12 * max(1.0, bf)
                if not ok:
                    check(False, "kmeans C=%d K=%d: dp %r brute %r" % (C, K, dp, bf))
                n_cases += 1
    check(True, "k-means DP == brute force on %d random vectors (C <= 9, K <= 3)" % n_cases)
    cl = kmeans_1d([2.0, 0.0, 1.0], 2)     # {0},{1,2} and {0,1},{2} both cost 0.5 exactly
    check([c.tolist() for c in cl] == [[1], [2, 0]], "equal-cost splits take the earliest boundary")
    cl = kmeans_1d([3.0, 1.0, 3.0, 1.0], 2)  # ties in value: channel order within runs
    check([c.tolist() for c in cl] == [[1, 3], [0, 2]], "stable sort on equal values")

    # (3) round half away from zero
    r = round_half_away(np.array([-2.5, -0.5, 0.5, 1.5, 0.49999997, -0.49999997], dtype=F))
    check(r.tolist() == [-3, -1, 1, 2, 0, -0] and F(0.49999997) < F(0.5),
          "round_half_away: %s" % r.tolist())

    # (4) a small random case with outlier channels, through the file interface
    rs = np.random.RandomState(11)
    C, O, S = 16, 12, 40
    X = (rs.standard_normal((S, C)) * 0.5).astype(F)
    X[:, [3, 9]] *= F(25)
    X[:, 12] *= F(8)
    W = (rs.standard_normal((O, C)) * 0.1).astype(F)
    a = np.abs(X).max(axis=0).astype(F)
    with tempfile.TemporaryDirectory() as d:
        write_case(d, DEFAULTS, a, W, X)
        alpha_loss, pw_loss, K, n_eval = run_case(d)
        back = np.fromfile(os.path.join(d, "ref_piecewise.f32"), dtype="<f4")
        with open(os.path.join(d, "ref_losses.txt")) as f:
            lines = f.read().split("\n")
    Y0 = reference_product(X, W)
    ones_loss = search_loss(np.ones(C, dtype=F), X, W, Y0)
    check(pw_loss <= alpha_loss, "piecewise loss %.6g <= alpha=0.5 loss %.6g" % (pw_loss, alpha_loss))
    check(n_eval == 69 * 6, "k_piece 3 with search_piece: 69 * (1+2+3) = 414 evaluations (%d)" % n_eval)
    check(search_loss(back, X, W, Y0) == pw_loss and lines[0].startswith("alpha_loss "),
          "files read back")
    print("info: all-ones loss %.6g, alpha=0.5 loss %.6g, piecewise loss %.6g (K=%d)"
          % (ones_loss, alpha_loss, pw_loss, K))
    prm = dict(DEFAULTS, search_piece=False)
    _, K1, _, n1 = piecewise_search(a, W, X, prm, Y0)
    check(K1 == 3 and n1 == 207, "without search_piece: one pass at K = k_piece, 207 evaluations")

    print("selftest: %s" % ("FAILED (%d)" % len(fails) if fails else "passed"))
    return 1 if fails else 0


def main(argv):
    if len(argv) != 2:
        sys.stderr.write(__doc__)
        return 2
    if argv[1] == "selftest":
        return selftest()
    run_case(argv[1])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
