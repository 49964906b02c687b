#!/usr/bin/env bash
# Set-up of everything (if needed: scripts/setup.sh, the tests' packages too), build of every
# target, and the whole test suite. Extra arguments go to ctest (e.g. scripts/test.sh -L unit,
# scripts/test.sh -R Model).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib.sh
source scripts/lib.sh

usage() {
  cat <<'EOF_USAGE'
usage: scripts/test.sh [CTEST_ARGS...]
  Sets up and builds everything (scripts/setup.sh: the tests' and benchmarks' packages too, every
  target), then runs ctest in build/ with CTEST_ARGS, e.g.
  -L unit, -LE gpu, -R Model (ctest --help lists them). Without arguments the whole suite,
  and a bounded fuzzing run of the file parsers first (scripts/fuzz.sh).
  -h, --help   this text
Environment: BCD_TEST_JOBS tests at once (default: the cores); those of scripts/setup.sh.
EOF_USAGE
}

# ctest ignores an option it does not know, and then runs every test: refuse those here, by the
# options `ctest --help` lists (a word after one that takes a value, as in `-R -x`, is that value).
check_ctest_args() {
  local known=" " takes=" " o a skip=0
  while read -r o; do
    o=${o#[ ,]}
    if [[ $o == *" <" ]]; then o=${o% <} takes+="$o "; fi
    known+="$o "
  done < <(ctest --help | grep -E '^  -' | grep -oE '(^|[ ,])--?[A-Za-z][-A-Za-z0-9]*( <)?')
  for a in "$@"; do
    if ((skip)); then skip=0; continue; fi
    [[ $a == -?* ]] || continue
    if [[ $known == *" ${a%%=*} "* ]]; then
      [[ $a == *=* || $takes != *" $a "* ]] || skip=1
    elif [[ $a != --* && $takes == *" ${a:0:2} "* ]]; then
      :  # a short option with its value attached (-j8)
    else
      usage_error "unknown flag '${a%%=*}' (not a ctest option)"
    fi
  done
}
case ${1:-} in -h | --help) usage; exit 0 ;; esac
checked=0
if command -v ctest > /dev/null; then check_ctest_args "$@"; checked=1; fi

scripts/setup.sh
((checked)) || check_ctest_args "$@"
# The whole suite also fuzzes the parsers of strangers' files for a bounded run (clang, build-fuzz/, ~1 min);
# a ctest selection (arguments) skips it.
if [[ $# -eq 0 ]]; then
  scripts/fuzz.sh
fi
cd build
# Tests that need a GPU are labelled `gpu`; without one they skip with the reason. As many tests
# at once as cores (BCD_TEST_JOBS): no test asserts on time, and the suite takes ~10 minutes on 2
# cores instead of ~20.
ctest --output-on-failure --timeout 1200 -j "${BCD_TEST_JOBS:-$(nproc)}" "$@"
