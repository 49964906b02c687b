#!/usr/bin/env bash
# Tests of scripts/gpu_check.sh and scripts/gpu_check_summary.py that run on any machine, with or
# without a GPU, and build nothing:
#   flags    --help, unknown and malformed flags (exit 2, the message names the flag)
#   no_gpu   the no-GPU path, forced with a stub nvidia-smi or a stub torch that sees no device:
#            exit 3, one line on stderr, the JSON with the reason, no build directory
#   summary  the JSON summary of the hand-written out directories in fixtures/ (README.md there)
# Usage: tests/scripts/test_gpu_check.sh flags|no_gpu|summary [SCRATCH_DIR]
# (ctest runs each case with a scratch directory in the build tree; by hand a temporary one.)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
script=$repo/scripts/gpu_check.sh
summarizer=$repo/scripts/gpu_check_summary.py
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
  for flag in --deps --build-dir --out --skip-build --build-all --steps --switch-every --data --nvme-dir --python --time-limit; do
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
    "few_steps|--steps 4 --switch-every 2|needs at least 5 steps"
    "value_on_switch|--skip-build=yes|--skip-build takes no value"
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

case_summary() {
  local f
  for f in one_gpu broken; do
    run "$f" python3 "$summarizer" "$here/fixtures/$f"
    expect_rc "$f" 1  # both hold failed parts
    json_equal "$scratch/$f.out" "$here/fixtures/$f/expected.json"
    [[ $(wc -l < "$scratch/$f.out") == 1 ]] || fail "$f: the summary is not one line"
  done

  # one_gpu with its gpu tests passing: no error left, exit 0.
  cp -r "$here/fixtures/one_gpu" "$scratch/passing"
  printf 'state=ok\nrc=0\nseconds=30.0\nlimit_s=150\nlog=ctest-gpu.log\n' > "$scratch/passing/status/ctest_gpu"
  printf '    Start 1: KernelsCuda.AdamWMatchesCpu\n100%% tests passed, 0 tests failed out of 5\n' \
    > "$scratch/passing/ctest-gpu.log"
  run passing python3 "$summarizer" "$scratch/passing"
  expect_rc passing 0
  json_check "$scratch/passing.out" 'j["errors"] == []' 'j["tests"] == {"passed": 5, "failed": 0, "skipped": 0}' \
    'j["runs"]["bcd_7b"]["tokens_per_s"] == 10000.0' 'j["streams"]["stream_nvme"]["losses_equal_to_off"] is True'

  # An out directory where nothing was recorded: every part is an error, none passes for ok.
  mkdir -p "$scratch/empty"
  run empty python3 "$summarizer" "$scratch/empty"
  expect_rc empty 1
  json_check "$scratch/empty.out" 'len(j["errors"]) == 11' \
    'all(e.endswith("no status recorded (the check stopped before this part)") for e in j["errors"])' \
    'all(r["state"] == "not_run" for r in j["runs"].values())'

  # No GPU: the skip summary.
  run skipped python3 "$summarizer" --skipped "no GPU: test"
  expect_rc skipped 3
  json_check "$scratch/skipped.out" 'j["skipped"] == "no GPU: test"' 'j["errors"] == []' 'j["gpu"] is None'

  run usage python3 "$summarizer"
  expect_rc usage 2
}

case $case in
  flags) case_flags ;;
  no_gpu) case_no_gpu ;;
  summary) case_summary ;;
  *) echo "usage: tests/scripts/test_gpu_check.sh flags|no_gpu|summary [SCRATCH_DIR]" >&2; exit 2 ;;
esac
verdict test_gpu_check
