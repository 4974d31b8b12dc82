#!/usr/bin/python3
"""ct_fixtures.py — compressed-tensors checkpoints (the Hugging Face folders llm-compressor writes)
for tests/test_model_ct.c, made independently of the C code with numpy alone.

    /usr/bin/python3 tools/ref/ct_fixtures.py OUT_DIR
    LMP_CT_PYTHON=/path/to/venv/bin/python /usr/bin/python3 tools/ref/ct_fixtures.py OUT_DIR

stories260K (models/stories260K/stories260K.bin, converted to a LlamaForCausalLM as
tools/ref/hf_fixtures.py does) has its linears quantized here, in numpy, and written in the layout
compressed-tensors documents for its compressors (config.json's quantization_config, then per
quantized module X):

  int-quantized / naive-quantized   X.weight int8 [out, in] codes, X.weight_scale, and for an
                                    asymmetric grid X.weight_zero_point (int8, one per scale);
  pack-quantized                    X.weight_packed int32 [out, ceil(in*bits/32)]: each row's codes
                                    + 2^(bits-1) as one bit stream, code j at bit j*bits of the
                                    row, words little-endian (8 four-bit codes per word, the first
                                    in the low nibble), the tail padded with 0 bits; X.weight_shape
                                    int64 [out, in]; X.weight_scale; X.weight_zero_point for an
                                    asymmetric channel or group grid packed the same way down the
                                    rows (int32 [ceil(out*bits/32), groups]); optional
                                    X.weight_g_idx int32 [in] (GPTQ's activation order: column j's
                                    group).
Dequantized: w = (q - zp) * scale in f32, the scale as stored (F32, F16 or BF16) widened to f32:
one rounding of the product for an F32 scale (what compressed-tensors computes in f32), none for a
16-bit one (a small integer times an 11- or 8-bit significand fits an f32).

Each fixture OUT_DIR/NAME holds config.json, model.safetensors and tok512.bin (so a compare run
finds the tokenizer beside it), and OUT_DIR/NAME-dequant the same model with every quantized weight
replaced by its dequantized f32 values, as a dense checkpoint without quantization_config.
OUT_DIR/manifest.json lists, per fixture, the storage bits per weight of every block linear
(bytes of its codes, scales, zero-points and g_idx * 8 / out*in) and the format name lmpress
should give.

  w8a8-int       int-quantized: int8 per channel, symmetric, BF16 scales; inputs dynamic per token
                 (int8, symmetric) — llm-compressor's W8A8.
  w4-g32         pack-quantized: int4 in groups of 32, symmetric, F16 scales; ignore = lm_head and
                 "re:.*down_proj$" (down_proj's 172 inputs stay a dense F32 weight).
  w4-asym        pack-quantized: int4 asymmetric, F32 scales, packed zero-points; two groups: the
                 regex "re:.*down_proj$" in groups of 4, "Linear" in groups of 16 (the exact or
                 regex match wins over the class name, so down_proj takes groups of 4).
  w3-asym        w4-asym with int3 codes (llm-compressor's W3 AWQ/GPTQ folders): a code straddles two
                 int32 words wherever j * 3 mod 32 > 29, in the weights and the packed zero-points.
  w4-actorder    format mixed-precision: "Linear" pack-quantized int4 groups of 16 (down_proj: 4,
                 through a regex group) with a random g_idx (activation order) on every block
                 linear, and an untied lm_head (the embedding's copy) int-quantized int8 per channel.
  w4-naive       naive-quantized: int4 per channel asymmetric (codes in int8, int8 zero-points),
                 BF16 scales, and o_proj int8 per tensor (one scale) through a regex group.

Cross-check.  When the environment variable LMP_CT_PYTHON names a Python with the PyPI
compressed-tensors package (and torch), this script runs itself under it (--crosscheck OUT_DIR):
for every quantized module, compressed-tensors' own target matching (match_targets / is_match on
a torch.nn.Linear) must pick the group the fixture used, its compressor's decompress() must give
the expected weights (rounded to the scale's dtype: it dequantizes in that dtype, where lmpress
keeps the exact f32 product), and its compress() of those weights with the same scales and
zero-points must give the very codes, packed words and zero-points written here.  Modules with a
g_idx are left out, with a message, when the installed compressed-tensors no longer reads it
(0.20 dropped activation-order groups).  Without LMP_CT_PYTHON the cross-check is skipped with a
message saying so.
"""
import json
import os
import shutil
import struct
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_fixtures as hf  # noqa: E402  (safetensors writer, llama2.c reader, q/k row order)

ROOT = hf.ROOT
TOKENIZER = os.path.join(ROOT, "models", "stories260K", "tok512.bin")
LINEARS = ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
           "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"]


# ---- tensors ------------------------------------------------------------------------------


class Raw:
    """A tensor written as given: name, safetensors dtype, shape, little-endian bytes."""

    def __init__(self, name, dtype, array):
        np_dtype = {"I8": "<i1", "I32": "<i4", "I64": "<i8", "F32": "<f4"}[dtype]
        a = np.ascontiguousarray(np.asarray(array).astype(np_dtype))
        self.name, self.dtype, self.shape, self.raw = name, dtype, list(a.shape), a.tobytes()


def round_scale(s, dtype):
    """The scale as stored (a Tensor of that dtype) and its exact f32 value."""
    t = hf.Tensor("s", dtype, s)
    return t, t.values.astype(np.float32)


def pack_rows(u, bits):
    """u [rows, n] unsigned codes < 2^bits -> int32 [rows, ceil(n*bits/32)]: code j at bit j*bits
    of its row's little-endian bit stream, 0 bits after the last."""
    rows, n = u.shape
    words = -(-n * bits // 32)
    out = np.zeros((rows, words), dtype=np.uint64)
    for j in range(n):
        bit = j * bits
        v = u[:, j].astype(np.uint64) << np.uint64(bit % 32)
        out[:, bit // 32] |= v & np.uint64(0xFFFFFFFF)
        if bit % 32 + bits > 32:  # 3, 5, 6, 7 bits: the code's high bits start the next word
            out[:, bit // 32 + 1] |= v >> np.uint64(32)
    return out.astype(np.uint32).view(np.int32)


class Scheme:
    def __init__(self, group, fmt, bits, sym, strategy, group_size=None, scale_dtype="F32", act=None,
                 actorder=False):
        self.group, self.fmt, self.bits, self.sym = group, fmt, bits, sym
        self.strategy, self.group_size, self.scale_dtype = strategy, group_size, scale_dtype
        self.act, self.actorder = act, actorder

    def config(self, with_format):
        w = {"num_bits": self.bits, "type": "int", "symmetric": self.sym, "strategy": self.strategy,
             "group_size": self.group_size if self.strategy == "group" else None, "block_structure": None,
             "dynamic": False, "actorder": "group" if self.actorder else None, "observer": "minmax",
             "observer_kwargs": {}}
        g = {"targets": None, "weights": w, "input_activations": self.act, "output_activations": None}
        if with_format:
            g["format"] = self.fmt
        return g


def quantize(name, w, s, rng):
    """Quantizes w [out, in] (float64) on scheme s.  Returns the tensors to write, the exact f32
    dequantized weight and the storage bytes."""
    out, n = w.shape
    qmin, qmax = -(1 << (s.bits - 1)), (1 << (s.bits - 1)) - 1
    g_idx = None  # column j's group when the columns are in activation order
    groups, col_group = 1, np.zeros(n, dtype=np.int64)
    if s.strategy == "group":
        groups = -(-n // s.group_size)
        col_group = np.arange(n) // s.group_size
        if s.actorder:  # a random column order, cut into full groups
            g_idx = np.empty(n, dtype=np.int64)
            g_idx[rng.permutation(n)] = col_group
            col_group = g_idx
    rows = 1 if s.strategy == "tensor" else out
    lo = np.zeros((rows, groups))
    hi = np.zeros((rows, groups))
    for g in range(groups):
        cols = w[:, col_group == g]
        if s.strategy == "tensor":
            lo[0, g], hi[0, g] = cols.min(), cols.max()
        else:
            lo[:, g], hi[:, g] = cols.min(axis=1), cols.max(axis=1)
    lo, hi = np.minimum(lo, 0), np.maximum(hi, 0)
    if s.sym:  # compressed-tensors' observer: abs-max over half the integer range
        scale = np.maximum(np.abs(lo), np.abs(hi)) / ((qmax - qmin) / 2.0)
        zp = np.zeros_like(scale)
    else:
        scale = (hi - lo) / float(qmax - qmin)
        scale = np.where(scale > 0, scale, 1e-8)
        zp = np.clip(np.round(qmin - lo / scale), qmin, qmax)
    scale_t, scale32 = round_scale(scale, s.scale_dtype)
    scale_t.name = name + ".weight_scale"
    r = np.arange(out)[:, None] if s.strategy != "tensor" else np.zeros((out, 1), dtype=np.int64)
    sc = scale32[r, col_group[None, :]]  # [out, n]
    zc = zp.astype(np.float32)[r, col_group[None, :]]
    q = np.clip(np.round(w / sc.astype(np.float64) + zc), qmin, qmax).astype(np.int64)
    deq = ((q.astype(np.float32) - zc) * sc).astype(np.float32)  # one f32 rounding, as torch in f32
    if s.scale_dtype != "F32":  # a 16-bit scale's product with a small integer is exact in f32
        assert np.array_equal(deq.astype(np.float64), (q - zc.astype(np.float64)) * sc.astype(np.float64))
    tensors = []
    if s.fmt == "pack-quantized":
        packed = pack_rows((q + (1 << (s.bits - 1))).astype(np.uint64), s.bits)
        tensors += [Raw(name + ".weight_packed", "I32", packed), Raw(name + ".weight_shape", "I64", [out, n])]
        codes_bytes = packed.size * 4
    else:
        tensors.append(Raw(name + ".weight", "I8", q))
        codes_bytes = q.size
    tensors.append(scale_t)
    nbytes = codes_bytes + len(scale_t.raw)
    zp_stored = None
    if not s.sym:
        if s.fmt == "pack-quantized" and s.strategy in ("channel", "group"):
            zp_stored = pack_rows((zp.astype(np.int64) + (1 << (s.bits - 1))).T.astype(np.uint64), s.bits).T
            tensors.append(Raw(name + ".weight_zero_point", "I32", zp_stored))
            nbytes += zp_stored.size * 4
        else:
            tensors.append(Raw(name + ".weight_zero_point", "I8", zp.astype(np.int64)))
            nbytes += zp.size
    if g_idx is not None:
        tensors.append(Raw(name + ".weight_g_idx", "I32", g_idx))
        nbytes += n * 4
    return tensors, deq, nbytes


# ---- fixtures -----------------------------------------------------------------------------

# "symmetric" left to its default (true), as tests/test_model_ct.c adds it to make a refused config
W8A8_ACT = {"num_bits": 8, "type": "int", "strategy": "token", "dynamic": True, "group_size": None,
            "block_structure": None, "actorder": None, "observer": None, "observer_kwargs": {}}


def fixtures():
    """name -> (format, [(scheme, targets)], ignore, untied head)"""
    return {
        "w8a8-int": ("int-quantized",
                     [(Scheme("group_0", "int-quantized", 8, True, "channel", scale_dtype="BF16", act=W8A8_ACT),
                       ["Linear"])], ["lm_head"], False),
        "w4-g32": ("pack-quantized",
                   [(Scheme("group_0", "pack-quantized", 4, True, "group", 32, scale_dtype="F16"), ["Linear"])],
                   ["lm_head", "re:.*down_proj$"], False),
        "w4-asym": ("pack-quantized",
                    [(Scheme("group_0", "pack-quantized", 4, False, "group", 4), ["re:.*down_proj$"]),
                     (Scheme("group_1", "pack-quantized", 4, False, "group", 16), ["Linear"])],
                    ["lm_head"], False),
        "w3-asym": ("pack-quantized",
                    [(Scheme("group_0", "pack-quantized", 3, False, "group", 4), ["re:.*down_proj$"]),
                     (Scheme("group_1", "pack-quantized", 3, False, "group", 16), ["Linear"])],
                    ["lm_head"], False),
        "w4-actorder": ("mixed-precision",
                        [(Scheme("group_0", "pack-quantized", 4, True, "group", 16, actorder=True), ["Linear"]),
                         (Scheme("group_1", "pack-quantized", 4, True, "group", 4, actorder=True),
                          ["re:model\\.layers\\.\\d+\\.mlp\\.down_proj"]),
                         (Scheme("head", "int-quantized", 8, True, "channel"), ["lm_head"])],
                        [], True),
        "w4-naive": ("naive-quantized",
                     [(Scheme("group_0", "naive-quantized", 4, False, "channel", scale_dtype="BF16"), ["Linear"]),
                      (Scheme("group_1", "naive-quantized", 8, True, "tensor"), ["re:.*o_proj"])],
                     ["lm_head"], False),
    }


def scheme_for(name, groups, ignore):
    """The fixture's own assignment (exact name, then regex, then the class "Linear")."""
    import re
    if name in ignore or any(i.startswith("re:") and re.match(i[3:], name) for i in ignore):
        return None
    for s, targets in groups:
        if name in targets:
            return s
    for s, targets in groups:
        if any(t.startswith("re:") and re.match(t[3:], name) for t in targets):
            return s
    for s, targets in groups:
        if "Linear" in targets:
            return s
    return None


def kind(s, has_g_idx):
    k = "int%d-%s" % (s.bits, "g%d" % s.group_size if s.strategy == "group" else s.strategy)
    if not s.sym:
        k += "-asym"
    if has_g_idx:
        k += "-actorder"
    if s.act:
        k += "-a%d" % s.act["num_bits"]
    return k


def format_name(params_by_kind):
    names = sorted(params_by_kind, key=lambda k: -params_by_kind[k])
    return "compressed-tensors " + "/".join(names) + (" mix" if len(names) > 1 else "")


def make(out_dir):
    hp, w = hf.read_llama2c(hf.STORIES_BIN)
    os.makedirs(out_dir, exist_ok=True)
    base_cfg = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "hidden_size": hp["dim"], "intermediate_size": hp["hidden"], "num_hidden_layers": hp["L"],
        "num_attention_heads": hp["H"], "num_key_value_heads": hp["KV"], "vocab_size": hp["vocab"],
        "max_position_embeddings": hp["seq_len"], "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
        "rope_scaling": None, "hidden_act": "silu", "tie_word_embeddings": True,
        "attention_bias": False, "torch_dtype": "float32", "bos_token_id": 1, "eos_token_id": 2,
    }
    dense = {"model.embed_tokens.weight": w["tok"], "model.norm.weight": w["rms_final"]}
    src = {"self_attn.q_proj": lambda l: hf.adjacent_to_rotate_half(w["wq"][l], hp["H"]),
           "self_attn.k_proj": lambda l: hf.adjacent_to_rotate_half(w["wk"][l], hp["KV"]),
           "self_attn.v_proj": lambda l: w["wv"][l], "self_attn.o_proj": lambda l: w["wo"][l],
           "mlp.gate_proj": lambda l: w["w1"][l], "mlp.up_proj": lambda l: w["w3"][l],
           "mlp.down_proj": lambda l: w["w2"][l]}
    manifest = {}
    for fx, (fmt, groups, ignore, untied) in fixtures().items():
        rng = np.random.RandomState(sum(map(ord, fx)))
        cfg = dict(base_cfg)
        cfg["tie_word_embeddings"] = not untied
        qc = {"quant_method": "compressed-tensors", "format": fmt, "quantization_status": "compressed",
              "config_groups": {}, "ignore": ignore, "kv_cache_scheme": None, "sparsity_config": {},
              "transform_config": {}, "global_compression_ratio": None, "version": "0.20.0"}
        for s, targets in groups:
            g = s.config(fmt == "mixed-precision")
            g["targets"] = targets
            qc["config_groups"][s.group] = g
        qt, dq = [], []  # tensors of the quantized file and of its dequantized twin
        lin_info, kinds, modules = {}, {}, {}
        modules_list = [("model.embed_tokens", w["tok"], False)]
        for l in range(hp["L"]):
            p = "model.layers.%d." % l
            qt.append(hf.Tensor(p + "input_layernorm.weight", "F32", w["rms_att"][l]))
            qt.append(hf.Tensor(p + "post_attention_layernorm.weight", "F32", w["rms_ffn"][l]))
            for leaf in LINEARS:
                modules_list.append((p + leaf, src[leaf](l), True))
        if untied:
            modules_list.append(("lm_head", w["tok"], False))
        for name, weight, block in modules_list:
            s = scheme_for(name, groups, ignore) if name != "model.embed_tokens" else None
            if s is None:
                t = hf.Tensor(name + ".weight", "F32", weight)
                qt.append(t)
                dq.append(hf.Tensor(name + ".weight", "F32", t.values))
                if block:
                    lin_info[name] = {"bits": 32.0}
                    kinds["F32"] = kinds.get("F32", 0) + weight.size
                continue
            tensors, deq, nbytes = quantize(name, np.asarray(weight, dtype=np.float64), s, rng)
            qt += tensors
            dq.append(hf.Tensor(name + ".weight", "F32", deq))
            has_g = any(t.name.endswith(".weight_g_idx") for t in tensors)
            modules[name] = {"group": s.group, "format": s.fmt, "scale_dtype": s.scale_dtype,
                             "g_idx": has_g, "bits": s.bits, "sym": s.sym, "strategy": s.strategy}
            if block:
                lin_info[name] = {"bits": 8.0 * nbytes / weight.size, "kind": kind(s, has_g)}
                k = kind(s, has_g)
                kinds[k] = kinds.get(k, 0) + weight.size
        for name in ("model.layers.%d.%s" % (l, n) for l in range(hp["L"])
                     for n in ("input_layernorm.weight", "post_attention_layernorm.weight")):
            dq.append(next(t for t in qt if t.name == name))
        qt.append(hf.Tensor("model.norm.weight", "F32", dense["model.norm.weight"]))
        dq.append(hf.Tensor("model.norm.weight", "F32", dense["model.norm.weight"]))
        for folder, tensors, c in ((fx, qt, dict(cfg, quantization_config=qc)), (fx + "-dequant", dq, cfg)):
            d = os.path.join(out_dir, folder)
            os.makedirs(d, exist_ok=True)
            hf.write_json(os.path.join(d, "config.json"), c)
            hf.write_safetensors(os.path.join(d, "model.safetensors"), sorted(tensors, key=lambda t: t.name))
            shutil.copy(TOKENIZER, os.path.join(d, "tok512.bin"))
        manifest[fx] = {"format": format_name(kinds), "linears": lin_info, "modules": modules}
        print("%s: %s" % (fx, manifest[fx]["format"]))
    hf.write_json(os.path.join(out_dir, "manifest.json"), manifest)


# ---- the cross-check, under LMP_CT_PYTHON ---------------------------------------------------


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    np_dtype = {"I8": "<i1", "I32": "<i4", "I64": "<i8", "F32": "<f4", "F16": "<f2", "BF16": "<u2"}
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, en = e["data_offsets"]
        out[name] = (e["dtype"], np.frombuffer(data[b:en], dtype=np_dtype[e["dtype"]]).reshape(e["shape"]))
    return out


def crosscheck(out_dir):
    import torch
    import compressed_tensors
    from compressed_tensors.compressors import BaseCompressor
    from compressed_tensors.quantization import QuantizationConfig
    from compressed_tensors.utils.match import is_match, match_targets

    def to_torch(dtype, a):
        if dtype == "BF16":
            return torch.from_numpy(a.astype(np.int16).copy()).view(torch.bfloat16)
        return torch.from_numpy(a.copy())

    manifest = json.load(open(os.path.join(out_dir, "manifest.json")))
    checked = skipped = 0
    for fx, info in manifest.items():
        qc_json = json.load(open(os.path.join(out_dir, fx, "config.json")))["quantization_config"]
        try:
            qc = QuantizationConfig.model_validate(qc_json)
        except ValueError as e:  # newer releases refuse actorder "group"; its modules are skipped below
            if "actorder" not in str(e):
                raise
            for g in qc_json["config_groups"].values():
                g["weights"]["actorder"] = None
            qc = QuantizationConfig.model_validate(qc_json)
        target_to_scheme = {}
        for name_g, scheme in qc.config_groups.items():
            for t in scheme.targets:
                target_to_scheme[t] = (name_g, scheme)
        tensors = read_safetensors(os.path.join(out_dir, fx, "model.safetensors"))
        expected = read_safetensors(os.path.join(out_dir, fx + "-dequant", "model.safetensors"))
        linear = torch.nn.Linear(1, 1)
        for module, m in info["modules"].items():
            # compressed-tensors' own matching picks the fixture's group
            matched = match_targets(module, linear, list(target_to_scheme))
            if not matched or is_match(module, linear, qc.ignore or []):
                sys.exit("cross-check: %s/%s: compressed-tensors does not quantize it" % (fx, module))
            group, scheme = target_to_scheme[matched[0]]
            if group != m["group"]:
                sys.exit("cross-check: %s/%s: compressed-tensors picks %s, the fixture %s" % (fx, module, group, m["group"]))
            if m["g_idx"]:
                skipped += 1
                continue
            fmt = scheme.format or qc.format
            comp = BaseCompressor.get_value_from_registry(fmt)
            sd = {leaf: to_torch(*tensors[module + "." + leaf])
                  for leaf in ("weight", "weight_packed", "weight_scale", "weight_zero_point", "weight_shape")
                  if module + "." + leaf in tensors}
            got = comp.decompress(dict(sd), scheme)["weight"]
            exp = torch.from_numpy(expected[module + ".weight"][1].copy()).to(got.dtype)
            if got.shape != exp.shape or not torch.equal(got, exp):
                diff = (got.float() - exp.float()).abs().max().item()
                sys.exit("cross-check: %s/%s: compressed-tensors' decompress differs from the numpy weights "
                         "(max |diff| %g)" % (fx, module, diff))
            # and compress() of the dequantized weight gives back the very codes written here
            zp = sd.get("weight_zero_point")
            if zp is not None and fmt == "pack-quantized" and scheme.weights.strategy in ("group", "channel"):
                from compressed_tensors.compressors.pack_quantized.helpers import unpack_from_int32
                zp = unpack_from_int32(zp, scheme.weights.num_bits, (got.shape[0], sd["weight_scale"].shape[-1]),
                                       packed_dim=0)
            src = {"weight": torch.from_numpy(expected[module + ".weight"][1].copy()), "weight_scale": sd["weight_scale"]}
            if zp is not None:
                src["weight_zero_point"] = zp.to(torch.int8)
            again = comp.compress(src, scheme)
            for leaf in ("weight", "weight_packed", "weight_zero_point"):
                if leaf in sd and leaf in again and not torch.equal(again[leaf].to(sd[leaf].dtype), sd[leaf]):
                    sys.exit("cross-check: %s/%s: compressed-tensors' compress gives another %s" % (fx, module, leaf))
            checked += 1
    print("cross-check: compressed-tensors %s decompresses %d modules to the numpy weights and compresses them "
          "back to the same codes" % (compressed_tensors.__version__, checked))
    if skipped:
        print("cross-check: %d modules with a g_idx checked against numpy only (compressed-tensors %s does not "
              "read activation-order groups)" % (skipped, compressed_tensors.__version__))


def main(argv):
    if len(argv) == 3 and argv[1] == "--crosscheck":
        crosscheck(argv[2])
        return 0
    if len(argv) != 2:
        sys.stderr.write(__doc__)
        return 2
    make(argv[1])
    py = os.environ.get("LMP_CT_PYTHON", "")
    if not py:
        print("SKIPPED cross-check with compressed-tensors: LMP_CT_PYTHON is not set (a Python with the PyPI "
              "compressed-tensors package, e.g. a venv's bin/python)")
        return 0
    probe = subprocess.run([py, "-c", "import compressed_tensors, torch"], capture_output=True)
    if probe.returncode != 0:
        print("SKIPPED cross-check with compressed-tensors: %s cannot import compressed_tensors and torch" % py)
        return 0
    return subprocess.run([py, os.path.abspath(__file__), "--crosscheck", argv[1]]).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv))
