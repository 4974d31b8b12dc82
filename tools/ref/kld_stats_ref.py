#!/usr/bin/python3
"""kld_stats_ref.py — an independent numpy statement of llama-perplexity --kl-divergence's
statistics (llama.cpp tools/perplexity/perplexity.cpp: kl_divergence, mean_and_uncertainty,
covariance, percentile), for tests/test_eval_kld.c, which checks core/eval/kld_stats.c against it.

Input (a file the test writes): int32 W, L, V; then float32 ref[W, L, V] (the base's
log-probabilities), float32 var[W, L, V] (the model Q's), int32 tok[W, L], little-endian.  Row t of
a window predicts tok[t + 1]; the L - 1 rows of every window are scored.

Per position: nll = -var[tok], nll_base = -ref[tok], KL = sum_v exp(ref) (ref - var) over the
whole vocabulary (lmpress uses the base's f32 log-probabilities; llama.cpp's 16-bit storage and
its log p < -16 cut are not restated), dp = exp(-nll) - exp(-nll_base), same top = argmax equal
(the first index of the maximum, as both C programs take it).  The per-position KL and dp are kept
as float32 for the percentiles, as llama.cpp keeps them.

Output: JSON with the keys of `lmpress eval --kl-divergence-base --json`'s "stats" object.

Run: /usr/bin/python3 tools/ref/kld_stats_ref.py FILE"""
import json
import math
import struct
import sys

import numpy as np


def mean_and_uncertainty(s, s2, n):
    if n < 1:
        return float("nan"), float("nan")
    f = s / n
    df = s2 / n - f * f
    return f, (math.sqrt(df / (n - 1)) if df > 0 and n > 10 else 0.0)


def covariance(a, b, ab, n):
    if n < 10:
        return 0.0
    return (ab / n - (a / n) * (b / n)) / (n - 1)


def percentile(sorted_values, fraction):
    n = len(sorted_values)
    if fraction <= 0:
        return float(sorted_values[0])
    if fraction >= 1:
        return float(sorted_values[-1])
    p = fraction * (n - 1)
    ip = int(p)
    p -= ip
    return (1 - p) * float(sorted_values[ip]) + p * float(sorted_values[min(ip + 1, n - 1)])


def main():
    with open(sys.argv[1], "rb") as f:
        data = f.read()
    W, L, V = struct.unpack_from("<3i", data, 0)
    off = 12
    ref = np.frombuffer(data, "<f4", W * L * V, off).reshape(W, L, V).astype(np.float64)
    off += 4 * W * L * V
    var = np.frombuffer(data, "<f4", W * L * V, off).reshape(W, L, V).astype(np.float64)
    off += 4 * W * L * V
    tok = np.frombuffer(data, "<i4", W * L, off).reshape(W, L)
    nll, nll_base, kld, dp, same = [], [], [], [], 0
    for w in range(W):
        for t in range(L - 1):
            r, q, nxt = ref[w, t], var[w, t], tok[w, t + 1]
            nll.append(-q[nxt])
            nll_base.append(-r[nxt])
            kld.append(float(np.sum(np.exp(r) * (r - q))))
            dp.append(math.exp(q[nxt]) - math.exp(r[nxt]))
            same += int(np.argmax(r) == np.argmax(q))
    n = len(nll)
    nll, nll_base, kld_a, dp_a = map(np.array, (nll, nll_base, kld, dp))
    lp = mean_and_uncertainty(nll.sum(), (nll * nll).sum(), n)
    lb = mean_and_uncertainty(nll_base.sum(), (nll_base * nll_base).sum(), n)
    cov = covariance(nll.sum(), nll_base.sum(), (nll * nll_base).sum(), n)
    ppl, ppl_base = math.exp(lp[0]), math.exp(lb[0])
    ratio = lp[0] - lb[0]
    ratio_err = math.sqrt(max(0.0, lp[1] ** 2 + lb[1] ** 2 - 2 * cov))
    ppl_err, ppl_base_err = ppl * lp[1], ppl_base * lb[1]
    mse = mean_and_uncertainty((dp_a ** 2).sum(), (dp_a ** 4).sum(), n)
    rms = math.sqrt(mse[0])
    top = same / n
    out = {"count": n, "ppl": ppl, "ppl_err": ppl_err, "ppl_base": ppl_base, "ppl_base_err": ppl_base_err,
           "ln_ppl_cor": cov / (lp[1] * lb[1]) if lp[1] * lb[1] else float("nan"),
           "ln_ppl_ratio": ratio, "ln_ppl_ratio_err": ratio_err,
           "ppl_ratio": math.exp(ratio), "ppl_ratio_err": math.exp(ratio) * ratio_err,
           "ppl_diff": ppl - ppl_base,
           "ppl_diff_err": math.sqrt(max(0.0, ppl_err ** 2 + ppl_base_err ** 2 - 2 * ppl * ppl_base * cov))}
    for key, (m, e) in (("kld", mean_and_uncertainty(kld_a.sum(), (kld_a ** 2).sum(), n)),
                        ("dp", mean_and_uncertainty(dp_a.sum(), (dp_a ** 2).sum(), n)),
                        ("dp_rms", (rms, 0.5 / rms * mse[1] if rms > 0 else 0.0)),
                        ("same_top", (top, math.sqrt(top * (1 - top) / (n - 1))))):
        out[key], out[key + "_err"] = m, e
    ks, ds = np.sort(kld_a.astype(np.float32)), np.sort(dp_a.astype(np.float32))
    out["kld_percentiles"] = [percentile(ks, f) for f in (1, .999, .99, .95, .90, .5, .10, .05, .01, .001, 0)]
    out["dp_percentiles"] = [percentile(ds, f) for f in (1, .999, .99, .95, .90, .75, .5, .25, .10, .05, .01, .001, 0)]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
