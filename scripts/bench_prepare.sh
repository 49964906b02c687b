#!/usr/bin/env bash
# Tokenizing throughput: `bcdtrain prepare` (every core, streaming) against sentencepiece's own
# command line, spm_encode (one thread), on the same generated text with the same tokenizer
# model, or (--tokenizer, `scripts/bench.sh tokenize`) prepare with another tokenizer, such as
# Llama 3's tokenizer.json, against spm_encode with the demo model. Each round runs both, alternating which goes first; a side's tokens/s is the tokens it
# produced over its whole command's wall time (prepare: reading, the split pass, tokenizing and
# writing tokens.h5; spm_encode: reading and writing ids). ratio = median over rounds of
# prepare's tokens/s / spm_encode's (goal >= 1 on two cores). Peak RSS of both, from GNU time.
# Last line: one JSON object.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib.sh
source scripts/lib.sh

usage() {
  cat <<'EOF_USAGE'
usage: scripts/bench_prepare.sh [--mib N] [--rounds N] [--tokenizer PATH]
       scripts/bench.sh prepare [FLAGS...]    (builds bcdtrain first)
       scripts/bench.sh tokenize [FLAGS...]   (the same with --tokenizer: Llama 3's tokenizer.json)
  --mib N          MiB of text to tokenize (default 32)                 [$BCD_BENCH_MIB]
  --rounds N       rounds, each running both sides (default 3)          [$BCD_BENCH_ROUNDS]
  --tokenizer PATH prepare's tokenizer (tokenizer.json, tokenizer.model or a directory);
                   default: the demo model spm_encode uses
  -h, --help    this text
A variable in brackets is the flag's default when set; the flag wins. The trainer is
BCD_BUILD_DIR/bcdtrain (BCD_BUILD_DIR default build).
EOF_USAGE
}
mib=${BCD_BENCH_MIB:-32} rounds=${BCD_BENCH_ROUNDS:-3} tokenizer=""
parse_flags "--mib=mib --rounds=rounds --tokenizer=tokenizer" "$@"
no_args
check_int --mib "$mib"
check_int --rounds "$rounds"
[[ -z $tokenizer || -e $tokenizer ]] || usage_error "--tokenizer: no such file or directory: $tokenizer"
flags_checked

bcd=${BCD_BUILD_DIR:-build}/bcdtrain
# shellcheck source=scripts/bench_corpus.sh
source scripts/bench_corpus.sh
bench_require "$bcd"
command -v spm_encode > /dev/null || die "spm_encode not found (scripts/setup.sh installs sentencepiece)"

dir=$(mktemp -d "${TMPDIR:-/tmp}/bcd-bench-prepare.XXXXXX")
trap 'rm -rf "$dir"' EXIT

# The tokenizer: the demo's; the text: the fortune files' records, repeated to $mib MiB.
model=$(demo_tokenizer "$bcd" "$dir")
bench=prepare prepare_tokenizer=$model
[[ -z $tokenizer ]] || bench=tokenize prepare_tokenizer=$tokenizer
make_corpus "$dir/text.txt" "$mib"
bytes=$(stat -c %s "$dir/text.txt")
say "$((bytes >> 20)) MiB of text, $(nproc) cores, $rounds rounds; prepare with $prepare_tokenizer, spm_encode with $model"

# Wall seconds and peak RSS (KiB) of a command, through GNU time.
timed() {
  /usr/bin/time -f "%e %M" -o "$dir/time" "$@" > "$dir/out" 2>&1 || { cat "$dir/out" >&2; exit 1; }
}
run_bcd() {
  rm -rf "$dir/ds"
  timed "$bcd" prepare --input "$dir/text.txt" --out "$dir/ds" --tokenizer "$prepare_tokenizer" --val-fraction 0
  read -r bt bm < "$dir/time"
  grep -o '[0-9]* train docs / [0-9]* tokens, [0-9]* val docs / [0-9]* tokens' "$dir/out" |
    awk '{print $5 + $11}' > "$dir/bcd_tokens"
  btok=$(cat "$dir/bcd_tokens")
}
run_spm() {
  timed spm_encode --model "$model" --output_format id --input "$dir/text.txt" --output "$dir/ids.txt"
  read -r st sm < "$dir/time"
  stok=$(wc -w < "$dir/ids.txt")
}

ratios=() bcd_rates=() spm_rates=() bcd_rss=0 spm_rss=0
for ((r = 0; r < rounds; r++)); do
  if ((r % 2 == 0)); then
    run_bcd; run_spm
  else
    run_spm; run_bcd
  fi
  brate=$(awk -v n="$btok" -v t="$bt" 'BEGIN{printf "%.0f", n / t}')
  srate=$(awk -v n="$stok" -v t="$st" 'BEGIN{printf "%.0f", n / t}')
  ratio=$(awk -v a="$brate" -v b="$srate" 'BEGIN{printf "%.4f", a / b}')
  echo "round $((r + 1)): prepare ${bt}s ${btok} tokens ${brate} tokens/s ${bm} KiB | spm_encode ${st}s ${stok} tokens ${srate} tokens/s ${sm} KiB | ratio $ratio" >&2
  ratios+=("$ratio") bcd_rates+=("$brate") spm_rates+=("$srate")
  ((bm <= bcd_rss)) || bcd_rss=$bm
  ((sm <= spm_rss)) || spm_rss=$sm
done

median() { printf '%s\n' "$@" | sort -g | awk '{v[NR]=$1} END{print (NR % 2) ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2}'; }
printf '{"bench":"%s","prepare_tokenizer":"%s","text_mib":%d,"cores":%d,"rounds":%d,"prepare_tokens_per_s":%s,"spm_encode_tokens_per_s":%s,"prepare_peak_rss_mib":%d,"spm_encode_peak_rss_mib":%d,"ratios":[%s],"ratio":%s}\n' \
  "$bench" "$(basename "$(dirname "$(realpath "$prepare_tokenizer")")")/$(basename "$prepare_tokenizer")" \
  "$((bytes >> 20))" "$(nproc)" "$rounds" "$(median "${bcd_rates[@]}")" "$(median "${spm_rates[@]}")" \
  "$((bcd_rss >> 10))" "$((spm_rss >> 10))" "$(IFS=,; echo "${ratios[*]}")" "$(median "${ratios[@]}")"
