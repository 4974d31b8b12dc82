#!/usr/bin/env python3
"""arch_export_ct_check.py: transformers with compressed-tensors loads a compressed Hugging Face
folder lmpress exported from an architecture fixture and gives lmpress's log-probabilities of the
same variant (tests/test_export_arch.c, with LMP_TRANSFORMERS_PYTHON; CI does not need torch).

    PYTHON arch_export_ct_check.py EXPORT_DIR TOKENS WANT ROWS

TOKENS is a text file of token ids, WANT the variant's log-probs as lmpress computed them
(little-endian float32, ROWS x vocab) with its activations unquantized: compressed-tensors
simulates int8 input activations with its own scale (abs-max / 127.5) where lmpress (and vLLM's
kernels) use abs-max / 127, so with activation quantization in the config both sides run with it
off, as tools/ref/ct_export_check.py does.  The model is loaded in float32 (compressed-tensors
decompresses codes x scales into it); max |d| / max |want| must be at most 1e-5.  Prints the class
transformers built, the versions and the difference; exits 0 when within, 1 otherwise."""
import json
import os
import sys

import numpy as np


def main():
    if len(sys.argv) != 5:
        print(__doc__)
        return 2
    folder, tokens, want_path, rows = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    import torch
    import transformers
    import compressed_tensors
    from transformers import AutoModelForCausalLM
    major = int(transformers.__version__.split(".")[0])
    kw = {"dtype": torch.float32} if major >= 5 else {"torch_dtype": torch.float32}
    model = AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager", **kw).eval()
    groups = (json.load(open(os.path.join(folder, "config.json"))).get("quantization_config") or {}) \
        .get("config_groups", {})
    if not groups:
        print(f"problem: {folder}: config.json has no compressed-tensors config groups")
        return 1
    act = any(g.get("input_activations") for g in groups.values())
    if act:
        for mod in model.modules():
            if hasattr(mod, "quantization_scheme"):
                mod.quantization_enabled = False
    with open(tokens) as f:
        toks = [int(x) for x in f.read().split()][:rows]
    with torch.no_grad():
        logits = model(torch.tensor([toks], dtype=torch.long)).logits[0]
    lp = torch.log_softmax(logits.double(), dim=-1).numpy()
    want = np.fromfile(want_path, dtype="<f4").astype(np.float64).reshape(rows, -1)
    if want.shape != lp.shape:
        print(f"problem: log-probs of shape {lp.shape}, lmpress's {want.shape}")
        return 1
    rel = float(np.abs(lp - want).max() / np.abs(want).max())
    ok = rel <= 1e-5
    print(f"{'ok' if ok else 'problem'}: transformers {transformers.__version__} + compressed-tensors "
          f"{compressed_tensors.__version__} load {os.path.basename(folder)} as {type(model).__name__}: {rows} rows, "
          f"relative difference {rel:.2e} to lmpress's variant{' (activation quantization off on both sides)' if act else ''}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
