#!/usr/bin/env bash
# Runs a queue of training runs one after another (`bcdtrain train --resume auto` each, in its own
# run directory), resumes interrupted ones and skips finished ones on the next call, and writes
# batch-summary.md / .jsonl. Queue lines, run names and the summary: scripts/batch_queue.py.
set -euo pipefail
export LC_ALL=C  # decimal points in $EPOCHREALTIME
repo=$(cd "$(dirname "$0")/.." && pwd)
helper=$repo/scripts/batch_queue.py
# shellcheck source=scripts/lib.sh
source "$repo/scripts/lib.sh"

usage() {
  cat <<'EOF'
usage: scripts/batch.sh [--runs DIR] QUEUE_FILE
       scripts/batch.sh [--runs DIR] CONFIG.toml...
  QUEUE_FILE   one run a line: a config path and overrides, e.g.
                 configs/tiny.toml --train.lr=1e-3 --bcd.switch_every=20
               `#` starts a comment; quote as in the shell; paths are relative to the current
               directory (as on the command line). Any argument not ending in .toml is a queue file.
  CONFIG.toml  one or more configs, each a run without overrides
  --runs DIR   where run directories and batch-summary.md/.jsonl go (default: runs)
  -h, --help   this text
Each run: $BCDTRAIN (default build/bcdtrain) train --config CONFIG OVERRIDES
--train.run_dir=DIR/<name> --resume auto, its output appended to <run dir>/train.log and shown
here. A run whose summary.json says finished is skipped. Ctrl-C or SIGTERM: the running trainer
checkpoints and stops, and so does the queue (call again to resume). Exit status: 0 every run
finished or was skipped, 1 some run failed, 2 bad arguments, 128+signal interrupted.
EOF
}

# ---- Arguments ----
runs_dir=runs
parse_flags "--runs=runs_dir" "$@"
inputs=("${args[@]}")
((${#inputs[@]})) || usage_error "no queue file or config given"
if [[ ${inputs[0]} == *.toml ]]; then
  for c in "${inputs[@]}"; do
    [[ $c == *.toml ]] || usage_error "'$c': give one queue file, or configs (*.toml) only"
  done
  source_args=(--configs "${inputs[@]}")
else
  ((${#inputs[@]} == 1)) || usage_error "'${inputs[1]}': give one queue file, or configs (*.toml) only"
  [[ -f ${inputs[0]} ]] || usage_error "queue file '${inputs[0]}' not found"
  source_args=(--queue "${inputs[0]}")
fi
command -v python3 > /dev/null || die "python3 not found (scripts/setup.sh installs it)"
bin=${BCDTRAIN:-$repo/build/bcdtrain}
[[ -x $bin ]] || die "no trainer at $bin (build it, or set BCDTRAIN)"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 "$helper" plan "$runs_dir" "$work/plan.json" "${source_args[@]}" > "$work/plan" || exit 2
mapfile -t plan < "$work/plan"
: > "$work/results"

# ---- Signals ----
# The trainer runs in its own process group, so a Ctrl-C at the terminal reaches this script
# alone and the trainer gets exactly one signal (a second one kills it without a checkpoint).
signal="" signals=0 pid=""
on_signal() {
  signal=$1
  signals=$((signals + 1))
  [[ -z $pid ]] || kill -s "$1" "$pid" 2> /dev/null || true  # it may have ended
}
trap 'on_signal INT' INT
trap 'on_signal TERM' TERM
signal_number() { case $1 in INT) echo 2 ;; TERM) echo 15 ;; esac; }

# ---- Runs ----
# run_one RUN_DIR LINE CONFIG ARG...: one trainer call; appends INDEX RC WALL_S LOG_OFFSET.
run_one() {
  local index=$1 run_dir=$2 line=$3 config=$4
  shift 4
  mkdir -p "$run_dir" || { printf '%s\t2\t0\t0\n' "$index" >> "$work/results"; return; }
  printf '%s\n' "$line" > "$run_dir/batch-line"
  # A summary.json from an earlier call would be read as this one's when the trainer fails early.
  rm -f "$run_dir/summary.json"
  local log=$run_dir/train.log
  printf '==== %s batch.sh: %s\n' "$(date '+%F %T')" "$line" >> "$log"
  local offset
  offset=$(stat -c %s "$log")
  local fifo=$work/out.$index
  mkfifo "$fifo"
  # tee ignores the signals so that the trainer's last lines (its checkpoint) still get through.
  (trap '' INT TERM; exec tee -a "$log" < "$fifo") &
  local tee_pid=$! start=$EPOCHREALTIME
  set -m
  "$bin" train --config "$config" "$@" --resume auto > "$fifo" 2>&1 &
  pid=$!
  set +m
  local rc seen
  while :; do
    seen=$signals rc=0
    wait "$pid" || rc=$?
    ((signals != seen)) || break  # else wait was cut short by a signal: wait again
  done
  pid=""
  while kill -0 "$tee_pid" 2> /dev/null; do wait "$tee_pid" || true; done
  rm -f "$fifo"
  printf '%s\t%s\t%s\t%s\n' "$index" "$rc" "$(awk "BEGIN { print $EPOCHREALTIME - $start }")" "$offset" \
    >> "$work/results"
  if ((rc != 0)) && [[ -z $signal ]]; then
    say "run $((index + 1)) exited with $rc; the queue goes on"
  fi
}

n=${#plan[@]}
fields=()
for entry in "${plan[@]}"; do
  [[ -n $signal ]] && break
  eval "fields=($entry)"  # shell-quoted by batch_queue.py (shlex.join)
  index=${fields[0]} skip=${fields[1]} run_dir=${fields[2]} line=${fields[3]} where=${fields[4]}
  if ((skip)); then
    say "[$((index + 1))/$n] $where: skipped, already finished in $run_dir"
    continue
  fi
  say "[$((index + 1))/$n] $where: $line -> $run_dir"
  run_one "$index" "$run_dir" "$line" "${fields[@]:5}"
done

[[ -n $signal ]] && say "stopped by SIG$signal; call again with the same arguments to resume"
python3 "$helper" summary "$work/plan.json" "$work/results" "$runs_dir" \
  "$([[ -n $signal ]] && signal_number "$signal")"
