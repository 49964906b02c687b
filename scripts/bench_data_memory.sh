#!/usr/bin/env bash
# Does memory grow with the corpus? Peak RSS (GNU time) of `bcdtrain prepare` and of `bcdtrain
# train` (the tiny demo model, a few steps and one evaluation) on a small and a large generated
# corpus (fortune records repeated with a tag line; the demo's tokenizer). prepare_ratio and
# train_ratio are RSS(large) / RSS(small); ratio is the larger of the two (goal <= 1.1).
# Last line: one JSON object.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib.sh
source scripts/lib.sh

usage() {
  cat <<'EOF_USAGE'
usage: scripts/bench_data_memory.sh [--small-mib N] [--large-mib N] [--dir DIR]
       scripts/bench.sh data-memory [FLAGS...]   (builds bcdtrain first)
  --small-mib N   the small corpus, MiB (default 100)                        [$BCD_BENCH_SMALL_MIB]
  --large-mib N   the large corpus, MiB (default 2048)                       [$BCD_BENCH_LARGE_MIB]
  --dir DIR       where the corpora go, in a fresh folder removed afterwards
                  (default: one under $TMPDIR or /tmp)                       [$BCD_BENCH_DIR]
  -h, --help      this text
A variable in brackets is the flag's default when set; the flag wins. The trainer is
BCD_BUILD_DIR/bcdtrain (BCD_BUILD_DIR default build).
EOF_USAGE
}
small_mib=${BCD_BENCH_SMALL_MIB:-100} large_mib=${BCD_BENCH_LARGE_MIB:-2048} base=${BCD_BENCH_DIR:-${TMPDIR:-/tmp}}
parse_flags "--small-mib=small_mib --large-mib=large_mib --dir=base" "$@"
no_args
check_int --small-mib "$small_mib"
check_int --large-mib "$large_mib"
flags_checked

bcd=${BCD_BUILD_DIR:-build}/bcdtrain
# shellcheck source=scripts/bench_corpus.sh
source scripts/bench_corpus.sh
bench_require "$bcd"

mkdir -p "$base"
dir=$(mktemp -d "$base/bcd-bench-data-memory.XXXXXX")
trap 'rm -rf "$dir"' EXIT
need=$(((large_mib + small_mib) * 3 >> 10))
avail=$(df -BG --output=avail "$dir" | tail -1 | tr -dc 0-9)
((avail > need + 1)) || die "$dir has ${avail} GiB free, the corpora need about $((need + 1)) GiB"

model=$(demo_tokenizer "$bcd" "$dir")

# Peak RSS (KiB) of a command; its output goes to $dir/NAME.log.
peak() {  # NAME CMD...
  local name=$1
  shift
  /usr/bin/time -f "%e %M" -o "$dir/$name.time" "$@" > "$dir/$name.log" 2>&1 ||
    { tail -20 "$dir/$name.log" >&2; say "$name failed"; exit 1; }
  read -r secs kib < "$dir/$name.time"
  say "$name ${secs}s, peak RSS $((kib >> 10)) MiB"
  echo "$kib"
}

declare -A rss
for size in small large; do
  mib_var=${size}_mib
  make_corpus "$dir/$size.txt" "${!mib_var}"
  say "$size corpus $(($(stat -c %s "$dir/$size.txt") >> 20)) MiB"
  rss[prepare_$size]=$(peak "prepare_$size" "$bcd" prepare --input "$dir/$size.txt" --out "$dir/$size" --tokenizer "$model")
  rm -f "$dir/$size.txt"
  rss[train_$size]=$(peak "train_$size" "$bcd" train --config configs/tiny.toml --data.path="$dir/$size" \
    --train.run_dir="$dir/run_$size" --train.steps=6 --train.val_every=6 --train.val_batches=4 --train.log_every=2)
done

ratio_of() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.4f", a / b}'; }
pr=$(ratio_of "${rss[prepare_large]}" "${rss[prepare_small]}")
tr=$(ratio_of "${rss[train_large]}" "${rss[train_small]}")
ratio=$(awk -v a="$pr" -v b="$tr" 'BEGIN{print (a > b) ? a : b}')
printf '{"bench":"data-memory","small_mib":%d,"large_mib":%d,"prepare_rss_mib":[%d,%d],"train_rss_mib":[%d,%d],"prepare_ratio":%s,"train_ratio":%s,"ratio":%s}\n' \
  "$small_mib" "$large_mib" "$((rss[prepare_small] >> 10))" "$((rss[prepare_large] >> 10))" \
  "$((rss[train_small] >> 10))" "$((rss[train_large] >> 10))" "$pr" "$tr" "$ratio"
