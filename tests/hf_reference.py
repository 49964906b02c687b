#!/usr/bin/env python3
"""Hugging Face reference for the model importer/exporter tests.

  make OUT        build tiny Llama-family models with transformers itself (llama,
                  llama3.1/3.2 RoPE, linear RoPE, mistral, qwen2, qwen2 yarn,
                  qwen3, qwen3 yarn; transformers-5 and transformers-4 config
                  forms), save them with save_pretrained, and store fp32
                  reference tokens/logits/loss in OUT/<name>/reference.safetensors
                  plus OUT/manifest.json
  check DIR...    load model directories exported by the trainer with
                  transformers and compare their logits to DIR/ours.safetensors
  rope-groups OUT write, for llama, mistral, qwen2 and qwen3, a config.json whose
                  rope_parameters groups its settings by layer type, to OUT/<type>/,
                  and print (one JSON line each) what transformers builds from it:
                  the rotary type it applies, or its error
  version         print the transformers version

Runs on CPU, offline, deterministic. Exit status: 0 ok, 1 a check failed,
2 bad arguments or input.
"""

import argparse
import json
import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

T = 32          # tokens per row
B = 2           # rows
SHARP_MIN = 1e-2  # the right RoPE must move the loss at least this much


def die(msg, code=2):
    print(f"hf_reference: {msg}", file=sys.stderr)
    sys.exit(code)


def imports():
    try:
        import torch
        import transformers
        from safetensors.torch import load_file, save_file
    except Exception as e:  # noqa: BLE001 - any import failure is bad input
        die(f"cannot import torch/transformers/safetensors: {e}")
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    torch.set_num_threads(1)
    return torch, transformers, load_file, save_file


# ---------------------------------------------------------------- variants

LLAMA31 = {"rope_type": "llama3", "rope_theta": 5e5, "factor": 8.0, "low_freq_factor": 1.0,
           "high_freq_factor": 4.0, "original_max_position_embeddings": 16}
YARN = {"rope_type": "yarn", "rope_theta": 1e6, "factor": 4.0, "original_max_position_embeddings": 16}
DEFAULT_1E6 = {"rope_type": "default", "rope_theta": 1e6}

# name, model_type, form, rope_parameters, extra config keys
VARIANTS = [
    ("llama_default_v5", "llama", "v5", DEFAULT_1E6, {}),
    ("llama31_v5", "llama", "v5", LLAMA31, {}),
    ("llama31_v4", "llama", "v4", LLAMA31, {}),
    ("llama32_tied_v5", "llama", "v5", dict(LLAMA31, factor=32.0), {"tie_word_embeddings": True}),
    ("llama_linear_v4", "llama", "v4", {"rope_type": "linear", "rope_theta": 1e4, "factor": 4.0}, {}),
    ("mistral_nemo_v5", "mistral", "v5", DEFAULT_1E6, {"head_dim": 16, "sliding_window": None}),
    ("mistral_v4", "mistral", "v4", DEFAULT_1E6, {"sliding_window": None}),
    ("qwen2_v5", "qwen2", "v5", DEFAULT_1E6, {"tie_word_embeddings": False}),
    ("qwen2_yarn_v4", "qwen2", "v4", YARN, {"tie_word_embeddings": False}),
    ("qwen3_tied_v5", "qwen3", "v5", DEFAULT_1E6,
     {"head_dim": 16, "tie_word_embeddings": True, "attention_bias": False}),
    ("qwen3_v4", "qwen3", "v4", DEFAULT_1E6, {"head_dim": 16, "tie_word_embeddings": False}),
    ("qwen3_yarn_v5", "qwen3", "v5", YARN, {"head_dim": 16, "tie_word_embeddings": False}),
]

BASE = dict(vocab_size=67, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
            rms_norm_eps=1e-6, bos_token_id=1, eos_token_id=2)


def make_config(transformers, model_type, rope, extra, rope_override=None):
    cls = {"llama": transformers.LlamaConfig, "mistral": transformers.MistralConfig,
           "qwen2": transformers.Qwen2Config, "qwen3": transformers.Qwen3Config}[model_type]
    kw = dict(BASE)
    if model_type in ("qwen2", "qwen3"):
        kw["use_sliding_window"] = False
    kw.update(extra)
    kw["rope_parameters"] = dict(rope_override if rope_override is not None else rope)
    return cls(**kw)


def init_weights(torch, model, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():  # tied weights appear once
            noise = torch.randn(p.shape, generator=g, dtype=torch.float32)
            if name.endswith("q_proj.weight") or name.endswith("k_proj.weight"):
                p.copy_(0.5 * noise)
            elif name.endswith(".bias"):
                p.copy_(0.1 * noise)
            elif "norm" in name.rsplit(".", 2)[-2]:
                p.copy_(1.0 + 0.2 * noise)
            elif p.dim() == 2:
                p.copy_(0.2 * noise)
            else:
                die(f"unexpected parameter {name} {tuple(p.shape)}", 1)


def to_v4(path):
    cfg_path = os.path.join(path, "config.json")
    with open(cfg_path) as f:
        cfg = json.load(f)
    rope = dict(cfg.pop("rope_parameters"))
    cfg["rope_theta"] = rope.pop("rope_theta")
    cfg["rope_scaling"] = None if rope.get("rope_type", "default") == "default" else rope
    with open(cfg_path, "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")


def forward(torch, model, tokens):
    with torch.no_grad():
        logits = model(input_ids=tokens).logits.float()
    v = logits.shape[-1]
    loss = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, v), tokens[:, 1:].reshape(-1))
    return logits, loss


def load(transformers, torch, path, config=None):
    kw = {"config": config} if config is not None else {}
    m = transformers.AutoModelForCausalLM.from_pretrained(
        path, attn_implementation="eager", dtype=torch.float32, **kw)
    return m.eval()


def cmd_make(args):
    torch, transformers, _, save_file = imports()
    t0 = time.time()
    os.makedirs(args.out, exist_ok=True)
    manifest = []
    failed = []
    for i, (name, model_type, form, rope, extra) in enumerate(VARIANTS):
        seed = 1000 + i
        path = os.path.join(args.out, name)
        cfg = make_config(transformers, model_type, rope, extra)
        torch.manual_seed(seed)
        model = transformers.AutoModelForCausalLM.from_config(
            cfg, attn_implementation="eager", dtype=torch.float32)
        init_weights(torch, model, seed)
        model.eval()
        model.save_pretrained(path)
        if form == "v4":
            to_v4(path)

        g = torch.Generator().manual_seed(seed + 500)
        tokens = torch.randint(0, cfg.vocab_size, (B, T), generator=g, dtype=torch.int64)
        logits, loss = forward(torch, model, tokens)

        # The saved directory (v4 rewrite included) must load back to the same model.
        back_logits, _ = forward(torch, load(transformers, torch, path), tokens)
        diff = (back_logits - logits).abs().max().item() / logits.abs().max().item()
        if not diff <= 1e-6:
            failed.append(f"{name}: reloaded model differs (rel {diff:.3g})")

        # Sharpness: a wrong RoPE must visibly change the loss.
        plain = make_config(transformers, model_type, rope, extra,
                            rope_override={"rope_type": "default", "rope_theta": 1e4})
        _, loss_plain = forward(torch, load(transformers, torch, path, plain), tokens)
        line = f"{name:18s} loss {loss.item():.6f}  default-rope-1e4 {loss_plain.item():.6f}"
        if abs(loss.item() - loss_plain.item()) <= SHARP_MIN:
            failed.append(f"{name}: loss with plain theta=10000 RoPE is within {SHARP_MIN} "
                          "(fixture would not catch a wrong RoPE)")
        if rope["rope_type"] != "default":
            noscale = make_config(transformers, model_type, rope, extra,
                                  rope_override={"rope_type": "default", "rope_theta": rope["rope_theta"]})
            _, loss_ns = forward(torch, load(transformers, torch, path, noscale), tokens)
            line += f"  unscaled-theta {loss_ns.item():.6f}"
            if abs(loss.item() - loss_ns.item()) <= SHARP_MIN:
                failed.append(f"{name}: loss without {rope['rope_type']} scaling is within {SHARP_MIN}")
        print(line)

        save_file({"tokens": tokens.contiguous(),
                   "logits": logits.contiguous(),
                   "loss": loss.reshape(1).float().contiguous()},
                  os.path.join(path, "reference.safetensors"))
        manifest.append({"name": name, "model_type": model_type, "form": form, "expect": "ok"})

    with open(os.path.join(args.out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=2)
        f.write("\n")
    print(f"transformers {transformers.__version__}, {len(manifest)} models in {args.out} "
          f"({time.time() - t0:.1f}s)")
    if failed:
        for msg in failed:
            print(f"hf_reference: FAIL {msg}", file=sys.stderr)
        return 1
    return 0


def cmd_check(args):
    for d in args.dirs:
        for f in ("config.json", "ours.safetensors"):
            if not os.path.isfile(os.path.join(d, f)):
                die(f"{os.path.join(d, f)}: no such file")
    torch, transformers, load_file, _ = imports()
    bad = 0
    for d in args.dirs:
        rec = {"dir": d, "model_type": None, "transformers": transformers.__version__,
               "rel": None, "ok": False}
        try:
            with open(os.path.join(d, "config.json")) as f:
                rec["model_type"] = json.load(f).get("model_type")
            ours = load_file(os.path.join(d, "ours.safetensors"))
            tokens, mine = ours["tokens"], ours["logits"]
            if tokens.dtype != torch.int64 or tokens.dim() != 2:
                raise ValueError(f"tokens must be int64 (B,T), got {tokens.dtype} {tuple(tokens.shape)}")
            theirs, _ = forward(torch, load(transformers, torch, d), tokens)
            if mine.shape != theirs.shape:
                raise ValueError(f"logits shape {tuple(mine.shape)} != transformers {tuple(theirs.shape)}")
            rel = ((mine.float() - theirs).abs().max() / theirs.abs().max()).item()
            rec["rel"] = rel
            rec["ok"] = bool(rel <= args.tol)  # NaN compares false
        except Exception as e:  # noqa: BLE001 - report, keep checking the others
            rec["error"] = f"{type(e).__name__}: {e}".splitlines()[0][:300]
        if not rec["ok"]:
            bad += 1
        print(json.dumps(rec), flush=True)
    return 1 if bad else 0


def cmd_rope_groups(args):
    torch, transformers, _, _ = imports()
    for model_type in ("llama", "mistral", "qwen2", "qwen3"):
        path = os.path.join(args.out, model_type)
        os.makedirs(path, exist_ok=True)
        cfg = {"model_type": model_type, "vocab_size": 256, "hidden_size": 64, "intermediate_size": 128,
               "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
               "max_position_embeddings": 512,
               "rope_parameters": {"full_attention": {"rope_type": "linear", "rope_theta": 10000.0, "factor": 2.0}}}
        with open(os.path.join(path, "config.json"), "w") as f:
            json.dump(cfg, f)
        rec = {"model_type": model_type, "dir": path, "rope_type": None, "error": None}
        try:
            config = transformers.AutoConfig.from_pretrained(path)
            model = transformers.AutoModelForCausalLM.from_config(config)
            rec["rope_type"] = getattr(model.model.rotary_emb, "rope_type", None)
        except Exception as e:  # noqa: BLE001 - what transformers does is the answer
            rec["error"] = f"{type(e).__name__}: {e}".splitlines()[0][:300]
        print(json.dumps(rec), flush=True)
    return 0


def cmd_version(args):
    _, transformers, _, _ = imports()
    print(transformers.__version__)
    return 0


class Parser(argparse.ArgumentParser):
    def error(self, message):
        die(f"{message} (see --help)")


def main():
    p = Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", metavar="{make,check,rope-groups,version}", parser_class=Parser)
    m = sub.add_parser("make", help="write reference models and logits to OUT")
    m.add_argument("out", metavar="OUT")
    c = sub.add_parser("check", help="compare trainer-exported model dirs with transformers")
    c.add_argument("dirs", metavar="DIR", nargs="+")
    c.add_argument("--tol", type=float, default=1e-5, help="max relative logit error (default 1e-5)")
    g = sub.add_parser("rope-groups", help="what transformers builds from rope settings grouped by layer type")
    g.add_argument("out", metavar="OUT")
    sub.add_parser("version", help="print the transformers version")
    args = p.parse_args()
    if args.cmd is None:
        die("missing command: make, check, rope-groups or version (see --help)")
    return {"make": cmd_make, "check": cmd_check, "rope-groups": cmd_rope_groups,
            "version": cmd_version}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
