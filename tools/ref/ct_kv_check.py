#!/usr/bin/env python3
"""ct_kv_check.py: compressed-tensors (and transformers) read the KV-cache quantization of a
Hugging Face folder lmpress wrote (tests/test_kv_cache.c).

    PYTHON tools/ref/ct_kv_check.py DIR TYPE      (TYPE: float or int, what the variant set)

Checks, each failing with a line starting "FAIL":
  * config.json's quantization_config parses with compressed-tensors' QuantizationConfig, and its
    kv_cache_scheme is 8-bit TYPE, symmetric, static, strategy "tensor";
  * every layer's attention module has k_scale and v_scale in the safetensors, one positive F32
    value each;
  * transformers' from_pretrained (its compressed-tensors quantizer) puts that scheme on every
    attention module and loads those very values (bit for bit) into its k_scale / v_scale;
  * with the scheme enabled the model's logits differ from those with it disabled (the KV cache
    is quantized when it runs), and stay close to them.
Needs torch, transformers and compressed-tensors (LMP_CT_PYTHON)."""
import glob
import json
import os
import sys

import torch
from safetensors.torch import load_file

from compressed_tensors.quantization import QuantizationConfig


def fail(msg):
    print("FAIL " + msg)
    sys.exit(1)


def main():
    if len(sys.argv) != 3:
        fail("usage: ct_kv_check.py DIR TYPE")
    d, want_type = sys.argv[1], sys.argv[2]
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    qc = QuantizationConfig.model_validate(cfg["quantization_config"])
    kv = qc.kv_cache_scheme
    if kv is None:
        fail(f"{d}: compressed-tensors finds no kv_cache_scheme")
    if kv.num_bits != 8 or kv.type.value != want_type or not kv.symmetric or kv.dynamic or \
            kv.strategy.value != "tensor":
        fail(f"{d}: kv_cache_scheme reads as {kv}")
    tensors = {}
    for p in sorted(glob.glob(os.path.join(d, "*.safetensors"))):
        tensors.update(load_file(p))
    n_layers = cfg["num_hidden_layers"]
    stored = {}
    for i in range(n_layers):
        for w in ("k_scale", "v_scale"):
            name = f"model.layers.{i}.self_attn.{w}"
            t = tensors.get(name)
            if t is None:
                fail(f"{d}: no tensor {name}")
            if t.dtype != torch.float32 or tuple(t.shape) != (1,) or not (t.item() > 0):
                fail(f"{d}: {name} is {t.dtype} {tuple(t.shape)} = {t.tolist()}")
            stored[name] = t
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32)
    model.eval()
    sd = model.state_dict()
    for name, t in stored.items():
        if name not in sd:
            fail(f"{d}: transformers' model has no {name}")
        if not torch.equal(sd[name].reshape(-1).float(), t.reshape(-1)):
            fail(f"{d}: transformers loaded {name} = {sd[name].tolist()}, the file holds {t.tolist()}")
    attn = [m for n, m in model.named_modules() if n.endswith("self_attn")]
    if len(attn) != n_layers:
        fail(f"{d}: {len(attn)} attention modules, {n_layers} layers")
    for m in attn:
        s = getattr(m, "quantization_scheme", None)
        if s is None or s.input_activations is None or s.input_activations.type.value != want_type:
            fail(f"{d}: an attention module carries no {want_type} KV scheme: {s}")
    toks = torch.tensor([[(i * 37 + 11) % cfg["vocab_size"] for i in range(64)]])
    with torch.no_grad():
        on = model(toks).logits[0].float()
        for m in attn:
            m.quantization_enabled = False
        off = model(toks).logits[0].float()
    diff = (on - off).abs().max().item()
    scale = off.abs().max().item()
    if not (diff > 0):
        fail(f"{d}: the KV scheme changes nothing in transformers' forward")
    if not diff < 0.5 * scale:
        fail(f"{d}: the KV scheme moves the logits by {diff:.3g} (max |logit| {scale:.3g})")
    print(f"  {d}: compressed-tensors reads kv_cache_scheme {want_type}/8 tensor static; transformers loads "
          f"{len(stored)} k_scale/v_scale bit for bit and quantizes the KV cache (logits move by {diff:.3g})")


if __name__ == "__main__":
    main()
