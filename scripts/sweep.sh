#!/usr/bin/env bash
# Expands a hyper-parameter grid into the queue lines of scripts/batch.sh (cartesian product, the
# first key varying slowest), prints them or writes them to a queue file, and with --run runs them.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=scripts/lib.sh
source "$repo/scripts/lib.sh"

usage() {
  cat <<'EOF'
usage: scripts/sweep.sh CONFIG KEY=V1,V2[,...] [KEY=...] [--out QUEUE_FILE] [--run [BATCH_ARGS...]]
  CONFIG         the config every line starts from
  KEY=V1,V2      section.key and its values; `\,` is a comma inside a value (TOML arrays:
                 sample.prompts='["a"\, "b"]'), `\\` a backslash
  --out FILE     write the queue there instead of printing it
  --run [ARGS]   then run it: scripts/batch.sh ARGS QUEUE_FILE; every argument after --run goes
                 to batch.sh (e.g. --runs DIR); without --out the queue is written to
                 RUNS_DIR/sweep-<config>-<hash>.queue
  -h, --help     this text
Lines are `CONFIG --k1=a --k2=x`, `CONFIG --k1=a --k2=y`, `CONFIG --k1=b --k2=x`, ... (the first
key varies slowest; values in the order given), quoted as in the shell where needed.
Exit status: that of batch.sh with --run, else 0; 2 bad arguments.
EOF
}

# Every argument after --run is batch.sh's.
out="" run=0 batch_args=() n=0
for a in "$@"; do
  [[ $a != --run ]] || { batch_args=("${@:n + 2}"); break; }
  n=$((n + 1))
done
parse_flags "--out=out --run:run" "${@:1:n}"
((n == $#)) || run=1
grid=("${args[@]}")
((${#grid[@]})) || usage_error "no CONFIG and KEY=V1,V2 given"
command -v python3 > /dev/null || die "python3 not found (scripts/setup.sh installs it)"
# (It also checks that CONFIG exists: a queue of a config that is not there would fail every line.)
lines=$(python3 "$repo/scripts/batch_queue.py" expand "${grid[@]}") || exit 2

if ((run)) && [[ -z $out ]]; then
  runs_dir=runs
  for ((i = 0; i < ${#batch_args[@]}; i++)); do
    case ${batch_args[i]} in
      --runs=*) runs_dir=${batch_args[i]#--runs=} ;;
      --runs) runs_dir=${batch_args[i + 1]:-} ;;
    esac
  done
  [[ -n $runs_dir ]] || usage_error "--runs needs a value"
  stem=$(basename "${grid[0]}" .toml)
  out=$runs_dir/sweep-$stem-$(printf '%s\n' "$lines" | sha1sum | head -c 8).queue
fi
if [[ -n $out ]]; then
  err=$({ mkdir -p -- "$(dirname -- "$out")" && printf '%s\n' "$lines" > "$out"; } 2>&1) ||
    die "cannot write '$out': ${err##*: }"
  say "$(wc -l <<< "$lines") runs written to $out"
else
  printf '%s\n' "$lines"
fi
((run)) || exit 0
exec "$repo/scripts/batch.sh" "${batch_args[@]}" "$out"
