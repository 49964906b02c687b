#!/usr/bin/env bash
# The GPU check, in one call on a machine with an NVIDIA GPU, the CUDA toolkit, CMake, ninja and a
# pip PyTorch, and no network: with --deps DIR (made by scripts/gpu_deps.sh where Debian's packages
# are reachable) the libraries bcdtrain builds against are unpacked into a private prefix. It
# builds bcdtrain and the `gpu` tests against that PyTorch's LibTorch with the CUDA kernels and
# NCCL, runs those tests in parallel, plans full AdamW on the Llama-2-7B shape, trains the tiny
# model on the GPU with its frozen layers' weights streamed (from host memory, then from NVMe)
# and not streamed (the losses must agree), and trains the 7B shape (random init) by BCD under a
# 24 GiB compute cap with master + moments homed partly in host memory, partly on NVMe; on 2
# ranks over NCCL too when 2 GPUs are visible. Every part runs under a share of --time-limit, is
# killed past it and is timed (the JSON's "parts"). Progress goes to stderr; the last stdout line
# is one JSON object, made by scripts/gpu_check_summary.py. The out directory gets two files:
# gpu_check.json and gpu-check-logs.tar.gz (every log, plan and metrics file).
# --dry-run needs no GPU, nvidia-smi nor torch: it checks the flags, the --deps folder against its
# MANIFEST and the summary script on a fixture, prints the device run's plan and exits 0; it
# builds and writes nothing.
# Exit status: 0 every part passed; 1 a part failed, timed out or was not run (the JSON's "errors"
# says which); 2 bad flags or --deps; 3 no usable GPU (found before anything is built or written:
# one line on stderr says why, and the JSON has "gpu": null and "skipped": why); 130 interrupted.
set -euo pipefail
export LC_ALL=C  # decimal points in $EPOCHREALTIME and awk
check_t0=$EPOCHREALTIME  # the whole check's clock: the JSON's total_s
caller_dir=$PWD
cd "$(dirname "$0")/.."
repo=$PWD
# shellcheck source=scripts/lib.sh
source scripts/lib.sh

usage() {
  cat <<'EOF'
usage: scripts/gpu_check.sh [--deps DIR] [--build-dir DIR] [--out DIR] [--skip-build] [--build-all]
                            [--steps N] [--switch-every K] [--data DIR] [--nvme-dir DIR]
                            [--python PATH] [--time-limit SECONDS] [--dry-run]
  --deps DIR            the packages scripts/gpu_deps.sh downloaded: unpacked into BUILD_DIR/deps
                        and used for the build (default: the machine's own libraries)
  --build-dir DIR       CUDA build directory (default: build-gpu in the repository)
  --out DIR             gpu_check.json and gpu-check-logs.tar.gz (default: $OUT when set, else
                        BUILD_DIR/gpu-check-out)
  --skip-build          use the build already in --build-dir (a second call on the same machine)
  --build-all           build every target (default: bcdtrain and the gpu tests' executables)
  --steps N             optimizer steps of each 7B run (default 9)
  --switch-every K      steps per BCD visit of the 7B runs (default 2; N must be at least 4K + 1)
  --data DIR            a dataset made by `bcdtrain prepare` (default: prepare Debian's fortunes)
  --nvme-dir DIR        where the NVMe tier goes (default: BUILD_DIR/gpu-check-work)
  --python PATH         the Python whose torch is built against (default: python3)
  --time-limit SECONDS  wall-clock budget of the whole check, summary included (default 540)
  --dry-run             on any machine, no GPU needed: check the flags, --deps against its
                        MANIFEST (sizes and checksums) and the summary script (on
                        tests/scripts/fixtures/one_gpu), print the device run's plan (each part
                        with its minimum, cap, budget and estimated seconds on a 16-core H100
                        machine; the total against --time-limit) and exit 0; nothing is written
  -h, --help            this text
The last stdout line is one JSON object (keys: README.md, "GPU check"). Exit status: 0 all parts
passed, 1 a part failed or timed out (--dry-run: the summary script failed), 2 bad flags or
--deps, 3 no usable GPU (nothing built).
EOF
}

# ---- Flags ----
build_dir="" out_dir="" skip_build=0 build_all=0 steps=9 switch_every=2 data_dir="" nvme_dir=""
deps_dir="" python=python3 time_limit=540 dry_run=0
parse_flags "--deps=deps_dir --build-dir=build_dir --out=out_dir --skip-build:skip_build --build-all:build_all
  --steps=steps --switch-every=switch_every --data=data_dir --nvme-dir=nvme_dir --python=python
  --time-limit=time_limit --dry-run:dry_run" "$@"
no_args
check_int --steps "$steps"
check_int --switch-every "$switch_every"
check_int --time-limit "$time_limit"
# Medians are taken over the steps after the first switch (step K + 1), which must hold a switch.
# The 7B runs cycle over 3 units: the 4th visit (step 3K + 1) reads layer.28 back from host
# memory, the 5th (step 4K + 1) layer.29 from NVMe; a first visit reads nothing.
((steps >= 4 * switch_every + 1)) ||
  usage_error "--steps $steps with --switch-every $switch_every: needs at least $((4 * switch_every + 1)) steps (a read back from NVMe)"
absolute() { if [[ $1 == /* ]]; then echo "$1"; else echo "$caller_dir/$1"; fi; }
explicit_out=0
if [[ -n $out_dir ]]; then out_dir=$(absolute "$out_dir") explicit_out=1
elif [[ -n ${OUT:-} ]]; then out_dir=$(absolute "$OUT") explicit_out=1
fi
if [[ -n $build_dir ]]; then build_dir=$(absolute "$build_dir"); else build_dir=$repo/build-gpu; fi
[[ -n $data_dir ]] && data_dir=$(absolute "$data_dir")
[[ -n $nvme_dir ]] && nvme_dir=$(absolute "$nvme_dir")
[[ -n $deps_dir ]] && deps_dir=$(absolute "$deps_dir")
# Paths reach the trainer as TOML strings.
for p in "$build_dir" "$data_dir" "$nvme_dir"; do
  [[ $p != *[\"\\]* ]] || usage_error "path '$p': quotes and backslashes are not supported"
done
[[ -z $data_dir || -f $data_dir/tokens.h5 ]] || usage_error "--data $data_dir: no tokens.h5 there (make it with bcdtrain prepare)"
[[ -z $deps_dir || -f $deps_dir/MANIFEST ]] ||
  usage_error "--deps $deps_dir: no MANIFEST there (make the folder with scripts/gpu_deps.sh DIR)"

# ---- Parts and their time budgets (README.md, "GPU check", has the table and the reasoning) ----
# A part gets at most its cap, and never the minimum that every later part needs (plus the
# summary's reserve): a slow build leaves the training runs their minimum, and a part that would
# get less than its own minimum is not run. A part past its budget is killed with its children
# (SIGKILL: SIGTERM would make the trainer checkpoint ~100 GB of state first). The estimates are
# seconds on a 16-core H100 machine with an NVMe drive, not yet measured: --dry-run prints them
# with the budgets they would leave, the JSON's "parts" what each part took.
declare -A part_min=([deps]=5 [configure]=10 [build]=60 [ctest_gpu]=20 [plan_full_adamw]=5 [corpus]=10
  [stream_off]=10 [stream_host]=10 [stream_nvme]=10 [bcd_7b]=60 [bcd_7b_noprefetch]=60 [bcd_2rank]=60)
declare -A part_cap=([deps]=30 [configure]=60 [build]=$time_limit [ctest_gpu]=60 [plan_full_adamw]=20
  [corpus]=30 [stream_off]=30 [stream_host]=30 [stream_nvme]=30 [bcd_7b]=150 [bcd_7b_noprefetch]=150
  [bcd_2rank]=150)
declare -A part_estimate=([probe]=5 [deps]=5 [configure]=15 [build]=120 [ctest_gpu]=20 [plan_full_adamw]=1
  [corpus]=5 [stream_off]=8 [stream_host]=8 [stream_nvme]=8 [bcd_7b]=40 [bcd_7b_noprefetch]=45 [bcd_2rank]=60
  [summary]=2)
probe_limit=60  # the GPU probe (import torch, start CUDA), before any part
summary_reserve=10
# plan_parts GPUS: the parts this call runs, in order, into `planned`.
plan_parts() {
  planned=()
  [[ -n $deps_dir ]] && planned+=(deps)
  ((skip_build)) || planned+=(configure build)
  planned+=(ctest_gpu plan_full_adamw)
  [[ -n $data_dir ]] || planned+=(corpus)
  planned+=(stream_off stream_host stream_nvme bcd_7b bcd_7b_noprefetch)
  (($1 >= 2)) && planned+=(bcd_2rank)
  return 0
}

# budget_for PART [ELAPSED]: prints the part's budget in seconds when it starts ELAPSED seconds
# into the check (default: now); fails when that is under the part's minimum.
budget_for() {
  local part=$1 elapsed=${2:-$SECONDS} later=0 after=0 p
  for p in "${planned[@]}"; do
    ((after)) && later=$((later + part_min[$p]))
    [[ $p == "$part" ]] && after=1
  done
  local left=$((time_limit - elapsed - summary_reserve - later))
  local budget=$((left < part_cap[$part] ? left : part_cap[$part]))
  echo "$budget"
  ((budget >= part_min[$part]))
}

# seconds_since T0: seconds from $EPOCHREALTIME T0 to now, one decimal.
seconds_since() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }'; }

# ---- Dry run: what needs no device, then the device run's plan ----
# check_manifest DIR: every file of DIR/MANIFEST is there with its size and sha256 (as
# `gpu_deps.sh --unpack` checks them); prints "N packages, K KiB"; exit 2 naming the first that is not.
check_manifest() {
  local dir=$1 p bytes sum file n=0 total=0 size
  while read -r p _ _ bytes sum file; do
    [[ -n $file && $bytes =~ ^[0-9]+$ ]] ||
      die "--deps $dir: MANIFEST line $((n + 1)) is not 'package version kind bytes sha256 file'"
    [[ $file != */* && -f $dir/$file ]] || die "--deps $dir: $file ($p) is missing"
    size=$(stat -c %s "$dir/$file")
    [[ $size == "$bytes" ]] || die "--deps $dir: $file: $size bytes, MANIFEST says $bytes"
    [[ $(sha256sum "$dir/$file" | cut -d' ' -f1) == "$sum" ]] || die "--deps $dir: $file: checksum differs from MANIFEST"
    n=$((n + 1)) total=$((total + bytes))
  done < "$dir/MANIFEST"
  ((n)) || die "--deps $dir: MANIFEST lists no package"
  echo "$n packages, $((total / 1024)) KiB"
}

# plan_row PART MIN CAP BUDGET ESTIMATE [NOTE]: one line of the plan.
plan_row() { printf '%-18s %7s %5s %6s %8s%s\n' "$1" "$2" "$3" "$4" "$5" "${6:+  $6}"; }

# print_plan: the device run's parts as a table (one GPU; bcd_2rank apart), each part's budget
# as if every part before it took its estimate (or its budget, when that is less: it is killed
# there; or nothing, when it would not run).
print_plan() {
  local elapsed=${part_estimate[probe]} p budget note over=0 took
  plan_row part minimum cap budget estimate
  plan_row probe - "$probe_limit" "$probe_limit" "${part_estimate[probe]}" "import torch, start CUDA"
  for p in "${planned[@]}"; do
    note=""
    budget=$(budget_for "$p" "$elapsed") || note="under its minimum: would not run"
    if [[ -z $note ]] && ((part_estimate[$p] > budget)); then note="estimate over budget"; fi
    [[ -n $note ]] && over=$((over + 1))
    plan_row "$p" "${part_min[$p]}" "${part_cap[$p]}" "$budget" "${part_estimate[$p]}" "$note"
    took=$((part_estimate[$p] < budget ? part_estimate[$p] : budget))
    elapsed=$((elapsed + (took > 0 && budget >= part_min[$p] ? took : 0)))
  done
  plan_row bcd_2rank "${part_min[bcd_2rank]}" "${part_cap[bcd_2rank]}" - "${part_estimate[bcd_2rank]}" \
    "only with 2 GPUs or more: not in the total"
  plan_row summary "$summary_reserve" - "$summary_reserve" "${part_estimate[summary]}" "the JSON and the logs' tarball"
  elapsed=$((elapsed + part_estimate[summary]))
  local spare=$((time_limit - elapsed))
  printf 'total: %d s estimated of --time-limit %d s (%d%% of it; %d s spare)\n' \
    "$elapsed" "$time_limit" $((100 * elapsed / time_limit)) "$spare"
  ((over == 0)) || printf 'warning: %d part(s) would not fit their budget (the total counts what they would get)\n' "$over"
}

if ((dry_run)); then
  echo "dry run: flags ok; no device used, nothing written"
  if [[ -n $deps_dir ]]; then
    deps_found=$(check_manifest "$deps_dir")  # exit 2 here when a file is missing or differs
    echo "--deps $deps_dir: $deps_found, sizes and checksums as in MANIFEST"
  else
    echo "--deps: not given (the build uses the machine's own libraries)"
  fi
  fixture=tests/scripts/fixtures/one_gpu
  command -v python3 > /dev/null || { say "dry run: python3 not found (scripts/gpu_check_summary.py needs it)"; exit 1; }
  [[ -d $fixture ]] || { say "dry run: $fixture not found (the summary script's fixture)"; exit 1; }
  summary_rc=0
  summary=$(python3 scripts/gpu_check_summary.py "$fixture" 2>&1) || summary_rc=$?
  summary=${summary##*$'\n'}
  # The fixture holds failed parts: exit 1 with the JSON is the summary's answer.
  if ((summary_rc > 1)) || [[ $summary != "{"*'"parts": {'* ]]; then
    say "dry run: scripts/gpu_check_summary.py $fixture printed no summary (exit $summary_rc): ${summary:0:300}"
    exit 1
  fi
  echo "summary: scripts/gpu_check_summary.py $fixture printed its JSON (exit $summary_rc)"
  plan_parts 1
  echo "the device run's parts, in order (seconds; estimates for a 16-core H100 machine; budget: what"
  echo "the part gets when every part before it took its estimate):"
  print_plan
  exit 0
fi

# ---- GPU: nvidia-smi lists one and PyTorch can use it; else skip before anything is built ----
skip() {
  say "skipped: $1"
  local json rc=3
  if command -v python3 > /dev/null; then
    json=$(python3 scripts/gpu_check_summary.py --skipped "$1") || true  # exits 3, as this script
  else
    json="{\"gpu\": null, \"skipped\": \"${1//[\"\\]/\'}\", \"errors\": []}"
  fi
  if ((explicit_out)); then
    { mkdir -p "$out_dir" && printf '%s\n' "$json" > "$out_dir/gpu_check.json"; } || say "cannot write $out_dir/gpu_check.json"
  fi
  printf '%s\n' "$json"
  exit $rc
}
command -v nvidia-smi > /dev/null || skip "no GPU: nvidia-smi not found"
smi_rc=0
smi=$(nvidia-smi -L 2>&1) || smi_rc=$?
if ((smi_rc != 0)) || ! grep -qE '^GPU [0-9]+:' <<< "$smi"; then
  skip "no GPU: nvidia-smi -L lists none (exit $smi_rc: $(head -n 1 <<< "$smi"))"
fi
command -v "$python" > /dev/null || skip "no PyTorch: $python not found"
# Under a limit: a driver that hangs in CUDA's start is a GPU this check cannot use.
probe_t0=$EPOCHREALTIME probe_rc=0
probe=$(timeout -s KILL "$probe_limit" "$python" -c '
import sys
try:
    import torch
except Exception as e:
    sys.exit("no PyTorch: %s cannot import torch (%s)" % (sys.executable, e))
if not torch.cuda.is_available():
    sys.exit("no GPU: torch %s (CUDA %s) finds no usable CUDA device" % (torch.__version__, torch.version.cuda))
import torch.utils
print("gpus=%d" % torch.cuda.device_count())
print("gpu=%s" % torch.cuda.get_device_name(0))
print("torch=%s" % torch.__version__)
print("cuda=%s" % torch.version.cuda)
print("arch=%d%d" % torch.cuda.get_device_capability(0))
print("prefix=%s" % torch.utils.cmake_prefix_path)
' 2>&1) || probe_rc=$?
((probe_rc != 137)) || skip "no GPU: $python did not import torch and start CUDA within $probe_limit s"
((probe_rc == 0)) || skip "$(tail -n 1 <<< "$probe")"
probe_s=$(seconds_since "$probe_t0")
probe_value() { sed -n "s/^$1=//p" <<< "$probe" | head -n 1; }
gpu_count=$(probe_value gpus) cuda_arch=$(probe_value arch) torch_prefix=$(probe_value prefix)
say "$(probe_value gpu) x $gpu_count, torch $(probe_value torch) (CUDA $(probe_value cuda)), found in $probe_s s"
plan_parts "$gpu_count"

# ---- Directories: LOGS holds every log (tarred into OUT at the end); WORK the runs' large files ----
[[ -n $out_dir ]] || out_dir=$build_dir/gpu-check-out
logs_dir=$build_dir/gpu-check-logs
work_dir=$build_dir/gpu-check-work
[[ -n $nvme_dir ]] || nvme_dir=$work_dir
nvme_path=$nvme_dir/bcdtrain-gpu-check  # removed after each run: never the given directory itself
status_dir=$logs_dir/status
mkdir -p "$out_dir" "$work_dir" || { say "cannot create $out_dir and $work_dir"; exit 1; }
# An earlier call's results must not pass for this one's.
rm -rf "$logs_dir" "$out_dir/gpu_check.json" "$out_dir/gpu-check-logs.tar.gz"
mkdir -p "$status_dir"
{
  grep -E '^(gpus|gpu|torch|cuda|arch)=' <<< "$probe" || true
  printf 'state=ok\nseconds=%s\nlimit_s=%s\n' "$probe_s" "$probe_limit"
} > "$status_dir/probe"

# SIGINT / SIGTERM: stop the running part with its children and exit 130, without a summary.
exec 3>&2  # the trap may run while stderr is elsewhere
part_pid=""
# shellcheck disable=SC2317  # called by the trap
on_signal() {
  exec 2>&3
  [[ -z $part_pid ]] || kill -KILL -- "-$part_pid" 2> /dev/null || true  # it may have ended
  say "interrupted; logs so far in $logs_dir"
  exit 130
}
trap on_signal INT TERM

# record PART key=value...: status/PART, read by gpu_check_summary.py.
record() {
  local part=$1
  shift
  printf '%s\n' "${@//$'\n'/ }" > "$status_dir/$part"
}

# run_part PART OK_RCS LOG ERRLOG CMD...: CMD under PART's budget, stdout to LOG and stderr to
# ERRLOG (- for LOG too); OK_RCS are the exit codes that mean success. Records status/PART (its
# state, exit status, seconds and budget) and returns 0 when the part is ok (a failed part is
# recorded, and the check goes on: `|| true`).
run_part() {
  local part=$1 ok_rcs=$2 log=$3 errlog=$4 limit
  shift 4
  if ! limit=$(budget_for "$part"); then
    record "$part" state=not_run "limit_s=$((limit < 0 ? 0 : limit))" \
      "reason=not enough time left ($limit s of --time-limit $time_limit; needs ${part_min[$part]} s)"
    say "$part: not run: not enough time left"
    return 1
  fi
  local rel=${log#"$logs_dir"/} errrel=${errlog#"$logs_dir"/}
  [[ $errlog == - ]] && errrel=$rel
  say "$part: running (budget $limit s, estimate ${part_estimate[$part]} s, log $rel)"
  local t0=$EPOCHREALTIME rc
  # In the background so that a signal's trap runs at once (and stops it); timeout makes the
  # part a process group of its own, which the trap kills.
  if [[ $errlog == - ]]; then
    timeout -s KILL "$limit" "$@" > "$log" 2>&1 &
  else
    timeout -s KILL "$limit" "$@" > "$log" 2> "$errlog" &
  fi
  part_pid=$!
  rc=0
  { wait "$part_pid"; } 2> /dev/null || rc=$?  # no "Killed" notice from bash: the status says it
  part_pid=""
  local seconds state reason=""
  seconds=$(seconds_since "$t0")
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
# skip_part PART WHY: a part that cannot run because an earlier one failed (that one is the error).
skip_part() { record "$1" state=skipped "reason=$2"; say "$1: skipped: $2"; }

# ---- Dependencies: the carried Debian packages in a private prefix (never /) ----
deps_ok=1
if [[ -n $deps_dir ]]; then
  deps_prefix=$build_dir/deps
  if run_part deps 0 "$logs_dir/deps.log" - bash scripts/gpu_deps.sh --unpack "$deps_dir" "$deps_prefix"; then
    # CMake's, pkg-config's and the loader's paths (BCD_DEPS_CMAKE_ARGS, LD_LIBRARY_PATH,
    # BCD_FORTUNES_DIR) for everything after this point.
    # shellcheck source=/dev/null
    source "$deps_prefix/env.sh"
  else
    deps_ok=0
  fi
else
  record deps state=skipped "reason=no --deps: the machine's own libraries"
fi
[[ -v BCD_DEPS_CMAKE_ARGS ]] || BCD_DEPS_CMAKE_ARGS=()
fortunes=${BCD_FORTUNES_DIR:-/usr/share/games/fortunes}

# ---- Configure and build: the CUDA path against the machine's own LibTorch, with Ninja ----
bin=$build_dir/bcdtrain
have_bin=0
# Each command echoed into its log first (set -x), as the build's lines follow it.
# shellcheck disable=SC2016  # expanded by the inner bash
traced=(bash -c 'set -x; "$@"' _)
if ((skip_build)); then
  record configure state=skipped "reason=--skip-build"
  if [[ -x $bin ]]; then
    record build state=skipped "reason=--skip-build"
    have_bin=1
  else
    record build state=failed "reason=--skip-build but $bin is missing"
  fi
elif ((!deps_ok)); then
  skip_part configure "the packages of --deps could not be unpacked"
  skip_part build "the packages of --deps could not be unpacked"
else
  # Only what this check runs (bcdtrain, and the executables of the `gpu` tests: the target
  # bcd_gpu_tests in tests/CMakeLists.txt), unless --build-all, on every core. -k 0: every
  # failing file is reported, not only the first.
  targets=(--target bcdtrain bcd_gpu_tests)
  ((build_all)) && targets=()
  generator=(-G Ninja)
  command -v ninja > /dev/null || generator=()
  keep_going=(-k 0)
  ((${#generator[@]})) || keep_going=(-k)
  configure=(cmake -S . -B "$build_dir" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DBCD_CUDA=ON
    -DBCD_REQUIRE_CUDA=ON "-DTorch_DIR=$torch_prefix/Torch" "-DBCD_CUDA_ARCHITECTURES=$cuda_arch"
    "${BCD_DEPS_CMAKE_ARGS[@]}")
  compile=(cmake --build "$build_dir" -j "$(nproc)" "${targets[@]}" -- "${keep_going[@]}")
  if run_part configure 0 "$logs_dir/configure.log" - "${traced[@]}" "${configure[@]}"; then
    if run_part build 0 "$logs_dir/build.log" - "${traced[@]}" "${compile[@]}"; then
      if [[ -x $bin ]]; then
        have_bin=1
      else  # a part that passed without its product is an error, not the runs' "no build" skips
        printf 'state=failed\nreason=the build passed but left no %s\n' "$bin" >> "$status_dir/build"
      fi
    fi
  else
    skip_part build "configure failed"
  fi
fi

# ---- Tests labelled gpu, in parallel on every core (each caps its own share of the GPU) ----
if ((have_bin)); then
  run_part ctest_gpu 0 "$logs_dir/ctest-gpu.log" - \
    ctest --test-dir "$build_dir" -L gpu -j "$(nproc)" --output-on-failure --timeout 50 || true
else
  skip_part ctest_gpu "no build"
fi

# ---- Training set-up ----
toml_str() { printf '"%s"' "$1"; }
no_extras=(--train.checkpoint_every=0 --train.save_model=false --train.log_every=1 "--sample.prompts=[]")
# 7B: the Llama-2-7B shape from the shipped config, BCD under a 24 GiB cap. Host memory holds
# master + moments first fit by block (embed, layer.0 ..) within memory.host_bytes (explicit:
# such machines' RAM may start small and grow, so `auto` would plan on what is free at start):
# 72 GiB less the pinned pool holds embed and layer.0-28 (67.1 GiB); layer.29-31 and head
# (8.25 GiB) go to NVMe, within a 64 GiB disk beside the build. A fixed cycle over layer.28
# (host) and layer.29-30 (NVMe): after the first cycle every switch reads the next block's state
# back from its home, host memory and NVMe alike, and writes the previous one's out (with the
# default 9 steps, a switch every 2: layer.28 back from host memory at step 7, layer.29 from NVMe
# at step 9; a unit's first visit starts from its working weights and reads nothing). Their steps run backward through 4 of 32 layers, so tokens/s is above a
# random order's mean; TFLOP/s counts what ran. `bcdtrain plan` shows the homes (bcd_7b/plan.txt
# in the logs). The weights are drawn at random (no init_from; no config key skips the draw).
config_7b=configs/llama2-7b-1x4090.toml
cycle='["layer.28","layer.29","layer.30"]'
bcd_7b_args=(--train.device=cuda --train.steps="$steps" --train.warmup_steps=1 --train.val_batches=1
  --bcd.enabled=true --bcd.switch_every="$switch_every" --bcd.order=fixed "--bcd.fixed_order=$cycle"
  --memory.compute_bytes=24GiB --memory.pinned_bytes=auto --memory.home=auto --memory.host_bytes=72GiB
  "--memory.nvme_paths=[$(toml_str "$nvme_path")]" "${no_extras[@]}")
# The 7B runs train on 512-token sequences, a quarter of the config's 2048 and of its compute per
# step: what they prove (staging to and from the homes, prefetching, the cap on the 13.4 GB of
# bf16 weights plus a block's state) is about blocks, which seq_len does not change. The
# full-AdamW plan keeps the config's 2048: a plan costs no time.
train_7b_args=("${bcd_7b_args[@]}" --train.seq_len=512)
# Tiny: configs/tiny.toml on the GPU for 8 steps (a switch every 2), its frozen layers' weights
# streamed to the GPU from host memory or NVMe (every layer: `on`), or resident (`off`); all three
# with activation checkpointing, which streaming needs (backward fetches a layer again). The
# plan's speed check is waived: a 4M-parameter model's compute hides nothing.
tiny_args=(--config configs/tiny.toml --train.device=cuda --train.steps=8 --train.warmup_steps=2
  --train.val_every=0 --bcd.switch_every=2 --bcd.order=ascending --memory.compute_bytes=2GiB
  --model.activation_checkpointing=true "${no_extras[@]}")
stream_off=(--memory.stream_weights=off)
stream_host=(--memory.stream_weights=on --memory.stream_home=host --memory.accept_slow_stream=true)
stream_nvme=(--memory.stream_weights=on --memory.stream_home=nvme --memory.accept_slow_stream=true
  "--memory.nvme_paths=[$(toml_str "$nvme_path")]")

# ---- Planner: full-parameter AdamW on the 7B shape ----
if ((have_bin)); then
  # Exit 2 with the table is the expected answer: it does not fit 24 GiB.
  run_part plan_full_adamw "0 2" "$logs_dir/plan-full-adamw.txt" - \
    "$bin" plan --config "$config_7b" "${bcd_7b_args[@]}" --bcd.enabled=false "--memory.nvme_paths=[]" || true
else
  skip_part plan_full_adamw "no build"
fi

# ---- Corpus: Debian's fortunes (carried by --deps, or the machine's), as scripts/train.sh ----
corpus=""
if [[ -n $data_dir ]]; then
  corpus=$data_dir
  record corpus state=skipped "reason=--data $data_dir"
elif ((!have_bin)); then
  skip_part corpus "no build"
elif [[ ! -d $fortunes ]]; then
  record corpus state=failed \
    "reason=no text to prepare: $fortunes is missing (Debian's fortunes: give --deps DIR, or --data DIR)"
  say "corpus: failed: $fortunes is missing"
elif run_part corpus 0 "$logs_dir/corpus.log" - \
  "$bin" prepare --input "$fortunes" --out "$work_dir/corpus" --vocab-size 2048 --force; then
  corpus=$work_dir/corpus
fi

# ---- Training runs ----
# train_run RUN NPROC EXPECT ARGS...: plans the run (LOGS/RUN/plan.txt), then trains it into
# WORK/runs/RUN; stdout, stderr, config and metrics go to LOGS/RUN. EXPECT: key=value lines for
# the summary (what the run must show).
train_run() {
  local run=$1 nproc=$2 expect=$3
  shift 3
  local dir=$logs_dir/$run run_dir=$work_dir/runs/$run
  local args=("$@" "--data.path=$(toml_str "$corpus")" "--train.run_dir=$(toml_str "$run_dir")")
  mkdir -p "$dir" "$nvme_path"
  rm -rf "$run_dir"
  # The plan within the run's budget: its table is for the reader; train refuses what plan would.
  # shellcheck disable=SC2016  # expanded by the inner bash
  run_part "$run" 0 "$dir/stdout.log" "$dir/stderr.log" bash -c '
    bin=$1 plan_txt=$2 nproc=$3
    shift 3
    "$bin" plan --nproc "$nproc" "$@" > "$plan_txt" 2>&1
    if ((nproc > 1)); then exec "$bin" launch --nproc "$nproc" train "$@"; else exec "$bin" train "$@"; fi
  ' _ "$bin" "$dir/plan.txt" "$nproc" "${args[@]}" || true
  # shellcheck disable=SC2086  # one key=value per word
  [[ -n $expect ]] && printf '%s\n' $expect >> "$status_dir/$run"
  local f
  for f in metrics.jsonl config.toml; do [[ -f $run_dir/$f ]] && cp "$run_dir/$f" "$dir/"; done
  # A run's NVMe extents: nothing reads them later (train.save_model = false: no weights).
  rm -rf "$nvme_path" "$run_dir"
}
for run in stream_off stream_host stream_nvme bcd_7b bcd_7b_noprefetch bcd_2rank; do
  if ((!have_bin)); then
    skip_part $run "no build"
  elif [[ -z $corpus ]]; then
    skip_part $run "no corpus"
  elif [[ $run == stream_off ]]; then
    train_run $run 1 "" "${tiny_args[@]}" "${stream_off[@]}"
  elif [[ $run == stream_host ]]; then
    train_run $run 1 "expect_stream=1" "${tiny_args[@]}" "${stream_host[@]}"
  elif [[ $run == stream_nvme ]]; then
    train_run $run 1 "expect_stream=1 expect_nvme_reads=1" "${tiny_args[@]}" "${stream_nvme[@]}"
  elif [[ $run == bcd_7b ]]; then
    train_run $run 1 "expect_nvme_reads=1 expect_host_reads=1" --config "$config_7b" "${train_7b_args[@]}"
  elif [[ $run == bcd_7b_noprefetch ]]; then
    # The same run with each unit's state read at its switch, in the step: what prefetching hides
    # is the step time this run loses (the summary's prefetch_speedup).
    train_run $run 1 "expect_nvme_reads=1 expect_host_reads=1" --config "$config_7b" "${train_7b_args[@]}" \
      --memory.prefetch=false
  elif ((gpu_count < 2)); then
    skip_part bcd_2rank "needs 2 GPUs: $gpu_count visible (NCCL allows one rank per GPU in a communicator)"
  else
    # Both ranks' state in host memory (sharded: half each), no NVMe.
    train_run $run 2 "" --config "$config_7b" "${train_7b_args[@]}" --memory.home=host "--memory.nvme_paths=[]"
  fi
done

# ---- Summary: the last stdout line; OUT gets it and the logs' tarball ----
printf 'seconds=%s\ntime_limit=%s\n' "$(seconds_since "$check_t0")" "$time_limit" > "$status_dir/check"
rc=0
summary=$(python3 scripts/gpu_check_summary.py "$logs_dir") || rc=$?
summary=${summary##*$'\n'}
if [[ $summary != "{"* ]]; then
  summary="{\"gpu\": null, \"skipped\": null, \"errors\": [\"summary: scripts/gpu_check_summary.py printed no JSON (exit $rc)\"]}"
  rc=1
fi
printf '%s\n' "$summary" > "$logs_dir/gpu_check.json"
printf '%s\n' "$summary" > "$out_dir/gpu_check.json"
tar -czf "$out_dir/gpu-check-logs.tar.gz" -C "$build_dir" "$(basename "$logs_dir")" ||
  say "could not write $out_dir/gpu-check-logs.tar.gz"
say "done in $SECONDS s, exit $rc; logs in $logs_dir and $out_dir/gpu-check-logs.tar.gz"
printf '%s\n' "$summary"
exit $rc
