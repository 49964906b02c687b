#!/usr/bin/env bash
# The GPU check, in one call on a machine with an NVIDIA GPU and a pip PyTorch: builds bcdtrain
# against that PyTorch's LibTorch with the CUDA kernels, runs the tests labelled `gpu`, plans full
# AdamW on the Llama-2-7B shape, and trains that shape (random init) by BCD under a 24 GiB compute
# cap with master + moments staged from host memory, then from NVMe, then on 2 ranks over NCCL when
# 2 GPUs are visible. Every part runs under a share of --time-limit and is killed past it; logs go
# to --out. Progress goes to stderr; the last stdout line is one JSON object, made by
# scripts/gpu_check_summary.py from the out directory and also written to OUT/gpu_check.json.
# Exit status: 0 every part passed; 1 a part failed, timed out or was not run (the JSON's "errors"
# says which); 2 bad flags; 3 no usable GPU (found before anything is built or written: one line on
# stderr says why, and the JSON has "gpu": null and "skipped": why); 130 interrupted (no JSON).
set -uo pipefail
export LC_ALL=C  # decimal points in $EPOCHREALTIME and awk
caller_dir=$PWD
cd "$(dirname "$0")/.." || exit 1
repo=$PWD

usage() {
  cat <<'EOF'
usage: scripts/gpu_check.sh [--build-dir DIR] [--out DIR] [--skip-build] [--build-all] [--steps N]
                            [--switch-every K] [--data DIR] [--nvme-dir DIR] [--time-limit SECONDS]
  --build-dir DIR       CUDA build directory (default: build-gpu in the repository)
  --out DIR             logs and gpu_check.json (default: $OUT when set, else BUILD_DIR/gpu-check-out)
  --skip-build          use the build already in --build-dir (a second call on the same machine)
  --build-all           build every target (default: bcdtrain and the gpu tests' executables)
  --steps N             optimizer steps of each training run (default 12)
  --switch-every K      steps per BCD visit (default 2; N must be at least 2K + 1)
  --data DIR            a dataset made by `bcdtrain prepare` (default: prepare Debian's fortunes)
  --nvme-dir DIR        where the NVMe tier goes (default: BUILD_DIR/gpu-check-work)
  --time-limit SECONDS  wall-clock budget of the whole check, summary included (default 470)
  -h, --help            this text
The last stdout line is one JSON object (keys: README.md, "GPU check"). Exit status: 0 all parts
passed, 1 a part failed or timed out, 2 bad flags, 3 no usable GPU (nothing built).
EOF
}
usage_error() {
  echo "gpu_check: $1 (see scripts/gpu_check.sh --help)" >&2
  exit 2
}
say() { echo "gpu_check: $*" >&2; }

# ---- Flags ----
build_dir="" out_dir="" skip_build=0 build_all=0 steps=12 switch_every=2 data_dir="" nvme_dir=""
time_limit=470
while (($#)); do
  flag=$1 value="" has_value=0
  if [[ $flag == --*=* ]]; then value=${flag#*=} flag=${flag%%=*} has_value=1; fi
  case $flag in
    -h | --help) usage; exit 0 ;;
    --skip-build | --build-all)
      ((has_value)) && usage_error "$flag takes no value"
      [[ $flag == --skip-build ]] && skip_build=1 || build_all=1 ;;
    --build-dir | --out | --steps | --switch-every | --data | --nvme-dir | --time-limit)
      if ((!has_value)); then
        (($# >= 2)) || usage_error "$flag needs a value"
        value=$2
        shift
      fi
      [[ -n $value ]] || usage_error "$flag needs a value"
      case $flag in
        --build-dir) build_dir=$value ;;
        --out) out_dir=$value ;;
        --steps) steps=$value ;;
        --switch-every) switch_every=$value ;;
        --data) data_dir=$value ;;
        --nvme-dir) nvme_dir=$value ;;
        --time-limit) time_limit=$value ;;
      esac ;;
    -*) usage_error "unknown flag '$flag'" ;;
    *) usage_error "unexpected argument '$flag'" ;;
  esac
  shift
done

for f in steps switch_every time_limit; do
  [[ ${!f} =~ ^[1-9][0-9]{0,6}$ ]] || usage_error "--${f//_/-}: expected a positive integer, got '${!f}'"
done
# Medians are taken over the steps after the first switch (step K + 1), which must hold a switch.
((steps >= 2 * switch_every + 1)) ||
  usage_error "--steps $steps with --switch-every $switch_every: needs at least $((2 * switch_every + 1)) steps (a switch after the first one)"
absolute() { if [[ $1 == /* ]]; then echo "$1"; else echo "$caller_dir/$1"; fi; }
explicit_out=0
if [[ -n $out_dir ]]; then out_dir=$(absolute "$out_dir") explicit_out=1
elif [[ -n ${OUT:-} ]]; then out_dir=$(absolute "$OUT") explicit_out=1
fi
if [[ -n $build_dir ]]; then build_dir=$(absolute "$build_dir"); else build_dir=$repo/build-gpu; fi
[[ -n $data_dir ]] && data_dir=$(absolute "$data_dir")
[[ -n $nvme_dir ]] && nvme_dir=$(absolute "$nvme_dir")
# Paths reach the trainer as TOML strings.
for p in "$build_dir" "$data_dir" "$nvme_dir"; do
  [[ $p != *[\"\\]* ]] || usage_error "path '$p': quotes and backslashes are not supported"
done
[[ -z $data_dir || -f $data_dir/tokens.h5 ]] || usage_error "--data $data_dir: no tokens.h5 there (make it with bcdtrain prepare)"

# ---- GPU: nvidia-smi lists one and PyTorch can use it; else skip before anything is built ----
skip() {
  say "skipped: $1"
  local json rc=3
  if command -v python3 > /dev/null; then
    json=$(python3 scripts/gpu_check_summary.py --skipped "$1")
  else
    json="{\"gpu\": null, \"skipped\": \"${1//[\"\\]/\'}\", \"errors\": []}"
  fi
  if ((explicit_out)); then mkdir -p "$out_dir" && printf '%s\n' "$json" > "$out_dir/gpu_check.json"; fi
  printf '%s\n' "$json"
  exit $rc
}
command -v nvidia-smi > /dev/null || skip "no GPU: nvidia-smi not found"
smi=$(nvidia-smi -L 2>&1)
smi_rc=$?
if ((smi_rc != 0)) || ! grep -qE '^GPU [0-9]+:' <<< "$smi"; then
  skip "no GPU: nvidia-smi -L lists none (exit $smi_rc: $(head -n 1 <<< "$smi"))"
fi
command -v python3 > /dev/null || skip "no PyTorch: python3 not found"
probe=$(python3 -c '
import sys
try:
    import torch
except Exception as e:
    sys.exit("no PyTorch: python3 cannot import torch (%s)" % e)
if not torch.cuda.is_available():
    sys.exit("no GPU: torch %s (CUDA %s) finds no usable CUDA device" % (torch.__version__, torch.version.cuda))
import torch.utils
print("gpus=%d" % torch.cuda.device_count())
print("gpu=%s" % torch.cuda.get_device_name(0))
print("torch=%s" % torch.__version__)
print("cuda=%s" % torch.version.cuda)
print("arch=%d%d" % torch.cuda.get_device_capability(0))
print("prefix=%s" % torch.utils.cmake_prefix_path)
' 2>&1) || skip "$(tail -n 1 <<< "$probe")"
probe_value() { sed -n "s/^$1=//p" <<< "$probe" | head -n 1; }
gpu_count=$(probe_value gpus) cuda_arch=$(probe_value arch) torch_prefix=$(probe_value prefix)
say "$(probe_value gpu) x $gpu_count, torch $(probe_value torch) (CUDA $(probe_value cuda))"

# ---- Directories: OUT holds what a caller fetches (small); WORK the runs' large files ----
[[ -n $out_dir ]] || out_dir=$build_dir/gpu-check-out
work_dir=$build_dir/gpu-check-work
[[ -n $nvme_dir ]] || nvme_dir=$work_dir
nvme_path=$nvme_dir/bcdtrain-gpu-check  # removed after each run: never the given directory itself
status_dir=$out_dir/status
mkdir -p "$out_dir" "$work_dir" || { say "cannot create $out_dir and $work_dir"; exit 1; }
# An earlier call's results must not pass for this one's.
rm -rf "$status_dir" "$out_dir"/bcd_* "$out_dir"/{build.log,ctest-gpu.log,corpus.log,plan-full-adamw.txt,gpu_check.json}
mkdir -p "$status_dir"
grep -E '^(gpus|gpu|torch|cuda|arch)=' <<< "$probe" > "$status_dir/probe"

# SIGINT / SIGTERM: stop the running part with its children and exit 130, without a summary.
exec 3>&2  # the trap may run while stderr is elsewhere
part_pid=""
# shellcheck disable=SC2317  # called by the trap
on_signal() {
  exec 2>&3
  [[ -n $part_pid ]] && kill -KILL -- "-$part_pid" 2> /dev/null
  say "interrupted; logs so far in $out_dir"
  exit 130
}
trap on_signal INT TERM

# ---- Parts and their time budgets ----
# A part gets at most its cap, and never the minimum that every later part needs (plus the
# summary's reserve): a slow build leaves the training runs their minimum, and a part that would
# get less than its own minimum is not run. A part past its budget is killed with its children
# (SIGKILL: SIGTERM would make the trainer checkpoint ~100 GB of state first).
declare -A part_min=([build]=60 [ctest_gpu]=30 [plan_full_adamw]=5 [corpus]=20 [bcd_host]=60 [bcd_nvme]=60 [bcd_2rank]=60)
declare -A part_cap=([build]=$time_limit [ctest_gpu]=150 [plan_full_adamw]=30 [corpus]=90 [bcd_host]=180 [bcd_nvme]=180 [bcd_2rank]=180)
summary_reserve=10
planned=()
((skip_build)) || planned+=(build)
planned+=(ctest_gpu plan_full_adamw)
[[ -n $data_dir ]] || planned+=(corpus)
planned+=(bcd_host bcd_nvme)
((gpu_count >= 2)) && planned+=(bcd_2rank)

# Prints the part's budget in seconds; fails when that is under the part's minimum.
budget_for() {
  local part=$1 later=0 after=0 p
  for p in "${planned[@]}"; do
    ((after)) && later=$((later + part_min[$p]))
    [[ $p == "$part" ]] && after=1
  done
  local left=$((time_limit - SECONDS - summary_reserve - later))
  local budget=$((left < part_cap[$part] ? left : part_cap[$part]))
  echo "$budget"
  ((budget >= part_min[$part]))
}

# record PART key=value...: status/PART, read by gpu_check_summary.py.
record() {
  local part=$1
  shift
  printf '%s\n' "${@//$'\n'/ }" > "$status_dir/$part"
}

# run_part PART OK_RCS LOG ERRLOG CMD...: CMD under PART's budget, stdout to LOG and stderr to
# ERRLOG (- for LOG too); OK_RCS are the exit codes that mean success. Records status/PART and
# returns 0 when the part is ok.
run_part() {
  local part=$1 ok_rcs=$2 log=$3 errlog=$4 limit
  shift 4
  if ! limit=$(budget_for "$part"); then
    record "$part" state=not_run \
      "reason=not enough time left ($limit s of --time-limit $time_limit; needs ${part_min[$part]} s)"
    say "$part: not run: not enough time left"
    return 1
  fi
  local rel=${log#"$out_dir"/} errrel=${errlog#"$out_dir"/}
  [[ $errlog == - ]] && errrel=$rel
  say "$part: running (budget $limit s, log $rel)"
  local t0=$EPOCHREALTIME rc
  # In the background so that a signal's trap runs at once (and stops it); timeout makes the
  # part a process group of its own, which the trap kills.
  if [[ $errlog == - ]]; then
    timeout -s KILL "$limit" "$@" > "$log" 2>&1 &
  else
    timeout -s KILL "$limit" "$@" > "$log" 2> "$errlog" &
  fi
  part_pid=$!
  { wait "$part_pid"; } 2> /dev/null  # no "Killed" notice from bash: the status says it
  rc=$?
  part_pid=""
  local seconds state reason=""
  seconds=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')
  if [[ " $ok_rcs " == *" $rc "* ]]; then
    state=ok
  elif ((rc == 124 || rc == 137)) && awk -v s="$seconds" -v l="$limit" 'BEGIN { exit !(s >= l - 1) }'; then
    state=timed_out
  else
    state=failed
    ((rc > 128)) && reason="killed by signal $((rc - 128))"
  fi
  record "$part" "state=$state" "rc=$rc" "seconds=$seconds" "limit_s=$limit" "log=$rel" "errlog=$errrel" \
    ${reason:+"reason=$reason"}
  say "$part: $state (exit $rc, $seconds s)"
  [[ $state == ok ]]
}

# ---- Build: the CUDA path against the pip PyTorch's LibTorch ----
bin=$build_dir/bcdtrain
if ((skip_build)); then
  if [[ -x $bin ]]; then
    record build state=skipped "reason=--skip-build"
  else
    record build state=failed "reason=--skip-build but $bin is missing"
  fi
else
  # Only what this check runs (bcdtrain, and the executables of the `gpu` tests: the target
  # bcd_gpu_tests in tests/CMakeLists.txt), unless --build-all.
  targets=(--target bcdtrain bcd_gpu_tests)
  ((build_all)) && targets=()
  # shellcheck disable=SC2016  # expanded by the inner bash
  run_part build 0 "$out_dir/build.log" - bash -c '
    set -ex
    cmake -S . -B "$1" -DCMAKE_BUILD_TYPE=Release -DBCD_CUDA=ON "-DCMAKE_PREFIX_PATH=$2" "-DBCD_CUDA_ARCHITECTURES=$3"
    build=$1
    shift 3
    cmake --build "$build" -j "$(nproc)" "$@"' _ "$build_dir" "$torch_prefix" "$cuda_arch" "${targets[@]}"
fi
have_bin=0
[[ $(sed -n 's/^state=//p' "$status_dir/build") =~ ^(ok|skipped)$ && -x $bin ]] && have_bin=1
# skip_part PART WHY: a part that cannot run because an earlier one failed (that one is the error).
skip_part() { record "$1" state=skipped "reason=$2"; say "$1: skipped: $2"; }

# ---- Tests labelled gpu ----
if ((have_bin)); then
  run_part ctest_gpu 0 "$out_dir/ctest-gpu.log" - ctest --test-dir "$build_dir" -L gpu --output-on-failure --timeout 300
else
  skip_part ctest_gpu "no build"
fi

# ---- Training set-up: Llama-2-7B shape from the shipped config, BCD under a 24 GiB cap ----
config=configs/llama2-7b-1x4090.toml
toml_str() { printf '"%s"' "$1"; }
# A fixed cycle over the top three layers: after the first cycle every switch reads the next
# block's master + moments back from its home and writes the previous one's out, as in a long run
# (a block's first visit reads nothing: it starts from the model). Their steps run backward
# through 3 of 32 layers, so tokens/s is above a random order's mean; TFLOP/s counts what ran.
cycle='["layer.29","layer.30","layer.31"]'
train_common=(--train.device=cuda --train.steps="$steps" --train.warmup_steps=1 --train.val_batches=1
  --train.checkpoint_every=0 --train.save_model=false --train.log_every=1 --bcd.enabled=true --bcd.switch_every="$switch_every"
  --bcd.order=fixed "--bcd.fixed_order=$cycle" --memory.compute_bytes=24GiB --memory.pinned_bytes=auto
  "--sample.prompts=[]")
# Host run: every block's master + moments in host memory (75.3 GiB + the 4.5 GiB pinned pool).
host_memory=(--memory.home=host --memory.host_bytes=auto "--memory.nvme_paths=[]")
# NVMe run: host memory first fit by block (embed, layer.0 .., head) under 72 GiB less the pinned
# pool: embed and layer.0-28 fit (67.1 GiB), layer.29-31 and head (8.25 GiB) go to NVMe, which keeps
# the tier within a 64 GiB disk beside the build. `bcdtrain plan` shows it (OUT/bcd_nvme/plan.txt).
nvme_memory=(--memory.home=auto --memory.host_bytes=72GiB "--memory.nvme_paths=[$(toml_str "$nvme_path")]")

# ---- Planner: full-parameter AdamW on the same shape ----
if ((have_bin)); then
  # Exit 2 with the table is the expected answer: it does not fit 24 GiB.
  run_part plan_full_adamw "0 2" "$out_dir/plan-full-adamw.txt" - \
    "$bin" plan --config "$config" "${train_common[@]}" --bcd.enabled=false "--memory.nvme_paths=[]"
else
  skip_part plan_full_adamw "no build"
fi

# ---- Corpus: Debian's fortunes (as scripts/train.sh), else the shared LIMA records ----
corpus=""
if [[ -n $data_dir ]]; then
  corpus=$data_dir
  record corpus state=skipped "reason=--data $data_dir"
elif ((!have_bin)); then
  skip_part corpus "no build"
else
  text=""
  if [[ -d /usr/share/games/fortunes ]]; then
    text=/usr/share/games/fortunes
  else
    for lima in shared/data/lima-900.jsonl ../shared/data/lima-900.jsonl; do
      [[ -f $lima ]] || continue
      # One document per record: prompt and response as paragraphs, records a blank line apart.
      mkdir -p "$work_dir/lima" && python3 -c '
import json, sys
with open(sys.argv[2], "w") as out:
    for line in open(sys.argv[1]):
        r = json.loads(line)
        out.write(r["prompt"].strip() + "\n\n" + r["response"].strip() + "\n\n")' "$lima" "$work_dir/lima/lima.txt" &&
        text=$work_dir/lima
      break
    done
  fi
  if [[ -z $text ]]; then
    record corpus state=failed \
      "reason=no text to prepare: neither /usr/share/games/fortunes (Debian's fortunes) nor shared/data/lima-900.jsonl; give --data DIR"
    say "corpus: failed: no text to prepare"
  elif run_part corpus 0 "$out_dir/corpus.log" - \
    "$bin" prepare --input "$text" --out "$work_dir/corpus" --vocab-size 2048 --force; then
    corpus=$work_dir/corpus
  fi
fi

# ---- Training runs ----
# train_run RUN NPROC EXPECT_NVME_READS MEMORY_OVERRIDES...: plans the run (OUT/RUN/plan.txt), then
# trains it into WORK/runs/RUN; stdout, stderr, config and metrics go to OUT/RUN.
train_run() {
  local run=$1 nproc=$2 expect=$3
  shift 3
  local dir=$out_dir/$run run_dir=$work_dir/runs/$run
  local args=(--config "$config" "--data.path=$(toml_str "$corpus")" "--train.run_dir=$(toml_str "$run_dir")"
    "${train_common[@]}" "$@")
  mkdir -p "$dir" "$nvme_path"
  rm -rf "$run_dir"
  # The plan within the run's budget: its table is for the reader; train refuses what plan would.
  # shellcheck disable=SC2016  # expanded by the inner bash
  run_part "$run" 0 "$dir/stdout.log" "$dir/stderr.log" bash -c '
    bin=$1 plan_txt=$2 nproc=$3
    shift 3
    "$bin" plan --nproc "$nproc" "$@" > "$plan_txt" 2>&1
    if ((nproc > 1)); then exec "$bin" launch --nproc "$nproc" train "$@"; else exec "$bin" train "$@"; fi
  ' _ "$bin" "$dir/plan.txt" "$nproc" "${args[@]}"
  echo "expect_nvme_reads=$expect" >> "$status_dir/$run"
  local f
  for f in metrics.jsonl config.toml; do [[ -f $run_dir/$f ]] && cp "$run_dir/$f" "$dir/"; done
  # A killed run's NVMe extents: nothing here reads them (train.save_model = false: no weights).
  rm -rf "$nvme_path"
}
for run in bcd_host bcd_nvme bcd_2rank; do
  if ((!have_bin)); then
    skip_part $run "no build"
  elif [[ -z $corpus ]]; then
    skip_part $run "no corpus"
  elif [[ $run == bcd_host ]]; then
    train_run bcd_host 1 0 "${host_memory[@]}"
  elif [[ $run == bcd_nvme ]]; then
    train_run bcd_nvme 1 1 "${nvme_memory[@]}"
  elif ! "$bin" --help | grep -q '^  launch '; then
    skip_part bcd_2rank "bcdtrain has no launch subcommand"
  elif ((gpu_count < 2)); then
    skip_part bcd_2rank "needs 2 GPUs: $gpu_count visible (NCCL allows one rank per GPU in a communicator)"
  else
    train_run bcd_2rank 2 0 "${host_memory[@]}"
  fi
done

# ---- Summary: the last stdout line ----
summary=$(python3 scripts/gpu_check_summary.py "$out_dir")
rc=$?
summary=${summary##*$'\n'}
if [[ $summary != "{"* ]]; then
  summary="{\"gpu\": null, \"skipped\": null, \"errors\": [\"summary: scripts/gpu_check_summary.py printed no JSON (exit $rc)\"]}"
  rc=1
fi
printf '%s\n' "$summary" > "$out_dir/gpu_check.json"
say "done in $SECONDS s, exit $rc; logs in $out_dir"
printf '%s\n' "$summary"
exit $rc
