#!/usr/bin/env bash
# Builds and runs one named benchmark; its last stdout line is one JSON record.
# Usage: scripts/bench.sh NAME [ARGS...]   (extra ARGS go to the benchmark program)
# Environment: BCD_BUILD_DIR (default build; set up with scripts/setup.sh when missing),
# BCD_JOBS parallel build jobs.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() {
  echo "usage: scripts/bench.sh NAME [ARGS...]" >&2
  echo "  NAME: adamw-kernel  fused CPU AdamW vs torch::optim::AdamW vs memcpy" >&2
  echo "        bcd-step      BCD step time over a block-epoch vs full AdamW (12 layers)" >&2
  echo "        convergence   tiny demo: BCD keep / reset / full AdamW at equal wall-clock and tokens" >&2
  echo "        finetune      LIMA instruction fine-tuning from a pretrained base: BCD keep / reset vs AdamW" >&2
  echo "        io            fio vs bcdtrain iobench (io_uring and thread engines)" >&2
  echo "        prepare       bcdtrain prepare tokens/s (every core) vs spm_encode, and peak RSS" >&2
  echo "        data-memory   peak RSS of prepare and train on a 100 MiB vs a 2 GiB corpus" >&2
  echo "        staging       BCD step time with master + moments on NVMe vs in host memory" >&2
  echo "        streaming     BCD step time with frozen layers' weights streamed from host memory vs resident" >&2
  echo "        comm          bytes moved per step, BCD vs data-parallel AdamW (2 ranks)" >&2
  echo "        dp            2 ranks x 1 thread vs 1 rank x 1 thread: scaling efficiency" >&2
  echo "        memory        compute-tier model-state peak of BCD vs full AdamW (32 layers, bf16)" >&2
  exit 2
}
[[ $# -ge 1 ]] || usage
name=$1
shift

# One line per benchmark: its CMake target and the program's path inside the build directory.
case "$name" in
  adamw-kernel) target=bench_adamw; program=tests/bench_adamw ;;
  bcd-step) target=bench_bcd_step; program=tests/bench_bcd_step ;;
  convergence) target=bench_convergence; program=tests/bench_convergence ;;
  finetune) target=bench_finetune; program=tests/bench_finetune ;;
  io | prepare | data-memory | streaming) target=bcdtrain; program="" ;;
  staging) target=bench_staging; program=tests/bench_staging ;;
  memory) target=bench_memory; program=tests/bench_memory ;;
  comm | dp) target=bench_dp; program="tests/bench_dp $name" ;;
  *) echo "scripts/bench.sh: unknown benchmark '$name'" >&2; usage ;;
esac

build=${BCD_BUILD_DIR:-build}
jobs=${BCD_JOBS:-$(nproc)}
if [[ ! -d $build ]]; then
  if [[ $build == build ]]; then
    scripts/setup.sh
  else
    cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release
    cmake --build "$build" -j "$jobs" --target "$target"
  fi
else
  cmake --build "$build" -j "$jobs" --target "$target"
fi

# Every core for both thread pools (the programs default to all of them); libgomp, LibTorch's
# OpenMP, otherwise spins idle threads and steals those cores from TBB.
export OMP_WAIT_POLICY=PASSIVE
case "$name" in
  io) BCD_IOBENCH="$build/bcdtrain iobench" exec scripts/bench_io.sh "$@" ;;
  prepare) BCD_BUILD_DIR=$build exec scripts/bench_prepare.sh "$@" ;;
  data-memory) BCD_BUILD_DIR=$build exec scripts/bench_data_memory.sh "$@" ;;
  streaming) BCD_BUILD_DIR=$build exec scripts/bench_streaming.sh "$@" ;;
esac
exec $build/$program "$@"
