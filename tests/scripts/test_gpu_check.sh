#!/usr/bin/env bash
# Tests of scripts/gpu_check_summary.py that run on any machine, with or without a GPU, and build
# nothing:
#   summary  the JSON summary of the hand-written out directories in fixtures/ (README.md there)
# Usage: tests/scripts/test_gpu_check.sh summary [SCRATCH_DIR]
# (ctest runs each case with a scratch directory in the build tree; by hand a temporary one.)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
summarizer=$repo/scripts/gpu_check_summary.py
case=${1:-}
scratch=${2:-}
if [[ -z $scratch ]]; then
  scratch=$(mktemp -d)
  trap 'rm -rf "$scratch"' EXIT
else
  rm -rf "$scratch"
  mkdir -p "$scratch"
fi
command -v python3 > /dev/null || { echo "FAIL [$case]: python3 not found (scripts/setup.sh installs it)" >&2; exit 1; }

failures=0
fail() {
  echo "FAIL [$case]: $*" >&2
  failures=$((failures + 1))
}
# run NAME CMD...: CMD's stdout and stderr to SCRATCH/NAME.out and .err; its exit status in $rc.
run() {
  local name=$1
  shift
  "$@" > "$scratch/$name.out" 2> "$scratch/$name.err"
  rc=$?
}
expect_rc() { [[ $rc == "$2" ]] || fail "$1: exit $rc, expected $2; stderr: $(head -c 600 "$scratch/$1.err")"; }

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
    'j["runs"]["bcd_host"]["tokens_per_s"] == 10000.0'

  # An out directory where nothing was recorded: every part is an error, none passes for ok.
  mkdir -p "$scratch/empty"
  run empty python3 "$summarizer" "$scratch/empty"
  expect_rc empty 1
  json_check "$scratch/empty.out" 'len(j["errors"]) == 7' \
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
  summary) case_summary ;;
  *) echo "usage: tests/scripts/test_gpu_check.sh summary [SCRATCH_DIR]" >&2; exit 2 ;;
esac
if ((failures)); then
  echo "test_gpu_check $case: $failures failure(s)" >&2
  exit 1
fi
echo "test_gpu_check $case: passed"
