#!/usr/bin/env python3
"""quant_grid_ref.py: an independent numpy reference of lmpress's fake-quantization grids.

Writes tests/golden/quant_grid.txt, which tests/test_quant_grid.c replays through the CPU
backend plugin's choose_weight_grid + apply_weight_grid and quantize_act.  Rerun it with (Debian's python3-numpy):

    /usr/bin/python3 tools/ref/quant_grid_ref.py > tests/golden/quant_grid.txt

The math is docs/algorithms.md section 1 / include/lmpress/plugin.h, written here from the formulas
with whole-array numpy (slices as padded rows, NaN-aware reductions) rather than from the C:

  weights, one grid per slice (whole tensor, one output row, or `group` consecutive input
  columns of one row; the last group of a row may be shorter):
    sym:  qmax = 2^(b-1)-1, T = max|w| (0 -> 1e-8), scale = T/qmax,
          q = clip(round(w/scale), -qmax-1, qmax), w' = q*scale              (SYM 1, "qmax")
          SYM 2 ("full", compressed-tensors' symmetric int, whose quantizer computes
          scale = max|w| / ((qmax - qmin)/2)): scale = T/((2^b-1)/2), same q and w'
          SYM 3 ("signed", ggml's Q4_0 rule d = max/-8 at any bits): M = the slice's signed
          value of largest magnitude (the positive one if both signs reach it; 0 -> 1e-8),
          scale = M/-2^(b-1), same q and w'
    asym: maxq = 2^b-1, lo = min(0, min w), hi = max(0, max w) (both 0 -> -1, 1),
          scale = (hi-lo)/maxq, zero = round(-lo/scale),
          q = clip(round(w/scale) + zero, 0, maxq), w' = scale*(q-zero)
  activations x[T, C], symmetric, qmax = 2^(b-1)-1:
    static: s = the given scale; dyn_tensor: s = max(max|x|, 1e-5)/qmax over x;
    dyn_token: the same per row;  x' = clip(round(x/s), -qmax, qmax)*s

Every step is float32 arithmetic, as the C does it, so the results are expected to match bit
for bit.  Rounding: numpy.round rounds halves to even; half away from zero is
sign(x)*floor(|x|+0.5), evaluated in float64 because in float32 |x|+0.5 itself can round up
(0.49999997 + 0.5 == 1.0f).

Inputs are fixed: numpy RandomState seeds and hand-built matrices with exact .5 ties (scale a
power of two, values at half steps, and asym zero-points at a half step), so rounding modes
give different answers.  All inputs are written to the file, so the C side needs no RNG.

File format (whitespace separated; '#' starts a comment line; float32 values are printed in
numpy's shortest round-trip form, which strtof reads back exactly):
  matrix NAME ROWS COLS            then ROWS*COLS values, one row per line
  weight NAME BITS SYM GRAN GROUP ROUNDING
      GRAN tensor|channel|group, GROUP 0 unless group, ROUNDING even|away
    scales N v...                  N = number of slices, in slice order (row-major over groups)
    zeros N v...                   N = 0 when SYM is not 0
    out                            then ROWS*COLS expected values
  act NAME MODE BITS ROUNDING SCALE
      MODE static|dyn_tensor|dyn_token, SCALE used by static only
    out                            then ROWS*COLS expected values
  end
"""
import sys

import numpy as np

F = np.float32


def rnd(x, rounding):
    """Round float32 array x to integers (kept float32) with the given tie rule."""
    if rounding == "even":
        return np.round(x).astype(F)  # numpy: halves to even
    x64 = x.astype(np.float64)        # exact for float32 inputs, see the module comment
    return (np.sign(x64) * np.floor(np.abs(x64) + 0.5)).astype(F)


def to_slices(W, gran, group):
    """W[rows, cols] -> S[n_slices, length], NaN-padded, slices in the order scales are stored."""
    rows, cols = W.shape
    if gran == "tensor":
        return W.reshape(1, rows * cols).copy()
    if gran == "channel":
        return W.copy()
    ng = -(-cols // group)
    P = np.full((rows, ng * group), np.nan, dtype=F)
    P[:, :cols] = W
    return P.reshape(rows * ng, group)


def from_slices(S, rows, cols, gran, group):
    if gran == "group":
        return S.reshape(rows, -1)[:, :cols].copy()
    return S.reshape(rows, cols).copy()


def quant_weight(W, bits, sym, gran, group, rounding):
    """Returns (W', scales, zeros or None)."""
    S = to_slices(W, gran, group)
    if sym:
        qmax = F(2 ** (bits - 1) - 1)
        T = np.nanmax(np.abs(S), axis=1)
        if sym == 3:
            hi, lo = np.nanmax(S, axis=1), np.nanmin(S, axis=1)
            T = np.where(hi >= -lo, hi, lo)
        T = np.where(T == 0, F(1e-8), T).astype(F)
        div = {1: qmax, 2: F((2 ** bits - 1) / 2), 3: F(-(2 ** (bits - 1)))}[sym]
        scale = (T / div).astype(F)
        q = np.clip(rnd(S / scale[:, None], rounding), -qmax - F(1), qmax)
        out = q * scale[:, None]
        zero = None
    else:
        maxq = F(2 ** bits - 1)
        lo = np.minimum(np.nanmin(S, axis=1), F(0)).astype(F)
        hi = np.maximum(np.nanmax(S, axis=1), F(0)).astype(F)
        both = (lo == 0) & (hi == 0)
        lo[both], hi[both] = F(-1), F(1)
        scale = ((hi - lo) / maxq).astype(F)
        zero = rnd(-lo / scale, rounding)
        q = np.clip(rnd(S / scale[:, None], rounding) + zero[:, None], F(0), maxq)
        out = scale[:, None] * (q - zero[:, None])
    for a in (out, scale) + ((zero,) if zero is not None else ()):
        assert a.dtype == F, a.dtype
    return from_slices(out, W.shape[0], W.shape[1], gran, group), scale, zero


def quant_act(X, mode, bits, rounding, static_scale):
    qmax = F(2 ** (bits - 1) - 1)
    if mode == "static":
        s = np.full((X.shape[0], 1), F(static_scale), dtype=F)
    elif mode == "dyn_tensor":
        s = np.full((X.shape[0], 1), np.maximum(np.abs(X).max(), F(1e-5)) / qmax, dtype=F)
    else:  # dyn_token
        s = (np.maximum(np.abs(X).max(axis=1), F(1e-5)) / qmax).astype(F)[:, None]
    out = np.clip(rnd(X / s, rounding), -qmax, qmax) * s
    assert out.dtype == F
    return out


# ---- inputs ---------------------------------------------------------------------------------

def random_weight():
    """3 x 72 (group 32 -> groups of 32, 32, 8): gaussian-ish weights with outliers."""
    rs = np.random.RandomState(0)
    W = (rs.standard_normal((3, 72)) * 0.05).astype(F)
    W[0, 5] = F(0.6)             # an outlier in group 0
    W[2, 70] = F(-0.45)          # one in the ragged last group
    W[1] = np.abs(W[1])          # all >= 0: asym lo = min(0, .) = 0
    return W


def zero_weight():
    """2 x 40: an all-zero row (sym T = 0 -> 1e-8, asym [0,0] -> [-1,1]) and a row whose first
    group of 32 is zero."""
    rs = np.random.RandomState(1)
    W = np.zeros((2, 40), dtype=F)
    W[1, 32:] = (rs.standard_normal(8) * 0.1).astype(F)
    return W


def place_extremes(row, lo, hi):
    """Puts lo and hi in each group of 32 of a 40-column row (cols 0/1 and 32/33)."""
    row[0], row[1], row[32], row[33] = lo, hi, lo, hi


def tie_weight_sym(bits, seed):
    """2 x 40, every row and group has abs-max qmax*s with s = 1/4: the grid is s exactly in
    every granularity, and the other values sit on half steps (k + 1/2)*s or whole steps."""
    qmax, s = 2 ** (bits - 1) - 1, 0.25
    rs = np.random.RandomState(seed)
    k = rs.randint(-qmax, qmax, size=(2, 40))            # k + 1/2 in [-qmax+1/2, qmax-1/2]
    half = rs.randint(0, 2, size=(2, 40)) * 0.5           # half the entries are ties
    W = ((k + half) * s).astype(F)
    place_extremes(W[0], -qmax * s * 0.5, qmax * s)       # abs-max from the positive side
    place_extremes(W[1], -qmax * s, qmax * s * 0.5)       # and from the negative side
    return W


def tie_weight_asym(bits, seed):
    """2 x 40 with lo = -(z + 1/2)s, hi = (maxq - z - 1/2)s, z even, s = 1/4: scale = s exactly,
    the zero-point -lo/s = z + 1/2 is a tie (even -> z, away -> z+1), and values sit on half
    or whole steps."""
    maxq, s = 2 ** bits - 1, 0.25
    z = (maxq // 3) & ~1
    lo, hi = -(z + 0.5) * s, (maxq - z - 0.5) * s
    rs = np.random.RandomState(seed)
    k = rs.randint(-z, maxq - z, size=(2, 40))            # (k + 1/2)s within [lo, hi]
    half = rs.randint(0, 2, size=(2, 40)) * 0.5
    W = ((k + half) * s).astype(F)
    W = np.clip(W, F(lo), F(hi))
    place_extremes(W[0], lo, hi)
    place_extremes(W[1], lo, hi)
    return W


def random_act():
    """4 x 24 activations: an outlier channel value and an all-zero token (1e-5 clamp)."""
    rs = np.random.RandomState(2)
    X = (rs.standard_normal((4, 24)) * 1.5).astype(F)
    X[1, 5] = F(12.0)
    X[3] = 0
    return X


def tie_act(bits, seed):
    """3 x 24 with every row's abs-max qmax/4 and the other values on quarter half-steps."""
    qmax, s = 2 ** (bits - 1) - 1, 0.25
    rs = np.random.RandomState(seed)
    k = rs.randint(-qmax, qmax, size=(3, 24))
    X = ((k + 0.5) * s).astype(F)
    for r in range(3):
        X[r, r] = (qmax if r % 2 == 0 else -qmax) * s
    return X


# ---- output -------------------------------------------------------------------------------

def fmt(v):
    return str(F(v))  # numpy's shortest string that reads back as the same float32


def write_values(out, A):
    for row in A:
        out.write(" ".join(fmt(v) for v in row) + "\n")


def main(out):
    matrices = {"rand_w": random_weight(), "zero_w": zero_weight(), "rand_a": random_act()}
    for i, b in enumerate((2, 3, 4, 8)):
        matrices["tie_sym_%d" % b] = tie_weight_sym(b, 10 + i)
        matrices["tie_asym_%d" % b] = tie_weight_asym(b, 20 + i)
    for i, b in enumerate((4, 8)):
        matrices["tie_a_%d" % b] = tie_act(b, 30 + i)

    weight_cases = []
    grans = (("tensor", 0), ("channel", 0), ("group", 32))
    for b in (2, 3, 4, 8):
        for sym in (1, 2, 3, 0):
            for gran, g in grans:
                for r in ("even", "away"):
                    weight_cases.append(("rand_w", b, sym, gran, g, r))
                    weight_cases.append(("tie_%s_%d" % ("sym" if sym else "asym", b), b, sym, gran, g, r))
    for sym in (1, 2, 3, 0):
        for gran, g in grans:
            weight_cases.append(("zero_w", 4, sym, gran, g, "even"))

    act_cases = []
    for b in (4, 8):
        for r in ("even", "away"):
            qmax = 2 ** (b - 1) - 1
            act_cases.append(("rand_a", "static", b, r, 2.0 / qmax))  # the outlier 12 clamps
            act_cases.append(("rand_a", "dyn_tensor", b, r, 0.0))
            act_cases.append(("rand_a", "dyn_token", b, r, 0.0))
            act_cases.append(("tie_a_%d" % b, "static", b, r, 0.25))    # every value a tie
            act_cases.append(("tie_a_%d" % b, "static", b, r, 0.125))   # odd integers, clamps
            act_cases.append(("tie_a_%d" % b, "dyn_tensor", b, r, 0.0))
            act_cases.append(("tie_a_%d" % b, "dyn_token", b, r, 0.0))

    out.write("# quant_grid golden v1, written by tools/ref/quant_grid_ref.py (numpy %s); do not edit.\n"
              % np.__version__)
    out.write("# Rerun: /usr/bin/python3 tools/ref/quant_grid_ref.py > tests/golden/quant_grid.txt\n")
    out.write("# Format: see the docstring of that script.\n")
    for name, A in matrices.items():
        out.write("matrix %s %d %d\n" % (name, A.shape[0], A.shape[1]))
        write_values(out, A)

    n_tie_diff = 0  # elements where the two roundings disagree: proof that ties are exercised
    for name, b, sym, gran, g, r in weight_cases:
        W = matrices[name]
        Wq, scale, zero = quant_weight(W, b, sym, gran, g, r)
        Wo, _, _ = quant_weight(W, b, sym, gran, g, "away" if r == "even" else "even")
        n_tie_diff += int(np.sum(Wq != Wo))
        out.write("weight %s %d %d %s %d %s\n" % (name, b, sym, gran, g, r))
        out.write("scales %d %s\n" % (scale.size, " ".join(fmt(v) for v in scale)))
        zs = [] if zero is None else [fmt(v) for v in zero]
        out.write("zeros %d%s\n" % (len(zs), "".join(" " + z for z in zs)))
        out.write("out\n")
        write_values(out, Wq)
    for name, mode, b, r, s in act_cases:
        X = matrices[name]
        Xq = quant_act(X, mode, b, r, s)
        Xo = quant_act(X, mode, b, "away" if r == "even" else "even", s)
        n_tie_diff += int(np.sum(Xq != Xo))
        out.write("act %s %s %d %s %s\n" % (name, mode, b, r, fmt(s)))
        out.write("out\n")
        write_values(out, Xq)
    out.write("end\n")
    assert n_tie_diff > 100, n_tie_diff
    sys.stderr.write("quant_grid_ref: %d weight cases, %d act cases, %d elements differ between "
                     "roundings\n" % (len(weight_cases), len(act_cases), n_tie_diff))


if __name__ == "__main__":
    main(sys.stdout)
