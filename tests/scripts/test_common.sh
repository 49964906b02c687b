#!/usr/bin/env bash
# What every script in scripts/ shares, and scripts/lib.sh itself; nothing is built or installed:
#   conventions  each script (scripts/*.sh and scripts/slurm/*, but the sourced ones without
#                #!): `set -euo pipefail`; --help exits 0 printing "usage" on stdout;
#                --no-such-flag exits 2 with one line on stderr naming the flag. Both before any
#                work: the tools a script would start (cmake, apt-get, python3, srun, ...) are
#                stubs here that record the call and fail.
#   lib          parse_flags (both value forms, switches, --, every error), check_int and
#                parse_bytes (the forms of bcdtrain's sizes, src/base/bytes.cpp) against a table
# Usage: tests/scripts/test_common.sh conventions|lib [SCRATCH_DIR]
# (ctest runs each case with a scratch directory in the build tree; by hand a temporary one.)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
# shellcheck source=harness.sh
source "$here/harness.sh" "${1:-}" "${2:-}"

case_conventions() {
  local stubs=$scratch/stubs tool
  mkdir -p "$stubs"
  for tool in cmake make ninja apt-get dpkg-query sudo pip python3 fio spm_encode nvidia-smi srun \
    scontrol scancel sbatch timeout clang; do
    printf '#!/bin/sh\necho "%s $*" >> "%s/called"\nexit 99\n' "$tool" "$scratch" > "$stubs/$tool"
    chmod +x "$stubs/$tool"
  done
  local f name n=0
  for f in "$repo"/scripts/*.sh "$repo"/scripts/slurm/*; do
    [[ $(head -c 2 "$f") == "#!" ]] || continue  # sourced by the others (lib.sh, bench_corpus.sh)
    name=${f#"$repo"/scripts/} name=${name//\//_}
    n=$((n + 1))
    grep -qx 'set -euo pipefail' "$f" || fail "$name: no 'set -euo pipefail' line"
    run "$name.help" env PATH="$stubs:$PATH" bash "$f" --help
    expect_rc "$name.help" 0
    grep -qi usage "$scratch/$name.help.out" || fail "$name --help: no \"usage\" on stdout: $(head -c 300 "$scratch/$name.help.out")"
    run "$name.bad" env PATH="$stubs:$PATH" bash "$f" --no-such-flag
    expect_rc "$name.bad" 2
    expect_text "$name.bad" err "--no-such-flag"
    [[ $(wc -l < "$scratch/$name.bad.err") == 1 ]] || fail "$name --no-such-flag: stderr is not one line: $(cat "$scratch/$name.bad.err")"
    [[ ! -s $scratch/$name.bad.out ]] || fail "$name --no-such-flag: printed to stdout: $(head -c 300 "$scratch/$name.bad.out")"
  done
  ((n >= 15)) || fail "only $n scripts found in $repo/scripts"
  # bench.sh checks a script benchmark's flags before it builds; its other flags reach the benchmark.
  run bench_io_bad env PATH="$stubs:$PATH" bash "$repo/scripts/bench.sh" io --size 1X
  expect_rc bench_io_bad 2
  expect_text bench_io_bad err "bench_io: --size: size '1X': unknown unit 'X'"
  run bench_io_help env PATH="$stubs:$PATH" bash "$repo/scripts/bench.sh" io --rounds 1 --help
  expect_rc bench_io_help 0
  expect_text bench_io_help out "--block-size"
  run bench_unknown env PATH="$stubs:$PATH" bash "$repo/scripts/bench.sh" nope
  expect_rc bench_unknown 2
  expect_text bench_unknown err "unknown benchmark 'nope'"
  [[ ! -e $scratch/called ]] || fail "a script did work before its flags were checked: $(cat "$scratch/called")"
}

# The table of parse_bytes: TEXT|BYTES, or TEXT|!MESSAGE for an error.
bytes_table=(
  "4096|4096" "4KiB|4096" "4k|4096" "4K|4096" "4kib|4096" "2 g|2147483648" " 3 MiB |3145728"
  "1.5GB|1500000000" "1.5GiB|1610612736" ".5KiB|512" "5.|5" "1.0|1" "007|7" "0|0" "2B|2" "2b|2"
  "3tb|3000000000000" "1.234567TB|1234567000000" "0.0009765625TiB|1073741824" "0.001KB|1"
  "9223372036854775807|9223372036854775807" "8388607TiB|9223370937343148032"
  "1.5|!not a whole number of bytes" "0.1KiB|!not a whole number of bytes"
  ".|!expected a number" "|!expected a number" "-1|!expected a number" "+1|!expected a number"
  "1e3|!unknown unit 'e3'" "1KiBs|!unknown unit 'KiBs'" "1 GiB x|!unexpected text after the unit"
  "9223372036854775808|!more than 2^63-1 bytes" "8388608TiB|!more than 2^63-1 bytes"
)

case_lib() {
  # A script of its own (lib.sh reads its name from $0): prints what parse_flags set.
  cat > "$scratch/probe.sh" << 'EOF'
set -euo pipefail
source "$1"
shift
usage() { echo "usage: probe"; }
size="" mode="" fast=0
parse_flags "--size=size --mode=mode --fast:fast" "$@"
printf 'size=%s mode=%s fast=%s args=%s\n' "$size" "$mode" "$fast" "${args[*]}"
EOF
  local lib=$repo/scripts/lib.sh c name args want
  # name | arguments | stdout, or !stderr (exit 2)
  local cases=(
    "both|--size 1 --mode=a b|size=1 mode=a fast=0 args=b"
    "switch|x --fast y|size= mode= fast=1 args=x y"
    "equals_in_value|--mode=a=b|size= mode=a=b fast=0 args="
    "dashdash|--fast -- --size z|size= mode= fast=1 args=--size z"
    "help|--bogus --help|!unknown flag '--bogus'"
    "help_first|--help --bogus|usage: probe"
    "missing|--size|!--size needs a value (see scripts/probe.sh --help)"
    "empty|--mode=|!--mode needs a value"
    "switch_value|--fast=1|!--fast takes no value"
    "unknown|--siz=1|!unknown flag '--siz'"
  )
  for c in "${cases[@]}"; do
    IFS='|' read -r name args want <<< "$c"
    # shellcheck disable=SC2086  # args is a word list on purpose
    run "$name" bash "$scratch/probe.sh" "$lib" $args
    if [[ $want == !* ]]; then
      expect_rc "$name" 2
      expect_text "$name" err "probe: ${want#!}"
    else
      expect_rc "$name" 0
      [[ $(cat "$scratch/$name.out") == "$want" ]] || fail "$name: printed '$(cat "$scratch/$name.out")', expected '$want'"
    fi
  done

  # VALUE|MIN, then !stderr for an error
  local ints=("1|" "12|1" "7|7" "0|!expected a positive integer, got '0'" "08|!expected a positive integer, got '08'"
    "x|!expected a positive integer, got 'x'" "6|7!expected an integer of at least 7, got '6'" "1234567890|!expected a positive integer")
  local value min msg
  for c in "${ints[@]}"; do
    value=${c%%|*} min=${c#*|} msg=""
    if [[ $min == *!* ]]; then msg=${min#*!} min=${min%%!*}; fi
    # shellcheck disable=SC2016  # expanded by the inner bash
    run "int_$value" bash -c 'source "$1"; check_int --n "$2" $3' probe "$lib" "$value" "$min"
    if [[ -n $msg ]]; then
      expect_rc "int_$value" 2
      expect_text "int_$value" err "--n: $msg"
    else
      expect_rc "int_$value" 0
    fi
  done

  local text want got i=0
  for c in "${bytes_table[@]}"; do
    text=${c%|*} want=${c##*|} i=$((i + 1))
    # shellcheck disable=SC2016  # expanded by the inner bash
    run "bytes_$i" bash -c 'source "$1"; parse_bytes --size "$2"' probe "$lib" "$text"
    got=$(cat "$scratch/bytes_$i.out")
    if [[ $want == !* ]]; then
      expect_rc "bytes_$i" 2
      expect_text "bytes_$i" err "--size: size '$text': ${want#!}"
    elif [[ $rc != 0 || $got != "$want" ]]; then
      fail "parse_bytes '$text': exit $rc, printed '$got', expected $want; stderr: $(cat "$scratch/bytes_$i.err")"
    fi
  done
}

case $case in
  conventions | lib) "case_$case" ;;
  *) echo "usage: tests/scripts/test_common.sh conventions|lib [SCRATCH_DIR]" >&2; exit 2 ;;
esac
verdict test_common
