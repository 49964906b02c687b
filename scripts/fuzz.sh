#!/usr/bin/env bash
# Fuzzes the safetensors header parser: builds its libFuzzer target with clang (ASan + UBSan, no
# LibTorch: seconds) into build-fuzz/ and runs a bounded number of inputs over tests/fuzz/corpus.
# A longer session by hand: build-fuzz/tests/fuzz/fuzz_safetensors -max_total_time=600 \
#   -dict=tests/fuzz/safetensors.dict build-fuzz/tests/fuzz/corpus-scratch tests/fuzz/corpus
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib.sh
source scripts/lib.sh

usage() {
  cat <<'EOF_USAGE'
usage: scripts/fuzz.sh [--runs N]
  --runs N     inputs to try (default 200000, about 10 s)   [$BCD_FUZZ_RUNS]
  -h, --help   this text
A variable in brackets is the flag's default when set; the flag wins. BCD_JOBS: build jobs.
EOF_USAGE
}
runs=${BCD_FUZZ_RUNS:-200000}
parse_flags "--runs=runs" "$@"
no_args
check_int --runs "$runs"

CC=clang CXX=clang++ cmake -S . -B build-fuzz -DBCD_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DBCD_FUZZ_RUNS="$runs" > /dev/null
cmake --build build-fuzz -j "${BCD_JOBS:-$(nproc)}"
cd build-fuzz
ctest --output-on-failure
