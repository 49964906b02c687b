#!/usr/bin/env bash
# Fuzzes the safetensors header parser: builds its libFuzzer target with clang (ASan + UBSan, no
# LibTorch: seconds) into build-fuzz/ and runs a bounded number of inputs over tests/fuzz/corpus.
# Environment: BCD_FUZZ_RUNS inputs to try (default 200000, about 10 s); BCD_JOBS build jobs.
# A longer session by hand: build-fuzz/tests/fuzz/fuzz_safetensors -max_total_time=600 \
#   -dict=tests/fuzz/safetensors.dict build-fuzz/tests/fuzz/corpus-scratch tests/fuzz/corpus
set -euo pipefail
cd "$(dirname "$0")/.."
CC=clang CXX=clang++ cmake -S . -B build-fuzz -DBCD_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DBCD_FUZZ_RUNS="${BCD_FUZZ_RUNS:-200000}" > /dev/null
cmake --build build-fuzz -j "${BCD_JOBS:-$(nproc)}"
cd build-fuzz
ctest --output-on-failure
