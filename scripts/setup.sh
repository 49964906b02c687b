#!/usr/bin/env bash
# Installs every dependency bcdtrain needs (Debian 12 packages; idempotent) and builds into build/.
# Environment: BCD_SKIP_APT=1 skips the package step; BCD_BUILD_TYPE (default Release);
# CMAKE_PREFIX_PATH picks another LibTorch (e.g. a CUDA build); BCD_JOBS parallel build jobs.
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(
  build-essential cmake pkg-config git
  libtorch-dev                      # LibTorch (CPU) 1.13
  libgloo-dev                       # Gloo's headers: LibTorch's CPU process group (multi-rank training)
  libopenblas0-pthread              # fast BLAS for LibTorch (the default reference BLAS is ~27x slower)
  liburing-dev libtbb-dev libhdf5-dev libfmt-dev
  libsentencepiece-dev              # tokenizer (loaded at run time, see src/io/tokenizer.cpp)
  libtomlplusplus-dev libcli11-dev nlohmann-json3-dev libxxhash-dev
  libgtest-dev libgmock-dev
  clang libclang-rt-14-dev           # libFuzzer build of the safetensors parser (scripts/fuzz.sh)
  fio                               # reference for `bcdtrain iobench` (scripts/bench_io.sh)
  sentencepiece time                # spm_encode and GNU time: scripts/bench_prepare.sh, bench_data_memory.sh
  python3                           # scripts/gpu_check_summary.py and the tests of scripts/
  gnuplot-nox                       # scripts/plot.sh (the pngcairo terminal, no X11)
  fortunes                          # demo corpus: /usr/share/games/fortunes
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [[ ${#missing[@]} -gt 0 && "${BCD_SKIP_APT:-0}" != 1 ]]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -q "${missing[@]}"
fi

# LibTorch calls BLAS through libblas.so.3: make sure OpenBLAS, not the reference BLAS, serves it.
blas_alt=/usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3
if [[ -e $blas_alt ]] && command -v update-alternatives > /dev/null; then
  cur=$(update-alternatives --query libblas.so.3-x86_64-linux-gnu 2>/dev/null | awk '/^Value:/{print $2}')
  if [[ "$cur" != "$blas_alt" && $(id -u) -eq 0 ]]; then
    update-alternatives --set libblas.so.3-x86_64-linux-gnu "$blas_alt" || true
    update-alternatives --set liblapack.so.3-x86_64-linux-gnu \
      /usr/lib/x86_64-linux-gnu/openblas-pthread/liblapack.so.3 || true
  fi
fi

jobs=${BCD_JOBS:-$(nproc)}
cmake -S . -B build -DCMAKE_BUILD_TYPE="${BCD_BUILD_TYPE:-Release}" ${CMAKE_PREFIX_PATH:+-DCMAKE_PREFIX_PATH="$CMAKE_PREFIX_PATH"}
cmake --build build -j "$jobs"
