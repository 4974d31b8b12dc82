#!/usr/bin/env python3
"""tok_fixtures.py — makes the tokenizer fixtures of tests/test_tokenizer_families.c and their
golden ids, from the reference libraries themselves (PyPI `tokenizers`, `sentencepiece`, `gguf`).

Real Qwen2 / Llama-2 / Mistral / Gemma tokenizer files cannot be fetched here (no PyPI package
ships one that may be redistributed), so this script trains small vocabularies (a few hundred
merges) on data/wikitext-2 plus a few lines of CJK, emoji and code, and writes them with EXACTLY
the normalizer / pre-tokenizer / model options / decoder that those families' tokenizer.json
files carry:

  qwen2    NFC + Sequence[Split(Qwen2 regex, Isolated), ByteLevel(use_regex false)], ByteLevel decoder
  llama3   Sequence[Split(Llama 3 regex, Isolated), ByteLevel(use_regex false)], ignore_merges
  nfkc     NFKC + ByteLevel(use_regex true)                      (the NFKC normalizer)
  llama2   Sequence[Prepend("▁"), Replace(" ", "▁")], no pre-tokenizer, BPE byte_fallback + fuse_unk,
           decoder Sequence[Replace, ByteFallback, Fuse, Strip], merges as "a b" strings
  mistral  no normalizer, Metaspace(prepend_scheme "first", split false), merges as [a, b] pairs
  gemma    Replace(" ", "▁") only (no prefix), byte_fallback, decoder without Strip
  llama2_always / llama2_never: Metaspace(prepend_scheme "always" / "never", split true)
  splits   Split with every behaviour (MergedWithPrevious, Contiguous, MergedWithNext, Removed)
           before ByteLevel;  sp_split: Split steps before a SentencePiece-style model

and a SentencePiece BPE model trained with `sentencepiece` (identity normalization, byte
fallback, as Llama's tokenizer.model; sp_user.gguf: with user-defined pieces (Gemma has many);
sp_rws.gguf: with remove_extra_whitespaces; sp_flat.gguf:
every score -1000, as gguf-py's LlamaHfVocab writes a tokenizer.json-only folder, which lmpress
must refuse) converted to a tokenizer-only GGUF the way llama.cpp's
convert_hf_to_gguf.py does (tokens, scores, token types), plus GGUF "gpt2" vocabularies of the
qwen2 / llama3 fixtures with tokenizer.ggml.pre "qwen2" / "llama-bpe".  The same three models
are also written as they are, sp.model, sp_user.model and sp_rws.model (a folder's
tokenizer.model), with the same golden ids.

Outputs (tests/fixtures/tokenizers/): <family>.tokenizer.json, sp.gguf, sp_rws.gguf, sp*.model, qwen2.gguf, llama3.gguf,
texts.json (the test texts), golden.json ({family: [[ids of text i], ...]}).

Rerun: python3 -m venv build/tok-venv && build/tok-venv/bin/pip install tokenizers==0.23.3 \
    sentencepiece==0.2.3 gguf==0.19.0 numpy && build/tok-venv/bin/python tools/ref/tok_fixtures.py
Training is deterministic for these versions; the golden ids always come from the files written.
"""
import json
import os
import sys
import tempfile
import unicodedata

import sentencepiece as spm
import tokenizers
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

PINNED = {"tokenizers": "0.23.3", "sentencepiece": "0.2.3"}
for mod, want in ((tokenizers, PINNED["tokenizers"]), (spm, PINNED["sentencepiece"])):
    if mod.__version__ != want:
        sys.exit(f"tok_fixtures.py: needs {mod.__name__}=={want}, found {mod.__version__}")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "fixtures", "tokenizers")

QWEN2_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
            r"|\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA3_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
             r"|\s*[\r\n]+|\s+(?!\S)|\s+")

EXTRA = [
    "我想在苹果公司工作。今天天气很好，我们去公园散步吧。東京は日本の首都です。",
    "안녕하세요 세계 🚀 🦙🦙 ✅ 😀😁 emoji test ☕",
    "def f(x):\n    return x * 2  # doubled\n\tif (a && b) { c++; }\n",
    "Ünïcödé café naïve résumé Åström Ωμέγα Привет мир",
    "3.14159 2026-11-28 1,000,000 0x1F 42nd 100% $5.99",
]

TEXTS = [
    "Hello world",
    " Hello world",
    "Hello  world   with    spaces",
    "   leading and trailing spaces   ",
    "The quick brown fox jumps over the lazy dog. It's 12:30, isn't it? I'll've",
    "def tokenize(text: str) -> list[int]:\n    return [ord(c) for c in text]  # 42\n",
    "for (int i = 0; i < 10; i++) { sum += a[i] * 3; }",
    "1234567890 12 123 1234 3.14 10,000 2026",
    "我想在苹果公司工作，东京是日本的首都。",
    "こんにちは世界 안녕하세요",
    "emoji 🚀🦙 ✅ 😶‍🌫️ flags 🇫🇷 and ☕",
    "\n\n\ttabs\tand\nnewlines\r\n\r\n  \n",
    "cafe\u0301 A\u030angstro\u0308m e\u0301te\u0301 \u1100\u1161\u11a8",  # decomposed: NFC composes
    "ﬁnancial ＦＵＬＬ ｗｉｄｔｈ ① ² ㎏ Ⅻ",                               # NFKC maps these
    "Ωμέγα Привет мир naïve résumé",
    "rare: ᚠᛇᚻ ꙮ 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 \u0000nul",
    "<s>special</s> inside <unk> text",
    "",
    " ",
    "a",
    "don't STOP 'RE 'Ll x's",
    "▁already▁meta",
    "<start_of_turn>user\nHi  there, 12345<end_of_turn>\n",
    "the-final--countdown: wait... what?! it's 3-2-1 o'clock",
]


FAMILIES = ("qwen2", "llama3", "nfkc", "splits", "llama2", "mistral", "gemma", "llama2_always", "llama2_never",
            "sp_split")


def training_text():
    with open(os.path.join(ROOT, "data", "wikitext-2", "wiki.test.raw"), encoding="utf-8") as f:
        lines = [ln for ln in f.read().split("\n")[:6000] if ln.strip()]
    return lines + EXTRA * 20


def byte_level_tokenizer(kind, lines):
    tok = Tokenizer(models.BPE(ignore_merges=(kind == "llama3")))
    if kind == "qwen2":
        tok.normalizer = normalizers.NFC()
    if kind == "nfkc":
        tok.normalizer = normalizers.NFKC()
    if kind == "splits":  # every Split behaviour, in a chain ending in GPT-2's regex
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(tokenizers.Regex(r"[.,;:!?]+"), behavior="merged_with_previous"),
            pre_tokenizers.Split(tokenizers.Regex(r"-"), behavior="contiguous"),
            pre_tokenizers.Split(tokenizers.Regex(r"\d"), behavior="merged_with_next"),
            pre_tokenizers.Split("'", behavior="removed"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    elif kind in ("qwen2", "llama3"):
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(tokenizers.Regex(QWEN2_RE if kind == "qwen2" else LLAMA3_RE),
                                 behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    else:
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=700, min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=["<|endoftext|>"])
    tok.train_from_iterator(lines, trainer)
    return tok


def sp_style_vocab(lines):
    """A Llama-2-style vocabulary: <unk> <s> </s>, the 256 byte tokens, then learned pieces and
    their merges (learned with Metaspace words, as sentencepiece splits on whitespace)."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always", split=True)
    trainer = trainers.BpeTrainer(vocab_size=600, min_frequency=2, show_progress=False, limit_alphabet=400)
    tok.train_from_iterator(lines, trainer)
    m = json.loads(tok.to_str())["model"]
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(256):
        vocab["<0x%02X>" % b] = len(vocab)
    for piece, _ in sorted(m["vocab"].items(), key=lambda kv: kv[1]):
        if piece not in vocab:
            vocab[piece] = len(vocab)
    merges = [tuple(mg) if isinstance(mg, list) else tuple(mg.split(" ")) for mg in m["merges"]]
    return vocab, merges


def sp_style_json(kind, vocab, merges):
    added = [{"id": i, "content": c, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for i, c in enumerate(["<unk>", "<s>", "</s>"])]
    strip = {"type": "Strip", "content": " ", "start": 1, "stop": 0}
    seq_decoder = {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
        {"type": "ByteFallback"}, {"type": "Fuse"}] + ([strip] if kind != "gemma" else [])}
    normalizer, pre, decoder = None, None, seq_decoder
    if kind == "llama2":
        normalizer = {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": "▁"},
            {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]}
    elif kind == "gemma":
        normalizer = {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}
    elif kind == "sp_split":  # Split steps before a SentencePiece-style model
        normalizer = {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}
        pre = {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"String": "▁"}, "behavior": "MergedWithNext", "invert": False},
            {"type": "Split", "pattern": {"Regex": "\\p{N}"}, "behavior": "Isolated", "invert": False}]}
    else:
        scheme, split = {"mistral": ("first", False), "llama2_always": ("always", True),
                         "llama2_never": ("never", True)}[kind]
        pre = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": scheme, "split": split}
        decoder = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": scheme, "split": split}
    as_strings = kind in ("llama2", "gemma")  # the other files use the [a, b] pair form
    doc = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": normalizer, "pre_tokenizer": pre,
        "post_processor": {"type": "TemplateProcessing",
                           "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                                      {"Sequence": {"id": "A", "type_id": 0}}],
                           "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                                    {"Sequence": {"id": "A", "type_id": 0}},
                                    {"SpecialToken": {"id": "<s>", "type_id": 1}},
                                    {"Sequence": {"id": "B", "type_id": 1}}],
                           "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
        "decoder": decoder,
        "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": True, "ignore_merges": False,
                  "vocab": vocab,
                  "merges": [f"{a} {b}" for a, b in merges] if as_strings else [[a, b] for a, b in merges]},
    }
    return json.dumps(doc, ensure_ascii=False, indent=1)


def fnv1a64_ids(ids):
    """FNV-1a 64 over the ids as uint32 little-endian bytes (tests/test_tokenizer.c's definition)."""
    h = 0xcbf29ce484222325
    for i in ids:
        for b in (i & 0xFFFFFFFF).to_bytes(4, "little"):
            h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h


def wiki_prefix():
    """The first 100 kB of WikiText-2 test (cut at a line end): a long text for count + hash."""
    with open(os.path.join(ROOT, "data", "wikitext-2", "wiki.test.raw"), "rb") as f:
        data = f.read()
    cut = data.index(b"\n", 100000) + 1
    return data[:cut].decode("utf-8")


def write(name, data):
    path = os.path.join(OUT, name)
    mode = "wb" if isinstance(data, bytes) else "w"
    with open(path + ".tmp", mode, **({} if mode == "wb" else {"encoding": "utf-8"})) as f:
        f.write(data)
    os.replace(path + ".tmp", path)


def sentencepiece_model(lines, remove_extra_whitespaces=False, user_defined=()):
    with tempfile.TemporaryDirectory() as d:
        txt = os.path.join(d, "train.txt")
        with open(txt, "w", encoding="utf-8") as f:
            f.write("\n".join(lines))
        spm.SentencePieceTrainer.train(
            input=txt, model_prefix=os.path.join(d, "sp"), model_type="bpe", vocab_size=800,
            character_coverage=0.995, byte_fallback=True, split_digits=True,
            normalization_rule_name="identity", remove_extra_whitespaces=remove_extra_whitespaces, add_dummy_prefix=True,
            allow_whitespace_only_pieces=True, num_threads=1, minloglevel=2,
            unk_id=0, bos_id=1, eos_id=2, pad_id=-1, user_defined_symbols=list(user_defined))
        return spm.SentencePieceProcessor(model_file=os.path.join(d, "sp.model"))


def gguf_tokenizer_only(path, fill):
    import gguf
    w = gguf.GGUFWriter(path, arch="llama")
    fill(w)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def sp_gguf(path, sp, remove_extra_whitespaces=False, flat_scores=False, user_defined=()):
    # as convert_hf_to_gguf.py's _create_vocab_sentencepiece: piece, score, type per id
    import gguf
    toks, scores, types = [], [], []
    for i in range(sp.vocab_size()):
        toks.append(sp.id_to_piece(i).encode("utf-8"))
        scores.append(-1000.0 if flat_scores else sp.get_score(i))  # flat: gguf-py's LlamaHfVocab
        t = gguf.TokenType.NORMAL
        if sp.is_unknown(i):
            t = gguf.TokenType.UNKNOWN
        elif sp.is_control(i):
            t = gguf.TokenType.CONTROL
        elif sp.is_unused(i):
            t = gguf.TokenType.UNUSED
        elif sp.id_to_piece(i) in user_defined:  # the converter takes these from the HF files
            t = gguf.TokenType.USER_DEFINED
        elif sp.is_byte(i):
            t = gguf.TokenType.BYTE
        types.append(t)

    def fill(w):
        w.add_tokenizer_model("llama")
        w.add_tokenizer_pre("default")
        w.add_token_list(toks)
        w.add_token_scores(scores)
        w.add_token_types(types)
        w.add_bos_token_id(1)
        w.add_eos_token_id(2)
        w.add_unk_token_id(0)
        w.add_add_bos_token(True)
        w.add_add_space_prefix(True)
        w.add_remove_extra_whitespaces(remove_extra_whitespaces)
    gguf_tokenizer_only(path, fill)


def bpe_gguf(path, tok, pre):
    # as convert_hf_to_gguf.py's get_vocab_base + gguf.SpecialVocab: tokens, types, merges
    import gguf
    doc = json.loads(tok.to_str())
    vocab = doc["model"]["vocab"]
    inv = {i: s for s, i in vocab.items()}
    added = {a["id"]: a for a in doc["added_tokens"]}
    toks, types = [], []
    for i in range(len(inv)):
        toks.append(inv[i].encode("utf-8"))
        types.append(gguf.TokenType.CONTROL if i in added else gguf.TokenType.NORMAL)
    merges = [" ".join(m) if isinstance(m, list) else m for m in doc["model"]["merges"]]

    def fill(w):
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre(pre)
        w.add_token_list(toks)
        w.add_token_types(types)
        w.add_token_merges(merges)
        w.add_add_bos_token(False)
    gguf_tokenizer_only(path, fill)


def main():
    os.makedirs(OUT, exist_ok=True)
    lines = training_text()
    golden = {}
    for kind in ("qwen2", "llama3", "nfkc", "splits"):
        tok = byte_level_tokenizer(kind, lines)
        write(f"{kind}.tokenizer.json", tok.to_str())
    vocab, merges = sp_style_vocab(lines)
    for kind in ("llama2", "mistral", "gemma", "llama2_always", "llama2_never", "sp_split"):
        write(f"{kind}.tokenizer.json", sp_style_json(kind, vocab, merges))
    # golden ids: from the files just written, read back by the library
    for kind in FAMILIES:
        tok = Tokenizer.from_file(os.path.join(OUT, f"{kind}.tokenizer.json"))
        golden[kind] = [tok.encode(t, add_special_tokens=False).ids for t in TEXTS]
        golden[kind + "+bos"] = [tok.encode(t).ids for t in TEXTS[:2]]
    # GGUF "gpt2" vocabularies: llama.cpp applies no NFC, so only texts already in NFC compare
    for kind, pre in (("qwen2", "qwen2"), ("llama3", "llama-bpe")):
        tok = Tokenizer.from_file(os.path.join(OUT, f"{kind}.tokenizer.json"))
        bpe_gguf(os.path.join(OUT, f"{kind}.gguf"), tok, pre)
        golden[kind + ".gguf"] = [tok.encode(t, add_special_tokens=False).ids
                                  if unicodedata.normalize("NFC", t) == t and "<" not in t else None
                                  for t in TEXTS]
    sp = sentencepiece_model(lines)
    sp_gguf(os.path.join(OUT, "sp.gguf"), sp)
    golden["sp.gguf"] = [sp.encode(t) for t in TEXTS]
    write("sp.model", sp.serialized_model_proto())
    sp_plain = sp
    sp_gguf(os.path.join(OUT, "sp_flat.gguf"), sp, flat_scores=True)  # must be refused
    user = ("<start_of_turn>", "<end_of_turn>", "▁▁", "1234")
    sp = sentencepiece_model(lines, user_defined=user)
    sp_gguf(os.path.join(OUT, "sp_user.gguf"), sp, user_defined=user)  # user-defined pieces: matched whole, never merged
    golden["sp_user.gguf"] = [sp.encode(t) for t in TEXTS]
    write("sp_user.model", sp.serialized_model_proto())
    sp = sentencepiece_model(lines, remove_extra_whitespaces=True)  # sentencepiece's default
    sp_gguf(os.path.join(OUT, "sp_rws.gguf"), sp, remove_extra_whitespaces=True)
    golden["sp_rws.gguf"] = [sp.encode(t) for t in TEXTS]
    write("sp_rws.model", sp.serialized_model_proto())
    for name in ("sp", "sp_user", "sp_rws"):  # the model file itself: sentencepiece's own ids
        golden[name + ".model"] = golden[name + ".gguf"]
    wiki = wiki_prefix()
    golden["wiki100k"] = {"bytes": len(wiki.encode("utf-8"))}
    for kind in FAMILIES:
        ids = Tokenizer.from_file(os.path.join(OUT, f"{kind}.tokenizer.json")).encode(
            wiki, add_special_tokens=False).ids
        golden["wiki100k"][kind] = [len(ids), "%016x" % fnv1a64_ids(ids)]
    ids = sp.encode(wiki)  # sp_rws's model; sp.gguf's below
    golden["wiki100k"]["sp_rws.gguf"] = [len(ids), "%016x" % fnv1a64_ids(ids)]
    ids = sp_plain.encode(wiki)
    golden["wiki100k"]["sp.gguf"] = [len(ids), "%016x" % fnv1a64_ids(ids)]
    # long runs (the regex match limit must let linear patterns through), made the same way in C
    runs = {"spaces": " " * 1000000 + "x", "bangs": "!" * 300000 + "\n" * 1000, "mixed": "ab1 !\t" * 50000}
    golden["runs"] = {}
    for kind in ("qwen2", "splits", "llama2"):
        tok = Tokenizer.from_file(os.path.join(OUT, f"{kind}.tokenizer.json"))
        for name, text in runs.items():
            ids = tok.encode(text, add_special_tokens=False).ids
            golden["runs"][f"{kind}/{name}"] = [len(ids), "%016x" % fnv1a64_ids(ids)]
    # Split pieces (byte offsets) of regexes on whitespace beyond ASCII (U+0085, U+00A0, U+2028, U+3000)
    split_text = "!\u0085! a\u0085\u0085b \u0085x\u00a0y\u2028z\u3000 w\t\u0085"
    golden["splits_text"] = split_text
    golden["split_pieces"] = {}
    for name, rx in (("qwen2", QWEN2_RE), ("s", r"\s+"), ("S", r"\S+"), ("class", r"[^\s\p{L}]+")):
        pieces = pre_tokenizers.Split(tokenizers.Regex(rx), behavior="isolated").pre_tokenize_str(split_text)
        golden["split_pieces"][name] = [[len(split_text[:a].encode()), len(split_text[:b].encode())]
                                        for _, (a, b) in pieces]
    write("texts.json", json.dumps(TEXTS, ensure_ascii=True, indent=1))
    golden["versions"] = {"tokenizers": tokenizers.__version__, "sentencepiece": spm.__version__}
    write("golden.json", json.dumps(golden, separators=(",", ":")))
    print(f"tok_fixtures.py: wrote {len(golden) - 1} golden lists for {len(TEXTS)} texts to {OUT}")


if __name__ == "__main__":
    main()
