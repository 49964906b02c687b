#!/usr/bin/env bash
# NVMe I/O benchmark: fio (io_uring, O_DIRECT) against `bcdtrain iobench` (io_uring engine, and the
# thread-pool fallback), sequential read and write of one shared file, same size, block size and
# queue depth, interleaved rounds, medians. Last line: one JSON object with read_ratio, write_ratio
# and ratio (the lower; ours / fio), and the same for the threads engine.
# Environment: BCD_BENCH_DIR (a directory on the drive under test; default: a fresh one under
# $TMPDIR or /tmp, removed afterwards), BCD_BENCH_SIZE (2GiB), BCD_BENCH_BS (1MiB), BCD_BENCH_QD (8),
# BCD_BENCH_ROUNDS (3), BCD_IOBENCH (the iobench command; default: build/bcdtrain iobench).
set -euo pipefail
cd "$(dirname "$0")/.."

size_text=${BCD_BENCH_SIZE:-2GiB}
bs_text=${BCD_BENCH_BS:-1MiB}
qd=${BCD_BENCH_QD:-8}
rounds=${BCD_BENCH_ROUNDS:-3}
read -r -a iobench <<< "${BCD_IOBENCH:-build/bcdtrain iobench}"

command -v fio > /dev/null || { echo "bench_io: fio not found (scripts/setup.sh installs it)" >&2; exit 2; }
[[ -x ${iobench[0]} ]] || command -v "${iobench[0]}" > /dev/null ||
  { echo "bench_io: ${iobench[0]} not found: build first (scripts/setup.sh)" >&2; exit 2; }

# "2GiB" -> 2147483648 (binary units), "1.5GB" -> 1500000000 (decimal), "4096" -> 4096.
to_bytes() {
  local t=${1%B}
  if [[ $t == *i ]]; then numfmt --from=iec-i "$t"; else numfmt --from=si "$t"; fi
}
size=$(to_bytes "$size_text")
bs=$(to_bytes "$bs_text")

if [[ -n ${BCD_BENCH_DIR:-} ]]; then
  mkdir -p "$BCD_BENCH_DIR"
  dir=$(mktemp -d "$BCD_BENCH_DIR/bench-io.XXXXXX")
else
  dir=$(mktemp -d "${TMPDIR:-/tmp}/bcd-bench-io.XXXXXX")
fi
trap 'rm -rf "$dir"' EXIT
fstype=$(df --output=fstype "$dir" | tail -1 | tr -d ' ')
[[ $fstype == tmpfs ]] && echo "bench_io: warning: $dir is on tmpfs: this measures memory, not a drive" >&2
file=$dir/bcd-iobench.dat  # the name iobench uses: both tools work on the same file

# GB/s (1e9 bytes/s) of one fio run; fio's terse v3 format has bandwidth in KiB/s in field 7
# (read) and 48 (write).
fio_gbs() {
  local mode=$1 field=7
  [[ $mode == write ]] && field=48
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

echo "bench_io: $size_text file in $dir ($fstype), block $bs_text, queue depth $qd, $rounds rounds" >&2
fio_gbs write > /dev/null  # lays the file out (untimed), so every run below finds it written

declare -A runs
for ((r = 1; r <= rounds; r++)); do
  # Alternate who goes first, so drive warm-up and caching don't favour one side.
  if ((r % 2)); then order="fio uring threads"; else order="threads uring fio"; fi
  for mode in read write; do
    for who in $order; do
      if [[ $who == fio ]]; then v=$(fio_gbs "$mode"); else v=$(ours_gbs "$mode" "$who"); fi
      [[ -n $v ]] || { echo "bench_io: no result from $who $mode" >&2; exit 1; }
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
