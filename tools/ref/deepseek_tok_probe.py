#!/usr/bin/env python3
"""llama.cpp's own token ids for its "deepseek-llm" and "deepseek-v3" pre-tokenizers on a vocabulary
whose merges cross the pre-tokenizers' splits (tests/test_tokenizer_families.c,
test_gguf_deepseek_pre_tokenizers).

The DeepSeek architecture fixtures' vocabulary (320 tokens, 62 English merges) tokenizes the test
text the same under both pre-tokenizers (and under GPT-2's): a split changes ids only where a merge
would cross it.  This script keeps that vocabulary's 2 special and 256 byte tokens and replaces its
62 merges by the 62 most frequent adjacent pairs of the raw text (BPE trained with no
pre-tokenization, ties by first occurrence), so merges join digits across 3-digit groups, spaces,
newlines, CJK, kana and Hangul bytes across characters, punctuation with letters.  It writes:

  OUT/deepseek_probe_llm.gguf, OUT/deepseek_probe_v3.gguf  the vocabulary alone (what lmpress reads)
  OUT/deepseek_probe_llm.ids, OUT/deepseek_probe_v3.ids    llama.cpp's ids of the text with it
  (and, printed, how many ids differ between the two and from GPT-2's pre-tokenizer)

llama.cpp's ids come from llama-perplexity --kl-divergence-base (its file keeps the text's ids, the
first n_chunk x 64) on a copy of the deepseek_v3 fixture model with the new vocabulary.

Usage: deepseek_tok_probe.py GGUF_PY_DIR LLAMA_PERPLEXITY MODEL_GGUF TEXT OUT
  GGUF_PY_DIR: llama.cpp's gguf-py (vendor/llama.cpp/gguf-py of llama-cpp-python 0.3.36)
  MODEL_GGUF: tests/fixtures/arch/deepseek_v3/model.gguf
"""
import os
import struct
import subprocess
import sys
import tempfile


def bytes_to_unicode():
    """GPT-2's byte-level alphabet (every byte-level BPE vocabulary, DeepSeek's too)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def train_raw_merges(text_bytes, n_merges):
    b2u = bytes_to_unicode()
    seq = [b2u[b] for b in text_bytes]
    merges = []
    for _ in range(n_merges):
        counts, first = {}, {}
        for i in range(len(seq) - 1):
            p = (seq[i], seq[i + 1])
            counts[p] = counts.get(p, 0) + 1
            first.setdefault(p, i)
        best = max(counts, key=lambda p: (counts[p], -first[p]))
        merges.append(best)
        out, i = [], 0
        while i < len(seq):
            if i + 1 < len(seq) and (seq[i], seq[i + 1]) == best:
                out.append(seq[i] + seq[i + 1])
                i += 2
            else:
                out.append(seq[i])
                i += 1
        seq = out
    return merges


def write_gguf(gguf, reader, path, new_kv, with_tensors, only_tokenizer):
    arch = reader.fields["general.architecture"].contents()
    w = gguf.GGUFWriter(path, arch)
    for f in reader.fields.values():
        if f.name == "general.architecture" or f.name.startswith("GGUF."):
            continue
        if only_tokenizer and not f.name.startswith("tokenizer."):
            continue
        vt = f.types[0]
        st = f.types[-1] if vt == gguf.GGUFValueType.ARRAY else None
        val = new_kv.get(f.name, f.contents())
        w.add_key_value(f.name, val, vt, sub_type=st)
    if with_tensors:
        for t in reader.tensors:
            w.add_tensor_info(t.name, t.data.shape, t.data.dtype, t.data.nbytes, t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    if with_tensors:
        for t in reader.tensors:
            w.write_tensor_data(t.data, tensor_endianess=reader.endianess)
    w.close()


def llamacpp_ids(perplexity, model, text_path, tmp):
    kl = os.path.join(tmp, "ids.kl")
    subprocess.run([perplexity, "-m", model, "-f", text_path, "-c", "64", "-t", "1", "--kl-divergence-base", kl],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    d = open(kl, "rb").read()
    assert d[:8] == b"_logits_", "not a llama-perplexity logits file"
    n_ctx, _n_vocab, n_chunk = struct.unpack_from("<iii", d, 8)
    return list(struct.unpack_from("<%di" % (n_ctx * n_chunk), d, 20))


def main():
    if len(sys.argv) != 6:
        sys.exit(__doc__)
    gguf_py, perplexity, model, text_path, out = sys.argv[1:]
    sys.path.insert(0, gguf_py)
    import gguf

    reader = gguf.GGUFReader(model)
    tokens = reader.fields["tokenizer.ggml.tokens"].contents()
    old_merges = reader.fields["tokenizer.ggml.merges"].contents()
    n_keep = len(tokens) - len(old_merges)  # specials and the 256 bytes
    merges = train_raw_merges(open(text_path, "rb").read(), len(old_merges))
    new_tokens = tokens[:n_keep] + [a + b for a, b in merges]
    assert len(set(new_tokens)) == len(new_tokens), "a merge made a token twice"
    new_merges = ["%s %s" % m for m in merges]
    os.makedirs(out, exist_ok=True)
    ids = {}
    with tempfile.TemporaryDirectory() as tmp:
        for short, pre in (("llm", "deepseek-llm"), ("v3", "deepseek-v3"), ("gpt2", "gpt-2")):
            kv = {"tokenizer.ggml.tokens": new_tokens, "tokenizer.ggml.merges": new_merges, "tokenizer.ggml.pre": pre}
            full = os.path.join(tmp, "probe_%s.gguf" % short)
            write_gguf(gguf, reader, full, kv, True, False)
            ids[short] = llamacpp_ids(perplexity, full, text_path, tmp)
            if short == "gpt2":
                continue
            write_gguf(gguf, reader, os.path.join(out, "deepseek_probe_%s.gguf" % short), kv, False, True)
            with open(os.path.join(out, "deepseek_probe_%s.ids" % short), "w") as f:
                f.write(" ".join(map(str, ids[short])) + "\n")

    def differ(a, b):
        return sum(x != y for x, y in zip(ids[a], ids[b]))

    print("ids: %d (deepseek-llm), %d (deepseek-v3), %d (gpt-2); deepseek-llm vs deepseek-v3 differ at %d, deepseek-llm vs gpt-2 at %d, deepseek-v3 vs gpt-2 at %d"
          % (len(ids["llm"]), len(ids["v3"]), len(ids["gpt2"]), differ("llm", "v3"), differ("llm", "gpt2"), differ("v3", "gpt2")))


if __name__ == "__main__":
    main()
