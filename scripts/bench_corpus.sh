# shellcheck shell=bash
# Sourced by scripts/bench_prepare.sh, bench_data_memory.sh and bench_streaming.sh (after
# scripts/lib.sh): their checks, the demo tokenizer and the generated corpora (the fortune files'
# records, repeated with a tag line per round: real text, any size).

# bench_require BCDTRAIN: exits 2 naming what is missing (scripts/setup.sh installs it all).
bench_require() {
  [[ -x $1 ]] || die "$1 not found: build first (scripts/setup.sh)"
  [[ -x /usr/bin/time ]] || die "/usr/bin/time not found (scripts/setup.sh installs time)"
  [[ -d /usr/share/games/fortunes ]] || die "/usr/share/games/fortunes missing (scripts/setup.sh installs fortunes)"
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
