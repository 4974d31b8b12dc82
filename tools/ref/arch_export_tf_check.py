#!/usr/bin/env python3
"""arch_export_tf_check.py: transformers loads a Hugging Face folder lmpress exported from an
architecture fixture and reproduces the fixture's golden log-probabilities (tests/test_export_arch.c,
with LMP_TRANSFORMERS_PYTHON; CI does not need torch).

    PYTHON arch_export_tf_check.py EXPORT_DIR FIXTURE_DIR GOLDEN ROWS

PYTHON has torch and transformers (4 or 5: tools/ref/arch_fixtures.sh's build/arch-venv has 5.24,
build/arch-venv4 4.57).  The model is loaded in float64 with eager attention, as the goldens were
made; the first ROWS tokens of FIXTURE_DIR/tokens.txt are run and the log-probs compared with the
first ROWS rows of FIXTURE_DIR/GOLDEN: max |d| / max |golden| must be at most 1e-5.  Prints the
class transformers built, its version and the difference; exits 0 when within, 1 otherwise."""
import os
import sys

import numpy as np


def main():
    if len(sys.argv) != 5:
        print(__doc__)
        return 2
    folder, fixture, golden, rows = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    import torch
    import transformers
    from transformers import AutoModelForCausalLM
    major = int(transformers.__version__.split(".")[0])
    kw = {"dtype": torch.float64} if major >= 5 else {"torch_dtype": torch.float64}
    model = AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager", **kw).eval()
    with open(os.path.join(fixture, "tokens.txt")) as f:
        tokens = [int(x) for x in f.read().split()][:rows]
    with torch.no_grad():
        logits = model(torch.tensor([tokens], dtype=torch.long)).logits[0]
    lp = torch.log_softmax(logits.double(), dim=-1).numpy()
    gold = np.fromfile(os.path.join(fixture, golden), dtype="<f8").reshape(-1, lp.shape[1])[:rows]
    rel = float(np.abs(lp - gold).max() / np.abs(gold).max())
    ok = rel <= 1e-5
    print(f"{'ok' if ok else 'problem'}: transformers {transformers.__version__} loads {os.path.basename(folder)} as "
          f"{type(model).__name__}: {rows} rows, relative difference {rel:.2e} to {golden}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
