#!/usr/bin/env bash
# NVMe I/O benchmark: fio (io_uring, O_DIRECT) against `bcdtrain iobench` (io_uring engine, and the
# thread-pool fallback), sequential read and write of one shared file, same size, block size and
# queue depth, interleaved rounds, medians. Last line: one JSON object with read_ratio, write_ratio
# and ratio (the lower; ours / fio), and the same for the threads engine.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib.sh
source scripts/lib.sh

usage() {
  cat <<'EOF_USAGE'
usage: scripts/bench_io.sh [--dir DIR] [--size SIZE] [--block-size SIZE] [--queue-depth N] [--rounds N]
       scripts/bench.sh io [FLAGS...]   (builds bcdtrain first)
  --dir DIR           a directory on the drive under test; the file goes in a fresh folder there,
                      removed afterwards (default: one under $TMPDIR or /tmp)   [$BCD_BENCH_DIR]
  --size SIZE         file size, e.g. 2GiB, 512MiB, 1.5GB (default 2GiB)        [$BCD_BENCH_SIZE]
  --block-size SIZE   block size (default 1MiB)                                  [$BCD_BENCH_BS]
  --queue-depth N     requests in flight (default 8)                             [$BCD_BENCH_QD]
  --rounds N          rounds; the medians are taken over them (default 3)        [$BCD_BENCH_ROUNDS]
  -h, --help          this text
A variable in brackets is the flag's default when set; the flag wins. BCD_IOBENCH is the
iobench command (default: BCD_BUILD_DIR/bcdtrain iobench, BCD_BUILD_DIR default build).
EOF_USAGE
}
dir_base=${BCD_BENCH_DIR:-} size_text=${BCD_BENCH_SIZE:-2GiB} bs_text=${BCD_BENCH_BS:-1MiB}
qd=${BCD_BENCH_QD:-8} rounds=${BCD_BENCH_ROUNDS:-3}
parse_flags "--dir=dir_base --size=size_text --block-size=bs_text --queue-depth=qd --rounds=rounds" "$@"
no_args
size=$(parse_bytes --size "$size_text")
bs=$(parse_bytes --block-size "$bs_text")
((size > 0)) || usage_error "--size: expected more than 0 bytes, got '$size_text'"
((bs > 0)) || usage_error "--block-size: expected more than 0 bytes, got '$bs_text'"
check_int --queue-depth "$qd"
check_int --rounds "$rounds"
flags_checked
read -r -a iobench <<< "${BCD_IOBENCH:-${BCD_BUILD_DIR:-build}/bcdtrain iobench}"

command -v fio > /dev/null || die "fio not found (scripts/setup.sh installs it)"
[[ -x ${iobench[0]} ]] || command -v "${iobench[0]}" > /dev/null || die "${iobench[0]} not found: build first (scripts/setup.sh)"

if [[ -n $dir_base ]]; then
  mkdir -p "$dir_base"
  dir=$(mktemp -d "$dir_base/bench-io.XXXXXX")
else
  dir=$(mktemp -d "${TMPDIR:-/tmp}/bcd-bench-io.XXXXXX")
fi
trap 'rm -rf "$dir"' EXIT
fstype=$(df --output=fstype "$dir" | tail -1 | tr -d ' ')
[[ $fstype != tmpfs ]] || say "warning: $dir is on tmpfs: this measures memory, not a drive"
file=$dir/bcd-iobench.dat  # the name iobench uses: both tools work on the same file

# GB/s (1e9 bytes/s) of one fio run; fio's terse v3 format has bandwidth in KiB/s in field 7
# (read) and 48 (write).
fio_gbs() {
  local mode=$1 field=7
  [[ $mode != write ]] || field=48
  fio --name="bcd-$mode" --filename="$file" --size="$size" --bs="$bs" --iodepth="$qd" --rw="$mode" \
      --ioengine=io_uring --direct=1 --numjobs=1 --output-format=terse --terse-version=3 |
    awk -F';' -v f="$field" '{ printf "%.4f\n", $f * 1024 / 1e9 }'
}

ours_gbs() {
  local mode=$1 engine=$2
  "${iobench[@]}" --path "$dir" --size "$size" --block-size "$bs" --queue-depth "$qd" --mode "$mode" \
      --engine "$engine" | tail -1 | sed -n 's/.*"gb_s":\([0-9.eE+-]*\).*/\1/p'
}

median() { tr ' ' '\n' | sed '/^$/d' | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

say "$size_text file in $dir ($fstype), block $bs_text, queue depth $qd, $rounds rounds"
fio_gbs write > /dev/null  # lays the file out (untimed), so every run below finds it written

declare -A runs
for ((r = 1; r <= rounds; r++)); do
  # Alternate who goes first, so drive warm-up and caching don't favour one side.
  if ((r % 2)); then order="fio uring threads"; else order="threads uring fio"; fi
  for mode in read write; do
    for who in $order; do
      if [[ $who == fio ]]; then v=$(fio_gbs "$mode"); else v=$(ours_gbs "$mode" "$who"); fi
      [[ -n $v ]] || { say "no result from $who $mode"; exit 1; }
      runs[$who.$mode]+="$v "
      printf 'bench_io: round %d %-7s %-5s %7.3f GB/s\n' "$r" "$who" "$mode" "$v" >&2
    done
  done
done

declare -A med
for k in "${!runs[@]}"; do med[$k]=$(echo "${runs[$k]}" | median); done
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.4f", (b > 0) ? a / b : 0 }'; }
lower() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.4f", (a < b) ? a : b }'; }
read_ratio=$(ratio "${med[uring.read]}" "${med[fio.read]}")
write_ratio=$(ratio "${med[uring.write]}" "${med[fio.write]}")
t_read_ratio=$(ratio "${med[threads.read]}" "${med[fio.read]}")
t_write_ratio=$(ratio "${med[threads.write]}" "${med[fio.write]}")
printf 'bench_io: medians GB/s  fio read %.3f write %.3f | uring read %.3f write %.3f | threads read %.3f write %.3f\n' \
  "${med[fio.read]}" "${med[fio.write]}" "${med[uring.read]}" "${med[uring.write]}" "${med[threads.read]}" \
  "${med[threads.write]}" >&2
printf '{"bench":"io","size":%s,"block_size":%s,"queue_depth":%s,"rounds":%s,' "$size" "$bs" "$qd" "$rounds"
printf '"fio_read_gb_s":%s,"fio_write_gb_s":%s,"read_gb_s":%s,"write_gb_s":%s,' \
  "${med[fio.read]}" "${med[fio.write]}" "${med[uring.read]}" "${med[uring.write]}"
printf '"read_ratio":%s,"write_ratio":%s,"ratio":%s,' "$read_ratio" "$write_ratio" "$(lower "$read_ratio" "$write_ratio")"
printf '"threads_read_gb_s":%s,"threads_write_gb_s":%s,"threads_read_ratio":%s,"threads_write_ratio":%s,"threads_ratio":%s}\n' \
  "${med[threads.read]}" "${med[threads.write]}" "$t_read_ratio" "$t_write_ratio" "$(lower "$t_read_ratio" "$t_write_ratio")"
