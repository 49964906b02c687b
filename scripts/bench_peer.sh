#!/usr/bin/env bash
# Benchmark peer (scripts/bench.sh peer): bcdtrain's BCD step against the same block coordinate
# descent written in eager PyTorch (tests/bench/peer_reference.py) on the same LibTorch, shape
# and threads: the tiny demo model (4 layers, d_model 256, GQA 4/2 heads, d_ff 704, vocabulary
# 2048), one layer per block, embedding and head frozen, K = 20, fp32, batch 16 x 128 tokens.
# Paired rounds, the side that goes first alternating; a side's tokens/s is measured from the end
# of step --skip to the last step (bcdtrain: metrics.jsonl's elapsed_s; the reference: its own
# clock), so start-up is left out of both. `ratio` = median over rounds of bcdtrain / reference
# tokens/s. A third side per round, bcdtrain with train.cpu_matmul = blas (LibTorch's BLAS, as the
# reference uses), shows what the GEMM choice alone moves (`ratio_blas`).
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
  --steps N     steps a side and round (default 100)                  [$BENCH_STEPS]
  --skip N      first steps not timed (default 20: the first visit)   [$BENCH_SKIP]
  --threads N   compute threads of both sides (default 2)             [$BENCH_THREADS]
  -h, --help    this text
A variable in brackets is the flag's default when set; the flag wins. The trainer is
BCD_BUILD_DIR/bcdtrain (BCD_BUILD_DIR default build); the reference runs in BCD_BENCH_PYTHON
(default: the Python with torch that scripts/setup.sh configured the build with).
EOF_USAGE
}
rounds=${BENCH_ROUNDS:-4} steps=${BENCH_STEPS:-100} skip=${BENCH_SKIP:-20} threads=${BENCH_THREADS:-2}
parse_flags "--rounds=rounds --steps=steps --skip=skip --threads=threads" "$@"
no_args
check_int --rounds "$rounds"
check_int --steps "$steps" 2
check_int --skip "$skip" 0
check_int --threads "$threads"
((skip < steps)) || usage_error "--skip $skip: must be below --steps $steps"
flags_checked

build=${BCD_BUILD_DIR:-build}
bcd=$build/bcdtrain
# shellcheck source=scripts/bench_corpus.sh
source scripts/bench_corpus.sh
bench_require "$bcd"
python=${BCD_BENCH_PYTHON:-$(sed -n 's/^BCD_TEST_PYTHON:[A-Z]*=//p' "$build/CMakeCache.txt" 2> /dev/null)}
[[ -n $python ]] && "$python" -c 'import torch' 2> /dev/null ||
  { echo "bench peer: no Python with torch (set BCD_BENCH_PYTHON, or run scripts/setup.sh)" >&2; exit 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/bcd-bench-peer.XXXXXX")
trap 'rm -rf "$work"' EXIT
"$bcd" prepare --input /usr/share/games/fortunes --out "$work/data" --vocab-size 2048 > /dev/null

# ours NAME MATMUL ROUND: one bcdtrain run; its metrics.jsonl stays in $work/NAME-ROUND.
ours() {
  "$bcd" train --config configs/tiny.toml --data.path="$work/data" --train.run_dir="$work/$1-$3" \
    --bcd.layers_per_block=1 --bcd.include_embed=false --bcd.include_head=false --bcd.switch_every=20 \
    --train.steps="$steps" --train.batch_size=16 --train.seq_len=128 --train.threads="$threads" \
    --train.cpu_matmul="$2" --train.val_every=0 --train.val_batches=1 --train.log_every=1 \
    --train.save_model=false --sample.prompts='[]' > "$work/$1-$3.log" 2>&1 ||
    { cat "$work/$1-$3.log" >&2; exit 1; }
}
reference() {
  "$python" tests/bench/peer_reference.py --steps "$steps" --skip "$skip" --threads "$threads" \
    --switch-every 20 --batch 16 --seq 128 > "$work/reference-$1.json" 2> "$work/reference-$1.log" ||
    { cat "$work/reference-$1.log" >&2; exit 1; }
}

echo "tiny model (4 layers, d_model 256), one layer per block, embed and head frozen, K = 20, fp32," \
  "batch 16 x 128, $threads threads; $rounds rounds of $steps steps a side ($skip not timed)"
for ((r = 1; r <= rounds; r++)); do
  if ((r % 2)); then ours ours auto "$r"; reference "$r"; ours blas blas "$r"
  else reference "$r"; ours ours auto "$r"; ours blas blas "$r"; fi
done

python3 - "$work" "$rounds" "$skip" "$steps" <<'EOF'
import json, statistics, sys
work, rounds, skip, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])

def ours(name, r):
    m = {x["step"]: x for x in map(json.loads, open(f"{work}/{name}-{r}/metrics.jsonl"))}
    a, b = m[skip] if skip else {"tokens": 0, "elapsed_s": 0.0}, m[steps]
    return (b["tokens"] - a["tokens"]) / (b["elapsed_s"] - a["elapsed_s"])

def gemm(r):
    for line in open(f"{work}/ours-{r}.log"):
        if "GEMMs)" in line:
            return line.rsplit("(", 1)[1].split()[0]
    return "?"

ratios, ratios_blas, tps, tps_blas, tps_ref = [], [], [], [], []
for r in range(1, rounds + 1):
    ref = json.load(open(f"{work}/reference-{r}.json"))["tokens_per_s"]
    o, ob = ours("ours", r), ours("blas", r)
    tps.append(o); tps_blas.append(ob); tps_ref.append(ref)
    ratios.append(o / ref); ratios_blas.append(ob / ref)
    print(f"round {r}: bcdtrain {o:.0f} tokens/s ({gemm(r)} GEMMs), with BLAS GEMMs {ob:.0f}, eager PyTorch {ref:.0f}; "
          f"ratio {o / ref:.3f} (BLAS {ob / ref:.3f})")
ref_info = json.load(open(f"{work}/reference-1.json"))
print(json.dumps({
    "benchmark": "peer", "rounds": rounds, "steps": steps, "skip": skip, "torch": ref_info["torch"],
    "threads": ref_info["threads"], "gemm": gemm(1),
    "tokens_per_s": round(statistics.median(tps)), "tokens_per_s_blas": round(statistics.median(tps_blas)),
    "reference_tokens_per_s": round(statistics.median(tps_ref)),
    "round_ratios": [round(x, 4) for x in ratios], "ratio_blas": round(statistics.median(ratios_blas), 4),
    "ratio": round(statistics.median(ratios), 4)}))
EOF
