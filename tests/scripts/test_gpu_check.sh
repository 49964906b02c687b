#!/usr/bin/env bash
# Tests of scripts/gpu_check.sh and scripts/gpu_check_summary.py that run on any machine, with or
# without a GPU, and build nothing:
#   flags    --help, unknown and malformed flags (exit 2, the message names the flag)
#   no_gpu   the no-GPU path, forced with a stub nvidia-smi or a stub torch that sees no device:
#            exit 3, one line on stderr, the JSON with the reason, no build directory
#   summary  the JSON summary of the hand-written out directories in fixtures/ (README.md there):
#            every part's timing ("parts", "total_s"), the streamed runs' loss rule (the first
#            logged loss exact, later ones within 1e-6 relative)
#   dry_run  --dry-run without a GPU (stub nvidia-smi and torch that must not be called): exit 0,
#            the plan lists every part and a total that leaves 30% of the machine's 590 s; the
#            --deps folder checked against its MANIFEST (exit 2 naming a missing or changed file)
#   stub_run the whole device run on a stub machine (fixtures/gpu_stub: nvidia-smi and torch that
#            see an H100, cmake, ctest and a trainer that write what the real ones would): exit 0,
#            every part timed in the JSON, the commands each part ran; a failing configure, a
#            build without its binary
# Usage: tests/scripts/test_gpu_check.sh flags|no_gpu|summary|dry_run|stub_run [SCRATCH_DIR]
# (ctest runs each case with a scratch directory in the build tree; by hand a temporary one.)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
script=$repo/scripts/gpu_check.sh
summarizer=$repo/scripts/gpu_check_summary.py
# shellcheck source=harness.sh
source "$here/harness.sh" "${1:-}" "${2:-}"
command -v python3 > /dev/null || { echo "FAIL [$case]: python3 not found (scripts/setup.sh installs it)" >&2; exit 1; }

expect_absent() { [[ ! -e $2 ]] || fail "$1: $2 was created"; }

# json_check FILE PYTHON_EXPR...: each expression, on `j` (FILE's last line as JSON), must be true.
json_check() {
  local file=$1
  shift
  python3 - "$file" "$@" << 'EOF' || fail "$(basename "$file"): JSON check failed (above)"
import json, sys
lines = open(sys.argv[1]).read().strip().splitlines()
try:
    j = json.loads(lines[-1])
except (IndexError, ValueError) as e:
    sys.exit(f"last stdout line is not JSON ({e}): {lines[-1:]}")
bad = [expr for expr in sys.argv[2:] if not eval(expr, {"j": j})]
for expr in bad:
    print(f"  false: {expr}\n  JSON: {json.dumps(j)[:800]}", file=sys.stderr)
sys.exit(1 if bad else 0)
EOF
}

# json_equal ACTUAL_FILE EXPECTED_FILE: the last line of ACTUAL equals EXPECTED (floats to 1e-9,
# ints and floats kept apart); prints every differing path.
json_equal() {
  python3 - "$1" "$2" << 'EOF' || fail "$(basename "$(dirname "$2")"): summary differs from expected.json (above)"
import json, math, sys
actual = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
expected = json.load(open(sys.argv[2]))
diffs = []
def compare(a, e, path):
    if isinstance(e, dict) and isinstance(a, dict):
        for k in sorted(set(a) | set(e)):
            if k not in a:
                diffs.append(f"{path}.{k}: missing (expected {e[k]!r})")
            elif k not in e:
                diffs.append(f"{path}.{k}: not expected ({a[k]!r})")
            else:
                compare(a[k], e[k], f"{path}.{k}")
    elif isinstance(e, list) and isinstance(a, list) and len(a) == len(e):
        for i, (x, y) in enumerate(zip(a, e)):
            compare(x, y, f"{path}[{i}]")
    elif isinstance(e, float) and isinstance(a, float):
        if not math.isclose(a, e, rel_tol=1e-9, abs_tol=1e-12):
            diffs.append(f"{path}: {a!r}, expected {e!r}")
    elif type(a) is not type(e) or a != e:
        diffs.append(f"{path}: {a!r}, expected {e!r}")
compare(actual, expected, "$")
for d in diffs:
    print("  " + d, file=sys.stderr)
sys.exit(1 if diffs else 0)
EOF
}

case_flags() {
  local b=$scratch/build
  run help bash "$script" --help
  expect_rc help 0
  for flag in --deps --build-dir --out --skip-build --build-all --steps --switch-every --data --nvme-dir --python \
    --time-limit --dry-run; do
    expect_text help out "$flag"
  done
  # name | arguments | what stderr must say
  local cases=(
    "unknown|--bogus|unknown flag '--bogus'"
    "unknown_eq|--bogus=1|unknown flag '--bogus'"
    "positional|extra|unexpected argument 'extra'"
    "no_value|--steps|--steps needs a value"
    "empty_value|--out=|--out needs a value"
    "not_int|--steps=abc|--steps: expected a positive integer, got 'abc'"
    "zero|--time-limit 0|--time-limit: expected a positive integer, got '0'"
    "few_steps|--steps 8 --switch-every 2|needs at least 9 steps"
    "value_on_switch|--skip-build=yes|--skip-build takes no value"
    "value_on_dry_run|--dry-run=yes|--dry-run takes no value"
    "few_steps_dry|--dry-run --steps 12 --switch-every 3|needs at least 13 steps"
    "no_data|--data $scratch/none|--data $scratch/none: no tokens.h5"
    "no_deps|--deps $scratch/none|--deps $scratch/none: no MANIFEST there"
  )
  local c name args want
  for c in "${cases[@]}"; do
    IFS='|' read -r name args want <<< "$c"
    # shellcheck disable=SC2086  # args is a word list on purpose
    run "$name" bash "$script" --build-dir "$b" $args
    expect_rc "$name" 2
    expect_text "$name" err "$want"
    [[ ! -s $scratch/$name.out ]] || fail "$name: a flag error printed to stdout: $(head -c 300 "$scratch/$name.out")"
  done
  expect_absent flags "$b"
}

case_no_gpu() {
  local stub=$scratch/stub
  mkdir -p "$stub/nogpu" "$stub/gpu" "$stub/py/torch"
  # What nvidia-smi -L prints, and its exit status, on a machine whose driver sees no GPU.
  printf '#!/bin/sh\necho "No devices were found"\nexit 6\n' > "$stub/nogpu/nvidia-smi"
  printf '#!/bin/sh\necho "GPU 0: NVIDIA H200 (UUID: GPU-00000000-0000-0000-0000-000000000000)"\n' > "$stub/gpu/nvidia-smi"
  chmod +x "$stub/nogpu/nvidia-smi" "$stub/gpu/nvidia-smi"
  # A torch that imports and sees no CUDA device (first on PYTHONPATH, so it hides a real one).
  cat > "$stub/py/torch/__init__.py" << 'EOF'
__version__ = "0.0-stub"
class version:
    cuda = None
class cuda:
    @staticmethod
    def is_available():
        return False
EOF

  # 1. nvidia-smi lists no GPU; no --out and no $OUT: nothing is written anywhere.
  run smi env -u OUT PATH="$stub/nogpu:$PATH" bash "$script" --build-dir "$scratch/b1"
  expect_rc smi 3
  expect_text smi err "gpu_check: skipped: no GPU: nvidia-smi -L lists none (exit 6: No devices were found)"
  [[ $(wc -l < "$scratch/smi.err") == 1 ]] || fail "smi: stderr is not one line: $(cat "$scratch/smi.err")"
  json_check "$scratch/smi.out" 'j["gpu"] is None' \
    'j["skipped"] == "no GPU: nvidia-smi -L lists none (exit 6: No devices were found)"' 'j["errors"] == []' \
    'j["build_s"] is None' 'j["tests"] == {"passed": None, "failed": None, "skipped": None}' \
    'all(p == {"state": "skipped", "seconds": None, "limit_s": None} for p in j["parts"].values())' \
    'j["total_s"] is None' \
    'all(r["state"] == "skipped" and r["skipped"] == j["skipped"] for r in j["runs"].values())' \
    'sorted(j["runs"]) == ["bcd_2rank", "bcd_7b", "bcd_7b_noprefetch"]' 'sorted(j["streams"]) == ["stream_host", "stream_nvme", "stream_off"]' \
    'all(r["state"] == "skipped" for r in j["streams"].values())'
  expect_absent smi "$scratch/b1"

  # 2. nvidia-smi lists a GPU but torch sees none; --out gets gpu_check.json.
  run torch env -u OUT PATH="$stub/gpu:$PATH" PYTHONPATH="$stub/py" bash "$script" --build-dir "$scratch/b2" \
    --out "$scratch/out2"
  expect_rc torch 3
  expect_text torch err "gpu_check: skipped: no GPU: torch 0.0-stub (CUDA None) finds no usable CUDA device"
  json_check "$scratch/torch.out" 'j["gpu"] is None' \
    'j["skipped"] == "no GPU: torch 0.0-stub (CUDA None) finds no usable CUDA device"'
  expect_absent torch "$scratch/b2"
  if [[ -f $scratch/out2/gpu_check.json ]]; then
    [[ $(tail -n 1 "$scratch/torch.out") == "$(cat "$scratch/out2/gpu_check.json")" ]] ||
      fail "torch: out2/gpu_check.json differs from the JSON line on stdout"
  else
    fail "torch: --out $scratch/out2 got no gpu_check.json"
  fi

  # 3. $OUT stands for --out.
  run env_out env OUT="$scratch/out3" PATH="$stub/nogpu:$PATH" bash "$script" --build-dir "$scratch/b3"
  expect_rc env_out 3
  [[ -f $scratch/out3/gpu_check.json ]] || fail "env_out: \$OUT=$scratch/out3 got no gpu_check.json"
  expect_absent env_out "$scratch/b3"
}

# set_loss DIR RUN STEP LOSS: the loss of RUN's record of STEP in DIR/RUN/metrics.jsonl (other
# lines, the torn one included, as they were).
set_loss() {
  python3 - "$1/$2/metrics.jsonl" "$3" "$4" << 'EOF' || fail "set_loss $*: failed (above)"
import json, sys
path, step, loss = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
lines, hit = open(path).read().split("\n"), False
for i, line in enumerate(lines):
    try:
        rec = json.loads(line)
    except ValueError:
        continue
    if rec.get("step") == step:
        rec["loss"] = loss
        lines[i], hit = json.dumps(rec), True
open(path, "w").write("\n".join(lines))
sys.exit(0 if hit else f"no record of step {step} in {path}")
EOF
}

# The parts the JSON times, in the order the check runs them.
parts_py='["probe", "deps", "configure", "build", "ctest_gpu", "plan_full_adamw", "corpus", "stream_off", "stream_host", "stream_nvme", "bcd_7b", "bcd_7b_noprefetch", "bcd_2rank"]'

case_summary() {
  local f
  for f in one_gpu broken; do
    run "$f" python3 "$summarizer" "$here/fixtures/$f"
    expect_rc "$f" 1  # both hold failed parts
    json_equal "$scratch/$f.out" "$here/fixtures/$f/expected.json"
    [[ $(wc -l < "$scratch/$f.out") == 1 ]] || fail "$f: the summary is not one line"
    json_check "$scratch/$f.out" "list(j[\"parts\"]) == $parts_py" \
      'all(sorted(p) == ["limit_s", "seconds", "state"] for p in j["parts"].values())'
  done
  # Timing: every part's state, seconds and budget; the whole check's seconds; build_s is
  # configure + build (14.5 + 187.0).
  json_check "$scratch/one_gpu.out" 'j["parts"]["probe"] == {"state": "ok", "seconds": 4.1, "limit_s": 60}' \
    'j["parts"]["configure"] == {"state": "ok", "seconds": 14.5, "limit_s": 60}' \
    'j["parts"]["build"] == {"state": "ok", "seconds": 187.0, "limit_s": 330}' 'j["build_s"] == 201.5' \
    'j["parts"]["ctest_gpu"] == {"state": "failed", "seconds": 40.2, "limit_s": 150}' \
    'j["parts"]["bcd_2rank"] == {"state": "skipped", "seconds": None, "limit_s": None}' \
    'j["total_s"] == 489.4' 'j["time_limit_s"] == 540'
  json_check "$scratch/broken.out" 'j["parts"]["ctest_gpu"] == {"state": "not_run", "seconds": None, "limit_s": 12}' \
    'j["parts"]["plan_full_adamw"]["state"] == "not_run"' 'j["total_s"] is None' \
    'j["parts"]["bcd_2rank"] == {"state": "timed_out", "seconds": 150.0, "limit_s": 150}'
  # The loss rule: broken's stream_nvme differs at its first step by 1.3e-9 relative (under the
  # tolerance, but the first step must be exact) and at step 3 by 0.017: one error naming both.
  json_check "$scratch/broken.out" 'j["streams"]["stream_nvme"]["first_loss_equal"] is False' \
    'sum("stream_nvme: losses differ" in e for e in j["errors"]) == 1' \
    'any("first logged loss (step 1) is 7.62500001" in e and "step 3 is 7.375" in e for e in j["errors"])'

  # one_gpu with its gpu tests passing: no error left, exit 0.
  cp -r "$here/fixtures/one_gpu" "$scratch/passing"
  printf 'state=ok\nrc=0\nseconds=30.0\nlimit_s=150\nlog=ctest-gpu.log\n' > "$scratch/passing/status/ctest_gpu"
  printf '    Start 1: KernelsCuda.AdamWMatchesCpu\n100%% tests passed, 0 tests failed out of 5\n' \
    > "$scratch/passing/ctest-gpu.log"
  run passing python3 "$summarizer" "$scratch/passing"
  expect_rc passing 0
  # stream_host's step 3 is 1e-8 relative off stream_off's: within the rule, not an error.
  json_check "$scratch/passing.out" 'j["errors"] == []' 'j["tests"] == {"passed": 5, "failed": 0, "skipped": 0}' \
    'j["runs"]["bcd_7b"]["tokens_per_s"] == 10000.0' 'j["streams"]["stream_nvme"]["losses_equal_to_off"] is True' \
    'j["streams"]["stream_nvme"]["first_loss_equal"] is True' 'j["streams"]["stream_nvme"]["max_rel_loss_diff"] == 0.0' \
    'j["streams"]["stream_host"]["losses_equal_to_off"] is False' 'j["streams"]["stream_host"]["first_loss_equal"] is True' \
    'abs(j["streams"]["stream_host"]["max_rel_loss_diff"] - 1e-8) < 1e-12' \
    'j["streams"]["stream_off"]["first_loss_equal"] is None'

  # The loss rule on passing's streamed runs: name | RUN STEP LOSS (stream_off's loss at that
  # step, off by the relative amount the name says) | exit | what the error says (none: no error).
  local cases=(
    "first_1e-8|stream_host 1 7.62500007625|1|stream_host: losses differ from stream_off's: the first logged loss (step 1) is 7.62500007625, stream_off's 7.625 (must be equal)"
    "later_9e-7|stream_nvme 4 7.0000063|0|"
    "later_2e-6|stream_nvme 2 7.500015|1|stream_nvme: losses differ from stream_off's: the loss at step 2 is 7.500015, stream_off's 7.5: 2e-06 relative (at most 1e-06)"
  )
  local c name change want_rc want
  for c in "${cases[@]}"; do
    IFS='|' read -r name change want_rc want <<< "$c"
    cp -r "$scratch/passing" "$scratch/loss_$name"
    # shellcheck disable=SC2086  # RUN STEP LOSS
    set_loss "$scratch/loss_$name" $change
    run "loss_$name" python3 "$summarizer" "$scratch/loss_$name"
    expect_rc "loss_$name" "$want_rc"
    if [[ -n $want ]]; then
      expect_text "loss_$name" out "$want"
      json_check "$scratch/loss_$name.out" 'len(j["errors"]) == 1'
    else
      json_check "$scratch/loss_$name.out" 'j["errors"] == []' 'j["streams"]["stream_nvme"]["max_rel_loss_diff"] > 5e-7'
    fi
  done

  # An out directory where nothing was recorded: every part is an error, none passes for ok.
  mkdir -p "$scratch/empty"
  run empty python3 "$summarizer" "$scratch/empty"
  expect_rc empty 1
  json_check "$scratch/empty.out" 'len(j["errors"]) == 12' \
    'all(e.endswith("no status recorded (the check stopped before this part)") for e in j["errors"])' \
    'all(r["state"] == "not_run" for r in j["runs"].values())' \
    'all(p == {"state": "not_run", "seconds": None, "limit_s": None} for p in j["parts"].values())' \
    'j["total_s"] is None and j["time_limit_s"] is None'

  # No GPU: the skip summary.
  run skipped python3 "$summarizer" --skipped "no GPU: test"
  expect_rc skipped 3
  json_check "$scratch/skipped.out" 'j["skipped"] == "no GPU: test"' 'j["errors"] == []' 'j["gpu"] is None' \
    "list(j[\"parts\"]) == $parts_py" 'all(p["state"] == "skipped" for p in j["parts"].values())'

  run usage python3 "$summarizer"
  expect_rc usage 2
}

# The plan's parts with --deps and a build, but bcd_2rank (one GPU assumed) and the summary.
plan_parts=(probe deps configure build ctest_gpu plan_full_adamw corpus stream_off stream_host stream_nvme
  bcd_7b bcd_7b_noprefetch)

case_dry_run() {
  local stub=$scratch/stub deps=$scratch/deps
  mkdir -p "$stub/bin" "$stub/py/torch" "$deps"
  # A device run would call these: the dry run must not (each leaves a mark).
  printf '#!/bin/sh\necho "nvidia-smi $*" >> "%s/called"\nexit 99\n' "$scratch" > "$stub/bin/nvidia-smi"
  chmod +x "$stub/bin/nvidia-smi"
  printf 'import os\nopen(os.environ["BCD_STUB_CALLED"], "a").write("import torch\\n")\n' > "$stub/py/torch/__init__.py"
  # A --deps folder: two packages and their MANIFEST (package version kind bytes sha256 file).
  printf 'one' > "$deps/a_1_amd64.deb"
  printf 'second' > "$deps/b_2_amd64.deb"
  local f
  for f in a_1_amd64.deb b_2_amd64.deb; do
    printf '%s 1 build %s %s %s\n' "${f%%_*}" "$(stat -c %s "$deps/$f")" "$(sha256sum "$deps/$f" | cut -d' ' -f1)" "$f"
  done > "$deps/MANIFEST"
  local env=(env -u OUT PATH="$stub/bin:$PATH" PYTHONPATH="$stub/py" BCD_STUB_CALLED="$scratch/called")

  run plan "${env[@]}" bash "$script" --dry-run --deps "$deps" --build-dir "$scratch/b"
  expect_rc plan 0
  expect_text plan out "--deps $deps: 2 packages"
  expect_text plan out "summary: scripts/gpu_check_summary.py tests/scripts/fixtures/one_gpu printed its JSON"
  local p
  for p in "${plan_parts[@]}" bcd_2rank summary; do
    grep -qE "^$p +" "$scratch/plan.out" || fail "plan: no line for part $p: $(cat "$scratch/plan.out")"
  done
  # Every part within its budget, and the total leaves 30% of the machine's hard limit, 590 s.
  local total sum
  total=$(sed -n 's/^total: \([0-9]*\) s estimated of --time-limit 540 s .*/\1/p' "$scratch/plan.out")
  [[ -n $total ]] || fail "plan: no 'total: N s estimated of --time-limit 540 s' line: $(cat "$scratch/plan.out")"
  ((${total:-999} <= 590 * 7 / 10)) || fail "plan: total $total s leaves less than 30% of 590 s"
  ! grep -q 'warning\|would not run\|over budget' "$scratch/plan.out" || fail "plan: a part does not fit: $(cat "$scratch/plan.out")"
  # The total is the sum of the estimates (the 5th column), bcd_2rank apart.
  sum=$(awk '$1 != "part" && $1 != "bcd_2rank" && NF >= 5 && $5 ~ /^[0-9]+$/ { s += $5 } END { print s }' "$scratch/plan.out")
  [[ $sum == "$total" ]] || fail "plan: total $total s, its parts' estimates sum to $sum s"

  # --skip-build and --data: no configure, build or corpus; no --deps: no deps.
  mkdir -p "$scratch/data"
  : > "$scratch/data/tokens.h5"
  run plan_short "${env[@]}" bash "$script" --dry-run --skip-build --data "$scratch/data" --build-dir "$scratch/b"
  expect_rc plan_short 0
  for p in deps configure build corpus; do
    ! grep -qE "^$p " "$scratch/plan_short.out" || fail "plan_short: part $p is planned"
  done
  expect_text plan_short out "--deps: not given"
  # A short --time-limit: the plan says which parts would not fit, and still exits 0.
  run plan_tight "${env[@]}" bash "$script" --dry-run --time-limit 200 --build-dir "$scratch/b"
  expect_rc plan_tight 0
  expect_text plan_tight out "would not run"
  expect_text plan_tight out "warning:"

  [[ ! -e $scratch/called ]] || fail "the dry run used the device: $(cat "$scratch/called")"
  expect_absent dry_run "$scratch/b"

  # A --deps folder that is not what its MANIFEST says: exit 2, one line naming the file.
  local cases=("missing|a_1_amd64.deb (a) is missing" "size|b_2_amd64.deb: 7 bytes, MANIFEST says 6"
    "checksum|b_2_amd64.deb: checksum differs from MANIFEST")
  local c name want
  for c in "${cases[@]}"; do
    IFS='|' read -r name want <<< "$c"
    cp -r "$deps" "$scratch/deps_$name"
    case $name in
      missing) rm "$scratch/deps_$name/a_1_amd64.deb" ;;
      size) printf x >> "$scratch/deps_$name/b_2_amd64.deb" ;;
      checksum) printf 'SECOND' > "$scratch/deps_$name/b_2_amd64.deb" ;;
    esac
    run "deps_$name" "${env[@]}" bash "$script" --dry-run --deps "$scratch/deps_$name" --build-dir "$scratch/b"
    expect_rc "deps_$name" 2
    expect_text "deps_$name" err "gpu_check: --deps $scratch/deps_$name: $want"
    [[ $(wc -l < "$scratch/deps_$name.err") == 1 ]] || fail "deps_$name: stderr is not one line: $(cat "$scratch/deps_$name.err")"
  done
}

case_stub_run() {
  local stub=$here/fixtures/gpu_stub log=$scratch/calls
  mkdir -p "$scratch/fortunes"
  echo "A fortune." > "$scratch/fortunes/one"
  # No __pycache__ in the source tree from the stub torch.
  local env=(env -u OUT PATH="$stub/bin:$PATH" PYTHONPATH="$stub/py" PYTHONDONTWRITEBYTECODE=1
    BCD_STUB_LOG="$log" BCD_FORTUNES_DIR="$scratch/fortunes")

  run ok "${env[@]}" bash "$script" --build-dir "$scratch/b" --out "$scratch/out"
  expect_rc ok 0
  json_check "$scratch/ok.out" 'j["errors"] == []' 'j["gpu"] == "NVIDIA H100 80GB HBM3"' \
    "list(j[\"parts\"]) == $parts_py" \
    'all(p["state"] == "ok" and isinstance(p["seconds"], float) and isinstance(p["limit_s"], int) and 0 < p["limit_s"] <= 540 for n, p in j["parts"].items() if n not in ("deps", "bcd_2rank"))' \
    'j["parts"]["deps"]["state"] == "skipped" and j["parts"]["bcd_2rank"]["state"] == "skipped"' \
    'j["parts"]["probe"]["limit_s"] == 60' 'j["time_limit_s"] == 540' \
    'sum(p["seconds"] or 0 for p in j["parts"].values()) <= j["total_s"] < 540' \
    'j["build_s"] == round(j["parts"]["configure"]["seconds"] + j["parts"]["build"]["seconds"], 3)' \
    'j["streams"]["stream_nvme"]["first_loss_equal"] is True' 'j["runs"]["bcd_7b"]["window_steps"] == 6'
  [[ $(tail -n 1 "$scratch/ok.out") == "$(cat "$scratch/out/gpu_check.json" 2> /dev/null)" ]] ||
    fail "ok: out/gpu_check.json differs from the JSON line on stdout"
  tar -tzf "$scratch/out/gpu-check-logs.tar.gz" 2> /dev/null | grep -x 'gpu-check-logs/status/check' > /dev/null ||
    fail "ok: the logs' tarball lacks status/check"
  grep -q '^+ cmake -S \. -B ' "$scratch/b/gpu-check-logs/configure.log" 2> /dev/null ||
    fail "ok: configure.log does not start with the configure's command"
  # What the parts ran: the configure, then the build and ctest on every core; the 7B runs (and
  # their plans) 9 steps of 512 tokens, the full-AdamW plan at the config's sequence length.
  local cores
  cores=$(nproc)
  grep -q "^cmake -S \. -B $scratch/b .*-DBCD_CUDA=ON .*-DBCD_CUDA_ARCHITECTURES=90" "$log" || fail "no configure call: $(cat "$log")"
  grep -q "^cmake --build $scratch/b -j $cores --target bcdtrain bcd_gpu_tests" "$log" || fail "no build on $cores cores: $(cat "$log")"
  grep -q "^ctest --test-dir $scratch/b -L gpu -j $cores " "$log" || fail "ctest does not run on $cores cores: $(cat "$log")"
  local n7 n512
  n7=$(grep -c '^bcdtrain \(plan --nproc 1\|train\) --config configs/llama2-7b-1x4090.toml .*--train.steps=9 ' "$log")
  n512=$(grep -c '^bcdtrain \(plan --nproc 1\|train\) --config configs/llama2-7b-1x4090.toml .*--train.seq_len=512' "$log")
  [[ $n7 == 4 && $n512 == 4 ]] || fail "the 7B runs' plans and trains: $n7 with 9 steps, $n512 with seq_len 512 (expected 4 each)"
  local full
  full=$(grep '^bcdtrain plan --config .*--bcd.enabled=false' "$log")
  [[ -n $full && $full != *seq_len* ]] || fail "plan_full_adamw: not called, or with its seq_len changed: $full"

  # A configure that fails: the build and everything after it skipped, one error naming it.
  run bad "${env[@]}" BCD_STUB_FAIL=configure bash "$script" --build-dir "$scratch/b2" --out "$scratch/out2"
  expect_rc bad 1
  json_check "$scratch/bad.out" 'j["parts"]["configure"]["state"] == "failed"' \
    'all(j["parts"][p]["state"] == "skipped" for p in ("build", "ctest_gpu", "bcd_7b"))' \
    'j["errors"] == ["configure: exit 1: CMake Error at CMakeLists.txt:1 (project): no CUDA compiler (stub) (configure.log)"]'
  # A build that passes without the binary: an error, not a check that skipped everything.
  run no_binary "${env[@]}" BCD_STUB_FAIL=no_binary bash "$script" --build-dir "$scratch/b3" --out "$scratch/out3"
  expect_rc no_binary 1
  json_check "$scratch/no_binary.out" 'j["parts"]["build"]["state"] == "failed"' 'len(j["errors"]) == 1'
  expect_text no_binary out "\"errors\": [\"build: the build passed but left no $scratch/b3/bcdtrain (build.log)\"]"
}

case $case in
  flags) case_flags ;;
  no_gpu) case_no_gpu ;;
  summary) case_summary ;;
  dry_run) case_dry_run ;;
  stub_run) case_stub_run ;;
  *) echo "usage: tests/scripts/test_gpu_check.sh flags|no_gpu|summary|dry_run|stub_run [SCRATCH_DIR]" >&2; exit 2 ;;
esac
verdict test_gpu_check
