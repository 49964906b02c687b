#!/usr/bin/env bash
# Fuzzes the parsers of files from strangers (safetensors header, tokenizer.json, config.json,
# JSONL instruction records): builds their libFuzzer targets with clang (ASan + UBSan, no
# LibTorch: a minute) into build-fuzz/ and runs each for a bounded number of inputs and seconds
# over its seed corpus, tests/fuzz/corpus/TARGET. A longer session by hand, e.g.:
#   build-fuzz/tests/fuzz/fuzz_tokenizer_json -max_total_time=600 -dict=tests/fuzz/json.dict \
#     build-fuzz/tests/fuzz/corpus-scratch-tokenizer_json tests/fuzz/corpus/tokenizer_json
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib.sh
source scripts/lib.sh

usage() {
  cat <<'EOF_USAGE'
usage: scripts/fuzz.sh [--runs N] [--seconds S]
  --runs N      inputs each target tries at most (default 200000)   [$BCD_FUZZ_RUNS]
  --seconds S   seconds each target runs at most (default 18)      [$BCD_FUZZ_SECONDS]
  -h, --help    this text
The four targets run two at a time: about 40 s on 2 cores after the build.
A variable in brackets is the flag's default when set; the flag wins. BCD_JOBS: build jobs.
EOF_USAGE
}
runs=${BCD_FUZZ_RUNS:-200000}
seconds=${BCD_FUZZ_SECONDS:-18}
parse_flags "--runs=runs --seconds=seconds" "$@"
no_args
check_int --runs "$runs"
check_int --seconds "$seconds"

CC=clang CXX=clang++ cmake -S . -B build-fuzz -DBCD_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DBCD_FUZZ_RUNS="$runs" -DBCD_FUZZ_SECONDS="$seconds" > /dev/null
cmake --build build-fuzz -j "${BCD_JOBS:-$(nproc)}"
cd build-fuzz
ctest --output-on-failure -j 2
