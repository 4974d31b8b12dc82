#!/usr/bin/env python3
"""hf_tokenize.py: golden token ids for core/text/tokenizer_bpe.c from an independent reference, the
PyPI `tokenizers` package (Hugging Face's Rust tokenizer library), written to
tests/golden/tokens_smollm2.txt.

Setup (once; no other network access is needed):

    pip download --no-deps --only-binary=:all: -d /tmp/wheels tokenizers
    pip install --no-deps --target /tmp/refpy /tmp/wheels/tokenizers-*.whl
    # the GGUF reader, llama.cpp's gguf-py (needs numpy, which /usr/bin/python3 has):
    pip download --no-deps gguf==0.19.0 -d /tmp/ggufpkg
    pip install --no-deps --target /tmp/refpy /tmp/ggufpkg/gguf-0.19.0-py3-none-any.whl
    tools/fetch_smollm2.sh          # models/cache/SmolLM2-135M-Instruct.Q4_1.gguf

Regenerate (from the repository root; deterministic):

    PYTHONPATH=/tmp/refpy /usr/bin/python3 tools/ref/hf_tokenize.py > tests/golden/tokens_smollm2.txt

What the reference tokenizer is.  The original SmolLM2 tokenizer.json is not available offline,
so this script rebuilds it from the GGUF's tokenizer arrays (read with the `gguf` package, not
with lmpress code) as the tokenizer.json that SmolLM2 ships:
    model: BPE, vocab = tokenizer.ggml.tokens (id = position), merges = tokenizer.ggml.merges
           (rank = position), unk_token null, dropout null, no subword prefix/suffix,
           byte_fallback false, ignore_merges false
    normalizer: null
    pre_tokenizer: Sequence[Digits(individual_digits=true),
                            ByteLevel(add_prefix_space=false, trim_offsets=true, use_regex=true)]
    decoder: ByteLevel
    added_tokens: every GGUF token of type CONTROL (the 17 tokens <|endoftext|> .. <empty_output>)
           with special=true, normalized=false (as SmolLM2's tokenizer.json lists them)
and loads it with tokenizers.Tokenizer.from_str.  Encoding uses encode(text,
add_special_tokens=False) (no BOS: SmolLM2's GGUF has add_bos_token false).  Mode "special" is
HF's default (added special tokens are matched in the text); mode "plain" sets
encode_special_tokens = True (special tokens are tokenized as ordinary text), which is what
lmp_tokenize() does without LMP_TOKENIZE_PARSE_SPECIAL.

Second tokenizer, "gpt2-llama3": GPT-2's encoder.json + vocab.bpe (data/gpt2-tokenizer)
with Llama 3's pre-tokenizer (Split on Llama 3's regex, Isolated, then ByteLevel with
use_regex=false) and ignore_merges=true, to check the Llama-3-style pre-tokenizer on a real
vocabulary (no Llama 3 vocabulary is available offline).

"gpt2": GPT-2's own tokenizer (encoder.json + vocab.bpe, ByteLevel without prefix space,
<|endoftext|> special), for WikiText with the plain GPT-2 regex.

Fourth tokenizer, "gpt2-added": GPT-2's vocabulary with ByteLevel(add_prefix_space=true) and added
tokens of every kind: <|endoftext|> (special), <mask> (special, lstrip; id 50257), [X] (not
special, rstrip, normalized=false; id 50258), foo (not special, single_word, normalized=true;
already GPT-2 token 21943) — HF's AddedVocabulary rules on a real vocabulary.

Output format ('#' lines are comments):
    file TOKENIZER NAME MODE COUNT HASH   NAME's bytes (UTF-8) tokenized as one text
    passages TOKENIZER NAME N MODE COUNT HASH   the "text" of each of the first N lines of the JSONL
                                          file, each tokenized separately; COUNT/HASH over all
                                          ids in order
    string TOKENIZER MODE HEXTEXT COUNT ID...   (HEXTEXT: the text's UTF-8 bytes, '-' if empty)
    random TOKENIZER HEXTEXT COUNT_PLAIN HASH_PLAIN COUNT_SPECIAL HASH_SPECIAL
                                          random strings (fixed seed) built from characters of
                                          every class the pre-tokenizers distinguish
HASH: FNV-1a 64-bit (offset 0xcbf29ce484222325, prime 0x100000001b3) over the ids, each as uint32
little-endian.  NAME is relative to data/.
"""
import json
import os
import sys

try:
    import gguf
    from tokenizers import Tokenizer
except ImportError:
    sys.exit("hf_tokenize.py: needs the tokenizers and gguf packages; see the setup lines at the top")

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
ASSETS = os.path.join(ROOT, "data")
SMOLLM2 = os.path.join(ROOT, "models", "cache", "SmolLM2-135M-Instruct.Q4_1.gguf")
GPT2_DIR = os.path.join(ASSETS, "gpt2-tokenizer")

LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

STRINGS = [
    "",
    "Hello world",
    " Hello world",
    "Hello, y'all! How are you 😁 ?我想在apple工作1314151天～",
    "3333333 33 3",
    "in 1995 , the 2,000.50 $ 12th",
    "  leading and trailing  ",
    "\n\n\t tabs\r\nand  \n  newlines \n",
    "don't I'LL we'RE 's 'Ve it'd",
    "naïve café résumé — “quotes” … ½ ² ³ Ⅻ ٣٤٥ ௫",
    "a\u3000b\u00a0c\u2028d\u0085e \u200bf",
    "emoji 🙂👍🏽👨‍👩‍👧‍👦 🇩🇪 ✨",
    "нещо на Български ქართული ελληνικά עברית",
    "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n",
    "x<|endoftext|>y <|endoftext|> <file_sep>",
    " = Robert Boulter = \n",
]


ADDED_STRINGS = [
    "I saw a <mask> 😺",
    "a  <mask>  b<mask>",
    "x[X]   y [X][X]\n",
    "foo food afoo foo_ foo. (foo)",
    "<|endoftext|>foo<mask>",
    "no prefix",
    " already spaced",
    "\tfoo",
]


# Pieces for the random strings: whitespace of several kinds (\u0085 NEL, \u00a0, \u3000,
# \u2028 are White_Space; \u200b and \u001c are not), letters of every category (Lu Ll Lt Lm
# Lo), numbers (Nd, also non-ASCII; Nl; No), contraction pieces in both cases, punctuation,
# symbols, a combining mark (Mn: not a letter), a 4-byte emoji, and added tokens.
RANDOM_PIECES = [" ", " ", " ", "  ", "\t", "\n", "\r\n", "\r", "\u0085", "\u00a0", "\u3000", "\u2028",
                 "\u200b", "\u001c", "a", "Z", "hello", "é", "ß", "ǅ", "ʰ", "中文", "ქ", "1", "42", "٣", "Ⅻ",
                 "½", "²", "'", "'s", "'S", "'t", "'re", "'RE", "'ve", "'m", "'ll", "'LL", "'d", "'x", "s", "l",
                 ".", ",", "!!", "_", "-", "$", "\u0301", "😀", "🇩🇪", "<|endoftext|>", "<|im_start|>",
                 "<mask>", "[X]", "foo"]


def random_strings(n, seed):
    x = seed
    out = []
    for _ in range(n):
        k = []
        x = (x * 6364136223846793005 + 1442695040888963407) & 0xFFFFFFFFFFFFFFFF
        length = (x >> 33) % 12
        for _ in range(length):
            x = (x * 6364136223846793005 + 1442695040888963407) & 0xFFFFFFFFFFFFFFFF
            k.append(RANDOM_PIECES[(x >> 33) % len(RANDOM_PIECES)])
        out.append("".join(k))
    return out


def fnv1a64(ids):
    h = 0xcbf29ce484222325
    for i in ids:
        for b in int(i).to_bytes(4, "little"):
            h ^= b
            h = (h * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h


def gguf_strings(reader, key):
    f = reader.fields[key]
    return [bytes(f.parts[i]).decode("utf-8") for i in f.data]


def smollm2_tokenizer():
    r = gguf.GGUFReader(SMOLLM2)
    assert r.fields["tokenizer.ggml.model"].contents() == "gpt2"
    assert r.fields["tokenizer.ggml.pre"].contents() == "smollm"
    tokens = gguf_strings(r, "tokenizer.ggml.tokens")
    merges = gguf_strings(r, "tokenizer.ggml.merges")
    tt = r.fields["tokenizer.ggml.token_type"]
    types = [int(tt.parts[i][0]) for i in tt.data]
    control = [i for i, t in enumerate(types) if t == 3]
    doc = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [{"id": i, "content": tokens[i], "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False, "special": True} for i in control],
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Digits", "individual_digits": True},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}]},
        "post_processor": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False,
                           "use_regex": True},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                  "ignore_merges": False,
                  "vocab": {t: i for i, t in enumerate(tokens)},
                  "merges": [m.split(" ") for m in merges]},
    }
    assert len(doc["model"]["vocab"]) == len(tokens)
    return Tokenizer.from_str(json.dumps(doc))


def gpt2_files():
    with open(os.path.join(GPT2_DIR, "encoder.json"), encoding="utf-8") as f:
        vocab = json.load(f)
    with open(os.path.join(GPT2_DIR, "vocab.bpe"), encoding="utf-8") as f:
        merges = [l.split(" ") for l in f.read().split("\n") if l and not l.startswith("#version")]
    return vocab, merges


def gpt2_added_tokenizer():
    vocab, merges = gpt2_files()
    def added(i, content, special, lstrip=False, rstrip=False, single_word=False, normalized=False):
        return {"id": i, "content": content, "single_word": single_word, "lstrip": lstrip,
                "rstrip": rstrip, "normalized": normalized, "special": special}
    doc = {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [added(vocab["<|endoftext|>"], "<|endoftext|>", True),
                         added(vocab["foo"], "foo", False, single_word=True, normalized=True),
                         added(50257, "<mask>", True, lstrip=True),
                         added(50258, "[X]", False, rstrip=True)],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                          "use_regex": True},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                  "ignore_merges": False, "vocab": vocab, "merges": merges},
    }
    tok = Tokenizer.from_str(json.dumps(doc))
    for a in doc["added_tokens"]:
        assert tok.token_to_id(a["content"]) == a["id"], a
    return tok


def gpt2_tokenizer():
    vocab, merges = gpt2_files()
    doc = {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": vocab["<|endoftext|>"], "content": "<|endoftext|>", "single_word": False,
                          "lstrip": False, "rstrip": False, "normalized": False, "special": True}],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                          "use_regex": True},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                  "ignore_merges": False, "vocab": vocab, "merges": merges},
    }
    return Tokenizer.from_str(json.dumps(doc))


def gpt2_llama3_tokenizer():
    vocab, merges = gpt2_files()
    doc = {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": vocab["<|endoftext|>"], "content": "<|endoftext|>", "single_word": False,
                          "lstrip": False, "rstrip": False, "normalized": False, "special": True}],
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": LLAMA3_REGEX}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                  "ignore_merges": True, "vocab": vocab, "merges": merges},
    }
    return Tokenizer.from_str(json.dumps(doc))


def encode(tok, text, mode):
    tok.encode_special_tokens = mode == "plain"
    return tok.encode(text, add_special_tokens=False).ids


def main():
    w = sys.stdout.write
    smol = smollm2_tokenizer()
    l3 = gpt2_llama3_tokenizer()
    import tokenizers
    w("# tokens_smollm2.txt — golden byte-level BPE output from Hugging Face tokenizers %s\n"
      % tokenizers.__version__)
    w("# produced by: PYTHONPATH=/tmp/refpy /usr/bin/python3 tools/ref/hf_tokenize.py "
      "> tests/golden/tokens_smollm2.txt\n")
    w("# tokenizers: smollm2 = SmolLM2-135M-Instruct's tokenizer rebuilt from its GGUF as a tokenizer.json;\n")
    w("#   gpt2 = GPT-2's encoder.json + vocab.bpe;\n")
    w("#   gpt2-llama3 = GPT-2's vocabulary with Llama 3's pre-tokenizer and ignore_merges;\n")
    w("#   gpt2-added = GPT-2's vocabulary, add_prefix_space and added tokens of every kind (see the script)\n")
    w("# MODE plain: special tokens are text (encode_special_tokens=True); special: HF's default\n")
    w("# hash: FNV-1a 64 over the ids as uint32 little-endian; no BOS anywhere\n")
    w("# file TOKENIZER NAME MODE COUNT HASH | passages TOKENIZER NAME N MODE COUNT HASH |\n")
    w("# string TOKENIZER MODE HEXTEXT COUNT ID... | random TOKENIZER HEXTEXT COUNT HASH COUNT_SPECIAL HASH_SPECIAL\n")

    with open(os.path.join(ASSETS, "wikitext-2", "wiki.test.raw"), "rb") as f:
        wiki = f.read().decode("utf-8")
    for name, tok in (("smollm2", smol), ("gpt2", gpt2_tokenizer()), ("gpt2-llama3", l3)):
        ids = encode(tok, wiki, "plain")
        w("file %s wikitext-2/wiki.test.raw plain %d %016x\n" % (name, len(ids), fnv1a64(ids)))

    all_ids = []
    with open(os.path.join(ASSETS, "lambada", "lambada_test.jsonl"), encoding="utf-8") as f:
        for k, line in enumerate(f):
            if k == 200:
                break
            all_ids += encode(smol, json.loads(line)["text"], "plain")
    w("passages smollm2 lambada/lambada_test.jsonl 200 plain %d %016x\n" % (len(all_ids), fnv1a64(all_ids)))

    for name, tok, strings in (("smollm2", smol, STRINGS), ("gpt2-llama3", l3, STRINGS),
                               ("gpt2-added", gpt2_added_tokenizer(), ADDED_STRINGS)):
        for s in strings:
            for mode in ("plain", "special"):
                ids = encode(tok, s, mode)
                hx = s.encode("utf-8").hex() or "-"
                w("string %s %s %s %d%s\n" % (name, mode, hx, len(ids), "".join(" %d" % i for i in ids)))
        for s in random_strings(200, 12345):
            a, b = encode(tok, s, "plain"), encode(tok, s, "special")
            w("random %s %s %d %016x %d %016x\n" % (name, s.encode("utf-8").hex() or "-", len(a), fnv1a64(a),
                                                     len(b), fnv1a64(b)))


if __name__ == "__main__":
    main()
