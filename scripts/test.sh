#!/usr/bin/env bash
# Set-up (if needed), build, and run the whole test suite. Extra arguments go to ctest
# (e.g. scripts/test.sh -L unit, scripts/test.sh -R Model).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
# The whole suite also fuzzes the safetensors parser for a bounded run (clang, build-fuzz/, ~15 s);
# a ctest selection (arguments) skips it.
if [[ $# -eq 0 ]]; then
  scripts/fuzz.sh
fi
cd build
# Tests that need a GPU are labelled `gpu`; without one they skip with the reason. As many tests
# at once as cores (BCD_TEST_JOBS): no test asserts on time, and the suite takes ~10 minutes on 2
# cores instead of ~20.
ctest --output-on-failure --timeout 1200 -j "${BCD_TEST_JOBS:-$(nproc)}" "$@"
