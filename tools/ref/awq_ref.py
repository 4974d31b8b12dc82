#!/usr/bin/env python3
"""awq_ref.py — golden AWQ scales and clipped weights, in numpy, from the definitions of
llm-compressor's AWQModifier (src/llmcompressor/modifiers/awq/base.py: _apply_smoothing,
_compute_best_scale, _pseudo_quantize_tensor, _accumulate_mean of |x|) and AutoAWQ's clip
search (awq/quantize/quantizer.py: _compute_best_clip, apply_clip).  Independent of lmpress's C
code: it reads the raw inputs the test wrote and writes what the plugin must produce.

Usage: awq_ref.py DIR.  DIR/case.txt holds lines
    bits B / group G (0: the whole row) / symmetric 0|1 / duo 0|1 / n_grid N
    max_shrink F / clip_tokens K
    scale NAME S C O    -> reads NAME.x.f32 [S, C] and NAME.w.f32 [O, C] (the balance linears'
                           rows, stacked); writes NAME.scales.f32 [C] and NAME.ratio.txt
    clip NAME S C O     -> reads NAME.x.f32 (the input as the scaled linear sees it) and
                           NAME.w.f32 [O, C]; writes NAME.clipped.f32 [O, C]
Runs with Debian's numpy (python3-numpy) or a venv's.
"""
import os
import sys

import numpy as np

f32 = np.float32


def pseudo_quantize(w, bits, sym, group):
    """_pseudo_quantize_tensor: w [O, C] in float32, groups of `group` columns of a row."""
    O, C = w.shape
    g = w.reshape(-1, group if group > 0 else C).astype(f32)
    if not sym:
        mx = g.max(axis=1, keepdims=True)
        mn = g.min(axis=1, keepdims=True)
        max_int = f32(2 ** bits - 1)
        scales = np.maximum(mx - mn, f32(1e-5)) / max_int
        zeros = np.clip(-np.round(mn / scales), f32(0), max_int)
        q = (np.clip(np.round(g / scales) + zeros, f32(0), max_int) - zeros) * scales
    else:
        mx = np.maximum(np.abs(g).max(axis=1, keepdims=True), f32(1e-5))
        max_int = f32(2 ** (bits - 1) - 1)
        min_int = f32(-(2 ** (bits - 1)))
        scales = mx / max_int
        q = np.clip(np.round(g / scales), min_int, max_int) * scales
    return q.reshape(O, C).astype(f32)


def best_scales(x, w, bits, sym, group, duo, n_grid):
    """_compute_best_scale with the loss on the balance linears' outputs X W^T."""
    O, C = w.shape
    G = group if group > 0 else C
    wa = np.abs(w).reshape(-1, G)
    w_mean = (wa / (wa.max(axis=1, keepdims=True) + f32(1e-6))).reshape(O, C).astype(np.float64).mean(axis=0)
    w_mean = w_mean.astype(f32)
    x_mean = np.abs(x.astype(np.float64)).mean(axis=0).astype(f32)
    xd = x.astype(np.float64)
    y0 = xd @ w.astype(np.float64).T
    best, best_ratio, best_loss = None, -1.0, np.inf
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        for i in range(n_grid):
            ratio = i / n_grid
            r = f32(ratio)
            if duo:
                s = np.power(x_mean, r) / (np.power(w_mean, f32(1) - r) + f32(1e-4))
            else:
                s = np.power(x_mean, r)
            s = np.where(s < f32(1e-4), f32(1e-4), s).astype(f32)  # clamp(min=1e-4), NaN kept
            s = s / np.sqrt(s.max() * s.min())
            s[~np.isfinite(s)] = f32(1)
            wq = pseudo_quantize(w * s[None, :], bits, sym, group) / s[None, :]
            y = xd @ wq.astype(np.float64).T
            loss = float(((y0 - y) ** 2).sum() / y.size)
            if loss < best_loss:
                best, best_ratio, best_loss = s.copy(), ratio, loss
    return best, best_ratio, best_loss


def clip(x, w, bits, sym, group, max_shrink, clip_tokens, n_grid=20):
    """AutoAWQ's _compute_best_clip then apply_clip (one output channel at a time)."""
    O, C = w.shape
    G = group if group > 0 else C
    step = max(1, x.shape[0] // clip_tokens)
    xs = x[0::step].astype(np.float64)               # [N, C]
    out = w.copy()
    for o in range(O):
        for g0 in range(0, C, G):
            wg = w[o, g0:g0 + G]
            xg = xs[:, g0:g0 + G]
            org = xg @ wg.astype(np.float64)
            amax = f32(np.abs(wg).max())
            best, best_err = amax, 1e9
            for i in range(int(max_shrink * n_grid)):
                mx = f32(amax * f32(1 - i / n_grid))
                cw = np.clip(wg, -mx, mx)
                qw = pseudo_quantize(cw[None, :], bits, sym, 0)[0]
                err = float(((xg @ qw.astype(np.float64) - org) ** 2).mean())
                if err < best_err:
                    best, best_err = mx, err
            out[o, g0:g0 + G] = np.clip(wg, -best, best)
    return out


def main():
    d = sys.argv[1]
    opts, jobs = {}, []
    with open(os.path.join(d, "case.txt")) as f:
        for line in f:
            p = line.split()
            if not p:
                continue
            if p[0] in ("scale", "clip"):
                jobs.append((p[0], p[1], int(p[2]), int(p[3]), int(p[4])))
            else:
                opts[p[0]] = float(p[1])
    bits, group, sym = int(opts["bits"]), int(opts["group"]), int(opts["symmetric"])
    for kind, name, S, C, O in jobs:
        x = np.fromfile(os.path.join(d, name + ".x.f32"), dtype=f32).reshape(S, C)
        w = np.fromfile(os.path.join(d, name + ".w.f32"), dtype=f32).reshape(O, C)
        if kind == "scale":
            s, ratio, loss = best_scales(x, w, bits, sym, group, int(opts["duo"]), int(opts["n_grid"]))
            s.astype(f32).tofile(os.path.join(d, name + ".scales.f32"))
            with open(os.path.join(d, name + ".ratio.txt"), "w") as f:
                f.write("%.6f %.9g\n" % (ratio, loss))
            print("%s: ratio %.2f loss %.6g" % (name, ratio, loss))
        else:
            c = clip(x, w, bits, sym, group, opts["max_shrink"], int(opts["clip_tokens"]))
            c.astype(f32).tofile(os.path.join(d, name + ".clipped.f32"))
            print("%s: %d of %d weights clipped" % (name, int((c != w).sum()), c.size))


if __name__ == "__main__":
    main()
