#!/usr/bin/env bash
# Runs a queue of training runs one after another (`bcdtrain train --resume auto` each, in its own
# run directory: the trainer resumes interrupted ones and skips finished ones on the next call),
# and writes batch-summary.md / .jsonl. Queue lines, run names and the summary: scripts/batch_queue.py.
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
here. The trainer decides: it goes on with this config's run there, starts it, skips it when it
has finished, and refuses a directory holding another config's run (a failed line). Ctrl-C or
SIGTERM: the running trainer checkpoints and stops, and so does the queue (call again to resume);
if batch.sh dies otherwise (SIGKILL), the trainer gets SIGTERM. One batch.sh per runs directory
(RUNS/.batch.lock). Exit status: 0 every run finished or was skipped, 1 some run failed, 2 bad
arguments, a bad queue file or a runs directory in use, 128+signal interrupted.
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
  [[ ! -d ${inputs[0]} ]] || usage_error "queue file '${inputs[0]}' is a directory"
  [[ -f ${inputs[0]} ]] || usage_error "queue file '${inputs[0]}' not found"
  source_args=(--queue "${inputs[0]}")
fi
[[ ! -e $runs_dir || -d $runs_dir ]] || usage_error "--runs '$runs_dir' is not a directory"
command -v python3 > /dev/null || die "python3 not found (scripts/setup.sh installs it)"
for tool in flock setpriv; do
  command -v "$tool" > /dev/null || die "$tool not found (it comes with util-linux)"
done
bin=${BCDTRAIN:-$repo/build/bcdtrain}
[[ -x $bin ]] || die "no trainer at $bin (build it, or set BCDTRAIN)"

# ---- Plan ----
# Every line checked (its config exists) and its run directory named before anything is written;
# entries end in NUL, since a config's path may hold a newline.
mapfile -t -d '' plan < <(python3 "$helper" plan "$runs_dir" "${source_args[@]}")
wait "$!" || exit 2

# ---- One batch.sh per runs directory ----
# Two would remove and rewrite each other's batch summaries and run each other's lines. flock(1)
# on RUNS/.batch.lock: the kernel drops the lock when its holder dies, however it dies, so a dead
# holder never blocks. The trainer and tee do not inherit it: the lock lives as long as batch.sh.
err=$(mkdir -p -- "$runs_dir" 2>&1) || die "cannot create runs directory '$runs_dir': ${err##*: }"
lock_file=$runs_dir/.batch.lock
{ exec {lock}<> "$lock_file"; } 2> /dev/null || die "cannot open $lock_file (is '$runs_dir' writable?)"
if ! flock -n "$lock"; then
  holder=""
  for _ in {1..20}; do  # the holder writes its pid just after it takes the lock
    holder=$(< "$lock_file") && [[ -n $holder ]] && break
    sleep 0.05
  done
  die "runs directory '$runs_dir' is in use by batch.sh (pid ${holder:-unknown});" \
    "wait for it, or give another --runs"
fi
printf '%s\n' "$$" > "$lock_file"

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
# No work files: the plan and the results stay in this shell and reach the summary through pipes,
# and the trainer's output reaches tee through one, so a batch.sh killed by SIGKILL leaves nothing
# behind in a temporary directory.
results=()
# result INDEX RC WALL_S LOG_OFFSET SUMMARY_SHA1: one line for the summary.
result() { results+=("$1"$'\t'"$2"$'\t'"$3"$'\t'"$4"$'\t'"$5"$'\t'); }
# not_started INDEX CAUSE: the line's trainer could not be started (RC "-"), CAUSE says why.
not_started() {
  say "run $(($1 + 1)) could not start: $2; the queue goes on"
  results+=("$1"$'\t-\t0\t0\t-\t'"${2//[$'\t\n']/ }")
}
summary_sha1() {
  local sum
  sum=$(sha1sum 2> /dev/null < "$1/summary.json") || { echo -; return; }
  echo "${sum%% *}"
}

# run_one INDEX RUN_DIR LINE CONFIG ARG...: one trainer call, `--resume auto`: it goes on with
# this config's run in RUN_DIR, starts it, does nothing when that run has finished, and refuses a
# directory holding another config's run. Whether it was skipped (exit 0, no new summary.json) is
# read by the summary.
run_one() {
  local index=$1 run_dir=$2 line=$3 config=$4
  shift 4
  local log=$run_dir/train.log err
  if ! err=$(mkdir -p -- "$run_dir" 2>&1); then
    not_started "$index" "cannot create run directory '$run_dir': ${err##*: }"
    return
  fi
  # The claim of a plain-named directory (batch_queue.py): another line's claim stays.
  if ! err=$({ { [[ -e $run_dir/batch-line ]] || printf '%s\n' "$line" > "$run_dir/batch-line"; } &&
    printf '==== %s batch.sh: %s\n' "$(date '+%F %T')" "$line" >> "$log"; } 2>&1); then
    not_started "$index" "cannot write in run directory '$run_dir': ${err##*: }"
    return
  fi
  local offset before start out tee_pid rc seen
  offset=$(stat -c %s -- "$log")
  before=$(summary_sha1 "$run_dir")
  # tee ignores the signals so that the trainer's last lines (its checkpoint) still get through,
  # and -p keeps it writing the log when the terminal's reader is gone (it ends when the trainer
  # does: end of file).
  exec {out}> >(exec {lock}>&-; trap '' INT TERM; exec tee -p -a -- "$log")
  tee_pid=$! start=$EPOCHREALTIME
  # The trainer gets SIGTERM (checkpoint and stop) when batch.sh dies, however it dies: setpriv
  # sets the parent-death signal and execs it, keeping its pid; the parent is this shell.
  set -m
  setpriv --pdeathsig TERM -- "$bin" train --config "$config" "$@" --resume auto \
    >&"$out" 2>&1 {out}>&- {lock}>&- &
  pid=$!
  set +m
  exec {out}>&-
  while :; do
    seen=$signals rc=0
    wait "$pid" || rc=$?
    ((signals != seen)) || break  # else wait was cut short by a signal: wait again
  done
  pid=""
  while kill -0 "$tee_pid" 2> /dev/null; do wait "$tee_pid" || true; done
  result "$index" "$rc" "$(awk "BEGIN { print $EPOCHREALTIME - $start }")" "$offset" "$before"
  if ((rc != 0)) && [[ -z $signal ]]; then
    say "run $((index + 1)) exited with $rc; the queue goes on"
  elif ((rc == 0)) && [[ $(summary_sha1 "$run_dir") == "$before" ]]; then
    say "run $((index + 1)) was finished already in $run_dir: skipped"
  fi
}

n=${#plan[@]}
fields=()
for entry in "${plan[@]}"; do
  [[ -n $signal ]] && break
  eval "fields=($entry)"  # shell-quoted by batch_queue.py (shlex.join)
  index=${fields[0]} run_dir=${fields[1]} line=${fields[2]} where=${fields[3]}
  say "[$((index + 1))/$n] $where: $line -> $run_dir"
  run_one "$index" "$run_dir" "$line" "${fields[@]:4}"
done

[[ -n $signal ]] && say "stopped by SIG$signal; call again with the same arguments to resume"
python3 "$helper" summary <(printf '%s\0' "${plan[@]}") <(printf '%s\n' "${results[@]}") "$runs_dir" \
  "$([[ -n $signal ]] && signal_number "$signal")"
