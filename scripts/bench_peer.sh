#!/usr/bin/env bash
# Benchmark peer (scripts/bench.sh peer): bcdtrain's BCD step against BAdam's own BlockOptimizer
# (the `badam` package from PyPI, unmodified) driving an eager PyTorch Llama on the same LibTorch,
# shape, tokens per step and threads (tests/bench/peer_reference.py --optimizer badam), and, as a
# second row, the same BCD written by hand in eager PyTorch (--optimizer adamw). The tiny demo
# model (4 layers, d_model 256, GQA 4/2 heads, d_ff 704, vocabulary 2048), one layer per block,
# embedding and head frozen, K = 20, fp32, batch 16 x 128 tokens.
# Paired rounds, the side that goes first rotating. Every side is timed over the same step
# window, from the end of step --skip to the end of step --steps - 1 (the last step ends with
# bcdtrain's end-of-run validation); by default that is the second block-epoch, steps 81-160,
# which visits each layer once on every side whatever order each draws (the lower the active
# layer, the longer its backward, so a window of other visits would compare other work): bcdtrain from metrics.jsonl's elapsed_s, the
# Python sides from their own per-step clock. `ratio` = median over rounds of bcdtrain / BAdam
# tokens/s; `ratio_eager` the same against the hand-written loop. Each side's median step time by
# active layer is printed too (backward stops at the active layer, so lower layers cost more).
# Last line: one JSON object.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib.sh
source scripts/lib.sh

usage() {
  cat <<'EOF_USAGE'
usage: scripts/bench_peer.sh [--rounds N] [--steps N] [--skip N] [--threads N]
       scripts/bench.sh peer [FLAGS...]   (builds bcdtrain first)
  --rounds N    paired rounds (default 4)                             [$BENCH_ROUNDS]
  --steps N     steps a side and round (default 161)                  [$BENCH_STEPS]
  --skip N      first steps not timed (default 80: the first block-epoch) [$BENCH_SKIP]
                (the last step, with bcdtrain's end-of-run validation, is not timed either)
  --threads N   compute threads of every side (default 2)             [$BENCH_THREADS]
  -h, --help    this text
A variable in brackets is the flag's default when set; the flag wins. The trainer is
BCD_BUILD_DIR/bcdtrain (BCD_BUILD_DIR default build); the Python sides run in BCD_BENCH_PYTHON
(default: the Python with torch that scripts/setup.sh configured the build with, where it
installs badam).
EOF_USAGE
}
rounds=${BENCH_ROUNDS:-4} steps=${BENCH_STEPS:-161} skip=${BENCH_SKIP:-80} threads=${BENCH_THREADS:-2}
parse_flags "--rounds=rounds --steps=steps --skip=skip --threads=threads" "$@"
no_args
check_int --rounds "$rounds"
check_int --steps "$steps" 3
check_int --skip "$skip" 0
check_int --threads "$threads"
((skip + 1 < steps)) || usage_error "--skip $skip: must be below --steps $steps - 1"
flags_checked

build=${BCD_BUILD_DIR:-build}
bcd=$build/bcdtrain
# shellcheck source=scripts/bench_corpus.sh
source scripts/bench_corpus.sh
bench_require "$bcd"
python=${BCD_BENCH_PYTHON:-$(sed -n 's/^BCD_TEST_PYTHON:[A-Z]*=//p' "$build/CMakeCache.txt" 2> /dev/null)}
[[ -n $python ]] && "$python" -c 'import torch' 2> /dev/null ||
  { echo "bench peer: no Python with torch (set BCD_BENCH_PYTHON, or run scripts/setup.sh)" >&2; exit 1; }
"$python" -c 'import badam' 2> /dev/null ||
  { echo "bench peer: $python has no badam (BAdam's package: scripts/setup.sh --bench=bcdtrain installs it)" >&2; exit 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/bcd-bench-peer.XXXXXX")
trap 'rm -rf "$work"' EXIT
"$bcd" prepare --input /usr/share/games/fortunes --out "$work/data" --vocab-size 2048 > /dev/null

# ours ROUND: one bcdtrain run; its metrics.jsonl stays in $work/ours-ROUND.
ours() {
  "$bcd" train --config configs/tiny.toml --data.path="$work/data" --train.run_dir="$work/ours-$1" \
    --bcd.layers_per_block=1 --bcd.include_embed=false --bcd.include_head=false --bcd.switch_every=20 \
    --train.steps="$steps" --train.batch_size=16 --train.seq_len=128 --train.threads="$threads" \
    --train.val_every=0 --train.val_batches=1 --train.log_every=1 \
    --train.save_model=false --sample.prompts='[]' > "$work/ours-$1.log" 2>&1 ||
    { cat "$work/ours-$1.log" >&2; exit 1; }
}
# python_side OPTIMIZER ROUND: one run of a Python side; its JSON (the last line) in
# $work/OPTIMIZER-ROUND.json (BAdam prints lines of its own before it).
python_side() {
  "$python" tests/bench/peer_reference.py --optimizer "$1" --steps "$steps" --skip "$skip" --threads "$threads" \
    --switch-every 20 --batch 16 --seq 128 > "$work/$1-$2.out" 2> "$work/$1-$2.log" ||
    { cat "$work/$1-$2.log" >&2; exit 1; }
  tail -n 1 "$work/$1-$2.out" > "$work/$1-$2.json"
}

echo "tiny model (4 layers, d_model 256), one layer per block, embed and head frozen, K = 20, fp32," \
  "batch 16 x 128, $threads threads; $rounds rounds; steps $((skip + 1))-$((steps - 1)) of $steps timed"
sides=(ours badam adamw)
for ((r = 1; r <= rounds; r++)); do
  for ((i = 0; i < 3; i++)); do
    s=${sides[(i + r - 1) % 3]}
    if [[ $s == ours ]]; then ours "$r"; else python_side "$s" "$r"; fi
  done
done

python3 - "$work" "$rounds" "$skip" "$steps" <<'EOF_PY'
import json, statistics, sys
work, rounds, skip, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
last = steps - 1  # the window: steps skip+1 .. steps-1 (1-based)
TOKENS = 16 * 128

def ours(r):
    m = {x["step"]: x for x in map(json.loads, open(f"{work}/ours-{r}/metrics.jsonl"))}
    t0 = m[skip]["elapsed_s"] if skip else 0.0
    per = {}
    for s in range(skip + 1, last + 1):
        prev = m[s - 1]["elapsed_s"] if s > 1 else 0.0
        per.setdefault(m[s]["block"], []).append(m[s]["elapsed_s"] - prev)
    return (last - skip) * TOKENS / (m[last]["elapsed_s"] - t0), per

def python(name, r):
    d = json.load(open(f"{work}/{name}-{r}.json"))
    each, layers = d["step_s_each"], d["layer_each"]
    per = {}
    for s in range(skip, last):  # 0-based: steps skip+1 .. steps-1
        per.setdefault(f"layer.{layers[s]}", []).append(each[s])
    return (last - skip) * TOKENS / sum(each[skip:last]), per, d

ratios, ratios_eager, tps, tps_badam, tps_eager = [], [], [], [], []
per_side = {"bcdtrain": {}, "badam": {}, "eager": {}}
for r in range(1, rounds + 1):
    o, po = ours(r)
    b, pb, info = python("badam", r)
    e, pe, _ = python("adamw", r)
    tps.append(o); tps_badam.append(b); tps_eager.append(e)
    ratios.append(o / b); ratios_eager.append(o / e)
    for name, per in (("bcdtrain", po), ("badam", pb), ("eager", pe)):
        for k, v in per.items():
            per_side[name].setdefault(k, []).extend(v)
    print(f"round {r}: bcdtrain {o:.0f} tokens/s, BAdam {b:.0f}, eager loop {e:.0f}; "
          f"ratio {o / b:.3f} (eager {o / e:.3f})")
layers = sorted({k for per in per_side.values() for k in per}, key=lambda k: int(k.split(".")[-1]))
print("median step ms by active layer (all rounds): " + "; ".join(
    f"{k}: " + ", ".join(f"{n} {1000 * statistics.median(per_side[n][k]):.0f}" for n in per_side if k in per_side[n])
    for k in layers))
print(json.dumps({
    "benchmark": "peer", "rounds": rounds, "steps": steps, "window": [skip + 1, last],
    "torch": info["torch"], "badam": info["badam"], "threads": info["threads"],
    "tokens_per_s": round(statistics.median(tps)), "badam_tokens_per_s": round(statistics.median(tps_badam)),
    "eager_tokens_per_s": round(statistics.median(tps_eager)),
    "step_ms_by_layer": {n: {k: round(1000 * statistics.median(v), 1) for k, v in per.items()}
                         for n, per in per_side.items()},
    "round_ratios": [round(x, 4) for x in ratios], "round_ratios_eager": [round(x, 4) for x in ratios_eager],
    "ratio_eager": round(statistics.median(ratios_eager), 4),
    "ratio": round(statistics.median(ratios), 4)}))
EOF_PY
