#!/usr/bin/env python3
"""ct_fp4_fixture.py OUT_DIR — NVFP4 and MXFP4 folders written by compressed-tensors' own compressor.

Run with a Python that has torch and the PyPI compressed-tensors package (LMP_CT_PYTHON; tested
with 0.20.1).  stories260K's q/k/v/o/gate/up linears (down_proj's 172 inputs are no whole number
of groups: left dense through "ignore") are quantized with compressed-tensors' own arithmetic:
the preset schemes NVFP4A16 / MXFP4A16, generate_gparam (NVFP4's global scale), calculate_qparams
of each group's min and max, and the compressor NVFP4PackedCompressor / MXFP4PackedCompressor's
compress() (codes packed two a byte, E4M3 / E8M0 scales).  For each format F it writes:
  OUT_DIR/F          the compressed-tensors folder (config.json's quantization_config is
                     compressed-tensors' own QuantizationConfig.model_dump of the scheme);
  OUT_DIR/F-deq      dense F32: what the compressor's decompress() returns, widened (NVFP4's is
                     bfloat16: its decompressor unpacks the codes to bfloat16);
  OUT_DIR/F-deq32    dense F32: compressed-tensors' dequantize() of the same codes and scales in
                     float32 (the value before NVFP4's bfloat16 rounding; MXFP4's is the same).
No code is shared with lmpress's reader; tests/test_export_fp.c compares them.
"""
import json
import os
import shutil
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_fixtures as hf  # noqa: E402  (llama2.c reader, q/k row order)

from compressed_tensors.compressors.mxfp4.base import MXFP4PackedCompressor  # noqa: E402
from compressed_tensors.compressors.nvfp4.base import NVFP4PackedCompressor  # noqa: E402
from compressed_tensors.compressors.nvfp4.helpers import unpack_fp4_from_uint8  # noqa: E402
from compressed_tensors.quantization import QuantizationConfig  # noqa: E402
from compressed_tensors.quantization.lifecycle.forward import dequantize  # noqa: E402
from compressed_tensors.quantization.quant_scheme import preset_name_to_scheme  # noqa: E402
from compressed_tensors.quantization.utils.helpers import calculate_qparams, generate_gparam  # noqa: E402

TOKENIZER = os.path.join(os.path.dirname(hf.STORIES_BIN), "tok512.bin")
TARGETS = ["re:.*(q|k|v|o|gate|up)_proj$"]
IGNORE = ["lm_head", "re:.*down_proj$"]
ST_DTYPE = {torch.float32: "F32", torch.uint8: "U8", torch.float8_e4m3fn: "F8_E4M3"}


def st_bytes(t):
    t = t.contiguous()
    return t.view(torch.uint8).numpy().tobytes() if t.dtype == torch.float8_e4m3fn else t.numpy().tobytes()


def write_st(path, tensors):
    """A safetensors file of torch tensors (F32, U8, F8_E4M3), names sorted."""
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        t = tensors[name]
        b = st_bytes(t)
        header[name] = {"dtype": ST_DTYPE[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path + ".tmp", "wb") as f:
        f.write(len(h).to_bytes(8, "little") + h + b"".join(blobs))
    os.replace(path + ".tmp", path)


def quantize(w, preset, compressor):
    """compressed-tensors' own scales and compressor on one weight [out, in]."""
    scheme = preset_name_to_scheme(preset, TARGETS)
    args = scheme.weights
    g = args.group_size
    grouped = w.unflatten(-1, (w.shape[1] // g, g))
    mins, maxs = grouped.amin(dim=-1), grouped.amax(dim=-1)
    sd = {"weight": w}
    gs = None
    if preset.startswith("NVFP4"):
        gs = generate_gparam(w.min(), w.max()).reshape(1)
        sd["weight_global_scale"] = gs
    scale, _ = calculate_qparams(mins, maxs, args, global_scale=gs)
    sd["weight_scale"] = scale
    comp = compressor.compress(sd, scheme)
    packed = comp["weight_packed"]
    dec = compressor.decompress(dict(comp), scheme)["weight"]
    # dequantize() in float32: the same codes and scales, no narrower dtype anywhere
    codes32 = unpack_fp4_from_uint8(packed, w.shape[0], w.shape[1], dtype=torch.float32)
    scale32 = compressor._decompress_scale(comp["weight_scale"], torch.float32)
    deq32 = dequantize(x_q=codes32, scale=scale32, args=args, global_scale=gs, dtype=torch.float32)
    out = {k: v for k, v in comp.items() if k != "weight"}
    return scheme, out, dec.float(), deq32


def main(argv):
    if len(argv) != 2:
        sys.stderr.write(__doc__)
        return 2
    out_dir = argv[1]
    hp, w = hf.read_llama2c(hf.STORIES_BIN)
    cfg = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "hidden_size": hp["dim"], "intermediate_size": hp["hidden"], "num_hidden_layers": hp["L"],
        "num_attention_heads": hp["H"], "num_key_value_heads": hp["KV"], "vocab_size": hp["vocab"],
        "max_position_embeddings": hp["seq_len"], "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
        "rope_scaling": None, "hidden_act": "silu", "tie_word_embeddings": True,
        "attention_bias": False, "torch_dtype": "float32", "bos_token_id": 1, "eos_token_id": 2,
    }
    src = {"self_attn.q_proj": lambda l: hf.adjacent_to_rotate_half(w["wq"][l], hp["H"]),
           "self_attn.k_proj": lambda l: hf.adjacent_to_rotate_half(w["wk"][l], hp["KV"]),
           "self_attn.v_proj": lambda l: w["wv"][l], "self_attn.o_proj": lambda l: w["wo"][l],
           "mlp.gate_proj": lambda l: w["w1"][l], "mlp.up_proj": lambda l: w["w3"][l],
           "mlp.down_proj": lambda l: w["w2"][l]}
    t32 = lambda a: torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32))  # noqa: E731
    for fmt, preset, comp in (("nvfp4", "NVFP4A16", NVFP4PackedCompressor), ("mxfp4", "MXFP4A16", MXFP4PackedCompressor)):
        common = {"model.embed_tokens.weight": t32(w["tok"]), "model.norm.weight": t32(w["rms_final"])}
        qt, dq, dq32 = dict(common), dict(common), dict(common)
        scheme = None
        n = 0
        for l in range(hp["L"]):
            p = "model.layers.%d." % l
            for k, key in (("input_layernorm.weight", "rms_att"), ("post_attention_layernorm.weight", "rms_ffn")):
                qt[p + k] = dq[p + k] = dq32[p + k] = t32(w[key][l])
            for leaf, get in src.items():
                name = p + leaf
                weight = t32(get(l))
                if leaf == "mlp.down_proj":
                    qt[name + ".weight"] = dq[name + ".weight"] = dq32[name + ".weight"] = weight
                    continue
                scheme, tensors, dec, deq32 = quantize(weight, preset, comp)
                for k, v in tensors.items():
                    qt[name + "." + k] = v
                dq[name + ".weight"] = dec
                dq32[name + ".weight"] = deq32
                n += 1
        qc = QuantizationConfig(config_groups={"group_0": scheme}, quant_method="compressed-tensors",
                                format="%s-pack-quantized" % fmt, ignore=IGNORE,
                                quantization_status="compressed")
        qcd = qc.model_dump(mode="json")
        for folder, tensors, c in ((fmt, qt, dict(cfg, quantization_config=qcd)), (fmt + "-deq", dq, cfg),
                                   (fmt + "-deq32", dq32, cfg)):
            d = os.path.join(out_dir, folder)
            os.makedirs(d, exist_ok=True)
            with open(os.path.join(d, "config.json"), "w") as f:
                json.dump(c, f, indent=1)
            write_st(os.path.join(d, "model.safetensors"), tensors)
            shutil.copy(TOKENIZER, os.path.join(d, "tok512.bin"))
        print("%s: %d linears compressed by compressed-tensors' %s (scheme %s)" % (fmt, n, comp.__name__, preset))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
