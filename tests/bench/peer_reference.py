#!/usr/bin/env python3
"""The reference sides of `scripts/bench.sh peer`: block coordinate descent in eager PyTorch on the
same LibTorch as bcdtrain, driven by BAdam's own BlockOptimizer (the `badam` package from PyPI,
unmodified: --optimizer badam) or written the way a PyTorch user writes it (--optimizer adamw).

A Llama-style model (RMSNorm, rotary positions, grouped-query attention through SDPA, SwiGLU) built
from torch.nn modules, every parameter frozen but the active decoder layer's; the optimizer is
torch.optim.AdamW over that layer alone (a new one, moments reset, at each switch, as BAdam's
BlockOptimizer does), a global-norm clip, and a switch to the next layer every K steps. The
embedding and the head stay frozen. One micro-batch per step.

With --optimizer badam, BlockOptimizer wraps torch.optim.AdamW over all parameters as BAdam's
README shows (block_prefix_list inferred from the parameter names: one decoder layer per block,
embedding and head left out, switch_mode random, switch_block_every K); it keeps an fp32 copy of
the active layer, steps it and copies it back, as it does for every model. The same clip runs on
the active layer's gradient before its step.

Prints one JSON object: tokens/s over the measured steps (the first --skip steps excluded,
as bcdtrain's side excludes its start-up), the mean step seconds and the final loss.
"""
import argparse
import json
import math
import time


def parse():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    a = p.add_argument
    a("--vocab", type=int, default=2048)
    a("--d-model", type=int, default=256)
    a("--layers", type=int, default=4)
    a("--heads", type=int, default=4)
    a("--kv-heads", type=int, default=2)
    a("--d-ff", type=int, default=704)
    a("--batch", type=int, default=16)
    a("--seq", type=int, default=128)
    a("--steps", type=int, default=100)
    a("--skip", type=int, default=20, help="steps left out of the measure (start-up)")
    a("--switch-every", type=int, default=20)
    a("--lr", type=float, default=2e-3)
    a("--threads", type=int, default=2)
    a("--seed", type=int, default=1234)
    a("--optimizer", choices=["badam", "adamw"], default="badam",
      help="badam: BAdam's BlockOptimizer (pip badam); adamw: the hand-written loop")
    args = p.parse_args()
    if not 0 <= args.skip < args.steps:
        p.error("--skip must be below --steps")
    return args


def build(torch, args):
    nn, F = torch.nn, torch.nn.functional
    head_dim = args.d_model // args.heads

    class RMSNorm(nn.Module):
        def __init__(self, d, eps=1e-5):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(d))
            self.eps = eps

        def forward(self, x):
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight

    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, head_dim, 2).float() / head_dim))
    angles = torch.outer(torch.arange(args.seq).float(), inv_freq)
    cos = torch.cat([angles.cos(), angles.cos()], -1)
    sin = torch.cat([angles.sin(), angles.sin()], -1)

    def rope(x):
        x1, x2 = x.chunk(2, -1)
        return x * cos + torch.cat([-x2, x1], -1) * sin

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            d, kv = args.d_model, args.kv_heads * head_dim
            self.attn_norm, self.mlp_norm = RMSNorm(d), RMSNorm(d)
            self.q, self.k, self.v = (nn.Linear(d, d, bias=False), nn.Linear(d, kv, bias=False),
                                      nn.Linear(d, kv, bias=False))
            self.o = nn.Linear(d, d, bias=False)
            self.gate, self.up = nn.Linear(d, args.d_ff, bias=False), nn.Linear(d, args.d_ff, bias=False)
            self.down = nn.Linear(args.d_ff, d, bias=False)

        def forward(self, x):
            b, t, _ = x.shape
            h = self.attn_norm(x)
            q = rope(self.q(h).view(b, t, args.heads, head_dim).transpose(1, 2))
            k = rope(self.k(h).view(b, t, args.kv_heads, head_dim).transpose(1, 2))
            v = self.v(h).view(b, t, args.kv_heads, head_dim).transpose(1, 2)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                               enable_gqa=args.kv_heads != args.heads)
            x = x + self.o(a.transpose(1, 2).reshape(b, t, -1))
            h = self.mlp_norm(x)
            return x + self.down(F.silu(self.gate(h)) * self.up(h))

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(args.vocab, args.d_model)
            self.layers = nn.ModuleList(Layer() for _ in range(args.layers))
            self.norm = RMSNorm(args.d_model)
            self.head = nn.Linear(args.d_model, args.vocab, bias=False)

        def forward(self, tokens):
            x = self.embed(tokens[:, :-1])
            for layer in self.layers:
                x = layer(x)
            logits = self.head(self.norm(x))
            return F.cross_entropy(logits.reshape(-1, args.vocab), tokens[:, 1:].reshape(-1))

    torch.manual_seed(args.seed)
    model = Model()
    for p in model.parameters():
        if p.dim() > 1:
            nn.init.normal_(p, std=0.02)
    return model


def main():
    args = parse()
    import torch

    torch.set_num_threads(args.threads)
    model = build(torch, args)
    # A window holds seq + 1 tokens (inputs and their shifted targets), as bcdtrain's loader.
    window = args.seq + 1
    gen = torch.Generator().manual_seed(args.seed)
    # Seeded random windows: with the embedding and the head frozen no step's time depends on
    # which tokens it reads (bcdtrain's side reads the prepared corpus).
    ids = torch.randint(0, args.vocab, (window * args.batch * 64,), generator=gen)
    n_windows = ids.numel() // window
    windows = ids[: n_windows * window].view(n_windows, window)

    if args.optimizer == "badam":
        return run_badam(torch, args, model, windows, n_windows, gen)
    for p in model.parameters():
        p.requires_grad_(False)
    order, active, opt = [], None, None
    t_start, loss = None, None
    step_s, layer_each = [], []
    for step in range(args.steps):
        t0 = time.perf_counter()
        if step % args.switch_every == 0:
            if not order:
                order = torch.randperm(args.layers, generator=gen).tolist()
            if active is not None:
                for p in active.parameters():
                    p.requires_grad_(False)
                    p.grad = None
            active_index = order.pop(0)
            active = model.layers[active_index]
            for p in active.parameters():
                p.requires_grad_(True)
            opt = torch.optim.AdamW(active.parameters(), lr=args.lr, betas=(0.9, 0.95),
                                    weight_decay=0.1)
        if step == args.skip:
            t_start = time.perf_counter()
        pick = torch.randint(0, n_windows, (args.batch,), generator=gen)
        loss = model(windows[pick])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(active.parameters(), 1.0)
        opt.step()
        step_s.append(time.perf_counter() - t0)
        layer_each.append(active_index)
    report(torch, args, t_start, loss, step_s, layer_each)


def run_badam(torch, args, model, windows, n_windows, gen):
    from badam import BlockOptimizer

    base = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1)
    opt = BlockOptimizer(base_optimizer=base, named_parameters_list=list(model.named_parameters()),
                         switch_block_every=args.switch_every, switch_mode="random", include_embedding=False,
                         include_lm_head=False, verbose=0)
    t_start, loss = None, None
    step_s, layer_each = [], []
    for step in range(args.steps):
        t0 = time.perf_counter()
        if step == args.skip:
            t_start = t0
        pick = torch.randint(0, n_windows, (args.batch,), generator=gen)
        loss = model(windows[pick])
        loss.backward()
        torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], 1.0)
        layer_each.append(int(opt.active_param_prefixs[0].split(".")[1]))  # "layers.N." during this step
        opt.step()
        opt.zero_grad(set_to_none=True)
        step_s.append(time.perf_counter() - t0)
    import importlib.metadata
    report(torch, args, t_start, loss, step_s, layer_each, importlib.metadata.version("badam"))


def report(torch, args, t_start, loss, step_s, layer_each, badam_version=None):
    loss_value = float(loss.detach())
    seconds = time.perf_counter() - t_start
    measured = args.steps - args.skip
    print(json.dumps({
        "optimizer": args.optimizer,
        "badam": badam_version,
        "step_s_each": [round(x, 5) for x in step_s],
        "layer_each": layer_each,
        "tokens_per_s": measured * args.batch * args.seq / seconds,
        "step_s": seconds / measured,
        "steps_measured": measured,
        "final_loss": loss_value if math.isfinite(loss_value) else None,
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
    }))


if __name__ == "__main__":
    main()
