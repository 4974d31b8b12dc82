#!/usr/bin/env python3
"""hf_tokenizer_check.py: does an exported folder's tokenizer.json tokenize like lmpress?

Independent reference: the PyPI `tokenizers` package (Hugging Face's Rust tokenizer library),
and transformers' AutoTokenizer when it is importable.  tests/test_export_hf.c exports a model
whose source has no tokenizer files (stories260K's llama2.c tok512.bin, SmolLM2's GGUF), so
lmpress writes tokenizer.json itself (core/export/hf_tokenizer.c); the test tokenizes a text
with lmpress's own tokenizer into IDS (whitespace-separated ids, BOS included when the
tokenizer adds one) and runs

    PYTHONPATH=build/pydeps python3 tools/ref/hf_tokenizer_check.py DIR TEXT IDS

This encodes TEXT with DIR/tokenizer.json (special tokens included, as HF adds them; control
tokens that appear in the text are read as text, as lmpress does: encode_special_tokens) and
requires the same ids, then decodes them back to TEXT.  tools/test.sh unpacks the tokenizers
wheel into build/pydeps.  Exit 0 when every check passes, 1 with the first difference otherwise.
"""
import argparse
import sys

from tokenizers import Tokenizer


def first_difference(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


def compare(what, got, want):
    if got == want:
        print(f"  {what}: {len(got)} ids equal")
        return True
    i = first_difference(got, want)
    print(f"FAIL {what}: {len(got)} ids against lmpress's {len(want)}; first difference at {i}: "
          f"{got[max(0, i - 3):i + 4]} against {want[max(0, i - 3):i + 4]}")
    return False


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("text")
    ap.add_argument("ids")
    a = ap.parse_args()
    with open(a.text, "rb") as f:
        text = f.read().decode("utf-8")
    with open(a.ids) as f:
        want = [int(x) for x in f.read().split()]

    tok = Tokenizer.from_file(f"{a.dir}/tokenizer.json")
    tok.encode_special_tokens = True
    got = tok.encode(text, add_special_tokens=True).ids
    ok = compare("tokenizers", got, want)
    back = tok.decode(want, skip_special_tokens=True)
    if back != text:
        i = first_difference(back, text)
        print(f"FAIL decode: differs at character {i}: {back[i:i + 20]!r} against {text[i:i + 20]!r}")
        ok = False
    else:
        print(f"  decode: {len(text)} characters back")

    try:
        from transformers import AutoTokenizer
    except ImportError:
        print("  transformers: not importable here, AutoTokenizer not checked")
    else:
        auto = AutoTokenizer.from_pretrained(a.dir)
        auto.split_special_tokens = True
        ok = compare(f"transformers {type(auto).__name__}", auto(text)["input_ids"], want) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
