#!/usr/bin/env python3
"""Writes a Llama-3-style model with random weights as transformers' save_pretrained does
(config.json, bf16 safetensors shards with model.safetensors.index.json), with a tokenizer beside
it: the input of the import/export benchmarks (scripts/bench_hf_io.sh, scripts/bench_lowram.sh).

--shape llama3.2-1b (the default): Llama-3.2-1B's shape (hidden 2048, MLP 8192, 32 heads of 64
with 8 KV heads, vocabulary 128256, tied embeddings, RoPE theta 500000) with --layers decoder
layers: 12 give 0.99B parameters (3.97 GB in fp32, 1.98 GB in bf16). --shape llama3-8b:
Llama-3-8B's (hidden 4096, MLP 14336, 32 heads of 128 with 8 KV heads, vocabulary 128256, untied
head): every tensor of an 8B model, its largest the 2.1 GB (fp32) embedding and head, with
--layers of its 32 layers. A directory that already holds the same model (its
bcd_model.json) is kept: the benchmarks reuse it across runs.

Usage: make_hf_model.py OUT_DIR [--shape llama3.2-1b|llama3-8b] [--layers N] [--max-shard-size 450MB]
                         [--tokenizer DIR] [--seed S]
"""
import argparse
import json
import os
import shutil
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--shape", choices=["llama3.2-1b", "llama3-8b"], default="llama3.2-1b")
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--max-shard-size", default="450MB")
    ap.add_argument("--tokenizer", default="", help="a directory whose tokenizer.json (and tokenizer_config.json) go along")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    spec = {"layers": a.layers, "max_shard_size": a.max_shard_size, "seed": a.seed, "shape": a.shape, "version": 1}
    marker = os.path.join(a.out, "bcd_model.json")
    if os.path.exists(marker) and json.load(open(marker)) == spec:
        print(f"make_hf_model: {a.out} already holds this model")
        return 0

    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    big = a.shape == "llama3-8b"
    cfg = LlamaConfig(
        vocab_size=128256, hidden_size=4096 if big else 2048, intermediate_size=14336 if big else 8192,
        num_hidden_layers=a.layers, num_attention_heads=32, num_key_value_heads=8, head_dim=128 if big else 64,
        max_position_embeddings=2048, rms_norm_eps=1e-5, rope_theta=500000.0, tie_word_embeddings=not big,
        bos_token_id=128000, eos_token_id=128001)
    torch.manual_seed(a.seed)
    model = LlamaForCausalLM._from_config(cfg, dtype=torch.bfloat16)
    if os.path.exists(a.out):
        shutil.rmtree(a.out)
    model.save_pretrained(a.out, max_shard_size=a.max_shard_size, safe_serialization=True)
    if a.tokenizer:
        for name in ("tokenizer.json", "tokenizer_config.json"):
            src = os.path.join(a.tokenizer, name)
            if os.path.exists(src):
                shutil.copy(src, os.path.join(a.out, name))
    n = sum(p.numel() for p in model.parameters())
    json.dump(spec, open(marker, "w"))
    print(f"make_hf_model: {a.out}: {n / 1e9:.3f}B parameters, bf16, shards of at most {a.max_shard_size}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
