#!/usr/bin/env python3
"""ct_export_check.py — reads lmpress's Hugging Face exports with compressed-tensors' own code
and checks that every tensor equals what lmpress evaluated, bit for bit (tests/test_export_hf.c).

    PYTHON ct_export_check.py [--transformers] DIR...

Each DIR is an export (config.json, model.safetensors or shards + index); DIR.ref beside it holds
lmpress's in-memory values, written by the C test in Hugging Face's layout (q/k rows in
rotate-half order): manifest.txt ("NAME ROWS COLS" per tensor, COLS 0 for a vector), NAME.f32
(raw little-endian float32), and optionally tokens.txt + logits.f32 ([T, vocab], lmpress's
forward of the variant on those tokens).

For every DIR:
  * config.json's quantization_config parses with compressed-tensors' QuantizationConfig and has no
    sparsity_config (vLLM 0.24 refuses one, whatever its format).  A scheme with actorder "group"
    (weight_g_idx) must be refused by compressed-tensors >= 0.19, which removed it; such a DIR is
    then checked only by an older compressed-tensors (the test runs this script a second time
    with 0.17.1 on PYTHONPATH).
  * the shards and the index agree (every tensor listed once, in its file; total_size).
  * compressed-tensors dequantizes every quantized linear (its model-free
    CompressedTensorsDequantizer) with the file's scales widened to float32 (exact), and the
    result equals lmpress's weight bit for bit (a -0 weight compared as +0: the file's code 0).  Every other tensor equals lmpress's value rounded to the file's dtype (torch's cast).
    How many weights a bfloat16/float16 dequantization (the runtime's own arithmetic) changes is
    printed, not checked.
  * with --transformers: transformers loads DIR as float32, its parameters after the first forward
    equal the same values, and its logits on tokens.txt are close to lmpress's (a layout mistake,
    e.g. q/k rows in the wrong order, is far off).  With activation quantization in the config
    both sides run without it (compressed-tensors simulates it with its own scale).
Exit status 0 when every check passes."""
import argparse
import json
import os
import re
import sys

import numpy as np
import torch
from safetensors.torch import load_file

import compressed_tensors
from compressed_tensors.config import SparsityCompressionConfig
from compressed_tensors.quantization import QuantizationConfig

CT_VERSION = tuple(int(x) for x in re.findall(r"\d+", compressed_tensors.__version__)[:2])
FLOAT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def fail(msg):
    print("FAIL " + msg)
    sys.exit(1)


def read_ref(d):
    ref = {}
    with open(os.path.join(d + ".ref", "manifest.txt")) as f:
        for line in f:
            name, rows, cols = line.split()
            rows, cols = int(rows), int(cols)
            a = np.fromfile(os.path.join(d + ".ref", name + ".f32"), dtype="<f4")
            if a.size != rows * max(cols, 1):
                fail(f"{d}.ref/{name}.f32: {a.size} values, manifest says {rows} x {cols}")
            ref[name] = torch.from_numpy(a.reshape((rows, cols) if cols else (rows,)).copy())
    return ref


def load_tensors(d):
    """Every tensor of the export, checking the index against the shards."""
    index = os.path.join(d, "model.safetensors.index.json")
    if not os.path.exists(index):
        return load_file(os.path.join(d, "model.safetensors"))
    with open(index) as f:
        idx = json.load(f)
    files = sorted(set(idx["weight_map"].values()))
    tensors, total = {}, 0
    for fn in files:
        part = load_file(os.path.join(d, fn))
        for name, t in part.items():
            if idx["weight_map"].get(name) != fn:
                fail(f"{d}: {name} is in {fn} but the index says {idx['weight_map'].get(name)}")
            if name in tensors:
                fail(f"{d}: {name} is in two shards")
            tensors[name] = t
            total += t.numel() * t.element_size()
    if set(tensors) != set(idx["weight_map"]):
        fail(f"{d}: the index lists {sorted(set(idx['weight_map']) - set(tensors))[:5]} which no shard holds")
    if idx["metadata"]["total_size"] != total:
        fail(f"{d}: index total_size {idx['metadata']['total_size']}, shards hold {total} bytes")
    print(f"  {len(files)} shards, index consistent, {total} bytes")
    return tensors


def same_bits(a, b):
    return a.shape == b.shape and torch.equal(a.contiguous().view(torch.int32), b.contiguous().view(torch.int32))


def dequantize(d, tensors):
    """{module.weight: float32 tensor} for every quantized linear, by compressed-tensors' own
    model-free dequantizer (in every version since 0.15)."""
    from compressed_tensors.entrypoints.convert.converters.ct_dequantizer import CompressedTensorsDequantizer

    # float scales widened (exact); MXFP4's uint8 E8M0 exponents stay as they are (its compressor reads them)
    wide = {k: (v.float() if k.endswith("weight_scale") and v.is_floating_point() else v) for k, v in tensors.items()}
    modules = {k[: -len(".weight_scale")] for k in tensors if k.endswith(".weight_scale")}
    out = CompressedTensorsDequantizer(d, dtype=torch.float32).process(dict(wide))
    missing = [m for m in modules if m + ".weight" not in out]
    if missing:
        fail(f"{d}: compressed-tensors did not dequantize {missing[:3]}")
    return {m + ".weight": out[m + ".weight"] for m in modules}


def narrow_dequant_changes(qc, tensors, deq):
    """How many dequantized weights differ when the runtime computes in the scales' own dtype."""
    changed = total = 0
    for name, w in deq.items():
        mod = name[: -len(".weight")]
        s = tensors[mod + ".weight_scale"]
        if s.dtype not in (torch.float16, torch.bfloat16):  # f32, and FP8 / E8M0 scales of float grids
            continue
        narrow = w.to(s.dtype).float()
        changed += int((narrow != w).sum())
        total += w.numel()
    return changed, total


def check_dir(d, use_transformers):
    print(f"{d}: compressed-tensors {compressed_tensors.__version__}")
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    if not isinstance(cfg.get("lmpress"), dict):
        fail(f"{d}/config.json: no lmpress record")
    qc = cfg.get("quantization_config")
    legacy = qc is not None and any(
        (g.get("weights") or {}).get("actorder") == "group" for g in qc.get("config_groups", {}).values())
    if qc is not None:
        try:
            parsed = QuantizationConfig.model_validate(qc)
        except Exception as e:  # noqa: BLE001 - pydantic's or ours, both mean "does not parse"
            if legacy and CT_VERSION >= (0, 19) and "actorder" in str(e):
                print(f"  refused as expected by {compressed_tensors.__version__}: actorder 'group' was removed "
                      "(checked by the older compressed-tensors run)")
                return
            fail(f"{d}: quantization_config does not parse: {e}")
        if legacy and CT_VERSION >= (0, 19):
            fail(f"{d}: actorder 'group' parsed with compressed-tensors {compressed_tensors.__version__}")
        print(f"  QuantizationConfig: format {parsed.format}, {len(parsed.config_groups)} groups, "
              f"{len(parsed.ignore or [])} ignored")
        if "sparsity_config" in qc:
            # vLLM 0.24 (its sparse-inference removal) refuses any sparsity_config with targets,
            # "dense" format included: lmpress keeps an N:M pattern in its own record instead
            fail(f"{d}: sparsity_config written: {qc['sparsity_config']}")
    ref = read_ref(d)
    tensors = load_tensors(d)
    deq = dequantize(d, tensors) if qc is not None and qc.get("config_groups") else {}
    n_q = n_d = n_negzero = 0
    n_narrow = [0]
    bf16_modules = set()
    for g in (qc or {}).get("config_groups", {}).values():
        if (g.get("format") or qc["format"]) == "nvfp4-pack-quantized":
            bf16_modules.update(g.get("targets", []))
    for name, want in ref.items():
        if name in deq:
            got = deq[name]
            # lmpress leaves a small negative weight on a symmetric grid as -0 (code -0 times the
            # scale); the file's code 0 reads +0, the same number (or -0 with a negative scale,
            # sym_scale = "signed"): both compared as +0
            n_negzero += int(((want == 0) & torch.signbit(want)).sum())
            if name[: -len(".weight")] in bf16_modules:
                # nvfp4-pack-quantized's decompressor unpacks the codes to bfloat16 and returns
                # bfloat16(q * scale / global_scale) whatever dtype it is asked for: lmpress's
                # weights rounded to bfloat16
                n_narrow[0] += 1
                want = want.to(torch.bfloat16).float()
            want = want + 0.0
            got = got + 0.0
            if not same_bits(got, want):
                diff = (got != want).nonzero()[:3].tolist()
                fail(f"{d}: {name}: dequantized weights differ from lmpress's at {diff}")
            n_q += 1
        elif name in tensors and tensors[name].dtype in FLOAT_DTYPES:
            got = tensors[name]
            if not same_bits(got.float(), want.to(got.dtype).float()):
                fail(f"{d}: {name} ({got.dtype}) differs from lmpress's value cast to it")
            n_d += 1
        else:
            fail(f"{d}: {name}: neither a dense tensor nor a dequantized weight in the export")
    extra = [k for k in deq if k not in ref]
    if extra:
        fail(f"{d}: dequantized {extra[:3]} which lmpress did not dump")
    print(f"  {n_q} quantized linears equal lmpress's weights bit for bit ({n_negzero} weights -0 in lmpress, +0 "
          f"from the file's code 0), {n_d} other tensors equal" +
          (f"; {n_narrow[0]} nvfp4 linears dequantized in bfloat16 by compressed-tensors, compared with lmpress's "
           "rounded to it"
           if n_narrow[0] else ""))
    stored = {name: None if name in deq else tensors[name].dtype for name in ref}
    if deq:
        changed, total = narrow_dequant_changes(qc, tensors, deq)
        if total:
            print(f"  (dequantized in the scales' 16-bit dtype instead: {changed} of {total} weights round)")
    asym_packed = qc is not None and any(
        not (g.get("weights") or {}).get("symmetric", True) and (g.get("weights") or {}).get("strategy") != "tensor"
        and (g.get("format") or qc["format"]) == "pack-quantized" for g in qc.get("config_groups", {}).values())
    if use_transformers and asym_packed and CT_VERSION >= (0, 20):
        # 0.20's compress() returns early for the meta tensors transformers loads into, before it
        # packs the zero point, so transformers expects an int8 [out, groups] zero point where the
        # file holds the packed int32 one that 0.20's own compress() writes: checked with 0.17.1
        print(f"  transformers: skipped (asymmetric pack-quantized does not load with compressed-tensors "
              f"{compressed_tensors.__version__}: it leaves the zero point unpacked on the meta device)")
    elif use_transformers:
        check_transformers(d, ref, stored)


def check_transformers(d, ref, stored):
    try:
        import transformers
        from transformers import AutoModelForCausalLM
    except ImportError:
        print("  transformers not installed: skipped")
        return
    model = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32)
    model.eval()
    tok_path = os.path.join(d + ".ref", "tokens.txt")
    with open(tok_path) as f:
        toks = [int(x) for x in f.read().split()]
    # compressed-tensors simulates int8 input activations with its own scale (abs-max / 127.5 over
    # levels -128..127) where lmpress (and vLLM's kernels) use abs-max / 127: with activation
    # quantization in the config, both sides run with it off (the C test dumps those logits too)
    act = any(g.get("input_activations") for g in
              (json.load(open(os.path.join(d, "config.json"))).get("quantization_config") or {})
              .get("config_groups", {}).values())
    if act:
        for mod in model.modules():
            if hasattr(mod, "quantization_scheme"):
                mod.quantization_enabled = False
    with torch.no_grad():
        logits = model(torch.tensor([toks])).logits[0].float()
    sd = model.state_dict()
    n = 0
    for name, want in ref.items():
        if name not in sd:
            continue
        exp = want + 0.0 if stored[name] is None else want.to(stored[name]).float()
        if not same_bits(sd[name].float() + 0.0, exp + 0.0):  # signed zeros as above
            fail(f"{d}: transformers' {name} differs from lmpress's")
        n += 1
    want = torch.from_numpy(np.fromfile(os.path.join(d + ".ref", "logits_weights_only.f32" if act else "logits.f32"),
                                        dtype="<f4").copy())
    want = want.reshape(len(toks), -1)
    if want.shape != logits.shape:
        fail(f"{d}: transformers' logits have shape {tuple(logits.shape)}, lmpress's {tuple(want.shape)}")
    err = (logits - want).abs().max().item()
    scale = want.abs().max().item()
    agree = (logits.argmax(-1) == want.argmax(-1)).float().mean().item()
    print(f"  transformers {transformers.__version__}: {n} parameters equal after decompression; logits max |diff| "
          f"{err:.3g} (max |logit| {scale:.3g}), top-1 agreement {agree:.3f}"
          f"{' (activation quantization off on both sides)' if act else ''}")
    if not (err <= 0.02 * scale + 1e-3 and agree >= 0.95):
        fail(f"{d}: transformers' logits are far from lmpress's")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--transformers", action="store_true")
    ap.add_argument("dirs", nargs="+")
    args = ap.parse_args()
    for d in args.dirs:
        check_dir(d, args.transformers)
    print(f"ok: {len(args.dirs)} exports")


if __name__ == "__main__":
    main()
