#!/usr/bin/env bash
# Benchmark import and export (scripts/bench.sh hf-io): seconds and peak RSS of `bcdtrain import`
# of a transformers-written model (scripts/make_hf_model.py: Llama-3.2-1B's shape with 12 layers,
# 0.99B parameters, five bf16 shards) into a weights file, and of `bcdtrain export` of that file
# back to bf16 safetensors; against a plain copy of the bytes each reads (`cp` of the shards, of
# the weights file, by dd), and against a copy that moves the bytes each command moves (import reads
# 2 GB of bf16 and writes 4 GB of fp32: the shards read twice into one file; export reads the
# 4 GB weights file and writes 2 GB: its first half copied, the rest read). Every side starts with the files it reads dropped from the page cache
# (posix_fadvise DONTNEED) and ends with what it wrote on disk (the commands fsync; the copies
# are followed by `sync FILE`), so both read from the drive and write to it. With --before BIN, an
# earlier bcdtrain binary's import and export run in the same rounds (its own weights file, so
# each exports what it imported). Rounds alternate which side goes first; the ratios are the
# medians of the per-round ratios. The copies are dd's read() and write() through a buffer, as
# the commands' are (cp and cat hand a file-to-file copy to the kernel: copy_file_range, which
# skips the copies through user space any transforming program makes). Last line: one JSON object.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib.sh
source scripts/lib.sh

usage() {
  cat <<'EOF_USAGE'
usage: scripts/bench_hf_io.sh [--rounds N] [--layers N] [--before BIN] [--work DIR]
       scripts/bench.sh hf-io [FLAGS...]   (builds bcdtrain first)
  --rounds N    rounds (default 3)                                       [$BENCH_ROUNDS]
  --layers N    decoder layers of the model (default 12: 0.99B parameters)
  --before BIN  an earlier bcdtrain to time beside this one (e.g. one built from an older commit)
  --work DIR    where the weights files and exports go (default: a temporary directory)
  -h, --help    this text
The model is written once into ~/.cache/bcdtrain/bench (BCD_BENCH_CACHE moves it) by
scripts/make_hf_model.py with the Python of LibTorch's environment (transformers, from
scripts/setup.sh). The trainer is BCD_BUILD_DIR/bcdtrain (BCD_BUILD_DIR default build).
EOF_USAGE
}
rounds=${BENCH_ROUNDS:-3} layers=12 before="" work=""
parse_flags "--rounds=rounds --layers=layers --before=before --work=work" "$@"
no_args
check_int --rounds "$rounds"
check_int --layers "$layers"
[[ -z $before || -x $before ]] || usage_error "--before '$before': not an executable"
flags_checked

build=${BCD_BUILD_DIR:-build}
bcd=$build/bcdtrain
# shellcheck source=scripts/bench_corpus.sh
source scripts/bench_corpus.sh
bench_require "$bcd"
bench_hf_model "$build" "$layers"

if [[ -z $work ]]; then
  work=$(mktemp -d "${TMPDIR:-/tmp}/bcd-bench-hf-io.XXXXXX")
  trap 'rm -rf "$work"' EXIT
fi
mkdir -p "$work"

# drop FILE...: the files' pages out of the page cache (clean pages: every writer here fsyncs).
drop() { python3 -c 'import os, sys
for p in sys.argv[1:]:
    fd = os.open(p, os.O_RDONLY); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED); os.close(fd)' "$@"; }

# timed NAME CMD...: runs CMD, prints "SECONDS PEAK_RSS_KB" (GNU time's %e and %M).
timed() {
  local name=$1
  shift
  /usr/bin/time -f "%e %M" -o "$work/$name.time" "$@" > "$work/$name.log" 2>&1 || { cat "$work/$name.log" >&2; die "$name failed"; }
  cat "$work/$name.time"
}
shards=("$model"/*.safetensors)
side() {  # NAME: one side of a round; appends "NAME SECONDS PEAK_KB" to the results
  local s
  case $1 in
    import | import_before)
      local bin=$bcd dir=$work/new
      [[ $1 == import ]] || bin=$before dir=$work/before
      rm -rf "$dir" && mkdir -p "$dir" && drop "${shards[@]}"
      s=$(timed "$1" "$bin" import --hf "$model" --out "$dir/model.h5") ;;
    export | export_before)
      local bin=$bcd dir=$work/new
      [[ $1 == export ]] || bin=$before dir=$work/before
      rm -rf "$dir/hf" && drop "$dir/model.h5"
      s=$(timed "$1" "$bin" export --checkpoint "$dir/model.h5" --hf "$dir/hf" --dtype bf16) ;;
    copy_shards)
      rm -rf "$work/copy" && mkdir -p "$work/copy" && drop "${shards[@]}"
      # shellcheck disable=SC2016 # the inner shell expands them
      s=$(timed "$1" bash -c 'for f; do dd if="$f" of="$0/${f##*/}" bs=8M status=none; done && sync "$0"/*' "$work/copy" "${shards[@]}") ;;
    copy_weights)
      rm -f "$work/copy.h5" && drop "$work/new/model.h5"
      # shellcheck disable=SC2016 # the inner shell expands them
      s=$(timed "$1" bash -c 'dd if="$0" of="$1" bs=8M status=none && sync "$1"' "$work/new/model.h5" "$work/copy.h5") ;;
    move_import)  # read the shards (2 GB), write as many bytes as the weights file (4 GB)
      rm -f "$work/copy.h5" && drop "${shards[@]}"
      # shellcheck disable=SC2016 # the inner shell expands them
      s=$(timed "$1" bash -c 'out=$0; shift; for f in "$@" "$@"; do dd if="$f" of="$out" bs=8M oflag=append conv=notrunc status=none; done && sync "$out"' "$work/copy.h5" "${shards[@]}") ;;
    move_export)  # read the weights file (4 GB), write as many bytes as the export (2 GB)
      rm -f "$work/copy.bin" && drop "$work/new/model.h5"
      local blocks
      blocks=$(($(stat -c %s "$work/new/model.h5") / 2 / 8388608))
      # shellcheck disable=SC2016 # the inner shell expands them
      s=$(timed "$1" bash -c 'dd if="$0" of="$1" bs=8M count="$2" status=none && dd if="$0" of=/dev/null bs=8M skip="$2" status=none && sync "$1"' "$work/new/model.h5" "$work/copy.bin" "$blocks") ;;
  esac
  echo "$1 $s" >> "$work/results"
  echo "round $r $1: $s (s, KB)" >&2
}

echo "model: $model ($(du -sh "$model" | cut -f1), $layers layers); $rounds rounds${before:+; before: $before}" >&2
order() {  # the sides in this order on odd rounds, reversed on even ones
  if ((r % 2)); then printf '%s\n' "$@"; else printf '%s\n' "$@" | tac; fi
}
for ((r = 1; r <= rounds; r++)); do
  # the weights files every export reads come from this round's imports
  mapfile -t imports < <(order import copy_shards move_import ${before:+import_before})
  mapfile -t exports < <(order export copy_weights move_export ${before:+export_before})
  for s in "${imports[@]}" "${exports[@]}"; do side "$s"; done
done
rm -rf "$work/copy" "$work/copy.h5" "$work/copy.bin"

python3 - "$work/results" "$rounds" "$layers" "$([[ -n $before ]] && echo 1 || echo 0)" <<'EOF'
import json, statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
rounds, layers, before = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
def col(name, i):
    return [float(r[i]) for r in rows if r[0] == name]
def med(name, i=1):
    return statistics.median(col(name, i))
def ratio(a, b):  # the median of the per-round ratios
    return round(statistics.median(x / y for x, y in zip(col(a, 1), col(b, 1))), 3)
out = {"benchmark": "hf-io", "layers": layers, "params_billions": round((128256 * 2048 + layers * 60821504 + 2048) / 1e9, 3),
       "rounds": rounds,
       "import_s": med("import"), "export_s": med("export"),
       "copy_shards_s": med("copy_shards"), "copy_weights_s": med("copy_weights"),
       "move_import_s": med("move_import"), "move_export_s": med("move_export"),
       "import_peak_rss_mb": round(max(col("import", 2)) / 1024), "export_peak_rss_mb": round(max(col("export", 2)) / 1024),
       "import_vs_copy_ratio": ratio("import", "copy_shards"), "export_vs_copy_ratio": ratio("export", "copy_weights"),
       "import_vs_move_ratio": ratio("import", "move_import"), "export_vs_move_ratio": ratio("export", "move_export")}
if before:
    out.update({"import_before_s": med("import_before"), "export_before_s": med("export_before"),
                "import_before_peak_rss_mb": round(max(col("import_before", 2)) / 1024),
                "export_before_peak_rss_mb": round(max(col("export_before", 2)) / 1024),
                "import_vs_before_ratio": ratio("import", "import_before"),
                "export_vs_before_ratio": ratio("export", "export_before")})
# the figure judged: each command against a plain copy of the bytes it reads (the moves say
# what a copy of as many bytes as it reads and writes takes)
out["ratio"] = max(out["import_vs_copy_ratio"], out["export_vs_copy_ratio"])
out["goal"] = "import and export <= 2x a plain copy of what they read, no slower than before"
print(json.dumps(out))
EOF
