#!/usr/bin/env bash
# Benchmark start-up (scripts/bench.sh startup): seconds from a `bcdtrain train` process's start
# to its first step's record in metrics.jsonl, for Llama-2-7B's layer shape (d_model 4096, d_ff
# 11008, vocabulary 32000) with --layers decoder layers (8: 1.88B parameters), on the CPU, from
# configs/llama2-7b-lowram.toml: BCD, every unit's master and moments homed on NVMe (a directory
# under the build), random init, short sequences (--seq-len 16: the first step's compute is not
# what is measured). bf16 and fp32 working weights, rounds alternating which goes first; the
# figures are medians. Also the trainer's own "setting up the run" seconds, and the full 7B's
# by the same measure extrapolated from --layers and half of it (start-up grows with the layers).
# Last line: one JSON object.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib.sh
source scripts/lib.sh

usage() {
  cat <<'EOF_USAGE'
usage: scripts/bench_startup.sh [--rounds N] [--layers N] [--seq-len N] [--nvme-dir DIR]
       scripts/bench.sh startup [FLAGS...]   (builds bcdtrain first)
  --rounds N      rounds, each a bf16 and an fp32 start (default 3)      [$BENCH_ROUNDS]
  --layers N      decoder layers (default 8), at least 2                 [$BENCH_LAYERS]
  --seq-len N     tokens per sequence (default 16)
  --nvme-dir DIR  where the NVMe tier goes (default: BCD_BUILD_DIR/bench-startup-nvme)
  -h, --help      this text
A variable in brackets is the flag's default when set; the flag wins. The trainer is
BCD_BUILD_DIR/bcdtrain (BCD_BUILD_DIR default build).
EOF_USAGE
}
rounds=${BENCH_ROUNDS:-3} layers=${BENCH_LAYERS:-8} seq_len=16 nvme_dir=""
parse_flags "--rounds=rounds --layers=layers --seq-len=seq_len --nvme-dir=nvme_dir" "$@"
no_args
check_int --rounds "$rounds"
check_int --layers "$layers" 2
check_int --seq-len "$seq_len"
flags_checked

build=${BCD_BUILD_DIR:-build}
bcd=$build/bcdtrain
# shellcheck source=scripts/bench_corpus.sh
source scripts/bench_corpus.sh
bench_require "$bcd"
[[ -n $nvme_dir ]] || nvme_dir=$build/bench-startup-nvme
[[ $nvme_dir != *[\"\\]* ]] || usage_error "--nvme-dir '$nvme_dir': quotes and backslashes are not supported"

work=$(mktemp -d "${TMPDIR:-/tmp}/bcd-bench-startup.XXXXXX")
trap 'rm -rf "$work" "$nvme_dir"' EXIT
# Llama 2's own tokenizer (32000 pieces), so the model's vocabulary is Llama-2-7B's.
"$bcd" prepare --input /usr/share/games/fortunes --out "$work/data" \
  --tokenizer ../shared/data/tokenizers/llama2/tokenizer.json > /dev/null

# start NAME DTYPE LAYERS: one run until its first record; prints "SECONDS SETUP_SECONDS".
start() {
  local run=$work/$1 t0 t1
  rm -rf "$run" "$nvme_dir"
  mkdir -p "$nvme_dir"
  t0=$EPOCHREALTIME
  "$bcd" train --config configs/llama2-7b-lowram.toml --train.device=cpu --train.dtype="$2" \
    --model.n_layers="$3" --train.seq_len="$seq_len" --train.grad_accum=1 --train.steps=2 --bcd.switch_every=1 \
    --data.path="$work/data" --train.run_dir="$run" "--memory.nvme_paths=[\"$nvme_dir\"]" --memory.compute_bytes=20GiB \
    --train.log_every=1 --train.val_every=0 --train.save_model=false '--sample.prompts=[]' > "$run.log" 2>&1 &
  local pid=$!
  until [[ -s $run/metrics.jsonl ]]; do
    if ! kill -0 "$pid" 2> /dev/null; then
      wait "$pid" || true
      [[ -s $run/metrics.jsonl ]] && break
      cat "$run.log" >&2
      die "the $2 run ended before its first step"
    fi
    sleep 0.02
  done
  t1=$EPOCHREALTIME
  wait "$pid" || { cat "$run.log" >&2; die "the $2 run failed"; }
  local setup
  setup=$(sed -n 's/.*setting up the run: done in \([0-9.]*\)s.*/\1/p' "$run.log" | tail -n 1)
  awk -v a="$t0" -v b="$t1" -v s="${setup:-0}" 'BEGIN { printf "%.2f %.2f\n", b - a, s }'
}

half=$((layers / 2))
echo "model: Llama-2-7B layers (d_model 4096, d_ff 11008, vocabulary 32000) x $layers, on the CPU; NVMe homes in $nvme_dir; $rounds rounds"
results=$work/results
for ((r = 1; r <= rounds; r++)); do
  order=(bf16 fp32)
  ((r % 2)) || order=(fp32 bf16)
  for d in "${order[@]}"; do
    read -r s setup < <(start "$d-$r" "$d" "$layers")
    echo "round $r $d: $s s to step 1 (set-up $setup s)"
    echo "$d $layers $s $setup" >> "$results"
  done
  # The half-depth model: the slope that extrapolates to 32 layers.
  read -r s setup < <(start "half-$r" bf16 "$half")
  echo "round $r bf16, $half layers: $s s to step 1 (set-up $setup s)"
  echo "bf16 $half $s $setup" >> "$results"
done

python3 - "$results" "$layers" "$half" <<'EOF'
import json, statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
layers, half = int(sys.argv[2]), int(sys.argv[3])
def med(dtype, n, col):
    return statistics.median(float(r[col]) for r in rows if r[0] == dtype and int(r[1]) == n)
bf16, fp32, bf16_half = med("bf16", layers, 2), med("fp32", layers, 2), med("bf16", half, 2)
per_layer = (bf16 - bf16_half) / (layers - half)
print(json.dumps({
    "benchmark": "startup", "layers": layers,
    "params_millions": round((2 * 32000 * 4096 + layers * (4 * 4096 * 4096 + 3 * 4096 * 11008) + (2 * layers + 1) * 4096) / 1e6, 1),
    "bf16_to_step1_s": round(bf16, 2), "fp32_to_step1_s": round(fp32, 2),
    "bf16_setup_s": round(med("bf16", layers, 3), 2), "fp32_setup_s": round(med("fp32", layers, 3), 2),
    "bf16_half_layers_to_step1_s": round(bf16_half, 2), "bf16_s_per_layer": round(per_layer, 3),
    "llama2_7b_bf16_to_step1_s_extrapolated": round(bf16 + per_layer * (32 - layers), 1),
    "goal_s": 10}))
EOF
