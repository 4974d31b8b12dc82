#!/usr/bin/python3
"""imatrix_compare.py — two llama.cpp importance matrices, and two GGUF files quantized with them,
compared entry by entry / tensor by tensor (for tools/bench/imatrix_vs_llamacpp.sh).

    imatrix_compare.py imatrix A.gguf B.gguf
        per entry: the importance llama-quantize uses (in_sum2 / counts); the relative difference
        |a - b| / |b| of every value, and ||a - b|| / ||b|| of the entry; the metadata
        (chunk_count, chunk_size) and the counts of both.  B is the reference (llama-imatrix's).
    imatrix_compare.py quant A.gguf B.gguf
        per quantized tensor: whether the bytes are equal, and the share of its blocks whose
        scale fields (d, dmin, the sub-block scales: the bytes that hold scales in each ggml block
        type) are equal, by type; the whole file's share of equal scale blocks.

Needs numpy and the gguf package (PYTHONPATH=build/pydeps, or llama.cpp's gguf-py)."""
import sys

import numpy as np
import gguf

Q = gguf.GGMLQuantizationType
# block size in bytes and the byte ranges holding its scales (ggml-common.h's block layouts)
SCALE_BYTES = {
    Q.Q4_0: (18, [(0, 2)]), Q.Q4_1: (20, [(0, 4)]), Q.Q5_0: (22, [(0, 2)]), Q.Q5_1: (24, [(0, 4)]),
    Q.Q8_0: (34, [(0, 2)]), Q.IQ4_NL: (18, [(0, 2)]),
    Q.Q2_K: (84, [(0, 16), (80, 84)]), Q.Q3_K: (110, [(96, 110)]), Q.Q4_K: (144, [(0, 16)]),
    Q.Q5_K: (176, [(0, 16)]), Q.Q6_K: (210, [(192, 210)]),
}


def importance(path):
    r = gguf.GGUFReader(path)
    meta = {k: r.fields[k].contents() for k in ("imatrix.chunk_count", "imatrix.chunk_size") if k in r.fields}
    t = {x.name: np.asarray(x.data, dtype=np.float64).reshape(-1) for x in r.tensors}
    out = {}
    for name in t:
        if name.endswith(".in_sum2"):
            w = name[:-len(".in_sum2")]
            count = float(np.float32(round(float(t[w + ".counts"][0]))))
            out[w] = (count, (t[name].astype(np.float32) / np.float32(count)).astype(np.float64))
    return meta, out


def header_bytes(path):
    """The file up to its first tensor's data: metadata, tensor infos, padding."""
    r = gguf.GGUFReader(path)
    start = min(t.data_offset for t in r.tensors)
    with open(path, "rb") as f:
        return f.read(start)


def cmd_imatrix(a, b):
    ma, ea = importance(a)
    mb, eb = importance(b)
    print(f"metadata: {a}: {ma}; {b}: {mb}")
    ha, hb = header_bytes(a), header_bytes(b)
    print(f"headers (metadata, tensor names, shapes, types, offsets): {len(ha)} and {len(hb)} bytes, "
          f"{'byte for byte equal' if ha == hb else 'different'}")
    only = sorted(set(ea) ^ set(eb))
    if only:
        print(f"entries in one file only: {only[:8]}{' ...' if len(only) > 8 else ''}")
    rows, all_rel = [], []
    for name in sorted(set(ea) & set(eb)):
        (ca, va), (cb, vb) = ea[name], eb[name]
        rel = np.abs(va - vb) / np.maximum(np.abs(vb), 1e-30)
        all_rel.append(rel)
        rows.append((name, ca, cb, float(np.median(rel)), float(rel.max()),
                     float(np.linalg.norm(va - vb) / max(np.linalg.norm(vb), 1e-30))))
    counts_equal = sum(r[1] == r[2] for r in rows)
    print(f"{len(rows)} common entries; counts equal in {counts_equal}")
    by_kind = {}
    for r in rows:
        kind = r[0].split(".")[2]
        by_kind.setdefault(kind, []).append(r)
    print(f"{'weight':<12} {'entries':>7} {'median rel':>11} {'max rel':>10} {'worst ||a-b||/||b||':>20}")
    for kind, rs in sorted(by_kind.items()):
        print(f"{kind:<12} {len(rs):>7} {np.median([r[3] for r in rs]):>11.2e} {max(r[4] for r in rs):>10.2e} "
              f"{max(r[5] for r in rs):>20.2e}")
    rel = np.concatenate(all_rel)
    worst = max(rows, key=lambda r: r[5])
    print(f"all values: median relative difference {np.median(rel):.2e}, 99th percentile "
          f"{np.percentile(rel, 99):.2e}, max {rel.max():.2e}; worst entry {worst[0]} "
          f"(||a-b||/||b|| = {worst[5]:.2e})")


def cmd_quant(a, b):
    ra, rb = gguf.GGUFReader(a), gguf.GGUFReader(b)
    ta, tb = {t.name: t for t in ra.tensors}, {t.name: t for t in rb.tensors}
    per_type, tensors_equal, n_tensors, blocks_same, blocks = {}, 0, 0, 0, 0
    for name in sorted(set(ta) & set(tb)):
        x, y = ta[name], tb[name]
        if x.tensor_type != y.tensor_type:
            print(f"{name}: types differ ({x.tensor_type.name} vs {y.tensor_type.name})")
            continue
        n_tensors += 1
        bx, by = np.asarray(x.data).view(np.uint8).reshape(-1), np.asarray(y.data).view(np.uint8).reshape(-1)
        equal = bx.size == by.size and bool(np.array_equal(bx, by))
        tensors_equal += equal
        if x.tensor_type not in SCALE_BYTES:
            continue
        size, ranges = SCALE_BYTES[x.tensor_type]
        ba, bb = bx.reshape(-1, size), by.reshape(-1, size)
        same = np.ones(ba.shape[0], dtype=bool)
        for lo, hi in ranges:
            same &= np.all(ba[:, lo:hi] == bb[:, lo:hi], axis=1)
        s = per_type.setdefault(x.tensor_type.name, [0, 0, 0, 0])
        s[0] += 1
        s[1] += equal
        s[2] += int(same.sum())
        s[3] += same.size
        blocks_same += int(same.sum())
        blocks += same.size
    print(f"{n_tensors} tensors of the same type in both; {tensors_equal} byte for byte equal")
    print(f"{'type':<8} {'tensors':>7} {'equal':>6} {'blocks with equal scales':>26}")
    for name, (n, eq, same, total) in sorted(per_type.items()):
        print(f"{name:<8} {n:>7} {eq:>6} {same:>12} / {total:<10} ({100.0 * same / total:6.2f} %)")
    if blocks:
        print(f"all quantized blocks: {blocks_same} of {blocks} with equal scales "
              f"({100.0 * blocks_same / blocks:.2f} %)")


def cmd_kld(label, path):
    import json
    with open(path) as f:
        d = json.load(f)
    s = d["stats"]
    print(f"{label:<8} ppl {d['ppl']:.4f} (base {d['ppl_base']:.4f})  KLD {s['kld']:.5f} ± {s['kld_err']:.5f}  "
          f"same top {100 * s['same_top']:.2f} %  RMS dp {100 * s['dp_rms']:.3f} %")


def main():
    cmds = {"imatrix": cmd_imatrix, "quant": cmd_quant, "kld": cmd_kld}
    if len(sys.argv) != 4 or sys.argv[1] not in cmds:
        sys.exit(__doc__)
    cmds[sys.argv[1]](sys.argv[2], sys.argv[3])


if __name__ == "__main__":
    main()
