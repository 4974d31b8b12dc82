#!/usr/bin/env python3
"""imatrix_fixture.py: llama.cpp importance matrices for tests/test_imatrix.c, written in both
forms llama-imatrix writes, the GGUF one with the PyPI `gguf` package (llama.cpp's gguf-py), the
legacy .dat one byte by byte, with the importance llama-quantize derives from each (its
load_imatrix in tools/quantize/quantize.cpp) computed here in numpy as the expected values.

Run (from the repository root; gguf needs only numpy; tools/test.sh unpacks it into build/pydeps):

    PYTHONPATH=build/pydeps /usr/bin/python3 tools/ref/imatrix_fixture.py random --llama2c MODEL.bin OUTDIR
    PYTHONPATH=build/pydeps /usr/bin/python3 tools/ref/imatrix_fixture.py random --gpt2 HF_FOLDER OUTDIR
    PYTHONPATH=build/pydeps /usr/bin/python3 tools/ref/imatrix_fixture.py from-raw OUTDIR COUNT NCALL
    PYTHONPATH=build/pydeps /usr/bin/python3 tools/ref/imatrix_fixture.py bad --llama2c MODEL.bin OUTDIR

random: one entry per block linear of the model (llama2.c: blk.N.attn_q/k/v/output, ffn_gate/up/
  down; GPT-2: blk.N.attn_qkv, attn_output, ffn_up, ffn_down; the names from gguf's TENSOR_NAMES),
  each with its own seeded random importance per input column (log-uniform over 1e-3..1e2, a few
  exact zeros), so that an entry taken for the wrong linear changes the grids.  Beside them
  output.weight (lmpress does not quantize it) and a MoE-style blk.0.ffn_up_exps.weight with four
  rows, one of them never reached (count 0), which must be read but are never used.
  GGUF form: <name>.in_sum2 = importance * count (f32) and <name>.counts = count, a random whole
  number of tokens per entry; odd blocks store the dense pair 2-D ({n, 1}, as ggml makes it), even
  ones 1-D (as llama-imatrix's files hold it).  Legacy form: the values (in_sum2 / count) * ncall
  with ncall a random chunk count per entry, then the trailer (chunk count, dataset name).
from-raw: OUTDIR/raw.txt ("NAME N" per line) and OUTDIR/raw.f32 (the N sums of each, one after
  another) as in_sum2 with every count COUNT (GGUF) and values sums / COUNT * NCALL (legacy).
bad: malformed files, one per check of core/formats/imatrix.c and of the mapping onto the model
  (see BAD below); the C test truncates and patches the good ones itself.

Writes into OUTDIR: imatrix.gguf, imatrix.dat, names.txt ("NAME N" per entry the model uses, in
the order below), gguf.f32 and dat.f32 (llama-quantize's importance of each such entry from each
file: in_sum2 / float32(count), value / float32(ncall), float32 divisions as in quantize.cpp,
little-endian, one entry after another).  Deterministic (fixed seed)."""
import json
import os
import struct
import sys

import numpy as np

try:
    import gguf
    from gguf import MODEL_TENSOR as MT
except ImportError:
    sys.exit("imatrix_fixture.py: the gguf package is missing (PYTHONPATH=build/pydeps, see tools/test.sh)")

LLAMA = [MT.ATTN_Q, MT.ATTN_K, MT.ATTN_V, MT.ATTN_OUT, MT.FFN_GATE, MT.FFN_UP, MT.FFN_DOWN]
GPT2 = [MT.ATTN_QKV, MT.ATTN_OUT, MT.FFN_UP, MT.FFN_DOWN]


def weight_name(kind, block):
    return gguf.TENSOR_NAMES[kind].format(bid=block) + ".weight"


def model_entries(args):
    """[(name, n_inputs)] of every block linear, from the model's own header; and its arch."""
    if args[0] == "--llama2c":
        with open(args[1], "rb") as f:
            dim, hidden, layers = struct.unpack("<3i", f.read(12))
        return "llama", [(weight_name(k, b), hidden if k == MT.FFN_DOWN else dim)
                         for b in range(layers) for k in LLAMA]
    if args[0] == "--gpt2":
        with open(os.path.join(args[1], "config.json")) as f:
            cfg = json.load(f)
        dim, layers = cfg["n_embd"], cfg["n_layer"]
        hidden = cfg.get("n_inner") or 4 * dim
        return "gpt2", [(weight_name(k, b), hidden if k == MT.FFN_DOWN else dim)
                        for b in range(layers) for k in GPT2]
    sys.exit("imatrix_fixture.py: expected --llama2c MODEL.bin or --gpt2 FOLDER")


def write_gguf(path, arch, entries, two_d=lambda name: False, metadata=True):
    """entries: [(name, sums [rows, n], counts [rows])] as llama-imatrix writes them
    (save_imatrix): general.type, imatrix.datasets, chunk_count, chunk_size, and per entry
    NAME.in_sum2 (ne {n, rows}) and NAME.counts (ne {1, rows}), sorted by name, in the arrays'
    own dtypes (float32; a bad file may give another, or None to leave the tensor out)."""
    w = gguf.GGUFWriter(path, arch)
    w.add_type(gguf.GGUFType.IMATRIX)
    if metadata:
        w.add_array(gguf.Keys.IMatrix.DATASETS, ["tinystories-synth-calib.txt"])
        w.add_uint32(gguf.Keys.IMatrix.CHUNK_COUNT, 10)
        w.add_uint32(gguf.Keys.IMatrix.CHUNK_SIZE, 512)
    for name, sums, counts in sorted(entries, key=lambda e: e[0]):
        rows = (sums if sums is not None else counts.reshape(-1, 1)).shape[0]
        flat = rows == 1 and not two_d(name)  # llama-imatrix's files: a dense pair is 1-D
        if sums is not None:
            w.add_tensor(name + ".in_sum2", sums.reshape(-1) if flat else sums)
        if counts is not None:
            w.add_tensor(name + ".counts", counts.reshape(-1) if flat else counts.reshape(rows, 1))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_dat(path, entries, chunk_count=10, dataset=b"tinystories-synth-calib.txt"):
    """entries: [(name, values float32 [n], ncall)] as save_imatrix_legacy writes them."""
    out = [struct.pack("<i", len(entries))]
    for name, values, ncall in sorted(entries, key=lambda e: e[0]):
        raw = name.encode()
        out += [struct.pack("<i", len(raw)), raw, struct.pack("<ii", ncall, len(values)),
                np.asarray(values, dtype="<f4").tobytes()]
    out += [struct.pack("<i", chunk_count), struct.pack("<i", len(dataset)), dataset]
    with open(path, "wb") as f:
        f.write(b"".join(out))


def save_expected(outdir, used, gguf_imp, dat_imp):
    with open(os.path.join(outdir, "names.txt"), "w") as f:
        for name, n in used:
            f.write("%s %d\n" % (name, n))
    for fname, imp in (("gguf.f32", gguf_imp), ("dat.f32", dat_imp)):
        with open(os.path.join(outdir, fname), "wb") as f:
            for name, _ in used:
                f.write(imp[name].astype("<f4").tobytes())


def random_importance(rng, n):
    imp = np.exp(rng.uniform(np.log(1e-3), np.log(1e2), n))
    imp[rng.randint(0, n, max(1, n // 32))] = 0.0  # inputs that never fired
    return imp


def cmd_random(model_args, outdir):
    arch, used = model_entries(model_args)
    rng = np.random.RandomState(20240917)
    g_entries, d_entries, g_imp, d_imp = [], [], {}, {}
    for name, n in used:
        count = np.float32(rng.randint(256, 8192))
        sums = (random_importance(rng, n) * float(count)).astype(np.float32)
        g_entries.append((name, sums.reshape(1, n), np.array([count], dtype=np.float32)))
        g_imp[name] = sums / count  # quantize.cpp: e[i] = sums[i] / (float)count, in f32
        ncall = int(rng.randint(1, 40))
        values = (random_importance(rng, n) * ncall).astype(np.float32)
        d_entries.append((name, values, ncall))
        d_imp[name] = values / np.float32(ncall)  # sums[i] / ncall: float / int64 -> float
    # read but never used: the head, and a MoE tensor of 4 experts of which one saw no token
    g_entries.append(("output.weight", np.ones((1, 64), np.float32), np.array([7], np.float32)))
    g_entries.append(("blk.0.ffn_up_exps.weight", np.full((4, 64), 3.0, np.float32),
                      np.array([10, 0, 5, 2], np.float32)))
    d_entries.append(("output.weight", np.ones(64, np.float32), 7))
    two_d = lambda name: name.startswith("blk.") and int(name.split(".")[1]) % 2 == 1
    write_gguf(os.path.join(outdir, "imatrix.gguf"), arch, g_entries, two_d)
    write_dat(os.path.join(outdir, "imatrix.dat"), d_entries)
    save_expected(outdir, used, g_imp, d_imp)


def cmd_from_raw(outdir, count, ncall):
    used = []
    with open(os.path.join(outdir, "raw.txt")) as f:
        for line in f:
            name, n = line.split()
            used.append((name, int(n)))
    raw = np.fromfile(os.path.join(outdir, "raw.f32"), dtype="<f4")
    count, ncall = np.float32(count), int(ncall)
    g_entries, d_entries, g_imp, d_imp, at = [], [], {}, {}, 0
    for name, n in used:
        sums = raw[at:at + n].astype(np.float32)
        at += n
        g_entries.append((name, sums.reshape(1, n), np.array([count], np.float32)))
        g_imp[name] = sums / count
        values = ((sums / count) * np.float32(ncall)).astype(np.float32)
        d_entries.append((name, values, ncall))
        d_imp[name] = values / np.float32(ncall)
    if at != raw.size:
        sys.exit("imatrix_fixture.py: raw.f32 holds %d values, raw.txt names %d" % (raw.size, at))
    write_gguf(os.path.join(outdir, "imatrix.gguf"), "llama", g_entries)
    write_dat(os.path.join(outdir, "imatrix.dat"), d_entries)
    save_expected(outdir, used, g_imp, d_imp)


# bad/<file>: what is wrong with it (tests/test_imatrix.c checks each one's message).
BAD = {
    "no-metadata.gguf": "in_sum2/counts pairs but no imatrix.* keys (llama-quantize refuses it too)",
    "no-counts.gguf": "blk.1.attn_k.weight.in_sum2 without its .counts",
    "no-sum2.gguf": "blk.1.attn_k.weight.counts without its .in_sum2",
    "nan.gguf": "a NaN at blk.2.ffn_up.weight.in_sum2[17]",
    "negative.gguf": "-1.5 at blk.3.attn_v.weight.in_sum2[3]",
    "inf-count.gguf": "blk.0.attn_q.weight.counts is infinite",
    "negative-count.gguf": "blk.0.attn_output.weight.counts is -3",
    "f16.gguf": "blk.4.ffn_gate.weight.in_sum2 is F16",
    "ragged.gguf": "blk.1.attn_q.weight: 3 counts for 64 values",
    "empty.gguf": "the metadata, but no entry",
    "zero-count.gguf": "blk.2.attn_q.weight.counts is 0: read, and refused where it is used",
    "short.gguf": "blk.1.ffn_gate.weight has 32 values, its linear 64 inputs",
    "missing.gguf": "no entry for blk.3.ffn_up.weight",
    "moe.gguf": "blk.0.attn_k.weight has 2 rows (experts)",
    "nan.dat": "a NaN at value 5 of blk.2.ffn_up.weight",
    "dup.dat": "blk.0.attn_q.weight twice",
}


def cmd_bad(model_args, outdir):
    arch, used = model_entries(model_args)

    def good(name=None, sums=None, counts=None, drop=False):
        """Every entry with 2n / 4 (count 4); the one called `name` changed or dropped."""
        out = []
        for nm, n in used:
            s, c = np.full((1, n), 2.0 * n, np.float32), np.array([4], np.float32)
            if nm == name:
                if drop:
                    continue
                s = s if sums is None else sums
                c = c if counts is None else counts
            out.append((nm, s, c))
        return out

    def gguf_file(f, entries, **kw):
        write_gguf(os.path.join(outdir, f), arch, entries, **kw)

    def with_at(n, at, v):
        s = np.full((1, n), 5.0, np.float32)
        s[0, at] = v
        return s

    gguf_file("no-metadata.gguf", good(), metadata=False)
    alone = good("blk.1.attn_k.weight", drop=True)
    gguf_file("no-counts.gguf", alone + [("blk.1.attn_k.weight", np.ones((1, 64), np.float32), None)])
    gguf_file("no-sum2.gguf", alone + [("blk.1.attn_k.weight", None, np.ones(1, np.float32))])
    gguf_file("nan.gguf", good("blk.2.ffn_up.weight", sums=with_at(64, 17, np.nan)))
    gguf_file("negative.gguf", good("blk.3.attn_v.weight", sums=with_at(64, 3, -1.5)))
    gguf_file("inf-count.gguf", good("blk.0.attn_q.weight", counts=np.array([np.inf], np.float32)))
    gguf_file("negative-count.gguf", good("blk.0.attn_output.weight", counts=np.array([-3], np.float32)))
    gguf_file("f16.gguf", good("blk.4.ffn_gate.weight", sums=np.ones((1, 64), np.float16)))
    gguf_file("ragged.gguf", good("blk.1.attn_q.weight", counts=np.ones(3, np.float32)))
    gguf_file("empty.gguf", [])
    gguf_file("zero-count.gguf", good("blk.2.attn_q.weight", counts=np.zeros(1, np.float32)))
    gguf_file("short.gguf", good("blk.1.ffn_gate.weight", sums=np.ones((1, 32), np.float32)))
    gguf_file("missing.gguf", good("blk.3.ffn_up.weight", drop=True))
    gguf_file("moe.gguf", good("blk.0.attn_k.weight", sums=np.ones((2, 64), np.float32),
                               counts=np.array([3, 4], np.float32)))
    dat = [(name, np.full(n, 1.5, np.float32), 3) for name, n in used]
    nan = [(nm, v.copy(), c) for nm, v, c in dat]
    for nm, v, _ in nan:
        if nm == "blk.2.ffn_up.weight":
            v[5] = np.nan
    write_dat(os.path.join(outdir, "nan.dat"), nan)
    write_dat(os.path.join(outdir, "dup.dat"), dat + [("blk.0.attn_q.weight", np.ones(64, np.float32), 1)])


def main(argv):
    if len(argv) >= 2:
        os.makedirs(argv[-1] if argv[0] != "from-raw" else argv[1], exist_ok=True)
    if len(argv) >= 4 and argv[0] == "random":
        cmd_random(argv[1:3], argv[3])
    elif len(argv) == 4 and argv[0] == "from-raw":
        cmd_from_raw(argv[1], argv[2], argv[3])
    elif len(argv) >= 4 and argv[0] == "bad":
        cmd_bad(argv[1:3], argv[3])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
