#!/usr/bin/env python3
"""arch_fixtures.py — tiny random checkpoints of each architecture lmpress reads, with PyPI
transformers' float64 log-probabilities as golden files, and their GGUF conversions made by
llama.cpp's own convert_hf_to_gguf.py (issue 33, point 6).

Run it through tools/ref/arch_fixtures.sh, which makes the pinned venv (build/arch-venv) and
extracts the converter from the llama-cpp-python sdist; by hand:

  build/arch-venv/bin/python tools/ref/arch_fixtures.py --converter DIR [NAME ...]

DIR is the sdist's vendor/llama.cpp with at least convert_hf_to_gguf.py, conversion/ and gguf-py/.
With no NAME every fixture is (re)made.  Output: tests/fixtures/arch/NAME/ (see the README there):

  hf5/          the folder as transformers 5 save_pretrained writes it: config.json (with
                rope_parameters, layer_types, ...), model.safetensors (F32), the tokenizer files
  hf4/          config.json rewritten as transformers 4 writes it (top-level rope_theta and a
                rope_scaling dict, no rope_parameters); model.safetensors and the tokenizer files
                are symbolic links to ../hf5/ (the same bytes; the repository stores them once)
  model.gguf    convert_hf_to_gguf.py --outtype f32 of hf5/
  tokens.txt    T seeded random token ids, one line, space separated
  logprobs.f64  log_softmax of transformers' logits for every position, the model run in float64
                (weights loaded from hf5/ and cast up: the F32 values are exact in float64), raw
                little-endian float64, row-major [T, V]; row t follows tokens[0..t]
  meta.txt      T, V, seed, versions, the GGUF's hyper-parameters and tensor names
  logprobs_gguf.f64 / logprobs_short.f64   (mistral, gemma3, gpt_oss, deepseek_v2 / phi3 only) a
                second golden for another reading of the same files: what llama.cpp makes of a
                GGUF whose converter dropped a config fact (deepseek_v2: of the conversion copy,
                gguf_config, that says what llama.cpp can run), or Phi-3's short RoPE factors;
                meta.txt's "extra" line gives its shape and the config overrides that produce it

Everything is seeded (numpy default_rng(seed)); rerunning gives the same weights and, with the same
pinned versions, the same golden numbers.  The weights are random: no licence attaches to them.

Weight scale.  Random checkpoints with the HF default init (std 0.02) have nearly flat output
distributions, which would let a wrong forward pass a relative test.  Here: embeddings and an
untied head N(0, 0.35^2) so the logits have std of 2-4; every linear N(0, 1/in_features), so the
residual stream neither vanishes nor explodes; biases N(0, 0.1^2); norm gains 1 + N(0, 0.15^2)
(stored as N(0, 0.15^2) for the Gemma families, whose RMSNorm multiplies by 1 + w).  The script
prints the logits' std and the log-prob spread per fixture.

Tokenizers: each folder gets a tiny tokenizer trained here (the ids in tokens.txt are random, so
only the converter needs it).  Byte-level BPE families (llama3, qwen2/3, glm, gpt2) get a
tokenizer.json trained with the `tokenizers` library on the start of data/wikitext-2 using the
family's real pre-tokenizer regex; llama.cpp's converter recognises a pre-tokenizer by hashing the
ids of a test string, which no tiny vocabulary reproduces, so the conversion wrapper here
monkeypatches TextModel.get_vocab_base_pre to return the family's real name ("llama-bpe",
"qwen2", "gpt-2", "glm4").  SentencePiece families (mistral, gemma 1-3, phi3, ernie4_5) get a
tokenizer.model trained with the `sentencepiece` library (BPE, byte_fallback), which the converter
reads directly.
"""
import argparse
import copy
import importlib.metadata as md
import io
import json
import os
import runpy
import shutil
import subprocess
import sys

import numpy as np

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
OUT_ROOT = os.path.join(ROOT, "tests", "fixtures", "arch")
CORPUS = os.path.join(ROOT, "data", "wikitext-2", "wiki.test.raw")

T = 48                  # window: longer than every sliding window below (16)
SLIDING = 16
DIMS = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            intermediate_size=128, max_position_embeddings=256)
V_BPE = 320             # byte-level BPE vocabularies: 256 bytes + merges + specials
V_SPM = 384             # SentencePiece with byte_fallback needs 256 byte pieces + the characters

# The pre-tokenizer regexes of the real families (from their tokenizer.json files).
RE_LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
             r"|\s*[\r\n]+|\s+(?!\S)|\s+")
RE_QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
            r"|\s*[\r\n]+|\s+(?!\S)|\s+")

# Each fixture: transformers model_type and class, config (transformers 5 spelling), tokenizer,
# the GGUF pre-tokenizer name the converter is told, seed.  Order = the brief's priority order.
FIXTURES = {
    "llama3": dict(
        model_type="llama", cls="LlamaForCausalLM", seed=3301, tok="bpe", regex=RE_LLAMA3,
        pre="llama-bpe", specials=["<|begin_of_text|>", "<|end_of_text|>"],
        config=dict(tie_word_embeddings=True, rms_norm_eps=1e-5, head_dim=16,
                    rope_parameters=dict(rope_type="llama3", rope_theta=500000.0, factor=8.0,
                                         low_freq_factor=1.0, high_freq_factor=4.0,
                                         original_max_position_embeddings=64))),
    "qwen2": dict(
        model_type="qwen2", cls="Qwen2ForCausalLM", seed=3302, tok="bpe", regex=RE_QWEN2, nfc=True,
        pre="qwen2", specials=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        config=dict(tie_word_embeddings=False, rms_norm_eps=1e-6, use_sliding_window=False,
                    rope_parameters=dict(rope_type="default", rope_theta=1000000.0))),
    "qwen2-yarn": dict(
        model_type="qwen2", cls="Qwen2ForCausalLM", seed=3303, tok="bpe", regex=RE_QWEN2, nfc=True,
        pre="qwen2", specials=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        config=dict(tie_word_embeddings=True, rms_norm_eps=1e-6, use_sliding_window=False,
                    rope_parameters=dict(rope_type="yarn", rope_theta=1000000.0, factor=4.0,
                                         original_max_position_embeddings=64))),
    "qwen3": dict(
        model_type="qwen3", cls="Qwen3ForCausalLM", seed=3304, tok="bpe", regex=RE_QWEN2, nfc=True,
        pre="qwen2", specials=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        config=dict(tie_word_embeddings=True, rms_norm_eps=1e-6, head_dim=32, attention_bias=False,
                    use_sliding_window=False,
                    rope_parameters=dict(rope_type="default", rope_theta=1000000.0))),
    "mistral": dict(
        model_type="mistral", cls="MistralForCausalLM", seed=3305, tok="spm",
        config=dict(tie_word_embeddings=False, rms_norm_eps=1e-5, head_dim=16, sliding_window=SLIDING,
                    rope_parameters=dict(rope_type="default", rope_theta=10000.0)),
        # llama.cpp's converter writes no sliding window for MistralForCausalLM (GGUF arch
        # "llama"), so the GGUF means full causal attention
        extra=[("logprobs_gguf.f64", T, dict(sliding_window=None),
                "what model.gguf means to llama.cpp: no sliding window (the converter writes none for "
                "MistralForCausalLM)")]),
    "gemma": dict(
        model_type="gemma", cls="GemmaForCausalLM", seed=3306, tok="spm", gemma_norm=True,
        config=dict(tie_word_embeddings=True, rms_norm_eps=1e-6, head_dim=16,
                    hidden_activation="gelu_pytorch_tanh",
                    rope_parameters=dict(rope_type="default", rope_theta=10000.0))),
    # query_pre_attn_scalar = head_dim as in Gemma 2 2B/9B and Gemma 3 1B-12B: the GGUF has no key
    # for it (llama.cpp derives the scale from head_dim, or hidden/heads for the 27B models)
    "gemma2": dict(
        model_type="gemma2", cls="Gemma2ForCausalLM", seed=3307, tok="spm", gemma_norm=True,
        config=dict(tie_word_embeddings=True, rms_norm_eps=1e-6, head_dim=16,
                    hidden_activation="gelu_pytorch_tanh", query_pre_attn_scalar=16,
                    attn_logit_softcapping=50.0, final_logit_softcapping=30.0,
                    sliding_window=SLIDING, layer_types=["sliding_attention", "full_attention"],
                    rope_parameters=dict(rope_type="default", rope_theta=10000.0))),
    "gemma3": dict(
        model_type="gemma3_text", cls="Gemma3ForCausalLM", seed=3308, tok="spm", gemma_norm=True,
        config=dict(tie_word_embeddings=True, rms_norm_eps=1e-6, head_dim=16,
                    hidden_activation="gelu_pytorch_tanh", query_pre_attn_scalar=16,
                    attn_logit_softcapping=None, final_logit_softcapping=None,
                    sliding_window=SLIDING, layer_types=["sliding_attention", "full_attention"],
                    rope_parameters=dict(
                        sliding_attention=dict(rope_type="default", rope_theta=10000.0),
                        full_attention=dict(rope_type="default", rope_theta=1000000.0))),
        # The converter writes no sliding-window pattern for Gemma3ForCausalLM and llama.cpp then
        # assumes Gemma 3's 5-local-1-global: with 2 layers both are local (window 16, base 10000)
        extra=[("logprobs_gguf.f64", T, dict(layer_types=["sliding_attention", "sliding_attention"]),
                "what model.gguf means to llama.cpp: both layers sliding with the local RoPE base (no "
                "pattern key in the GGUF, llama.cpp's default pattern 6)")]),
    "phi3": dict(
        model_type="phi3", cls="Phi3ForCausalLM", seed=3309, tok="spm",
        # original 32 < T: transformers (and llama.cpp at any context > 32) use the long factors
        # and the attention factor sqrt(1 + ln(256/32) / ln 32); logprobs_short.f64 covers the
        # short ones.  transformers 5 takes the top-level original_max_position_embeddings over
        # the one in rope_parameters, so both are given.
        extra=[("logprobs_short.f64", 32, {},
                "the first 32 tokens alone: sequence <= original_max_position_embeddings, so "
                "transformers uses the short factors")],
        config=dict(tie_word_embeddings=False, rms_norm_eps=1e-5, sliding_window=None,
                    original_max_position_embeddings=32,
                    rope_parameters=dict(
                        rope_type="longrope", rope_theta=10000.0, original_max_position_embeddings=32,
                        short_factor=[1.0, 1.02, 1.05, 1.1, 1.2, 1.5, 2.0, 3.0],
                        long_factor=[1.0, 1.1, 1.3, 1.8, 2.5, 4.0, 6.0, 9.0]))),
    "glm": dict(
        model_type="glm", cls="GlmForCausalLM", seed=3310, tok="bpe", regex=RE_LLAMA3, pre="glm4",
        specials=["<|endoftext|>", "[MASK]", "[gMASK]", "[sMASK]", "<sop>", "<eop>", "<|user|>"],
        # rms_norm_eps 1e-5, not GLM-4-9B's 1.5625e-07: the converter's chatglm path writes
        # "layernorm_epsilon" or 1e-5, never rms_norm_eps, so only 1e-5 keeps both formats equal
        config=dict(tie_word_embeddings=False, rms_norm_eps=1e-5, head_dim=16, attention_bias=True,
                    rope_parameters=dict(rope_type="default", rope_theta=10000.0,
                                         partial_rotary_factor=0.5))),
    "glm4": dict(
        model_type="glm4", cls="Glm4ForCausalLM", seed=3311, tok="bpe", regex=RE_LLAMA3, pre="glm4",
        specials=["<|endoftext|>", "[MASK]", "[gMASK]", "[sMASK]", "<sop>", "<eop>", "<|user|>"],
        config=dict(tie_word_embeddings=False, rms_norm_eps=1e-5, head_dim=16, attention_bias=True,
                    rope_parameters=dict(rope_type="default", rope_theta=10000.0,
                                         partial_rotary_factor=0.5))),
    # ERNIE 4.5 dense: RoPE over interleaved pairs on the whole head (GLM's style at full width; the
    # converter keeps the rows as stored), head_dim 32 != 64 / 4, use_bias false as in the released
    # models, tied head; SentencePiece vocabulary (the converter reads tokenizer.model)
    "ernie4_5": dict(
        model_type="ernie4_5", cls="Ernie4_5ForCausalLM", seed=3313, tok="spm",
        config=dict(tie_word_embeddings=True, rms_norm_eps=1e-5, head_dim=32, use_bias=False,
                    rope_parameters=dict(rope_type="default", rope_theta=500000.0))),
    # Mixtures of experts (issue 37): 4 experts, 2 per token, experts of 32 (a quarter of the dense
    # MLPs' 128), so each expert sees about half of the 48 tokens.  Mixtral: softmax, top-k, then
    # the k weights renormalized (always); GGUF arch "llama" with expert_count.
    "mixtral": dict(
        model_type="mixtral", cls="MixtralForCausalLM", seed=3701, tok="spm",
        config=dict(tie_word_embeddings=False, rms_norm_eps=1e-5, head_dim=16, sliding_window=None,
                    num_local_experts=4, num_experts_per_tok=2, intermediate_size=32,
                    rope_parameters=dict(rope_type="default", rope_theta=1000000.0))),
    # Qwen2-MoE: a shared expert (64) behind a sigmoid gate, norm_topk_prob false (as Qwen1.5-MoE
    # and what llama.cpp's qwen2moe assumes)
    "qwen2moe": dict(
        model_type="qwen2_moe", cls="Qwen2MoeForCausalLM", seed=3702, tok="bpe", regex=RE_QWEN2, nfc=True,
        pre="qwen2", specials=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        config=dict(tie_word_embeddings=False, rms_norm_eps=1e-6, use_sliding_window=False,
                    num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
                    shared_expert_intermediate_size=64, norm_topk_prob=False, decoder_sparse_step=1,
                    mlp_only_layers=[],
                    rope_parameters=dict(rope_type="default", rope_theta=1000000.0))),
    # The same with a dense first layer (mlp_only_layers [0], intermediate 128) and norm_topk_prob
    # true: the blocks differ in structure.  Hugging Face only: llama.cpp's converter cannot map a
    # dense MLP in a qwen2moe file ("Can not map tensor 'model.layers.0.mlp.down_proj.weight'").
    "qwen2moe-dense0": dict(
        model_type="qwen2_moe", cls="Qwen2MoeForCausalLM", seed=3704, tok="bpe", regex=RE_QWEN2, nfc=True,
        pre="qwen2", specials=["<|endoftext|>", "<|im_start|>", "<|im_end|>"], gguf=False,
        config=dict(tie_word_embeddings=False, rms_norm_eps=1e-6, use_sliding_window=False,
                    num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
                    shared_expert_intermediate_size=64, norm_topk_prob=True, decoder_sparse_step=1,
                    mlp_only_layers=[0],
                    rope_parameters=dict(rope_type="default", rope_theta=1000000.0))),
    # Qwen3-MoE: q/k norms, head_dim 32, norm_topk_prob true (as Qwen3-30B-A3B, and what llama.cpp's
    # qwen3moe assumes), no shared expert
    "qwen3moe": dict(
        model_type="qwen3_moe", cls="Qwen3MoeForCausalLM", seed=3703, tok="bpe", regex=RE_QWEN2, nfc=True,
        pre="qwen2", specials=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        config=dict(tie_word_embeddings=True, rms_norm_eps=1e-6, head_dim=32, attention_bias=False,
                    use_sliding_window=False, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
                    norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[],
                    rope_parameters=dict(rope_type="default", rope_theta=1000000.0)),
        # transformers 5 saves num_experts as num_local_experts; transformers 4 reads num_experts
        v4_rename={"num_local_experts": "num_experts"}),
    # DeepSeek-V2 (issue 37): multi-head latent attention without q_lora_rank (one q_proj), kv
    # latent 32, q/k heads of 16 + 8 rotary dims, v heads of 12 (not the q/k width), all 4 heads
    # (MLA expands k and v to every head); the first layer dense, then 6 experts in 3 groups,
    # softmax, group_limited_greedy (the 2 groups of the largest score compete), 2 per token,
    # times routed_scaling_factor 1.5, no renormalization; 2 shared experts (one MLP of 64).  YaRN
    # as DeepSeek's checkpoints have it (factor 4 = 256 / 64; mscale 1 and mscale_all_dim 0.707:
    # the rotary's attention factor 1.0370 and the softmax scale times 1.0980^2).
    # Its GGUF (llama.cpp's deepseek2) cannot mean this model: llama.cpp ranks expert groups by the
    # sum of their two best scores (DeepSeek-V3's rule, not V2's group_limited_greedy) and takes
    # mscale = mscale_all_dim.  So model.gguf is converted from a copy whose config.json says what
    # llama.cpp can run (greedy top-k without groups, mscale 0.707 as DeepSeek-V2's own configs),
    # and logprobs_gguf.f64 is transformers' golden of that copy (gguf_golden).
    "deepseek_v2": dict(
        model_type="deepseek_v2", cls="DeepseekV2ForCausalLM", seed=3705, tok="bpe", regex=RE_LLAMA3,
        pre="deepseek-llm", specials=["<|begin_of_sentence|>", "<|end_of_sentence|>"],
        gguf_config={"scoring_func": "softmax", "topk_method": "greedy", "n_group": None, "topk_group": None,
                     "rope_parameters": dict(rope_type="yarn", rope_theta=10000.0, factor=4.0,
                                             original_max_position_embeddings=64, mscale=0.707,
                                             mscale_all_dim=0.707, beta_fast=32, beta_slow=1)},
        gguf_golden=("logprobs_gguf.f64",
                     "what model.gguf means to llama.cpp: transformers on the conversion copy (topk_method "
                     "greedy, no expert groups, rope mscale 0.707 = mscale_all_dim)",
                     # the same as from_pretrained overrides (scoring_func: not a class argument)
                     dict(topk_method="greedy", n_group=None, topk_group=None,
                          rope_parameters=dict(rope_type="yarn", rope_theta=10000.0, factor=4.0,
                                               original_max_position_embeddings=64, mscale=0.707,
                                               mscale_all_dim=0.707, beta_fast=32, beta_slow=1))),
        config=dict(tie_word_embeddings=False, rms_norm_eps=1e-6, num_key_value_heads=4, q_lora_rank=None,
                    kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=12,
                    first_k_dense_replace=1, n_routed_experts=6, num_experts_per_tok=2, moe_intermediate_size=32,
                    n_shared_experts=2, topk_method="group_limited_greedy", n_group=3, topk_group=2,
                    routed_scaling_factor=1.5, norm_topk_prob=False,
                    rope_parameters=dict(rope_type="yarn", rope_theta=10000.0, factor=4.0,
                                         original_max_position_embeddings=64, mscale=1.0,
                                         mscale_all_dim=0.707, beta_fast=32, beta_slow=1))),
    # DeepSeek-V3: q through the low-rank q_a (24) / q_b with its norm, kv latent 32, q/k heads of
    # 16 + 8, v heads of 16; the first layer dense, then 8 experts in 4 groups chosen by sigmoid
    # scores plus a non-zero e_score_correction_bias (N(0, 0.1^2): it changes some choices, see
    # meta.txt) within the 2 best groups (sum of each group's two best), 2 per token, renormalized,
    # times 2.5; one shared expert.  transformers 5 saves no scoring_func, without which llama.cpp's
    # deepseek2 routes by softmax: the GGUF is converted from a copy saying scoring_func "sigmoid"
    # (as DeepSeek-V3's own config.json), which transformers reads to the same golden.
    "deepseek_v3": dict(
        model_type="deepseek_v3", cls="DeepseekV3ForCausalLM", seed=3706, tok="bpe", regex=RE_LLAMA3,
        pre="deepseek-v3", specials=["<|begin_of_sentence|>", "<|end_of_sentence|>"],
        gguf_config={"scoring_func": "sigmoid", "topk_method": "noaux_tc"},
        selection_bias=0.1,
        config=dict(tie_word_embeddings=False, rms_norm_eps=1e-6, num_key_value_heads=4, q_lora_rank=24,
                    kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16,
                    first_k_dense_replace=1, n_routed_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
                    n_shared_experts=1, n_group=4, topk_group=2, routed_scaling_factor=2.5, norm_topk_prob=True,
                    rope_interleave=True,
                    rope_parameters=dict(rope_type="default", rope_theta=10000.0))),
    # The long tail (issue 40).  GPT-NeoX / Pythia: parallel residual with two LayerNorms, RoPE on a
    # quarter of each head (rotate-half), q/k/v fused per head, the erf GELU, biases, untied
    # embed_out; no GQA (num_key_value_heads dropped).  llama.cpp's converter reads rotary_pct, which
    # only transformers 4's config has: the GGUF is converted from hf4/ (the same weights) by the
    # converter run under transformers 4 (its AutoConfig under transformers 5 drops rotary_pct).
    "gptneox": dict(
        model_type="gpt_neox", cls="GPTNeoXForCausalLM", seed=4001, tok="bpe", regex=None, pre="gpt-2",
        specials=["<|endoftext|>"], drop=["num_key_value_heads"], gguf_from="hf4",
        v4_rename={"partial_rotary_factor": "rotary_pct", "rope_theta": "rotary_emb_base"},
        config=dict(tie_word_embeddings=False, layer_norm_eps=1e-5, hidden_act="gelu",
                    use_parallel_residual=True, attention_bias=True,
                    rope_parameters=dict(rope_type="default", rope_theta=10000.0, partial_rotary_factor=0.25))),
    # the same block made sequential (use_parallel_residual false): HF folders only (llama.cpp's
    # gptneox reads the key too, but one GGUF of the family is enough)
    "gptneox-seq": dict(
        model_type="gpt_neox", cls="GPTNeoXForCausalLM", seed=4002, tok="bpe", regex=None, pre="gpt-2",
        specials=["<|endoftext|>"], drop=["num_key_value_heads"], gguf=False,
        v4_rename={"partial_rotary_factor": "rotary_pct", "rope_theta": "rotary_emb_base"},
        config=dict(tie_word_embeddings=False, layer_norm_eps=1e-5, hidden_act="gelu",
                    use_parallel_residual=False, attention_bias=False,
                    rope_parameters=dict(rope_type="default", rope_theta=10000.0, partial_rotary_factor=0.5))),
    # Phi-2: one LayerNorm feeding attention and the MLP in parallel, RoPE on half of each head,
    # gelu_new, biases everywhere, a head bias.  llama.cpp's converter writes feed_forward_length
    # 4 * hidden and as many kv heads as heads, no RoPE base (10000): the config keeps to those.
    "phi2": dict(
        model_type="phi", cls="PhiForCausalLM", seed=4003, tok="bpe", regex=None, pre="gpt-2",
        specials=["<|endoftext|>"],
        config=dict(tie_word_embeddings=False, layer_norm_eps=1e-5, hidden_act="gelu_new",
                    num_key_value_heads=4, intermediate_size=256, qk_layernorm=False,
                    rope_parameters=dict(rope_type="default", rope_theta=10000.0, partial_rotary_factor=0.5))),
    # GPT-J: Phi-2's parallel block with interleaved RoPE on the first rotary_dim dims, no attention
    # biases, a head bias, GPT-2's key names.  llama.cpp's converter has no GPT-J: no GGUF.
    "gptj": dict(
        model_type="gptj", cls="GPTJForCausalLM", seed=4004, tok="bpe", regex=None, pre="gpt-2",
        specials=["<|endoftext|>"], own_dims=True, gguf=False,
        config=dict(n_embd=64, n_layer=2, n_head=4, n_inner=None, n_positions=256, rotary_dim=8,
                    layer_norm_epsilon=1e-5, activation_function="gelu_new", tie_word_embeddings=False)),
    # StableLM 2: the Llama block (SwiGLU, GQA) with LayerNorms, RoPE on a quarter of each head,
    # q/k/v biases (use_qkv_bias); and its parallel form (use_parallel_residual: one LayerNorm feeds
    # both branches; llama.cpp runs it when the blocks have no ffn_norm)
    "stablelm": dict(
        model_type="stablelm", cls="StableLmForCausalLM", seed=4005, tok="bpe", regex=None, pre="gpt-2",
        specials=["<|endoftext|>"],
        config=dict(tie_word_embeddings=False, layer_norm_eps=1e-5, hidden_act="silu", use_qkv_bias=True,
                    qk_layernorm=False, use_parallel_residual=False,
                    rope_parameters=dict(rope_type="default", rope_theta=10000.0, partial_rotary_factor=0.25))),
    "stablelm-par": dict(
        model_type="stablelm", cls="StableLmForCausalLM", seed=4006, tok="bpe", regex=None, pre="gpt-2",
        specials=["<|endoftext|>"],
        config=dict(tie_word_embeddings=False, layer_norm_eps=1e-5, hidden_act="silu", use_qkv_bias=False,
                    qk_layernorm=False, use_parallel_residual=True,
                    rope_parameters=dict(rope_type="default", rope_theta=10000.0, partial_rotary_factor=0.25))),
    # OLMo 1: the Llama block with LayerNorms without parameters (eps 1e-5, no key), no biases
    "olmo": dict(
        model_type="olmo", cls="OlmoForCausalLM", seed=4007, tok="bpe", regex=None, pre="gpt-2",
        specials=["<|endoftext|>"],
        config=dict(tie_word_embeddings=False, attention_bias=False, clip_qkv=None, hidden_act="silu",
                    rope_parameters=dict(rope_type="default", rope_theta=10000.0))),
    # StarCoder2: LayerNorms in the RoPE block (GQA, full-head rotate-half RoPE), the gate-less
    # c_fc / c_proj MLP with the tanh GELU, use_bias on every linear, tied head
    "starcoder2": dict(
        model_type="starcoder2", cls="Starcoder2ForCausalLM", seed=4008, tok="bpe", regex=None, pre="gpt-2",
        specials=["<|endoftext|>"],
        config=dict(tie_word_embeddings=True, norm_epsilon=1e-5, hidden_act="gelu_pytorch_tanh", use_bias=True,
                    sliding_window=None, rope_parameters=dict(rope_type="default", rope_theta=10000.0))),
    # gpt-oss (issue 37): 3 layers, sliding (window 16 < T), full, sliding (layer_types);
    # head_dim 32 (q is wider than the hidden size), q/k/v/o biases, a learned attention sink per
    # head (N(0, 1), drawn here), YaRN as gpt-oss configures it (factor 4 over 64 positions,
    # truncate false); the router with a bias, top 2 of 4 then softmax over the two; the experts'
    # gate_up_proj [E, d, 2f] (gate and up interleaved by column) and down_proj [E, f, d], both
    # with biases, through the clamped SwiGLU, its limit lowered to 1.5 so that the clamps act on
    # these small activations (meta.txt says how much).  Its GGUF means something else to llama.cpp
    # (limit 7.0, a truncated YaRN): logprobs_gguf.f64 is that reading.
    "gpt_oss": dict(
        model_type="gpt_oss", cls="GptOssForCausalLM", seed=3707, tok="bpe", regex=RE_LLAMA3,
        pre="gpt-4o", specials=["<|startoftext|>", "<|endoftext|>"], experts_in_out=True,
        swiglu_unclamped=True,
        extra=[("logprobs_gguf.f64", T,
                dict(swiglu_limit=7.0, rope_parameters=dict(rope_type="yarn", rope_theta=150000.0, factor=4.0,
                                                            beta_fast=32.0, beta_slow=1.0, truncate=True,
                                                            original_max_position_embeddings=64)),
                "what model.gguf means to llama.cpp: its gpt-oss fixes swiglu_limit at 7.0 (no GGUF key) and "
                "its YaRN always truncates the correction range (no key for truncate false)")],
        config=dict(tie_word_embeddings=False, rms_norm_eps=1e-5, num_hidden_layers=3, head_dim=32,
                    sliding_window=SLIDING, layer_types=["sliding_attention", "full_attention", "sliding_attention"],
                    num_local_experts=4, num_experts_per_tok=2, intermediate_size=24, attention_bias=True,
                    swiglu_limit=1.5,
                    rope_parameters=dict(rope_type="yarn", rope_theta=150000.0, factor=4.0, beta_fast=32.0,
                                         beta_slow=1.0, truncate=False, original_max_position_embeddings=64))),
    # Bloom (issue 40, a seed model): ALiBi instead of rotary positions, a LayerNorm on the
    # embeddings, q/k/v fused per head, the tanh GELU, biases everywhere, tied head.  Its own key
    # names (n_layer, n_head, layer_norm_epsilon); no intermediate_size (4 x hidden).
    "bloom": dict(
        model_type="bloom", cls="BloomForCausalLM", seed=4009, tok="bpe", regex=None, pre="bloom",
        specials=["<s>", "</s>"], own_dims=True,
        config=dict(hidden_size=64, n_layer=2, n_head=4, layer_norm_epsilon=1e-5, tie_word_embeddings=True,
                    apply_residual_connection_post_layernorm=False)),
    # Falcon-7B's block: one LayerNorm feeding attention and the MLP in parallel, multi-query (one
    # k/v head), q/k/v fused as [q heads, k, v], full-head RoPE, the erf GELU, no biases, tied head.
    # transformers 5 (and 4) fill in num_kv_heads = the heads even for a multi-query model
    # (FalconAttention ignores it there); llama.cpp's converter reads its config through AutoConfig
    # and takes that as the kv heads, so it cannot convert a multi-query Falcon (not the Hub's
    # falcon-7b either: its view of query_key_value fails).  The GGUF is converted from a copy of
    # hf5/ saying num_kv_heads 1, which transformers reads as the same model (gguf_config).
    "falcon": dict(
        model_type="falcon", cls="FalconForCausalLM", seed=4010, tok="bpe", regex=None, pre="falcon",
        specials=[">>ABSTRACT<<", "<|endoftext|>"], drop=["num_key_value_heads", "intermediate_size"],
        gguf_config={"num_kv_heads": 1},
        config=dict(tie_word_embeddings=True, layer_norm_epsilon=1e-5, activation="gelu", multi_query=True,
                    new_decoder_architecture=False, parallel_attn=True, bias=False, alibi=False,
                    rope_parameters=dict(rope_type="default", rope_theta=10000.0))),
    # Falcon-40B's block (new_decoder_architecture): ln_attn and ln_mlp in parallel, 2 kv groups of
    # q heads fused with their k and v; no biases (llama.cpp's converter cannot reshape a
    # query_key_value.bias: falcon-seq has them)
    "falcon-nda": dict(
        model_type="falcon", cls="FalconForCausalLM", seed=4011, tok="bpe", regex=None, pre="falcon",
        specials=[">>ABSTRACT<<", "<|endoftext|>"], drop=["num_key_value_heads", "intermediate_size"],
        config=dict(tie_word_embeddings=False, layer_norm_epsilon=1e-5, activation="gelu", multi_query=False,
                    new_decoder_architecture=True, num_kv_heads=2, num_ln_in_parallel_attn=2, parallel_attn=True,
                    bias=False, alibi=False, rope_parameters=dict(rope_type="default", rope_theta=10000.0))),
    # the sequential block (parallel_attn false: post_attention_layernorm), as many kv heads as heads
    # (multi_query false: q/k/v fused per head), biases; llama.cpp's falcon is always parallel: HF only
    "falcon-seq": dict(
        model_type="falcon", cls="FalconForCausalLM", seed=4012, tok="bpe", regex=None, pre="falcon",
        specials=[">>ABSTRACT<<", "<|endoftext|>"], drop=["num_key_value_heads", "intermediate_size"], gguf=False,
        config=dict(tie_word_embeddings=True, layer_norm_epsilon=1e-5, activation="gelu", multi_query=False,
                    new_decoder_architecture=False, parallel_attn=False, bias=True, alibi=False,
                    rope_parameters=dict(rope_type="default", rope_theta=10000.0))),
    # OPT: learned positions (offset 2) on the embeddings, pre-norm LayerNorm blocks, ReLU MLP
    # fc1 / fc2, biases, tied head.  llama.cpp's converter has no OPT: no GGUF.
    "opt": dict(
        model_type="opt", cls="OPTForCausalLM", seed=4013, tok="bpe", regex=None, pre="gpt-2",
        specials=["</s>", "<pad>"], drop=["num_key_value_heads", "intermediate_size"], gguf=False,
        config=dict(tie_word_embeddings=True, ffn_dim=128, activation_function="relu", do_layer_norm_before=True,
                    word_embed_proj_dim=64, enable_bias=True, layer_norm_elementwise_affine=True)),
    "gpt2": dict(
        model_type="gpt2", cls="GPT2LMHeadModel", seed=3312, tok="bpe", regex=None, pre="gpt-2",
        specials=["<|endoftext|>"],
        config=dict(n_embd=64, n_layer=2, n_head=4, n_inner=None, n_positions=256, n_ctx=256,
                    layer_norm_epsilon=1e-5, activation_function="gelu_new",
                    tie_word_embeddings=True)),
}


# OLMo 2 (issue 40): no norm before attention or the MLP, RMSNorms on both branches' outputs
# (post_attention_layernorm, post_feedforward_layernorm), q/k RMSNorms over all heads together
# before rotate-half RoPE; GQA, no biases.  llama.cpp's olmo2 (NEOX rope).
FIXTURES["olmo2"] = dict(
    model_type="olmo2", cls="Olmo2ForCausalLM", seed=4009, tok="bpe", regex=None, pre="gpt-2",
    specials=["<|endoftext|>"],
    config=dict(tie_word_embeddings=False, rms_norm_eps=1e-6, attention_bias=False, hidden_act="silu",
                rope_parameters=dict(rope_type="default", rope_theta=10000.0)))


# Cohere / Command-R (issue 40): one LayerNorm without a bias feeding attention and the SwiGLU MLP
# in parallel, RoPE over interleaved pairs of the whole head, the logits times logit_scale (0.25
# here: 0.0625 would flatten these random logits), a tied head.  llama.cpp's command-r.
FIXTURES["cohere"] = dict(
    model_type="cohere", cls="CohereForCausalLM", seed=4010, tok="bpe", regex=None, pre="gpt-2",
    specials=["<|endoftext|>"],
    config=dict(tie_word_embeddings=True, layer_norm_eps=1e-5, logit_scale=0.25, use_qk_norm=False,
                attention_bias=False, hidden_act="silu",
                rope_parameters=dict(rope_type="default", rope_theta=10000.0)))


def log(msg):
    print(f"arch_fixtures: {msg}", flush=True)


# ---- tokenizers ---------------------------------------------------------------------------------


def corpus_lines(n_chars=200_000):
    """The start of wikitext-2's test split, ASCII lines only (keeps the SentencePiece alphabet
    small enough for a 384-piece vocabulary)."""
    out, total = [], 0
    with open(CORPUS, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line or not line.isascii():
                continue
            out.append(line)
            total += len(line)
            if total >= n_chars:
                break
    return out


def make_bpe_tokenizer(spec, vocab_size, folder):
    """A byte-level BPE tokenizer.json with the family's pre-tokenizer, written through
    transformers' PreTrainedTokenizerFast.save_pretrained (tokenizer.json + tokenizer_config.json)."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast
    tok = Tokenizer(models.BPE())
    if spec.get("regex"):
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(spec["regex"]), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    else:  # GPT-2: ByteLevel's own regex
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    if spec.get("nfc"):
        tok.normalizer = normalizers.NFC()
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=spec["specials"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(corpus_lines(), trainer)
    n = tok.get_vocab_size()
    if n != vocab_size:
        raise SystemExit(f"arch_fixtures: BPE training gave {n} tokens, wanted {vocab_size}")
    sp = spec["specials"]
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=sp[0], eos_token=sp[min(1, len(sp) - 1)],
                                   model_max_length=DIMS["max_position_embeddings"])
    fast.save_pretrained(folder)
    return n


def make_spm_tokenizer(vocab_size, folder, gemma=False):
    """A SentencePiece BPE tokenizer.model with byte fallback (Llama-2 / Mistral / Gemma / Phi-3
    style); Gemma's special-token ids (pad 0, eos 1, bos 2, unk 3) differ from Llama's."""
    import sentencepiece as spm
    model = io.BytesIO()
    ids = dict(pad_id=0, eos_id=1, bos_id=2, unk_id=3) if gemma else dict(unk_id=0, bos_id=1, eos_id=2, pad_id=-1)
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(corpus_lines()), model_writer=model, vocab_size=vocab_size,
        model_type="bpe", byte_fallback=True, character_coverage=1.0, split_digits=True,
        normalization_rule_name="identity",     # as Llama's: no 240 KB NFKC character map
        num_threads=1, minloglevel=2, **ids)
    with open(os.path.join(folder, "tokenizer.model"), "wb") as f:
        f.write(model.getvalue())
    sp = spm.SentencePieceProcessor(model_proto=model.getvalue())
    if sp.get_piece_size() != vocab_size:
        raise SystemExit(f"arch_fixtures: SentencePiece training gave {sp.get_piece_size()} pieces, wanted {vocab_size}")
    return sp.get_piece_size()


# ---- model --------------------------------------------------------------------------------------


def build_config(name, spec, vocab_size):
    from transformers import AutoConfig
    kw = dict(spec["config"])
    if spec["model_type"] == "gpt2" or spec.get("own_dims"):
        kw.update(vocab_size=vocab_size, bos_token_id=0, eos_token_id=0)
    else:
        kw = {**{k: v for k, v in DIMS.items() if k not in spec.get("drop", ())}, **kw, "vocab_size": vocab_size}
        if spec["tok"] == "spm":
            kw.update(dict(pad_token_id=0, eos_token_id=1, bos_token_id=2) if spec.get("gemma_norm")
                      else dict(bos_token_id=1, eos_token_id=2, pad_token_id=None))
        else:
            kw.update(bos_token_id=0, eos_token_id=min(1, len(spec["specials"]) - 1), pad_token_id=None)
    cfg = AutoConfig.for_model(spec["model_type"], **kw)
    cfg.architectures = [spec["cls"]]
    return cfg


def randomize(model, spec, seed):
    """Realistic scales (see the module doc), drawn parameter by parameter in name order."""
    import torch
    rng = np.random.default_rng(seed)
    params = dict(model.named_parameters())   # tied weights appear once
    for pname in sorted(params):
        p = params[pname]
        shape = tuple(p.shape)
        leaf = pname.rsplit(".", 1)[-1]
        is_norm = ("norm" in pname or ".ln_" in pname or pname.endswith("ln_f.weight")) and len(shape) == 1
        if is_norm and leaf == "weight":
            v = rng.normal(0.0, 0.15, shape)
            if spec.get("gemma_norm"):
                # multiples of 2^-20: the converter stores w + 1 in F32, exact only for such w
                v = np.round(v * 2.0 ** 20) / 2.0 ** 20
            else:
                v += 1.0
        elif leaf == "bias" or leaf.endswith("_proj_bias"):
            v = rng.normal(0.0, 0.1, shape)
        elif leaf == "sinks":
            # gpt-oss's per-head attention sink: a logit of the order of the scores'
            v = rng.normal(0.0, 1.0, shape)
        elif ("embed_tokens" in pname or pname.endswith("wte.weight") or pname.startswith("lm_head")
              or pname.endswith("word_embeddings.weight")
              or "embed_in" in pname or pname.startswith("embed_out")):
            v = rng.normal(0.0, 0.35, shape)
        elif pname.endswith("wpe.weight"):
            v = rng.normal(0.0, 0.2, shape)
        elif len(shape) == 3 and ".experts." in pname:
            # transformers 5 holds a layer's experts fused: gate_up_proj [E, 2 f, d], down_proj [E, d, f]
            # (gpt-oss's are [E, in, out]: gate_up_proj [E, d, 2 f], down_proj [E, f, d])
            v = rng.normal(0.0, 1.0 / np.sqrt(shape[1] if spec.get("experts_in_out") else shape[2]), shape)
        elif len(shape) == 2:
            # nn.Linear stores [out, in]; GPT-2's Conv1D stores [in, out]
            fan_in = shape[0] if spec["model_type"] == "gpt2" else shape[1]
            v = rng.normal(0.0, 1.0 / np.sqrt(fan_in), shape)
        else:
            raise SystemExit(f"arch_fixtures: no init rule for {pname} {shape}")
        with torch.no_grad():
            p.copy_(torch.from_numpy(v.astype(np.float32)))
    # DeepSeek-V3's selection bias is a buffer (saved, not a parameter): drawn after the
    # parameters, so that the other fixtures' draws are unchanged
    for bname, b in sorted(model.named_buffers()):
        if bname.endswith("e_score_correction_bias"):
            with torch.no_grad():
                b.copy_(torch.from_numpy(rng.normal(0.0, spec["selection_bias"], tuple(b.shape)).astype(np.float32)))


def golden_logprobs(folder, tokens, **overrides):
    """transformers' log-probs in float64 for the model saved in folder (eager attention, which
    applies sliding windows and soft-capping exactly as the modelling code defines them)."""
    import torch
    from transformers import AutoModelForCausalLM
    kw = dict(overrides)
    if "experts" in open(os.path.join(folder, "config.json")).read():
        # the experts one by one in float64 (the grouped_mm kernel takes no float64)
        kw["experts_implementation"] = "eager"
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float64, attn_implementation="eager", **kw)
    model.eval()
    with torch.no_grad():
        logits = model(torch.tensor([tokens], dtype=torch.long)).logits[0]
    assert logits.dtype == torch.float64
    return logits, torch.log_softmax(logits, dim=-1).numpy()


# ---- transformers 4 config ----------------------------------------------------------------------


def v4_config(cfg5, spec):
    """config.json as transformers 4.5x writes it: rope_theta (and Gemma 3's rope_local_base_freq)
    at the top level, rope_scaling a dict or null, partial_rotary_factor at the top level, and
    Phi-3's original_max_position_embeddings at the top level; no rope_parameters."""
    c = copy.deepcopy(cfg5)
    rp = c.pop("rope_parameters", None)
    if rp is not None:
        if "full_attention" in rp or "sliding_attention" in rp:        # Gemma 3
            full = dict(rp.get("full_attention", {}))
            c["rope_theta"] = full.pop("rope_theta")
            if "sliding_attention" in rp:
                c["rope_local_base_freq"] = rp["sliding_attention"]["rope_theta"]
            scaling = full
        else:
            scaling = dict(rp)
            c["rope_theta"] = scaling.pop("rope_theta")
        if "partial_rotary_factor" in scaling:
            c["partial_rotary_factor"] = scaling.pop("partial_rotary_factor")
        if spec["model_type"] == "phi3" and "original_max_position_embeddings" in scaling:
            c["original_max_position_embeddings"] = scaling.pop("original_max_position_embeddings")
        for k5, k4 in spec.get("v4_rename", {}).items():   # GPT-NeoX 4's rotary_pct, rotary_emb_base
            if k5 in c:
                c[k4] = c.pop(k5)
        if scaling.get("rope_type", "default") == "default":
            c["rope_scaling"] = None
        else:
            if spec["model_type"] == "phi3":      # Phi-3's Hub configs spell it "type"
                scaling["type"] = scaling.pop("rope_type")
            c["rope_scaling"] = scaling
    if "dtype" in c:
        c["torch_dtype"] = c.pop("dtype")
    c["transformers_version"] = "4"    # replaced when transformers 4 rewrites the file
    return c


V4_ROUND_TRIP = r'''
import os, sys, tempfile, transformers
from transformers import AutoConfig
folder = sys.argv[1]
cfg = AutoConfig.from_pretrained(folder)
with tempfile.TemporaryDirectory() as d:
    cfg.save_pretrained(d)
    os.replace(os.path.join(d, "config.json"), os.path.join(folder, "config.json"))
print(transformers.__version__)
'''


# ---- GGUF ---------------------------------------------------------------------------------------

CONVERT_WRAPPER = r'''
# Runs llama.cpp's convert_hf_to_gguf.py; when a pre-tokenizer name is given, its hash lookup
# (TextModel.get_vocab_base_pre) is replaced by that name: a tiny trained vocabulary never hashes
# like the real family's, and the name is what a real checkpoint of the family gets.
import sys
conv_dir, pre, argv = sys.argv[1], sys.argv[2], sys.argv[3:]
sys.path.insert(0, conv_dir)
sys.path.insert(1, conv_dir + "/gguf-py")
import convert_hf_to_gguf as conv
from conversion import base
if pre != "-":
    base.TextModel.get_vocab_base_pre = lambda self, tokenizer: pre
sys.argv = ["convert_hf_to_gguf.py"] + argv
conv.main()
'''


def convert_gguf(conv_dir, folder, out, pre, python=None):
    wrapper = os.path.join(os.path.dirname(out), ".convert_wrapper.py")
    with open(wrapper, "w") as f:
        f.write(CONVERT_WRAPPER)
    tmp = out + ".tmp"
    cmd = [python or sys.executable, wrapper, conv_dir, pre or "-", "--outtype", "f32", "--outfile", tmp, folder]
    r = subprocess.run(cmd, capture_output=True, text=True)
    os.unlink(wrapper)
    if r.returncode != 0:
        sys.stderr.write(r.stdout[-3000:] + r.stderr[-6000:])
        raise SystemExit(f"arch_fixtures: convert_hf_to_gguf.py failed for {folder}")
    os.replace(tmp, out)


def gguf_summary(path, conv_dir):
    sys.path.insert(0, os.path.join(conv_dir, "gguf-py"))
    import gguf
    rd = gguf.GGUFReader(path)
    arch = rd.fields["general.architecture"].contents()
    keys = {}
    for k, fld in rd.fields.items():
        if k.startswith(arch + ".") or k in ("tokenizer.ggml.model", "tokenizer.ggml.pre"):
            try:
                keys[k] = fld.contents()
            except Exception:   # noqa: BLE001 - summary only
                keys[k] = "?"
    names = [t.name for t in rd.tensors]
    return arch, keys, names


# ---- driver -------------------------------------------------------------------------------------


def versions():
    out = {}
    for pkg in ("torch", "transformers", "safetensors", "numpy", "tokenizers", "sentencepiece"):
        out[pkg] = md.version(pkg)
    return out


def make(name, conv_dir, llama_cpp_python_version, python4):
    import torch
    from transformers import AutoModelForCausalLM
    spec = FIXTURES[name]
    out = os.path.join(OUT_ROOT, name)
    tmp = out + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    hf5 = os.path.join(tmp, "hf5")
    hf4 = os.path.join(tmp, "hf4")
    os.makedirs(hf5)
    os.makedirs(hf4)

    # tokenizer first: its size is the model's vocabulary
    if spec["tok"] == "bpe":
        vocab = make_bpe_tokenizer(spec, V_BPE, hf5)
    else:
        vocab = make_spm_tokenizer(V_SPM, hf5, gemma=spec.get("gemma_norm", False))

    torch.manual_seed(spec["seed"])
    cfg = build_config(name, spec, vocab)
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="eager")
    model = model.float()
    randomize(model, spec, spec["seed"])
    model.save_pretrained(hf5)
    # save_pretrained may add generation_config.json; keep it (it is part of what v5 writes)

    rng = np.random.default_rng(spec["seed"] + 100000)
    tokens = [int(x) for x in rng.integers(0, vocab, T)]
    logits, lp = golden_logprobs(hf5, tokens)
    lp = np.ascontiguousarray(lp, dtype="<f8")
    assert lp.shape == (T, vocab)
    lp.tofile(os.path.join(tmp, "logprobs.f64"))
    with open(os.path.join(tmp, "tokens.txt"), "w") as f:
        f.write(" ".join(map(str, tokens)) + "\n")
    extra = []
    for fn, n, overrides, what in spec.get("extra", []):
        # a second golden, same weights: another reading of the same files (see FIXTURES)
        _, lp2 = golden_logprobs(hf5, tokens[:n], **overrides)
        np.ascontiguousarray(lp2, dtype="<f8").tofile(os.path.join(tmp, fn))
        d = np.abs(lp2 - lp[:n]).max(axis=1)
        same = int(np.argmax(d > 0)) if (d > 0).any() else n
        extra.append(f"extra {fn} [{n}, {vocab}] {what}; overrides {json.dumps(overrides)}; "
                     f"rows 0..{same - 1} equal logprobs.f64, max |diff| {d.max():.3g}")

    if spec.get("swiglu_unclamped"):
        # the control that the clamped SwiGLU's limit acts: the same model without it
        _, lp0 = golden_logprobs(hf5, tokens, swiglu_limit=1e9)
        extra.append(f"swiglu_limit {spec['config']['swiglu_limit']}: without the clamps the log-probs move by up "
                     f"to {np.abs(lp0 - lp).max():.3g}")
    if spec.get("selection_bias"):
        # the control that the selection bias matters: the same model with it zeroed
        m0 = AutoModelForCausalLM.from_pretrained(hf5, dtype=torch.float64, attn_implementation="eager",
                                                  experts_implementation="eager")
        for bname, b in m0.named_buffers():
            if bname.endswith("e_score_correction_bias"):
                b.zero_()
        with torch.no_grad():
            lp0 = torch.log_softmax(m0(torch.tensor([tokens], dtype=torch.long)).logits[0], dim=-1).numpy()
        extra.append(f"selection_bias N(0, {spec['selection_bias']}^2): with e_score_correction_bias zeroed the "
                     f"log-probs move by up to {np.abs(lp0 - lp).max():.3g} (it changes which experts are chosen)")

    # transformers 4 config; the weights and tokenizer are the same bytes (symbolic links)
    with open(os.path.join(hf5, "config.json")) as f:
        cfg5 = json.load(f)
    with open(os.path.join(hf4, "config.json"), "w") as f:
        json.dump(v4_config(cfg5, spec), f, indent=2, sort_keys=True)
        f.write("\n")
    hf4_writer = "hand rewrite of hf5/config.json (no transformers 4 interpreter given)"
    if python4:
        # let transformers 4 itself write the file: load the rewrite, save it again
        r = subprocess.run([python4, "-c", V4_ROUND_TRIP, hf4], capture_output=True, text=True)
        if r.returncode != 0:
            sys.stderr.write(r.stderr[-4000:])
            raise SystemExit(f"arch_fixtures: transformers 4 cannot read {hf4}/config.json")
        hf4_writer = f"transformers {r.stdout.split()[-1]} save_pretrained (AutoConfig round trip of the rewrite)"
    for fn in sorted(os.listdir(hf5)):
        if fn != "config.json":
            os.symlink(os.path.join("..", "hf5", fn), os.path.join(hf4, fn))

    if spec.get("gguf", True):
        src, python = hf5, None
        if spec.get("gguf_from") == "hf4":
            # the converter reads config.json through transformers' AutoConfig: transformers 4's,
            # on a copy of hf4/ whose tokenizer_config.json names the class transformers 4 has
            # (transformers 5 writes "TokenizersBackend"; the tokenizer.json is the same)
            if not python4:
                raise SystemExit(f"arch_fixtures: {name}'s GGUF needs the transformers 4 interpreter (--python4)")
            python, src = python4, os.path.join(tmp, ".hf4-convert")
            os.makedirs(src)
            for fn in os.listdir(hf4):
                if fn == "tokenizer_config.json":
                    with open(os.path.join(hf5, fn)) as f:
                        tc = json.load(f)
                    tc["tokenizer_class"] = "PreTrainedTokenizerFast"
                    with open(os.path.join(src, fn), "w") as f:
                        json.dump(tc, f)
                else:
                    os.symlink(os.path.realpath(os.path.join(hf4, fn)), os.path.join(src, fn))
        if spec.get("gguf_config"):
            # a copy of hf5/ whose config.json says what the converter would misread (Falcon)
            src = os.path.join(tmp, ".hf5-convert")
            os.makedirs(src)
            for fn in os.listdir(hf5):
                if fn == "config.json":
                    with open(os.path.join(hf5, fn)) as f:
                        c = json.load(f)
                    c.update(spec["gguf_config"])
                    with open(os.path.join(src, fn), "w") as f:
                        json.dump(c, f)
                else:
                    os.symlink(os.path.realpath(os.path.join(hf5, fn)), os.path.join(src, fn))
            _, lp_copy = golden_logprobs(src, tokens)
            if spec.get("gguf_golden"):
                # the copy is another model (DeepSeek-V2: what llama.cpp can run): its own golden,
                # which the same overrides on hf5/ give too (as arch_ref_check.py rechecks it)
                fn, what, overrides = spec["gguf_golden"]
                _, lp_over = golden_logprobs(hf5, tokens, **overrides)
                if np.abs(lp_over - lp_copy).max() != 0:
                    raise SystemExit(f"arch_fixtures: {name}: the overrides do not give the conversion copy's golden")
                np.ascontiguousarray(lp_copy, dtype="<f8").tofile(os.path.join(tmp, fn))
                d = np.abs(lp_copy - lp).max(axis=1)
                same = int(np.argmax(d > 0)) if (d > 0).any() else T
                extra.append(f"extra {fn} [{T}, {vocab}] {what}; overrides {json.dumps(overrides)}; "
                             f"rows 0..{same - 1} equal logprobs.f64, max |diff| {d.max():.3g}")
            elif np.abs(lp_copy - lp).max() != 0:
                raise SystemExit(f"arch_fixtures: {name}: transformers reads the conversion copy differently")
        convert_gguf(conv_dir, src, os.path.join(tmp, "model.gguf"), spec.get("pre"), python)
        if src != hf5:
            shutil.rmtree(src)
        arch, gkeys, gnames = gguf_summary(os.path.join(tmp, "model.gguf"), conv_dir)
    else:
        arch, gkeys, gnames = "none (no GGUF: see FIXTURES)", {}, []

    ver = versions()
    std = float(logits.std(dim=-1).mean())
    spread = float((lp.max(axis=1) - lp.min(axis=1)).mean())
    with open(os.path.join(tmp, "meta.txt"), "w") as f:
        f.write(f"name {name}\nT {T}\nV {vocab}\nseed {spec['seed']}\n")
        f.write(f"class {spec['cls']}\nmodel_type {spec['model_type']}\ngguf_arch {arch}\n")
        for k, v in ver.items():
            f.write(f"{k} {v}\n")
        f.write(f"llama-cpp-python {llama_cpp_python_version} (vendor/llama.cpp convert_hf_to_gguf.py, its gguf-py)\n")
        f.write(f"hf4_config_written_by {hf4_writer}\n")
        f.write(f"gguf_pre_tokenizer_forced {spec.get('pre') or 'none (SentencePiece tokenizer.model)'}\n")
        f.write("logprobs.f64 little-endian float64 [T, V], log_softmax of transformers' logits, model in float64, eager attention\n")
        f.write(f"logit_std_mean {std:.4f}\nlogprob_spread_mean {spread:.4f}\n")
        for e in extra:
            f.write(e + "\n")
        for k in sorted(gkeys):
            v = gkeys[k]
            if isinstance(v, list) and len(v) > 16:
                v = f"[{len(v)} values]"
            f.write(f"gguf {k} = {v}\n")
        f.write(f"gguf_tensors {len(gnames)}: {' '.join(gnames)}\n")

    shutil.rmtree(out, ignore_errors=True)
    os.replace(tmp, out)
    size = sum(os.path.getsize(os.path.join(dp, fn)) for dp, _, fns in os.walk(out) for fn in fns
               if not os.path.islink(os.path.join(dp, fn)))
    log(f"{name}: V {vocab}, logit std {std:.2f}, log-prob spread {spread:.1f} nats, gguf arch {arch}, "
        f"{size / 1024:.0f} KiB")


def fuse_experts(name, fused_name):
    """fused_name/: fixture `name` with its routed experts stored as transformers 5 holds them in
    memory, <experts>.gate_up_proj [E, 2 f, d] (each expert's gate rows, then its up rows) and
    <experts>.down_proj [E, d, f] per layer, instead of one linear per expert as save_pretrained
    writes them (transformers 5.24 converts back on save; other writers keep them fused).  The
    same weights: the golden files, tokens and config are the source's (hf5/ only)."""
    import re
    from safetensors.numpy import load_file, save_file
    src, out = os.path.join(OUT_ROOT, name), os.path.join(OUT_ROOT, fused_name)
    tmp = out + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(os.path.join(tmp, "hf5"))
    tensors = load_file(os.path.join(src, "hf5", "model.safetensors"))
    experts, kept = {}, {}
    for k, v in tensors.items():
        m = re.match(r"(model\.layers\.\d+\.mlp\.experts)\.(\d+)\.(gate|up|down)_proj\.weight$", k)
        if m:
            experts.setdefault(m.group(1), {})[(int(m.group(2)), m.group(3))] = v
        else:
            kept[k] = v
    for prefix, parts in experts.items():
        n = 1 + max(e for e, _ in parts)
        kept[prefix + ".gate_up_proj"] = np.stack([np.concatenate([parts[(e, "gate")], parts[(e, "up")]]) for e in range(n)])
        kept[prefix + ".down_proj"] = np.stack([parts[(e, "down")] for e in range(n)])
    save_file(kept, os.path.join(tmp, "hf5", "model.safetensors"), metadata={"format": "pt"})
    for fn in os.listdir(os.path.join(src, "hf5")):
        if fn != "model.safetensors":
            shutil.copy(os.path.join(src, "hf5", fn), os.path.join(tmp, "hf5", fn))
    for fn in ("tokens.txt", "logprobs.f64"):
        shutil.copy(os.path.join(src, fn), os.path.join(tmp, fn))
    with open(os.path.join(tmp, "meta.txt"), "w") as f:
        f.write(f"name {fused_name}\nfused_from {name} (tools/ref/arch_fixtures.py fuse_experts): the same weights, "
                f"the experts as 3-D gate_up_proj / down_proj per layer; goldens and tokens are {name}'s\n")
    # transformers 5 reads the fused folder as its own layout and gives the source's golden
    with open(os.path.join(tmp, "tokens.txt")) as f:
        tokens = [int(x) for x in f.read().split()]
    _, lp = golden_logprobs(os.path.join(tmp, "hf5"), tokens)
    gold = np.fromfile(os.path.join(tmp, "logprobs.f64"), dtype="<f8").reshape(lp.shape)
    if np.abs(lp - gold).max() != 0:
        raise SystemExit(f"arch_fixtures: transformers reads {fused_name} differently: {np.abs(lp - gold).max()}")
    shutil.rmtree(out, ignore_errors=True)
    os.replace(tmp, out)
    log(f"{fused_name}: {name}'s experts fused ({len(experts)} layers); transformers reproduces the golden exactly")


def strip_prefix(name, stripped_name, prefix="transformer."):
    """stripped_name/: fixture `name` with `prefix` taken off every tensor name, as a checkpoint saved
    from the base model names them (bigscience's Bloom files: "h.0.input_layernorm.weight").  The same
    weights: the golden files, tokens and config are the source's (hf5/ only), and transformers reads
    the folder to the source's golden exactly."""
    from safetensors.numpy import load_file, save_file
    src, out = os.path.join(OUT_ROOT, name), os.path.join(OUT_ROOT, stripped_name)
    tmp = out + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(os.path.join(tmp, "hf5"))
    tensors = load_file(os.path.join(src, "hf5", "model.safetensors"))
    assert all(k.startswith(prefix) for k in tensors), f"{name}: a tensor without {prefix}"
    save_file({k[len(prefix):]: v for k, v in tensors.items()}, os.path.join(tmp, "hf5", "model.safetensors"),
              metadata={"format": "pt"})
    for fn in os.listdir(os.path.join(src, "hf5")):
        if fn != "model.safetensors":
            shutil.copy(os.path.join(src, "hf5", fn), os.path.join(tmp, "hf5", fn))
    for fn in ("tokens.txt", "logprobs.f64"):
        shutil.copy(os.path.join(src, fn), os.path.join(tmp, fn))
    with open(os.path.join(tmp, "meta.txt"), "w") as f:
        f.write(f"name {stripped_name}\nstripped_from {name} (tools/ref/arch_fixtures.py strip_prefix): the same "
                f"weights, tensor names without \"{prefix}\"; goldens and tokens are {name}'s\n")
    with open(os.path.join(tmp, "tokens.txt")) as f:
        tokens = [int(x) for x in f.read().split()]
    _, lp = golden_logprobs(os.path.join(tmp, "hf5"), tokens)
    gold = np.fromfile(os.path.join(tmp, "logprobs.f64"), dtype="<f8").reshape(lp.shape)
    if np.abs(lp - gold).max() != 0:
        raise SystemExit(f"arch_fixtures: transformers reads {stripped_name} differently: {np.abs(lp - gold).max()}")
    shutil.rmtree(out, ignore_errors=True)
    os.replace(tmp, out)
    log(f"{stripped_name}: {name}'s tensors without {prefix}; transformers reproduces the golden exactly")


FUSED = {"qwen3moe-fused": "qwen3moe"}
STRIPPED = {"bloom-base": "bloom"}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--converter", required=True, help="the sdist's vendor/llama.cpp folder")
    ap.add_argument("--llama-cpp-python", default="?", help="its version, for meta.txt")
    ap.add_argument("--python4", help="a python with transformers 4, which then writes hf4/config.json")
    ap.add_argument("names", nargs="*", help=f"fixtures to make (default all: {' '.join(FIXTURES)})")
    a = ap.parse_args()
    names = a.names or list(FIXTURES)
    fused = [n for n in names if n in FUSED]
    stripped = [n for n in names if n in STRIPPED]
    names = [n for n in names if n not in FUSED and n not in STRIPPED]
    for n in names:
        if n not in FIXTURES:
            raise SystemExit(f"arch_fixtures: unknown fixture {n!r}; known: {' '.join(FIXTURES)}")
    conv = os.path.abspath(a.converter)
    if not os.path.isfile(os.path.join(conv, "convert_hf_to_gguf.py")):
        raise SystemExit(f"arch_fixtures: {conv}/convert_hf_to_gguf.py not found")
    python4 = a.python4 if a.python4 and os.path.exists(a.python4) else None
    if not python4:
        log("no transformers 4 interpreter (--python4): hf4/config.json is the hand rewrite only")
    os.makedirs(OUT_ROOT, exist_ok=True)
    for n in names:
        make(n, conv, a.llama_cpp_python, python4)
    for n in fused or ([] if a.names else list(FUSED)):
        fuse_experts(FUSED[n], n)
    for n in stripped or ([] if a.names else list(STRIPPED)):
        strip_prefix(STRIPPED[n], n)


if __name__ == "__main__":
    main()
