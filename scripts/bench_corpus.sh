# shellcheck shell=bash
# Sourced by scripts/bench_prepare.sh, bench_data_memory.sh, bench_streaming.sh, bench_hf_io.sh and
# bench_lowram.sh (after scripts/lib.sh): their checks, the demo tokenizer, the transformers-written
# model and the generated corpora (the fortune files'
# records, repeated with a tag line per round: real text, any size).

# bench_require BCDTRAIN: exits 2 naming what is missing (scripts/setup.sh installs it all).
bench_require() {
  [[ -x $1 ]] || die "$1 not found: build first (scripts/setup.sh)"
  [[ -x /usr/bin/time ]] || die "/usr/bin/time not found (scripts/setup.sh installs time)"
  [[ -d /usr/share/games/fortunes ]] || die "/usr/share/games/fortunes missing (scripts/setup.sh installs fortunes)"
}

# bench_python BUILD: the Python with transformers (the build's BCD_TEST_PYTHON, else LibTorch's
# environment), into $python.
bench_python() {
  python=$(sed -n 's/^BCD_TEST_PYTHON:FILEPATH=//p' "$1/CMakeCache.txt" 2> /dev/null || true)
  [[ -x $python ]] || python=${XDG_CACHE_HOME:-$HOME/.cache}/bcdtrain/torch-2.11.0/bin/python
}

# bench_hf_model BUILD LAYERS: Llama-3.2-1B's shape with LAYERS layers written by transformers
# (scripts/make_hf_model.py, with Llama 3's tokenizer), once, into ~/.cache/bcdtrain/bench
# (BCD_BENCH_CACHE moves it); its directory into $model, the Python into $python.
bench_hf_model() {
  bench_python "$1"
  model=${BCD_BENCH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/bcdtrain/bench}/llama3-1b-$2
  "$python" scripts/make_hf_model.py "$model" --layers "$2" --tokenizer ../shared/data/tokenizers/llama3 >&2
}

# demo_tokenizer BCDTRAIN DIR: the demo's BPE tokenizer (vocabulary 2048) in DIR/demo; prints its path.
demo_tokenizer() {
  "$1" prepare --input /usr/share/games/fortunes --out "$2/demo" --vocab-size 2048 > /dev/null
  echo "$2/demo/tokenizer.model"
}

# make_corpus FILE MIB: at least MIB MiB of fortune records in FILE.
make_corpus() {
  local once round=0
  once=$(mktemp)
  # shellcheck disable=SC2046
  cat $(find /usr/share/games/fortunes -maxdepth 1 -type f ! -name '*.*' | sort) > "$once"
  : > "$1"
  while [[ $(stat -c %s "$1") -lt $(($2 << 20)) ]]; do
    echo "% round $round" >> "$1"  # a tag line per round keeps every round's first record apart
    cat "$once" >> "$1"
    round=$((round + 1))
  done
  rm -f "$once"
}
