#!/usr/bin/env bash
# Expands a hyper-parameter grid into the queue lines of scripts/batch.sh (cartesian product, the
# first key varying slowest), prints them or writes them to a queue file, and with --run runs them.
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)

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
usage_error() {
  echo "sweep: $1 (see scripts/sweep.sh --help)" >&2
  exit 2
}

grid=() out="" run=0 batch_args=()
while (($#)); do
  case $1 in
    -h | --help) usage; exit 0 ;;
    --out=*) out=${1#--out=}; [[ -n $out ]] || usage_error "--out needs a value" ;;
    --out)
      [[ -n ${2:-} ]] || usage_error "--out needs a value"
      out=$2
      shift ;;
    --run) run=1; shift; batch_args=("$@"); break ;;
    --run=*) usage_error "--run takes no value (batch.sh's arguments follow it)" ;;
    -*) usage_error "unknown flag '${1%%=*}'" ;;
    *) grid+=("$1") ;;
  esac
  shift
done
((${#grid[@]})) || usage_error "no CONFIG and KEY=V1,V2 given"
command -v python3 > /dev/null || { echo "sweep: python3 not found (scripts/setup.sh installs it)" >&2; exit 2; }
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
  if ! { mkdir -p "$(dirname "$out")" && printf '%s\n' "$lines" > "$out"; }; then
    echo "sweep: cannot write '$out'" >&2
    exit 2
  fi
  echo "sweep: $(wc -l <<< "$lines") runs written to $out" >&2
else
  printf '%s\n' "$lines"
fi
((run)) || exit 0
exec "$repo/scripts/batch.sh" "${batch_args[@]}" "$out"
