#!/usr/bin/env python3
"""ct_kv_check.py: compressed-tensors (and transformers) read the KV-cache quantization of a
Hugging Face folder lmpress wrote (tests/test_kv_cache.c).

    PYTHON tools/ref/ct_kv_check.py DIR TYPE STRATEGY [BITS]   (float or int; tensor or attn_head; 8 or 4)

Checks, each failing with a line starting "FAIL":
  * config.json's quantization_config parses with compressed-tensors' QuantizationConfig, and its
    kv_cache_scheme is BITS-bit (default 8) TYPE, symmetric, static, strategy STRATEGY;
  * every layer's attention module has k_scale and v_scale in the safetensors, positive F32 of
    shape [1] (tensor) or [num_key_value_heads, 1, 1] (attn_head);
  * compressed-tensors' apply_quantization_config puts that scheme on every attention module of
    the transformers model from_pretrained loads, registering k_scale / v_scale [1], which take
    the file's values bit for bit;
  * with the scheme enabled the model's next-token distributions differ from those with it
    disabled (the KV cache is quantized when it runs), by a mean KL divergence below 0.1 (1 for 4 bits).
transformers 5 renamed the attention's past_key_values argument to `cache`, which
compressed-tensors 0.20.1 does not recognise: its quantizer then loads such a folder without the KV
scheme (the k_scale tensors "UNEXPECTED"), so the attention modules are given the signature it
looks for (the same forward) and the scheme is applied with compressed-tensors' own
apply_quantization_config.
Needs torch, transformers and compressed-tensors (LMP_CT_PYTHON)."""
import glob
import json
import os
import sys

import torch
from safetensors.torch import load_file

from compressed_tensors.quantization import QuantizationConfig


def val(x):
    """An enum's value, or the string pydantic kept (use_enum_values)."""
    return getattr(x, "value", x)


def fail(msg):
    print("FAIL " + msg)
    sys.exit(1)


def main():
    if len(sys.argv) not in (4, 5):
        fail("usage: ct_kv_check.py DIR TYPE STRATEGY [BITS]")
    d, want_type, want_strategy = sys.argv[1], sys.argv[2], sys.argv[3]
    want_bits = int(sys.argv[4]) if len(sys.argv) == 5 else 8
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    qc = QuantizationConfig.model_validate(cfg["quantization_config"])
    kv = qc.kv_cache_scheme
    if kv is None:
        fail(f"{d}: compressed-tensors finds no kv_cache_scheme")
    if kv.num_bits != want_bits or val(kv.type) != want_type or not kv.symmetric or kv.dynamic or \
            val(kv.strategy) != want_strategy:
        fail(f"{d}: kv_cache_scheme reads as {kv}")
    tensors = {}
    for p in sorted(glob.glob(os.path.join(d, "*.safetensors"))):
        tensors.update(load_file(p))
    n_layers = cfg["num_hidden_layers"]
    heads = cfg.get("num_key_value_heads") or cfg["num_attention_heads"]
    want_shape = (heads, 1, 1) if want_strategy == "attn_head" else (1,)
    stored = {}
    for i in range(n_layers):
        for w in ("k_scale", "v_scale"):
            name = f"model.layers.{i}.self_attn.{w}"
            t = tensors.get(name)
            if t is None:
                fail(f"{d}: no tensor {name}")
            if t.dtype != torch.float32 or tuple(t.shape) != want_shape or not bool((t > 0).all()):
                fail(f"{d}: {name} is {t.dtype} {tuple(t.shape)} = {t.tolist()}")
            stored[name] = t
    import inspect

    from compressed_tensors.quantization import apply_quantization_config
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32)
    model.eval()
    attn = [m for n, m in model.named_modules() if n.endswith("self_attn")]
    if len(attn) != n_layers:
        fail(f"{d}: {len(attn)} attention modules, {n_layers} layers")
    # transformers 5 renamed the attention's past_key_values argument to `cache`, which
    # compressed-tensors 0.20.1's is_cached_attention_module does not recognise: its quantizer then
    # loads the folder without the KV scheme (k_scale "UNEXPECTED").  Give the attention modules the
    # signature it looks for (the same forward), and apply the folder's kv_cache_scheme with
    # compressed-tensors' own apply_quantization_config.
    shimmed = "past_key_values" not in inspect.signature(type(attn[0]).forward).parameters
    if shimmed:
        base = type(attn[0])

        class KVAttention(base):
            def forward(self, hidden_states, *args, past_key_values=None, **kw):
                kw["cache"] = past_key_values if past_key_values is not None else kw.get("cache")
                return base.forward(self, hidden_states, *args, **kw)

        KVAttention.__name__ = base.__name__
        for m in attn:
            m.__class__ = KVAttention
    apply_quantization_config(model, QuantizationConfig(config_groups={}, kv_cache_scheme=kv,
                                                        quantization_status="frozen"))
    for m in attn:
        s = getattr(m, "quantization_scheme", None)
        if s is None or s.input_activations is None or val(s.input_activations.type) != want_type:
            fail(f"{d}: compressed-tensors put no {want_type} KV scheme on an attention module: {s}")
    missing, _ = model.load_state_dict(stored, strict=False), None
    sd = model.state_dict()
    for name, t in stored.items():
        if name not in sd:
            fail(f"{d}: compressed-tensors registered no {name}")
        if tuple(sd[name].shape) != tuple(t.shape) or not torch.equal(sd[name].reshape(-1).float(), t.reshape(-1)):
            fail(f"{d}: the model's {name} is {sd[name].tolist()}, the file holds {t.tolist()}")
    toks = torch.tensor([[(i * 37 + 11) % cfg["vocab_size"] for i in range(64)]])
    with torch.no_grad():
        on = model(toks).logits[0].float()
        for m in attn:
            m.quantization_enabled = False
        off = model(toks).logits[0].float()
    lp_on, lp_off = torch.log_softmax(on, -1), torch.log_softmax(off, -1)
    kl = (lp_off.exp() * (lp_off - lp_on)).sum(-1).mean().item()
    if not kl > 0:
        fail(f"{d}: the KV scheme changes nothing in transformers' forward")
    bound = 0.1 if want_bits == 8 else 1.0  # stories260K: 8-bit caches cost ~1e-3, 4-bit ones ~1e-1
    if not kl < bound:
        fail(f"{d}: the KV scheme costs a KL divergence of {kl:.3g} per position, far more than a {want_bits}-bit KV cache")
    print(f"  {d}: compressed-tensors reads kv_cache_scheme {want_type}/{want_bits} {want_strategy} static, registers k_scale/v_scale "
          f"{list(want_shape)} on "
          f"the {len(attn)} attention modules and takes the file's {len(stored)} values bit for bit; with them it "
          f"quantizes the KV cache in transformers' forward (KL divergence to the forward without it {kl:.3g} per position)"
          f"{' (attention forward given compressed-tensors past_key_values signature)' if shimmed else ''}")


if __name__ == "__main__":
    main()
