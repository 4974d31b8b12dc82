#!/usr/bin/env python3
"""moe_ct_logits_check.py — loads a mixture-of-experts Hugging Face folder that lmpress exported
(compressed-tensors' quantization_config, per-expert linears) with transformers and
compressed-tensors, and compares its logits with the ones lmpress evaluated (tests/test_moe.c).

    PYTHON moe_ct_logits_check.py TOL DIR...

TOL     the largest allowed max |transformers - lmpress| / max |lmpress|.
DIR     an export (config.json with quantization_config, safetensors); beside it DIR.tokens (token
        ids, whitespace separated, one sequence) and DIR.logits (raw little-endian float32
        [T, vocab]: lmpress's forward of the variant on those tokens).

Checks, for every DIR, each printed:
  * quantization_config parses with compressed-tensors' QuantizationConfig; every router
    (mlp.gate, Mixtral's block_sparse_moe.gate, a Qwen2-MoE shared_expert_gate) is in its ignore list and no routed
    expert is;
  * transformers (float32) loads DIR, compressed-tensors dequantizing the experts and the other
    linears on load, without missing or unexpected weights;
  * its logits on TOKENS are within TOL of lmpress's.
Exit status 0 when every check passes."""
import json
import os
import re
import sys

os.environ.setdefault("TQDM_DISABLE", "1")  # no progress bars in the test's output

import numpy as np
import torch
from compressed_tensors.quantization import QuantizationConfig
from safetensors import safe_open
from transformers import AutoModelForCausalLM


def quiet():
    """compressed-tensors warns once per per-expert target ("Could not match ...model.layers.0.mlp.
    experts.0.gate_proj"): transformers 5 holds the experts fused, and dequantizes them on load."""
    import logging
    logging.getLogger("compressed_tensors.utils.match").setLevel(logging.ERROR)
    from transformers.utils import logging as tlog
    tlog.set_verbosity_error()
    tlog.disable_progress_bar()


def main():
    quiet()
    tol = float(sys.argv[1])
    failed = 0
    for d in sys.argv[2:]:
        failed += check(d, d + ".tokens", d + ".logits", tol) != 0
    return 1 if failed or len(sys.argv) < 3 else 0


def check(d, tok_path, logit_path, tol):
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    qc = QuantizationConfig.model_validate(cfg["quantization_config"])
    ignore = set(qc.ignore or [])
    names = []
    for fn in sorted(os.listdir(d)):
        if fn.endswith(".safetensors"):
            with safe_open(os.path.join(d, fn), "pt") as sf:
                names += list(sf.keys())
    routers = sorted({re.sub(r"\.(weight|bias|e_score_correction_bias)$", "", n) for n in names
                      if re.search(r"\.(mlp|block_sparse_moe)\.(gate|router|shared_expert_gate)\.weight$", n)})
    experts = sorted({re.sub(r"\.(weight|weight_packed|weight_scale|weight_shape|weight_zero_point)$", "", n)
                      for n in names if ".experts." in n})
    bad = [r for r in routers if r not in ignore] + [e for e in experts if e in ignore]
    print(f"{d}: quantization_config parses ({len(qc.config_groups)} group(s)); {len(routers)} routers in ignore, "
          f"{len(experts)} expert linears quantized")
    if bad or not routers:
        print(f"FAIL: routers outside ignore or experts inside it: {bad[:6]}")
        return 1
    model, info = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32, output_loading_info=True)
    missing = [k for k in info["missing_keys"]]
    unexpected = [k for k in info["unexpected_keys"]]
    if missing or unexpected:
        print(f"FAIL: transformers loads with missing {missing[:6]} unexpected {unexpected[:6]}")
        return 1
    model.eval()
    with open(tok_path) as f:
        toks = [int(t) for t in f.read().split()]
    want = np.fromfile(logit_path, dtype="<f4").reshape(len(toks), -1)
    with torch.no_grad():
        got = model(torch.tensor([toks])).logits[0].double().numpy()
    rel = float(np.abs(got - want).max() / np.abs(want).max())
    print(f"{d}: transformers {__import__('transformers').__version__} + compressed-tensors "
          f"{__import__('compressed_tensors').__version__}: logits {rel:.2e} relative to lmpress's (tolerance {tol:g})")
    if not rel <= tol:
        print("FAIL: the logits differ")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
