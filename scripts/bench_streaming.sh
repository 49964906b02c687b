#!/usr/bin/env bash
# Benchmark streaming (scripts/bench.sh streaming): BCD step time with every frozen decoder
# layer's weights streamed from host memory through a window of two compute buffers
# (memory.stream_weights = on) against all weights resident (off), through `bcdtrain train` on a
# 12-layer model with activation checkpointing on both sides. Paired rounds, the side that goes
# first alternating; a side's step time is the median of its steps after the first visit (the
# record-to-record time in metrics.jsonl); `ratio` is the median of the rounds' streamed /
# resident ratios. Both sides' losses must agree bitwise.
# Last line: one JSON object.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib.sh
source scripts/lib.sh

usage() {
  cat <<'EOF_USAGE'
usage: scripts/bench_streaming.sh [--rounds N] [--steps N] [--layers N]
       scripts/bench.sh streaming [FLAGS...]   (builds bcdtrain first)
  --rounds N    paired rounds (default 5)                             [$BENCH_ROUNDS]
  --steps N     steps a side and round (default 40), at least 7: the  [$BENCH_STEPS]
                first visit (5 steps) and the step after it are not timed
  --layers N    decoder layers of the model (default 12)              [$BENCH_LAYERS]
  -h, --help    this text
A variable in brackets is the flag's default when set (the names tests/bench's programs read);
the flag wins. The trainer is BCD_BUILD_DIR/bcdtrain (BCD_BUILD_DIR default build).
EOF_USAGE
}
rounds=${BENCH_ROUNDS:-5} steps=${BENCH_STEPS:-40} layers=${BENCH_LAYERS:-12}
parse_flags "--rounds=rounds --steps=steps --layers=layers" "$@"
no_args
check_int --rounds "$rounds"
check_int --steps "$steps" 7
check_int --layers "$layers"
flags_checked

bcd=${BCD_BUILD_DIR:-build}/bcdtrain
# shellcheck source=scripts/bench_corpus.sh
source scripts/bench_corpus.sh
bench_require "$bcd"

work=$(mktemp -d "${TMPDIR:-/tmp}/bcd-bench-streaming.XXXXXX")
trap 'rm -rf "$work"' EXIT
"$bcd" prepare --input /usr/share/games/fortunes --out "$work/data" --vocab-size 2048 > /dev/null

# side NAME MODE ROUND: one training run; its metrics.jsonl stays in $work/NAME-ROUND.
side() {
  "$bcd" train --quiet --config configs/tiny.toml --data.path="$work/data" --train.run_dir="$work/$1-$3" \
    --model.n_layers="$layers" --model.d_model=256 --model.d_ff=704 --model.activation_checkpointing=true \
    --bcd.layers_per_block=1 --bcd.switch_every=5 --bcd.order=random --train.steps="$steps" \
    --train.batch_size=8 --train.seq_len=128 --train.val_every=0 --train.log_every=1 --train.save_model=false \
    --sample.prompts='[]' --memory.stream_weights="$2" > "$work/$1-$3.log" 2>&1 ||
    { cat "$work/$1-$3.log" >&2; exit 1; }
}

echo "model: $layers layers, d_model 256, batch 8 x 128 tokens, one layer per BCD unit, K = 5; $rounds rounds of $steps steps a side"
for ((r = 1; r <= rounds; r++)); do
  if ((r % 2)); then side resident off "$r"; side streamed on "$r"; else side streamed on "$r"; side resident off "$r"; fi
done

python3 - "$work" "$rounds" "$layers" <<'EOF'
import json, statistics, sys
work, rounds = sys.argv[1], int(sys.argv[2])

def load(name, r):
    return [json.loads(l) for l in open(f"{work}/{name}-{r}/metrics.jsonl")]

def step_ms(m):
    # record-to-record times after the first visit (5 steps): warm caches, every side the same steps
    t = [m[i]["elapsed_s"] - m[i - 1]["elapsed_s"] for i in range(6, len(m))]
    return 1e3 * statistics.median(t)

ratios, res_ms, str_ms, same = [], [], [], True
bytes_per_step, stall_ms = [], []
for r in range(1, rounds + 1):
    a, b = load("resident", r), load("streamed", r)
    same = same and [x["loss"] for x in a] == [x["loss"] for x in b]
    ra, rb = step_ms(a), step_ms(b)
    res_ms.append(ra)
    str_ms.append(rb)
    ratios.append(rb / ra)
    bytes_per_step += [x["stream_bytes"] for x in b[5:]]
    stall_ms += [x["stream_stall_ms"] for x in b[5:]]
    print(f"round {r}: resident {ra:.1f} ms/step, streamed {rb:.1f} ms/step, ratio {rb / ra:.4f}")
last = load("streamed", rounds)[-1]
print(f"streamed {statistics.mean(bytes_per_step) / 1e6:.1f} MB per step, stall {statistics.median(stall_ms):.3f} ms "
      f"per step (median), window misses {last['stream_misses_total']}; losses bitwise equal: {'yes' if same else 'NO'}")
print(json.dumps({
    "benchmark": "streaming", "layers": int(sys.argv[3]), "rounds": rounds,
    "resident_ms_per_step": round(statistics.median(res_ms), 2), "streamed_ms_per_step": round(statistics.median(str_ms), 2),
    "round_ratios": [round(x, 4) for x in ratios],
    "stream_bytes_per_step": int(statistics.median(bytes_per_step)),
    "stream_stall_ms_per_step": round(statistics.median(stall_ms), 3),
    "compute_peak_working_bytes": {"resident": load("resident", rounds)[-1]["memory"]["compute"]["peak_working"],
                                   "streamed": last["memory"]["compute"]["peak_working"]},
    "losses_equal": same, "ratio": round(statistics.median(ratios), 4)}))
sys.exit(0 if same else 1)
EOF
