#!/usr/bin/env python3
"""arch_export_check.py: an independent check of what lmpress exports for each architecture, against
the fixture's own files made by transformers and llama.cpp's converter (tests/fixtures/arch), for
tests/test_export_arch.c.

    PYTHONPATH=build/pydeps python3 tools/ref/arch_export_check.py gguf EXPORT.gguf REF.gguf \
        [--quantized | --exact] [--ignore KEY ...]
    python3 tools/ref/arch_export_check.py hf EXPORT_DIR REF_HF_DIR [--quantized | --exact] [--class CLS:TYPE]

gguf: read with the PyPI `gguf` package (llama.cpp's gguf-py).  general.architecture must be the
reference's; every tensor name must be one gguf-py lists for that architecture (MODEL_TENSORS) and
the two files must hold the same tensors with the same shapes; every value, dequantized by gguf-py,
must equal the reference's (F32: bit for bit, rope_freqs and rope_factors_* to 1e-6 relative; --quantized: each within
0.6 of its 32-value block's step max|ref| / 127 for Q8_0, which a row in the wrong order, a norm
without its + 1 or a transposed weight cannot pass).  Every <arch>.* key of the reference must be
in the export with the same value (to 1e-6 for floats) unless named by --ignore.

hf: config.json's "architectures" and "model_type" must be the reference's (or --class's: a
Mistral read from a GGUF, which says "llama", is a LlamaForCausalLM), and the keys that shape
the model (sizes, head_dim, rms_norm_eps, the activation, RoPE's theta and scaling as transformers 4
or 5 writes them, tie_word_embeddings) must mean the same.  model.safetensors (read with numpy, the
format is a JSON header and raw little-endian data) must hold the reference's tensors by name and
shape with equal values (bit for bit); --quantized: compressed-tensors' packed weights are
unpacked and dequantized and must lie within 0.6 of a step (scale) of the reference.

--exact (either kind): REF is the same compressed variant exported with its weights as F32 (what
lmpress evaluated), and every quantized tensor, dequantized by gguf-py or unpacked from
compressed-tensors' packed or int8 codes times scales (less zero points), must equal it to 1e-6
of its largest value; the rest as above.  This holds GPTQ's weights, which move further than a
grid step from the unquantized model, to the bytes written.

Prints "ok: ..." and exits 0, or every problem and exits 1."""
import json
import os
import struct
import sys

import numpy as np

problems = []


def problem(msg):
    problems.append(msg)


def close(a, b, rel=1e-6):
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    scale = max(float(np.max(np.abs(b))) if b.size else 0.0, 1e-30)
    return float(np.max(np.abs(a - b))) / scale <= rel if a.size else True


# ---- GGUF --------------------------------------------------------------------------------------
def gguf_fields(reader):
    out = {}
    for name, f in reader.fields.items():
        if not f.types:
            continue
        from gguf import GGUFValueType as VT
        if f.types[0] == VT.STRING:
            out[name] = bytes(f.parts[f.data[0]]).decode("utf-8")
        elif f.types[0] == VT.ARRAY:
            out[name] = None  # arrays (the tokenizer's) are not compared here
        else:
            out[name] = f.parts[f.data[0]][0].item()
    return out


def check_gguf(path, ref_path, quantized, ignore, exact=False):
    import gguf
    from gguf import GGMLQuantizationType as QT
    r, e = gguf.GGUFReader(ref_path), gguf.GGUFReader(path)
    rf, ef = gguf_fields(r), gguf_fields(e)
    arch = rf["general.architecture"]
    if ef.get("general.architecture") != arch:
        problem(f"general.architecture {ef.get('general.architecture')!r}, the reference's is {arch!r}")
    for k, v in rf.items():
        if not k.startswith(arch + ".") or k in ignore or v is None:
            continue
        if k not in ef:
            problem(f"{k} = {v!r} in the reference, missing from the export")
        elif isinstance(v, float) and not abs(ef[k] - v) <= 1e-6 * max(abs(v), 1e-30):
            problem(f"{k} = {ef[k]!r}, the reference has {v!r}")
        elif not isinstance(v, float) and ef[k] != v:
            problem(f"{k} = {ef[k]!r}, the reference has {v!r}")
    for k in ef:
        if k.startswith(arch + ".") and k not in rf and k not in ignore:
            # a key the converter leaves at llama.cpp's default: the export's value must be it
            defaults = {"vocab_size": None, "rope.freq_base": 10000.0, "rope.dimension_count": None,
                        "attention.key_length": None, "attention.value_length": None}
            leaf = k[len(arch) + 1:]
            if leaf not in defaults:
                problem(f"{k} = {ef[k]!r} is in the export but not in the reference")
            elif defaults[leaf] is not None and ef[k] != defaults[leaf]:
                problem(f"{k} = {ef[k]!r}, llama.cpp's default (the reference leaves it out) is {defaults[leaf]!r}")
    # tensor names: llama.cpp's for the architecture
    march = next((a for a, n in gguf.MODEL_ARCH_NAMES.items() if n == arch), None)
    allowed = set()
    if march is None:
        problem(f"gguf-py knows no architecture {arch!r}")
    else:
        for t in gguf.MODEL_TENSORS[march]:
            allowed.add(gguf.TENSOR_NAMES[t])
    rt = {t.name: t for t in r.tensors}
    et = {t.name: t for t in e.tensors}
    for name in et:
        stem = name.rsplit(".", 1)[0]
        parts = stem.split(".")
        if parts[0] == "blk":
            stem = "blk.{bid}." + ".".join(parts[2:])
        if stem not in allowed:
            problem(f"tensor {name}: not a tensor of llama.cpp's {arch} (gguf-py's MODEL_TENSORS)")
    if set(rt) != set(et):
        problem(f"tensors only in the reference: {sorted(set(rt) - set(et))}; only in the export: "
                f"{sorted(set(et) - set(rt))}")
    n_q = 0
    for name in sorted(set(rt) & set(et)):
        a, b = et[name], rt[name]
        if list(a.shape) != list(b.shape):
            problem(f"{name}: shape {list(a.shape)}, the reference's {list(b.shape)}")
            continue
        va = gguf.quants.dequantize(a.data, a.tensor_type).astype(np.float64).reshape(-1)
        vb = gguf.quants.dequantize(b.data, b.tensor_type).astype(np.float64).reshape(-1)
        if a.tensor_type == QT.F32:
            # bit for bit, but RoPE's divisor tables (rope_freqs, Phi-3's rope_factors_*): their
            # divisors are chosen to give lmpress's frequencies back, the converter's are the
            # config's or the formula's (the two may differ by an ulp)
            divisors = name in ("rope_freqs.weight", "rope_factors_short.weight", "rope_factors_long.weight")
            if not (close(va, vb) if divisors else np.array_equal(va, vb)):
                d = np.abs(va - vb)
                problem(f"{name}: differs from the reference: max |d| {d.max():.3g} at {int(d.argmax())}")
        elif exact and a.tensor_type != QT.F32:
            # the reference is the same variant as F32 (the weights lmpress evaluated): gguf-py's
            # dequantization of each block must give them back (up to float rounding)
            n_q += 1
            if not close(va, vb, 1e-6):
                d = np.abs(va - vb)
                problem(f"{name} ({a.tensor_type.name}): gguf-py's dequantization differs from the variant lmpress "
                        f"evaluated: max |d| {d.max():.3g} at {int(d.argmax())}")
        elif quantized and a.tensor_type == QT.Q8_0:
            n_q += 1
            blocks = vb.reshape(-1, 32)
            step = np.abs(blocks).max(axis=1, keepdims=True) / 127.0
            err = np.abs(va.reshape(-1, 32) - blocks)
            if not np.all(err <= 0.6 * step + 1e-7):
                k = int(np.argmax(err / (step + 1e-30)))
                problem(f"{name}: dequantized value {k} is {float(err.reshape(-1)[k] / step.repeat(32)[k]):.2f} "
                        "steps from the reference (at most 0.6 allowed)")
        else:
            problem(f"{name}: type {a.tensor_type.name} not expected here")
    return f"{len(et)} tensors, architecture {arch}" + (f", {n_q} quantized" if exact else f", {n_q} Q8_0" if quantized else "")


# ---- Hugging Face ------------------------------------------------------------------------------
DTYPES = {"F32": np.float32, "F16": np.float16, "I32": np.int32, "I64": np.int64, "I8": np.int8}


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        head = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, t in head.items():
        if name == "__metadata__":
            continue
        s, e = t["data_offsets"]
        if t["dtype"] == "BF16":
            raw = np.frombuffer(data[s:e], dtype=np.uint16).astype(np.uint32) << 16
            arr = raw.view(np.float32)
        else:
            arr = np.frombuffer(data[s:e], dtype=DTYPES[t["dtype"]])
        out[name] = arr.reshape(t["shape"])
    return out


def rope_of(cfg):
    """theta and the scaling as transformers 5 would hold them, from either form."""
    rp = cfg.get("rope_parameters")
    if rp:
        theta = rp.get("rope_theta", cfg.get("rope_theta", 10000.0))
        sc = {k: v for k, v in rp.items() if k not in ("rope_theta", "partial_rotary_factor")}
    else:
        theta = cfg.get("rope_theta", 10000.0)
        sc = dict(cfg.get("rope_scaling") or {})
    if "type" in sc and "rope_type" not in sc:
        sc["rope_type"] = sc.pop("type")
    sc.setdefault("rope_type", "default")
    if sc["rope_type"] == "longrope" and cfg.get("original_max_position_embeddings"):
        # Phi-3 keeps it at the top (transformers 4's form); transformers 5 lets that one win
        sc["original_max_position_embeddings"] = cfg["original_max_position_embeddings"]
    return float(theta), {k: (float(v) if isinstance(v, (int, float)) else v) for k, v in sc.items()}


def unpack_ct(tensors, module, cfg):
    """A compressed-tensors pack-quantized module's weights dequantized (symmetric, or asymmetric with
    channel or group zero points), and its step (scale) per weight."""
    packed = tensors[module + ".weight_packed"].astype(np.uint32)
    out_dim, in_dim = (int(x) for x in tensors[module + ".weight_shape"])
    scale = tensors[module + ".weight_scale"].astype(np.float64)
    bits = None
    for g in cfg["quantization_config"]["config_groups"].values():
        if module in g["targets"]:
            bits = g["weights"]["num_bits"]
            sym = g["weights"]["symmetric"]
    if bits is None:
        raise KeyError(module)
    per = 32 // bits
    vals = np.zeros((out_dim, packed.shape[1] * per), dtype=np.int64)
    for k in range(per):
        vals[:, k::per] = (packed >> (k * bits)) & ((1 << bits) - 1)
    q = vals[:, :in_dim]  # unsigned: the signed code + 2^(b-1)
    step = np.repeat(scale, in_dim // scale.shape[1], axis=1) if scale.ndim == 2 else np.full((out_dim, in_dim), scale[0])
    if sym:
        return (q - (1 << (bits - 1))) * step, step
    # asymmetric: the zero points, packed down the columns of [out, groups] (as the codes, unsigned)
    zpk = tensors[module + ".weight_zero_point"].astype(np.uint32)
    z = np.zeros((zpk.shape[0] * per, zpk.shape[1]), dtype=np.int64)
    for k in range(per):
        z[k::per, :] = (zpk >> (k * bits)) & ((1 << bits) - 1)
    z = np.repeat(z[:out_dim], in_dim // z.shape[1], axis=1)
    return (q - z) * step, step


def gpt2_as_generic(c):
    """GPT2Config's own names (n_embd, n_layer, ...) under the names the checks below compare, as
    transformers' GPT2Config.attribute_map does (GPTJConfig's are the same); n_inner null is
    4 * n_embd."""
    if c.get("model_type") == "bloom":  # BloomConfig's attribute_map: n_head, n_layer
        c = dict(c)
        c.setdefault("num_attention_heads", c.get("n_head"))
        c.setdefault("num_hidden_layers", c.get("n_layer"))
        return c
    if c.get("model_type") not in ("gpt2", "gptj"):
        return c
    gptj = c.get("model_type") == "gptj"
    c = dict(c)
    c.update(hidden_size=c["n_embd"], num_hidden_layers=c["n_layer"], num_attention_heads=c["n_head"],
             num_key_value_heads=c["n_head"], intermediate_size=c.get("n_inner") or 4 * c["n_embd"],
             rms_norm_eps=c.get("layer_norm_epsilon", 1e-5), hidden_act=c.get("activation_function", "gelu_new"))
    c.setdefault("tie_word_embeddings", not gptj)  # GPT2Config's default (GPTJConfig's: untied)
    return c


def check_hf(path, ref_path, quantized, cls, exact=False):
    cfg = gpt2_as_generic(json.load(open(os.path.join(path, "config.json"))))
    ref = gpt2_as_generic(json.load(open(os.path.join(ref_path, "config.json"))))
    want = {"architectures": ref.get("architectures"), "model_type": ref.get("model_type")}
    if cls:
        want = {"architectures": [cls.split(":")[0]], "model_type": cls.split(":")[1]}
    for k in ("architectures", "model_type"):
        if cfg.get(k) != want[k]:
            problem(f"config.json {k} = {cfg.get(k)!r}, expected {want[k]!r}")
    for k in ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
              "vocab_size"):
        if cfg.get(k) != ref.get(k):
            problem(f"config.json {k} = {cfg.get(k)!r}, the reference's is {ref.get(k)!r}")
    hd = lambda c: c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]
    if hd(cfg) != hd(ref):
        problem(f"head size {hd(cfg)}, the reference's {hd(ref)}")
    if not abs(cfg.get("rms_norm_eps", 1e-6) - ref.get("rms_norm_eps", 1e-6)) <= 1e-6 * ref.get("rms_norm_eps", 1e-6):
        problem(f"rms_norm_eps {cfg.get('rms_norm_eps')}, the reference's {ref.get('rms_norm_eps')}")
    act = lambda c: c.get("hidden_activation") or c.get("hidden_act")
    if act(cfg) != act(ref):
        problem(f"activation {act(cfg)!r}, the reference's {act(ref)!r}")
    rp = cfg.get("rope_parameters")
    if isinstance(rp, dict) and not any(isinstance(v, dict) for v in rp.values()):
        problem("config.json keeps RoPE in rope_parameters only, which transformers 4 ignores (it would run "
                "rope_theta's default); rope_theta + rope_scaling are read by transformers 4 and 5")
    (t1, s1), (t2, s2) = rope_of(cfg), rope_of(ref)
    if abs(t1 - t2) > 1e-6 * t2:
        problem(f"rope theta {t1}, the reference's {t2}")
    if s1 != s2:
        # transformers reads yarn's factor as max_position_embeddings / original when both are given
        eff = lambda s, c: (s.get("rope_type"), c.get("max_position_embeddings", 0) /
                            s["original_max_position_embeddings"] if "original_max_position_embeddings" in s
                            else s.get("factor"))
        if eff(s1, cfg) != eff(s2, ref):
            problem(f"rope scaling {s1}, the reference's {s2}")
    tie = lambda c: bool(c.get("tie_word_embeddings", False))
    if tie(cfg) != tie(ref):
        problem(f"tie_word_embeddings {tie(cfg)}, the reference's {tie(ref)}")
    et = read_safetensors(os.path.join(path, "model.safetensors"))
    rt = read_safetensors(os.path.join(ref_path, "model.safetensors"))
    n_q = 0
    for name, b in rt.items():
        if name == "lm_head.weight" and tie(ref):
            continue
        if name == "transformer.rotary_pos_emb.inv_freq":
            # ChatGLM's buffer, derived from the config; THUDM's RotaryEmbedding makes it in __init__
            # and its forward recomputes the frequencies anyway: lmpress does not write it
            continue
        module = name[: -len(".weight")] if name.endswith(".weight") else None
        if exact and module and module + ".weight_scale" in et and name in et and et[name].dtype == np.int8:
            # int-quantized (W8A8): int8 codes times the per-channel (or group) scale, less zero points
            n_q += 1
            q = et[name].astype(np.float64)
            scale = et[module + ".weight_scale"].astype(np.float64)
            scale = scale.reshape(q.shape[0], -1) if scale.size > 1 else np.full((q.shape[0], 1), float(scale))
            step = np.repeat(scale, q.shape[1] // scale.shape[1], axis=1)
            z = 0
            if module + ".weight_zero_point" in et:
                zp = et[module + ".weight_zero_point"].astype(np.float64)
                z = np.repeat(zp.reshape(q.shape[0], -1), q.shape[1] // zp.reshape(q.shape[0], -1).shape[1], axis=1)
            w = (q - z) * step
            if not close(w, b, 1e-6):
                problem(f"{module}: int8 codes x scales differ from the variant lmpress evaluated: max |d| "
                        f"{np.abs(w - b).max():.3g}")
        elif name in et:
            a = et[name].astype(np.float64)
            if a.shape != b.shape:
                problem(f"{name}: shape {list(a.shape)}, the reference's {list(b.shape)}")
            elif not np.array_equal(a, b.astype(np.float64)):
                d = np.abs(a - b.astype(np.float64))
                problem(f"{name}: differs from the reference: max |d| {d.max():.3g} at {np.unravel_index(d.argmax(), d.shape)}")
        elif quantized and module and module + ".weight_packed" in et:
            n_q += 1
            w, step = unpack_ct(et, module, cfg)
            if w.shape != b.shape:
                problem(f"{module}: dequantized shape {list(w.shape)}, the reference's {list(b.shape)}")
            elif exact:
                if not close(w, b, 1e-6):
                    problem(f"{module}: unpacked codes x scales differ from the variant lmpress evaluated: max |d| "
                            f"{np.abs(w - b).max():.3g}")
            elif not np.all(np.abs(w - b) <= 0.6 * step + 1e-7):
                r = np.abs(w - b) / step
                problem(f"{module}: a dequantized weight is {r.max():.2f} steps from the reference at "
                        f"{np.unravel_index(r.argmax(), r.shape)} (at most 0.6)")
        else:
            problem(f"{name}: missing from the export")
    extra = [n for n in et if not any(n == r or n.startswith(r[: -len("weight")]) for r in rt)]
    if extra:
        problem(f"tensors the reference does not have: {extra[:5]}")
    return f"{len(et)} tensors, {cfg['architectures'][0]}" + (f", {n_q} quantized" if exact else f", {n_q} pack-quantized" if quantized else "")


def main():
    args = sys.argv[1:]
    quantized = "--quantized" in args or "--exact" in args
    exact = "--exact" in args
    ignore = set()
    cls = None
    rest = []
    i = 0
    while i < len(args):
        if args[i] in ("--quantized", "--exact"):
            pass
        elif args[i] == "--ignore":
            i += 1
            ignore.add(args[i])
        elif args[i] == "--class":
            i += 1
            cls = args[i]
        else:
            rest.append(args[i])
        i += 1
    if len(rest) != 3 or rest[0] not in ("gguf", "hf"):
        print(__doc__)
        return 2
    what = (check_gguf(rest[1], rest[2], quantized, ignore, exact) if rest[0] == "gguf"
            else check_hf(rest[1], rest[2], quantized, cls, exact))
    if problems:
        for p in problems:
            print("problem:", p)
        return 1
    print(f"ok: {rest[1]}: {what}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
