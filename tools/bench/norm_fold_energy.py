#!/usr/bin/env python3
"""norm_fold_energy.py: why R1 hurts weight-only RTN on SmolLM2 (docs/results.md, issue 39).

    PYTHON tools/bench/norm_fold_energy.py HF_FOLDER TEXT [--tokens 512]

For each block's two RMSNorms that feed linears (input_layernorm -> q/k/v, post_attention_layernorm
-> gate/up), on the first TOKENS tokens of TEXT: the normalized input xh = x / rms(x) (before the
norm's weight g) and, per channel j, its mean square E[xh_j^2].  A linear reads g * xh; unrotated,
a weight error dW[:, j] meets g_j * xh_j.  R1 folds g into the columns (W <- W diag(g)) and turns
xh by Q, which spreads xh's energy evenly over the channels, so a weight error of the folded,
rotated matrix meets sqrt(mean_j E[xh_j^2]) on every channel.  Printed per norm:
  top3   the share of sum_j E[xh_j^2] in its 3 largest channels (massive activations),
  g@top3 the norm weight at those channels against the median |g|,
  gain   sum_j E[xh_j^2] * mean_j g_j^2 / sum_j g_j^2 E[xh_j^2]: how much more input energy the folded
         weights' errors meet after a rotation than before, for errors equal across channels.
Needs torch and transformers (CPU)."""
import argparse

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("folder")
    ap.add_argument("text")
    ap.add_argument("--tokens", type=int, default=512)
    a = ap.parse_args()
    torch.set_num_threads(1)
    tok = AutoTokenizer.from_pretrained(a.folder)
    ids = tok(open(a.text).read()[:200000], return_tensors="pt").input_ids[:, :a.tokens]
    m = AutoModelForCausalLM.from_pretrained(a.folder, dtype=torch.float64).eval()
    seen = {}

    def hook(name, norm):
        def f(_mod, inp):
            x = inp[0][0].double()
            xh = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + norm.variance_epsilon)
            seen[name] = (xh.pow(2).mean(0), norm.weight.detach().double())
        return f

    for i, layer in enumerate(m.model.layers):
        for nm in ("input_layernorm", "post_attention_layernorm"):
            norm = getattr(layer, nm)
            norm.register_forward_pre_hook(hook(f"{i}.{nm}", norm))
    with torch.no_grad():
        m(ids)
    print("| norm | top3 share of E[xh^2] | |g| at top3 / median |g| | gain |")
    print("|:---|---:|---:|---:|")
    gains = []
    for name, (e, g) in seen.items():
        top = torch.topk(e, 3).indices
        share = (e[top].sum() / e.sum()).item()
        gm = g.abs().median().item()
        gain = (e.sum() * g.pow(2).mean() / (g.pow(2) * e).sum()).item()
        gains.append(gain)
        print(f"| {name} | {share:.3f} | {', '.join(f'{abs(g[j].item()) / gm:.3g}' for j in top)} | {gain:.1f} |")
    gs = sorted(gains)
    print(f"\ngain over the {len(gs)} norms: median {gs[len(gs) // 2]:.1f}, max {gs[-1]:.1f}, min {gs[0]:.1f}")


if __name__ == "__main__":
    main()
