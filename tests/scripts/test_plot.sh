#!/usr/bin/env bash
# Tests of scripts/plot.sh, and so of `bcdtrain plot` (src/report/plots.cpp) that it runs, on the
# runs in fixtures/plot/ (README.md there). They need the built binary: $BCD_BINARY (ctest sets it
# to the build's bcdtrain), else build/bcdtrain of this clone.
#   plots   two runs (BCD with switches and validation, AdamW without either): every PNG is a PNG
#           of more than 1 KB and plots.json holds the series each plot must have; then the AdamW
#           run alone into the same directory: stall.png and active_block.png are skipped and
#           their earlier PNGs removed; a run dir named with a newline, quotes, $() and backticks
#           is plotted under that name and runs nothing. Fails (never skips) without gnuplot:
#           setup.sh installs it.
#   errors  a run dir without metrics.jsonl, a malformed line, unknown flags: exit 2, the message
#           names the dir, the file:line or the flag; plot.sh without the binary: exit 2, saying so
# Usage: tests/scripts/test_plot.sh plots|errors [SCRATCH_DIR]
# (ctest runs each case with a scratch directory in the build tree; by hand a temporary one.)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
script=$repo/scripts/plot.sh
fixtures=$here/fixtures/plot
source "$here/harness.sh" "${1:-}" "${2:-}"
command -v python3 > /dev/null || { echo "FAIL [$case]: python3 not found (scripts/setup.sh installs it)" >&2; exit 1; }
export BCD_BINARY=${BCD_BINARY:-$repo/build/bcdtrain}
[[ -x $BCD_BINARY ]] || { echo "FAIL [$case]: no bcdtrain at $BCD_BINARY (build it, or set BCD_BINARY)" >&2; exit 1; }


# expect_png FILE: the 8-byte PNG signature and more than 1 KB.
expect_png() {
  if [[ ! -f $1 ]]; then
    fail "$(basename "$1") was not written"
    return
  fi
  local size sig
  size=$(stat -c %s "$1")
  sig=$(head -c 8 "$1" | od -An -tx1 | tr -d ' \n')
  [[ $sig == 89504e470d0a1a0a ]] || fail "$(basename "$1"): not a PNG (first bytes $sig)"
  ((size > 1024)) || fail "$(basename "$1"): $size bytes, expected more than 1 KB"
}

# expect_series PLOTS_JSON FILE=N...: each plot lists N series (0: skipped, with a reason).
expect_series() {
  local json=$1
  shift
  python3 - "$json" "$@" << 'EOF' || fail "$(basename "$(dirname "$json")")/plots.json: series differ (above)"
import json, sys
plots = {p["file"]: p for p in json.load(open(sys.argv[1]))["plots"]}
bad = False
for arg in sys.argv[2:]:
    file, n = arg.split("=")
    p = plots.get(file)
    if p is None:
        print(f"  {file}: not in plots.json", file=sys.stderr); bad = True
    elif len(p["series"]) != int(n) or bool(p["skipped"]) != (n == "0") or not p["title"]:
        print(f"  {file}: {len(p['series'])} series {p['series']}, skipped {p['skipped']!r}, "
              f"title {p['title']!r}; expected {n} series", file=sys.stderr); bad = True
sys.exit(1 if bad else 0)
EOF
}

case_plots() {
  command -v gnuplot > /dev/null || {
    fail "gnuplot not found: scripts/setup.sh installs it (package gnuplot-nox)"
    return
  }
  local out=$scratch/out f
  run two bash "$script" "$fixtures/bcd" "$fixtures/adamw" --out "$out"
  expect_rc two 0
  for f in loss_vs_step loss_vs_time tokens_per_s memory stall active_block; do
    expect_png "$out/$f.png"
  done
  # bcd: train + val loss, tiers compute, pinned and host, switches, blocks; adamw: train loss,
  # compute only, no switch, no block, no validation step.
  expect_series "$out/plots.json" loss_vs_step.png=3 loss_vs_time.png=3 tokens_per_s.png=2 memory.png=4 \
    stall.png=1 active_block.png=1
  local want='["bcd train", "bcd val", "adamw train"]'
  python3 -c 'import json, sys; sys.exit(json.load(open(sys.argv[1]))["plots"][0]["series"] != json.loads(sys.argv[2]))' \
    "$out/plots.json" "$want" || fail "two: loss_vs_step.png's series are not $want: $(head -c 400 "$out/plots.json")"

  # One run without switches or blocks, into the same directory: two plots skipped, their
  # PNGs from the call above gone.
  run one bash "$script" "$fixtures/adamw" --out "$out"
  expect_rc one 0
  expect_series "$out/plots.json" loss_vs_step.png=1 loss_vs_time.png=1 tokens_per_s.png=1 memory.png=1 \
    stall.png=0 active_block.png=0
  expect_text one out "skipped stall.png"
  expect_text one out "skipped active_block.png"
  for f in stall active_block; do
    [[ ! -e $out/$f.png ]] || fail "one: $f.png of the earlier call is still there"
  done
  expect_png "$out/memory.png"

  # One run and no --out: RUN_DIR/plots.
  cp -r "$fixtures/bcd" "$scratch/bcd"
  run default bash "$script" "$scratch/bcd"
  expect_rc default 0
  expect_png "$scratch/bcd/plots/active_block.png"
  expect_series "$scratch/bcd/plots/plots.json" stall.png=1 active_block.png=1

  # A name is data, never gnuplot (or shell) code: it is the legend's, and nothing it names runs.
  local odd=$'it\'s "q" $(touch d) `touch t` \\b\nl'  # under 40 characters: not elided
  mkdir -p "$scratch/$odd"
  cp "$fixtures/adamw/metrics.jsonl" "$scratch/$odd/"
  cd "$scratch" || return  # where a command in the name would leave its file
  run odd bash "$script" "$odd" --out odd
  expect_rc odd 0
  expect_png "$scratch/odd/memory.png"
  python3 -c 'import json, sys; sys.exit(json.load(open(sys.argv[1]))["plots"][2]["series"] != [sys.argv[2]])' \
    "$scratch/odd/plots.json" "$odd" || fail "odd: tokens_per_s.png's series is not the run's name: $(head -c 400 "$scratch/odd/plots.json")"
  [[ ! -e $scratch/d && ! -e $scratch/t ]] || fail "odd: the run name ran a command"
}

case_errors() {
  local out=$scratch/out
  mkdir -p "$scratch/empty_run"
  # name | arguments | what stderr must say
  local cases=(
    "no_metrics|$fixtures/bcd $scratch/empty_run|$scratch/empty_run: no metrics.jsonl there"
    "not_dir|$scratch/none|$scratch/none: not a directory"
    "malformed|$fixtures/bcd $fixtures/malformed|$fixtures/malformed/metrics.jsonl:4: not valid JSON"
    "unknown|$fixtures/bcd --bogus|--bogus: unknown option of \`plot\`"
    "unknown_eq|$fixtures/bcd --bogus=1|--bogus: unknown option of \`plot\`"
    "no_value|$fixtures/bcd --out|--out: expected a directory, got no value"
    "no_run|--out $out|no RUN_DIR given"
  )
  local c name args want
  for c in "${cases[@]}"; do
    IFS='|' read -r name args want <<< "$c"
    # shellcheck disable=SC2086  # args is a word list on purpose
    run "$name" bash "$script" --out "$out" $args
    expect_rc "$name" 2
    expect_text "$name" err "$want"
    [[ ! -e $out/plots.json ]] || fail "$name: plots.json was written"
  done
  run help bash "$script" --help
  expect_rc help 0
  expect_text help out "--out DIR"
  # Without the binary plot.sh says so; its own --help still works.
  BCD_BINARY=$scratch/none run no_binary bash "$script" "$fixtures/bcd"
  expect_rc no_binary 2
  expect_text no_binary err "no bcdtrain at $scratch/none"
  BCD_BINARY=$scratch/none run no_binary_help bash "$script" --help
  expect_rc no_binary_help 0
  expect_text no_binary_help out "--out DIR"
}

case $case in
  plots) case_plots ;;
  errors) case_errors ;;
  *) echo "usage: tests/scripts/test_plot.sh plots|errors [SCRATCH_DIR]" >&2; exit 2 ;;
esac
verdict test_plot
