#!/usr/bin/env python3
"""gguf_moe_check.py: an independent check of a mixture of experts' GGUF that lmpress exported,
with the PyPI `gguf` package (llama.cpp's gguf-py), for tests/test_moe.c.

    PYTHONPATH=build/pydeps python3 tools/ref/gguf_moe_check.py FILE.gguf DIR ARCH E K [SAME.gguf]

DIR holds, for every block N, raw little-endian f32 files of the weights lmpress held in memory:
blk.N.ffn_gate_exps.f32 (every expert's gate, expert after expert: [E, out, in]), likewise
ffn_up_exps and ffn_down_exps, and blk.N.ffn_gate_inp.f32 (the router); for gpt-oss also
blk.N.ffn_gate_inp.bias.f32 and blk.N.ffn_{gate,up,down}_exps.bias.f32 ([E, out]), which must be
F32.  An experts file with a NAME.f32plain marker beside it is one the variant left in float (a
width no GGUF block fits): it need not be quantized, only equal.  Each tensor, dequantized
by gguf-py, must equal its file bit for bit (a quantized weight may read +0 where memory held -0);
the experts' tensors must be 3-D with ne = {in, out, E} and of one quantized type, the router F32
(never quantized unless a stage names it), and <ARCH>.expert_count / expert_used_count must be E and
K.  With SAME.gguf (llama.cpp's converter's file of the same weights, DeepSeek's deepseek2): FILE
holds exactly SAME's tensors, each of the same shape and type and the same values (its split
attn_k_b / attn_v_b, exp_probs_b included), and every <ARCH>.* key SAME has, of the same value (a
float to 1e-6 relative).  Prints "ok: ..." and exits 0, or every problem and
exits 1."""
import os
import sys

import numpy as np
import gguf


def main():
    path, ref_dir, arch, n_exp, k = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
    rd = gguf.GGUFReader(path)
    bad = []
    same = 0
    if len(sys.argv) > 6:  # every tensor as llama.cpp's converter wrote it
        mine = {t.name: t for t in rd.tensors}
        theirs = {t.name: t for t in gguf.GGUFReader(sys.argv[6]).tensors}
        if set(mine) != set(theirs):
            bad.append(f"tensors only in {path}: {sorted(set(mine) - set(theirs))}; only in {sys.argv[6]}: "
                       f"{sorted(set(theirs) - set(mine))}")
        for name in sorted(set(mine) & set(theirs)):
            a, b = mine[name], theirs[name]
            if [int(x) for x in a.shape] != [int(x) for x in b.shape] or a.tensor_type != b.tensor_type:
                bad.append(f"{name}: shape {list(a.shape)} {a.tensor_type.name}, the converter's {list(b.shape)} "
                           f"{b.tensor_type.name}")
                continue
            va = gguf.quants.dequantize(a.data, a.tensor_type).reshape(-1)
            vb = gguf.quants.dequantize(b.data, b.tensor_type).reshape(-1)
            if not np.array_equal(va, vb):
                bad.append(f"{name}: {int((va != vb).sum())} values differ from the converter's")
            same += 1
        # and every key of the architecture the converter wrote, with its value
        ref = gguf.GGUFReader(sys.argv[6])
        for key, fld in ref.fields.items():
            if not key.startswith(arch + "."):
                continue
            mine_f = rd.fields.get(key)
            if mine_f is None:
                bad.append(f"{key}: missing (the converter wrote {fld.contents()!r})")
                continue
            a, b = mine_f.contents(), fld.contents()
            if isinstance(b, float) and isinstance(a, float) and abs(a - b) <= 1e-6 * abs(b):
                continue
            if a != b:
                bad.append(f"{key} = {a!r}, the converter wrote {b!r}")
    got_arch = rd.fields["general.architecture"].contents()
    if got_arch != arch:
        bad.append(f"general.architecture {got_arch!r}, expected {arch!r}")
    for key, want in (("expert_count", n_exp), ("expert_used_count", k)):
        f = rd.fields.get(f"{arch}.{key}")
        if f is None or f.contents() != want:
            bad.append(f"{arch}.{key} = {None if f is None else f.contents()}, expected {want}")
    tensors = {t.name: t for t in rd.tensors}
    checked = 0
    for fn in sorted(os.listdir(ref_dir)):
        if not fn.endswith(".f32"):
            continue
        bias = fn.endswith(".bias.f32")  # gpt-oss's router and expert biases: F32, [E, out] for the experts
        name = fn[:-4] if bias else fn[:-4] + ".weight"
        t = tensors.get(name)
        if t is None:
            bad.append(f"{name}: missing")
            continue
        ref = np.fromfile(os.path.join(ref_dir, fn), dtype="<f4")
        exps = name.endswith("_exps.weight") and not os.path.exists(os.path.join(ref_dir, fn[:-4] + ".f32plain"))
        shape = [int(x) for x in t.shape]
        if exps and (len(shape) != 3 or shape[2] != n_exp or t.tensor_type == gguf.GGMLQuantizationType.F32):
            bad.append(f"{name}: shape {shape} type {t.tensor_type.name}, expected 3-D over {n_exp} experts, quantized")
        if not exps and not name.endswith("_exps.weight") and t.tensor_type != gguf.GGMLQuantizationType.F32:
            bad.append(f"{name}: the router or bias is stored as {t.tensor_type.name}, expected F32")
        vals = gguf.quants.dequantize(t.data, t.tensor_type).astype("<f4").reshape(-1)
        if vals.size != ref.size:
            bad.append(f"{name}: {vals.size} values, lmpress held {ref.size}")
            continue
        diff = vals != ref
        diff &= ~((vals == 0) & (ref == 0))
        if diff.any():
            i = int(np.argmax(diff))
            bad.append(f"{name}: {int(diff.sum())} values differ, first at {i}: {vals[i]!r} vs {ref[i]!r}")
        checked += 1
    if checked == 0 and same == 0:
        bad.append(f"{ref_dir}: no reference file")
    if bad:
        print("\n".join(bad))
        sys.exit(1)
    print(f"ok: {path}: {checked} tensors equal lmpress's weights; experts 3-D and quantized, routers F32"
          + (f"; {same} tensors as llama.cpp's converter wrote them" if same else ""))


if __name__ == "__main__":
    main()
