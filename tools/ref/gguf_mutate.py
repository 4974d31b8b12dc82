#!/usr/bin/python3
"""gguf_mutate.py — a copy of a GGUF file with one thing added, written by the PyPI `gguf`
package (not by lmpress), for tests/test_arch_fixtures.c: each mutation is something a real file
can hold that changes the model's numbers, so lmpress must refuse it by name rather than ignore it.

    PYTHONPATH=build/pydeps /usr/bin/python3 tools/ref/gguf_mutate.py IN.gguf OUT.gguf MUTATION

MUTATION:
  key:NAME=INT        an extra uint32 metadata key (e.g. key:llama.expert_count=8), or one in
                      place of the file's key of that name
  tensor:NAME=ROWSxCOLS  an extra F32 tensor of ones (e.g. tensor:blk.0.attn_q_norm.weight=16x1)
Every key and tensor of IN is copied unchanged (the tensors' data byte for byte)."""
import sys

import numpy as np
import gguf


def copy_with(src, dst, mutation):
    r = gguf.GGUFReader(src)
    arch = r.fields["general.architecture"]
    arch = bytes(arch.parts[arch.data[0]]).decode()
    w = gguf.GGUFWriter(dst, arch)
    kind, spec = mutation.split(":", 1)
    for name, field in r.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture" or (kind == "key" and name == spec.split("=")[0]):
            continue
        vtype = field.types[0]
        if vtype == gguf.GGUFValueType.ARRAY:
            etype = field.types[1]
            if etype == gguf.GGUFValueType.STRING:
                vals = [bytes(field.parts[i]).decode("utf-8", "surrogateescape") for i in field.data]
            else:
                vals = [field.parts[i].tolist()[0] for i in field.data]
            w.add_key_value(name, vals, vtype, sub_type=etype)
        elif vtype == gguf.GGUFValueType.STRING:
            w.add_key_value(name, bytes(field.parts[field.data[0]]).decode("utf-8", "surrogateescape"), vtype)
        else:
            w.add_key_value(name, field.parts[field.data[0]].tolist()[0], vtype)
    name, value = spec.split("=", 1)
    if kind == "key":
        w.add_uint32(name, int(value))
    for t in r.tensors:
        shape = [int(d) for d in reversed(t.shape.tolist())]  # ne order -> numpy order
        w.add_tensor(t.name, np.asarray(t.data).reshape(shape), raw_dtype=t.tensor_type)
    if kind == "tensor":
        rows, cols = (int(x) for x in value.split("x"))
        w.add_tensor(name, np.ones((rows, cols) if cols > 1 else (rows,), dtype=np.float32))
    elif kind != "key":
        sys.exit("gguf_mutate.py: MUTATION is key:NAME=INT or tensor:NAME=ROWSxCOLS")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    copy_with(sys.argv[1], sys.argv[2], sys.argv[3])
