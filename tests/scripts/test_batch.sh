#!/usr/bin/env bash
# Tests of scripts/batch.sh and scripts/sweep.sh against a stub trainer (fixtures/batch/
# bcdtrain_stub.sh behind bcdtrain_resume_auto.sh, through $BCDTRAIN); they build nothing and need
# bash, python3, coreutils and util-linux (flock, setpriv):
#   queue        a bad key (failed, the queue goes on), a run finished then skipped, a run stopped
#                by SIGTERM to batch.sh then resumed from its checkpoint; summaries, exit codes,
#                run directory names stable across calls
#   interrupt    Ctrl-C at a terminal (SIGINT to batch.sh's process group): the trainer gets one
#                signal and checkpoints, later runs are not started; a failure from summary.json
#   naming       run directory names: plain, hashed (lossy, long, a second config of one name),
#                an explicit train.run_dir, configs as arguments; stable when the queue is reordered
#   errors       batch.sh's bad arguments and bad queue files: exit 2 naming them, nothing written
#   start        lines that cannot start (a run directory that cannot be created, a trainer that
#                cannot be executed): failed with the cause, the queue goes on; nothing of a
#                finished run of another config is reported or removed
#   kill         SIGKILL to batch.sh: the trainer gets SIGTERM and checkpoints, nothing is left
#                running nor in $TMPDIR, and the next call (the lock's holder dead) resumes it
#   lock         a second batch.sh on the same runs directory is refused naming the holder's pid
#   sweep_grid   grid order and count, --out, `\,` escapes, and the lines read back by batch.sh
#   sweep_errors bad sweep arguments: exit 2 naming the argument
#   sweep_run    --run: the queue written under the runs directory and run through batch.sh
#   real         the real trainer ($BCDTRAIN_REAL, set by ctest to the built binary): a queue of a
#                run that finishes and one with a bad key, summary.json read into the table, the
#                finished run skipped the second time, and plot.sh on what it wrote
#   real_skip    the real trainer's --resume auto rule decides a skip: a line whose train.run_dir
#                holds another config's finished run, and a line whose config file was edited since
#                its run finished, fail naming the keys (not skipped with the other run's figures);
#                the same config again is skipped with its own figures
# Usage: tests/scripts/test_batch.sh CASE [SCRATCH_DIR]
# (ctest runs each case with a scratch directory in the build tree; by hand a temporary one.)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
batch=$repo/scripts/batch.sh
sweep=$repo/scripts/sweep.sh
stub=$here/fixtures/batch/bcdtrain_resume_auto.sh
source "$here/harness.sh" "${1:-}" "${2:-}"
for tool in python3 sha1sum flock setpriv; do
  command -v "$tool" > /dev/null || { echo "FAIL [$case]: $tool not found (scripts/setup.sh installs it)" >&2; exit 1; }
done
for f in "$stub" "$here/fixtures/batch/bcdtrain_stub.sh"; do
  [[ -x $f ]] || { echo "FAIL [$case]: $f is missing or not executable" >&2; exit 1; }
done
export BCDTRAIN=$stub
cd "$scratch" || exit 1
mkdir -p configs other
cp "$here/fixtures/batch/tiny.toml" configs/tiny.toml
cp "$here/fixtures/batch/tiny.toml" other/tiny.toml

expect_file_text() { grep -qF -- "$2" "$1" 2> /dev/null || fail "$1 lacks \"$2\"; it holds: $(head -c 600 "$1" 2>&1)"; }
expect_absent() { [[ ! -e $2 ]] || fail "$1: $2 was created"; }

# json_check NAME FILE PYTHON_EXPR...: each expression, on `rows` (FILE's lines as JSON), is true.
json_check() {
  local name=$1 file=$2
  shift 2
  python3 - "$file" "$@" << 'EOF' || fail "$name: checks of $file failed (above)"
import json, re, sys
try:
    rows = [json.loads(line) for line in open(sys.argv[1])]
except (OSError, ValueError) as e:
    sys.exit(f"  cannot read {sys.argv[1]}: {e}")
bad = [expr for expr in sys.argv[2:] if not eval(expr, {"rows": rows, "re": re})]
for expr in bad:
    print(f"  false: {expr}", file=sys.stderr)
if bad:
    print("  rows:\n" + "\n".join("    " + json.dumps(r) for r in rows), file=sys.stderr)
sys.exit(1 if bad else 0)
EOF
}

# wait_for_step FILE N: until FILE (a checkpoint marker) holds a step >= N; 0, or 1 after 60 s.
wait_for_step() {
  local deadline=$((SECONDS + 60)) step
  while ((SECONDS < deadline)); do
    step=$(cat "$1" 2> /dev/null)
    [[ $step =~ ^[0-9]+$ ]] && ((step >= $2)) && return 0
    sleep 0.02
  done
  fail "$1 never reached step $2 (the run did not start, or batch.sh died: $(tail -c 400 ./*.err))"
  return 1
}

# steps_run RUN_DIR: the steps the stub executed, in order, one line.
steps_run() { sed -n 's/^step //p' "$1/stub.log" | tr '\n' ' '; }

# alive PID: the process runs (a zombie, whose parent died and nobody reaps, does not).
alive() { [[ -r /proc/$1/stat && $(sed 's/.*) //' "/proc/$1/stat" 2> /dev/null) != Z* ]]; }
ended() { ! alive "$1"; }

# batch_processes: the pid and command line of each live process of batch.sh's here (working
# directory the scratch one: batch.sh, the stub, tee), one a line.
batch_processes() {
  local p cmd
  for p in /proc/[0-9]*; do
    [[ $(readlink "$p/cwd" 2> /dev/null) == "$scratch" ]] || continue
    cmd=$(tr '\0' ' ' < "$p/cmdline" 2> /dev/null) || continue
    [[ $cmd == */scripts/batch.sh* || $cmd == *bcdtrain_stub* || $cmd == tee* ]] && echo "${p#/proc/} $cmd"
  done
  return 0
}
no_batch_processes() { [[ -z $(batch_processes) ]]; }

# wait_until CMD...: until CMD succeeds; 0, or 1 after 60 s.
wait_until() {
  local deadline=$((SECONDS + 60))
  until "$@"; do
    ((SECONDS < deadline)) || return 1
    sleep 0.02
  done
}

case_queue() {
  cat > q.txt << 'EOF'
# one run a line: config and overrides
configs/tiny.toml --train.bogus=1               # unknown key: fails, the queue goes on
configs/tiny.toml --train.lr=1e-3               # finishes in the first call, skipped in the second

configs/tiny.toml --train.steps=100 --stub.step_ms=30   # stopped by SIGTERM, resumed
EOF
  local bad=runs/tiny__train.bogus=1 fast=runs/tiny__train.lr=1e-3
  local slow=runs/tiny__train.steps=100__stub.step_ms=30
  # 1. SIGTERM to batch.sh once the third run has written its second checkpoint.
  bash "$batch" q.txt > first.out 2> first.err &
  local pid=$!
  wait_for_step "$slow/checkpoints/step" 2 && kill -TERM "$pid"
  wait "$pid"
  rc=$?
  expect_rc first 143
  expect_text first err "stopped by SIGTERM"
  local stopped_at
  stopped_at=$(cat "$slow/checkpoints/step" 2> /dev/null)
  json_check first runs/batch-summary.jsonl 'len(rows) == 3' \
    "[r['run_dir'] for r in rows] == ['$bad', '$fast', '$slow']" \
    '[r["status"] for r in rows] == ["failed", "finished", "stopped"]' \
    'rows[0]["error"] == "bcdtrain: error: config: unknown key [train] bogus"' \
    'rows[0]["exit_code"] == 2 and rows[0]["steps"] is None' \
    'rows[0]["overrides"] == ["--train.bogus=1"] and rows[0]["config"] == "configs/tiny.toml"' \
    'rows[1]["steps"] == 3 and rows[1]["total_steps"] == 3 and rows[1]["final_loss"] == 2.5' \
    'rows[1]["final_val_loss"] == 2.75 and rows[1]["tokens_per_s"] == 1500.5 and rows[1]["stall_ms"] == 12.5' \
    'rows[1]["peak_compute_bytes"] == 3221225472 and rows[1]["peak_host_bytes"] == 1610612736' \
    'rows[1]["exit_code"] == 0 and rows[1]["error"] is None and rows[1]["wall_s"] >= 0' \
    "rows[2]['exit_code'] == 143 and rows[2]['steps'] == ${stopped_at:-0} and 2 <= rows[2]['steps'] < 100" \
    'rows[2]["total_steps"] == 100 and rows[2]["error"] is None'
  expect_absent first "$bad/summary.json"
  expect_file_text "$slow/summary.json" '"status": "stopped"'
  expect_file_text "$slow/train.log" "stopped by SIGTERM at step"
  expect_file_text "$bad/train.log" "bcdtrain: error: config: unknown key [train] bogus"
  grep -q "second SIG" "$slow/stub.log" && fail "first: the trainer got a second signal"
  local md=runs/batch-summary.md
  expect_file_text "$md" "| failed "
  expect_file_text "$md" "| stopped "
  expect_file_text "$md" "| bcdtrain: error: config: unknown key [train] bogus |"
  expect_file_text "$md" "| 3/3 "
  expect_file_text "$md" "| 3.0 GiB "
  expect_file_text "$md" "| 1.5 GiB "
  expect_file_text "$md" "| $stopped_at/100 "
  cp runs/batch-summary.jsonl first.jsonl

  # 2. The same queue again: the bad key fails again, the finished run is skipped, the stopped
  # one resumes from its checkpoint (--resume auto) and finishes.
  run second bash "$batch" q.txt
  expect_rc second 1
  expect_text second err "run 2 was finished already in $fast: skipped"
  expect_text second out "$fast: finished already (3 steps); nothing to do"
  json_check second runs/batch-summary.jsonl 'len(rows) == 3' \
    "[r['run_dir'] for r in rows] == ['$bad', '$fast', '$slow']" \
    '[r["status"] for r in rows] == ["failed", "skipped", "finished"]' \
    'rows[1]["exit_code"] == 0 and rows[1]["steps"] == 3 and rows[1]["final_loss"] == 2.5' \
    'rows[2]["steps"] == 100 and rows[2]["total_steps"] == 100 and rows[2]["exit_code"] == 0'
  json_check stable first.jsonl "[r['run_dir'] for r in rows] == ['$bad', '$fast', '$slow']"
  expect_file_text runs/batch-summary.md "| skipped (already finished) "
  expect_file_text runs/batch-summary.md "| 100/100 "
  [[ $(grep -c '^args:' "$fast/stub.log") == 1 ]] || fail "second: the finished run was run again"
  [[ $(grep -c '^args:' "$slow/stub.log") == 2 ]] || fail "second: the stopped run was not called again"
  grep '^args:' "$slow/stub.log" | grep -qv -- '--resume auto' && fail "a call lacks --resume auto: $(cat "$slow/stub.log")"
  expect_file_text "$slow/stub.log" "resume=auto start=$stopped_at"
  [[ $(steps_run "$slow") == "$(seq -s ' ' 1 100) " ]] ||
    fail "second: the resumed run did not continue from step $stopped_at: $(steps_run "$slow")"
  [[ $(grep -c '^==== ' "$slow/train.log") == 2 ]] || fail "second: $slow/train.log was not appended to"
}

case_interrupt() {
  cat > q.txt << 'EOF'
configs/tiny.toml --stub.fail_at=2
configs/tiny.toml --train.steps=100 --stub.step_ms=30
configs/tiny.toml --train.lr=1e-3
EOF
  local slow=runs/tiny__train.steps=100__stub.step_ms=30
  # batch.sh leads its own process group, as a command typed at a terminal does; Ctrl-C there
  # sends SIGINT to the whole group.
  set -m
  bash "$batch" q.txt > ctrl_c.out 2> ctrl_c.err &
  local pid=$!
  set +m
  wait_for_step "$slow/checkpoints/step" 2 && kill -INT -- "-$pid"
  wait "$pid"
  rc=$?
  expect_rc ctrl_c 130
  grep -q "second SIG" "$slow/stub.log" && fail "ctrl_c: the trainer got two signals (killed without checkpoint)"
  expect_file_text "$slow/stub.log" "stopped at"
  json_check ctrl_c runs/batch-summary.jsonl 'len(rows) == 3' \
    '[r["status"] for r in rows] == ["failed", "stopped", "not_run"]' \
    'rows[0]["error"] == "stub: failed at step 2" and rows[0]["exit_code"] == 1 and rows[0]["steps"] == 2' \
    'rows[1]["exit_code"] == 130 and rows[1]["steps"] >= 2' \
    'rows[2]["exit_code"] is None and rows[2]["run_dir"] == "runs/tiny__train.lr=1e-3"'
  expect_absent ctrl_c runs/tiny__train.lr=1e-3
  expect_file_text runs/batch-summary.md "| not run (interrupted) "
}

case_naming() {
  local long="--sample.prompts=aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
  cat > q.txt << EOF
configs/tiny.toml --train.lr 1e-3 --train.steps=1
other/tiny.toml --train.lr=1e-3 --train.steps=1
configs/tiny.toml '--data.path=data/my set' --train.steps=1
configs/tiny.toml $long --train.steps=1
configs/tiny.toml --train.steps=1 --train.run_dir=own/dir
EOF
  run first bash "$batch" q.txt
  expect_rc first 0
  json_check first runs/batch-summary.jsonl 'len(rows) == 5' \
    'all(r["status"] == "finished" for r in rows)' \
    'rows[0]["run_dir"] == "runs/tiny__train.lr=1e-3__train.steps=1"' \
    'rows[0]["overrides"] == ["--train.lr=1e-3", "--train.steps=1"]' \
    're.fullmatch(r"runs/tiny__train.lr=1e-3__train.steps=1-[0-9a-f]{8}", rows[1]["run_dir"])' \
    're.fullmatch(r"runs/tiny__data.path=data_my_set__train.steps=1-[0-9a-f]{8}", rows[2]["run_dir"])' \
    're.fullmatch(r"runs/tiny__sample.prompts=a{50,}-[0-9a-f]{8}", rows[3]["run_dir"])' \
    'len(rows[3]["run_dir"]) <= len("runs/") + 89' \
    'rows[4]["run_dir"] == "own/dir"'
  [[ -f own/dir/summary.json ]] || fail "first: train.run_dir=own/dir was not used"
  cp runs/batch-summary.jsonl first.jsonl

  # The lines in another order (the other/tiny.toml line first): every run keeps its directory
  # (the plain name stays with the line that claimed it) and is skipped.
  { sed -n 2p q.txt; sed -n 1p q.txt; sed -n '3,$p' q.txt; } > q2.txt
  run reordered bash "$batch" q2.txt
  expect_rc reordered 0
  json_check reordered runs/batch-summary.jsonl 'all(r["status"] == "skipped" for r in rows)'
  python3 - first.jsonl runs/batch-summary.jsonl << 'EOF' || fail "reordered: run directories changed (above)"
import json, sys
first, again = ([json.loads(l) for l in open(p)] for p in sys.argv[1:])
a = {(r["config"], tuple(r["overrides"])): r["run_dir"] for r in first}
b = {(r["config"], tuple(r["overrides"])): r["run_dir"] for r in again}
if a != b:
    sys.exit(f"  first:  {a}\n  second: {b}")
EOF

  # Configs as arguments: one run each, named after the file.
  run configs bash "$batch" --runs r2 configs/tiny.toml
  expect_rc configs 0
  json_check configs r2/batch-summary.jsonl 'len(rows) == 1' 'rows[0]["run_dir"] == "r2/tiny"' \
    'rows[0]["status"] == "finished" and rows[0]["steps"] == 3'

  # Two lines that would share a run directory are refused before anything runs.
  printf 'configs/tiny.toml --train.steps=1\n./configs/tiny.toml --train.steps 1\n' > dup.txt
  run dup bash "$batch" --runs r3 dup.txt
  expect_rc dup 2
  expect_text dup err "dup.txt:2: run directory r3/tiny__train.steps=1 is also that of dup.txt:1"
  expect_absent dup r3

  # A run directory that is the runs directory, or inside another line's, is refused too.
  printf 'configs/tiny.toml --train.steps=1 --train.run_dir=r4\n' > same.txt
  run same bash "$batch" --runs r4 same.txt
  expect_rc same 2
  expect_text same err "same.txt:1: run directory r4 is the runs directory itself"
  printf 'configs/tiny.toml --train.steps=1 --train.run_dir=r5/a\nconfigs/tiny.toml --train.steps=2 --train.run_dir=r5/a/b\n' > nest.txt
  run nest bash "$batch" --runs r5 nest.txt
  expect_rc nest 2
  expect_text nest err "nest.txt:2: run directory r5/a/b nests with nest.txt:1's r5/a"
  expect_absent nest r5/a
}

case_errors() {
  run help bash "$batch" --help
  expect_rc help 0
  expect_text help out "--runs"
  expect_text help out "--resume auto"
  printf '# nothing\n\n' > empty.txt
  printf 'configs/tiny.toml stray\n' > stray.txt
  printf 'configs/tiny.toml --resume=latest\n' > resume.txt
  printf "configs/tiny.toml '--data.path=x\n" > quote.txt
  printf 'configs/tiny.toml\nconfigs/nope.toml --train.lr=1\n' > noconf.txt
  printf 'configs --train.lr=1\n' > confdir.txt
  printf 'configs/tiny.toml --help\n' > help.txt
  # One argument past Linux's 128 KiB (MAX_ARG_STRLEN): the exec would fail (exit 126).
  printf 'configs/tiny.toml --sample.prompts=%s\n' "$(printf 'a%.0s' {1..200000})" > long.txt
  : > afile
  # name | arguments | what stderr must say
  local cases=(
    "unknown|--bogus q.txt|unknown flag '--bogus'"
    "unknown_eq|--bogus=1 q.txt|unknown flag '--bogus'"
    "no_value|--runs|--runs needs a value"
    "nothing||no queue file or config given"
    "missing|nope.txt|queue file 'nope.txt' not found"
    "empty|empty.txt|queue file 'empty.txt' holds no runs"
    "stray|stray.txt|stray.txt:1: unexpected 'stray'"
    "resume|resume.txt|resume.txt:1: --resume is batch.sh's own"
    "quote|quote.txt|quote.txt:1: No closing quotation"
    "mixed|configs/tiny.toml q.txt|'q.txt': give one queue file, or configs (*.toml) only"
    "two_queues|empty.txt stray.txt|'stray.txt': give one queue file, or configs (*.toml) only"
    "dir_queue|configs|queue file 'configs' is a directory"
    "runs_file|--runs afile configs/tiny.toml|--runs 'afile' is not a directory"
    "runs_mkdir|--runs afile/sub configs/tiny.toml|cannot create runs directory 'afile/sub': Not a directory"
    "no_config|noconf.txt|noconf.txt:2: config 'configs/nope.toml' not found"
    "config_dir|confdir.txt|confdir.txt:1: config 'configs' is a directory"
    "no_config_arg|configs/tiny.toml configs/nope.toml|config 'configs/nope.toml' not found"
    "help_line|help.txt|help.txt:1: --help trains nothing"
    "too_long|long.txt|long.txt:1: '--sample.prompts=aaaaaaaaaaaaaaaaaaaaaaa...' is 200017 bytes; one argument of a program holds at most"
  )
  local c name args want
  for c in "${cases[@]}"; do
    IFS='|' read -r name args want <<< "$c"
    # shellcheck disable=SC2086  # args is a word list on purpose
    run "$name" bash "$batch" --runs "r_$name" $args
    expect_rc "$name" 2
    expect_text "$name" err "$want"
    [[ $(wc -l < "$name.err") == 1 ]] || fail "$name: stderr is not one line: $(head -c 600 "$name.err")"
    expect_absent "$name" "r_$name"
  done
  run no_trainer env BCDTRAIN="$scratch/none" bash "$batch" --runs r_none configs/tiny.toml
  expect_rc no_trainer 2
  expect_text no_trainer err "no trainer at $scratch/none (build it, or set BCDTRAIN)"
  expect_absent no_trainer r_none
}

case_sweep_grid() {
  run grid bash "$sweep" configs/tiny.toml train.lr=1e-3,3e-3 bcd.switch_every=10,20,40 \
    'sample.prompts=["a"\, "b"],["c\\d"]'
  expect_rc grid 0
  python3 - grid.out << 'EOF' || fail "grid: lines differ from the expected grid (above)"
import itertools, shlex, sys
got = open(sys.argv[1]).read().splitlines()
want = [shlex.join(["configs/tiny.toml", f"--train.lr={a}", f"--bcd.switch_every={b}", f"--sample.prompts={c}"])
        for a, b, c in itertools.product(["1e-3", "3e-3"], ["10", "20", "40"], ['["a", "b"]', '["c\\d"]'])]
if got != want:
    sys.exit("  got:\n    " + "\n    ".join(got) + "\n  expected:\n    " + "\n    ".join(want))
EOF
  run out bash "$sweep" configs/tiny.toml train.lr=1e-3,3e-3 bcd.switch_every=10,20,40 \
    'sample.prompts=["a"\, "b"],["c\\d"]' --out sweeps/lr.queue
  expect_rc out 0
  [[ ! -s out.out ]] || fail "out: --out also printed the lines: $(head -c 300 out.out)"
  expect_text out err "12 runs written to sweeps/lr.queue"
  cmp -s grid.out sweeps/lr.queue || fail "out: sweeps/lr.queue differs from the printed lines"
  # batch.sh reads the lines back to the same overrides (a value with a comma and a space is one).
  # (plan prints INDEX RUN_DIR LINE WHERE CONFIG OVERRIDE... --train.run_dir=DIR, shell-quoted, NUL-ended.)
  run plan python3 "$repo/scripts/batch_queue.py" plan runs --queue sweeps/lr.queue
  expect_rc plan 0
  json_check plan <(python3 -c 'import json, shlex, sys
for e in filter(None, open(sys.argv[1]).read().split("\0")):
    f = shlex.split(e)
    print(json.dumps({"run_dir": f[1], "overrides": f[5:-1]}))' plan.out) \
    'len(rows) == 12' 'rows[0]["overrides"][2] == "--sample.prompts=[\"a\", \"b\"]"' \
    'rows[1]["overrides"][2] == "--sample.prompts=[\"c\\d\"]"' \
    'rows[0]["run_dir"] == "runs/tiny__train.lr=1e-3__bcd.switch_every=10__sample.prompts=_a_b_-dad02ca4"' \
    'len({r["run_dir"] for r in rows}) == 12'
}

case_sweep_errors() {
  : > afile
  run help bash "$sweep" --help
  expect_rc help 0
  expect_text help out "--run"
  expect_text help out '\,'
  # name | arguments | what stderr must say
  local cases=(
    "nothing||no CONFIG and KEY=V1,V2 given"
    "no_grid|configs/tiny.toml|needs at least one KEY=V1,V2 after the config"
    "config_first|train.lr=1 configs/tiny.toml|'train.lr=1': the first argument is the config file"
    "no_section|configs/tiny.toml lr=1|'lr=1': expected section.key=V1,V2,..."
    "no_equals|configs/tiny.toml train.lr|'train.lr': expected section.key=V1,V2,..."
    "empty|configs/tiny.toml train.lr=|'train.lr=': empty value"
    "empty_item|configs/tiny.toml train.lr=1,,2|'train.lr=1,,2': empty value"
    "twice|configs/tiny.toml train.lr=1 train.lr=2|'train.lr=2': key train.lr is given twice"
    "dup_value|configs/tiny.toml train.lr=1,1|'train.lr=1,1': a value is listed twice"
    "escape|configs/tiny.toml train.lr=1\\x|'train.lr=1\\x': a backslash escapes only"
    "trailing|configs/tiny.toml train.lr=1\\|'train.lr=1\\': a backslash escapes only"
    "run_dir|configs/tiny.toml train.run_dir=a,b|batch.sh names each run's directory itself"
    "unknown|configs/tiny.toml train.lr=1 --bogus|unknown flag '--bogus'"
    "out_empty|configs/tiny.toml train.lr=1 --out=|--out needs a value"
    "out_missing|configs/tiny.toml train.lr=1 --out|--out needs a value"
    "run_value|configs/tiny.toml train.lr=1 --run=1|--run takes no value"
    "no_config|configs/nope.toml train.lr=1|sweep: config 'configs/nope.toml' not found"
    "config_dir|configs train.lr=1|sweep: config 'configs' is a directory"
    "out_bad|configs/tiny.toml train.lr=1 --out afile/q|sweep: cannot write 'afile/q': File exists"
  )
  local c name args want
  for c in "${cases[@]}"; do
    IFS='|' read -r name args want <<< "$c"
    # shellcheck disable=SC2086  # args is a word list on purpose
    run "$name" bash "$sweep" $args
    expect_rc "$name" 2
    expect_text "$name" err "$want"
    [[ $(wc -l < "$name.err") == 1 ]] || fail "$name: stderr is not one line: $(head -c 600 "$name.err")"
    [[ ! -s $name.out ]] || fail "$name: printed lines despite the error: $(head -c 300 "$name.out")"
  done
  expect_absent sweep_errors runs
  # A value with a line break would make a queue of cut lines that batch.sh cannot read.
  run newline bash "$sweep" configs/tiny.toml "sample.prompts=[\"a
b\"]"
  expect_rc newline 2
  expect_text newline err "sample.prompts: the value '[\"a\\nb\"]' holds a line break or NUL"
  [[ $(wc -l < newline.err) == 1 ]] || fail "newline: stderr is not one line: $(cat newline.err)"
  [[ ! -s newline.out ]] || fail "newline: printed lines despite the error"
}

case_sweep_run() {
  run run bash "$sweep" configs/tiny.toml train.steps=1,2 train.lr=1e-3,2e-3 --run --runs sw
  expect_rc run 0
  local queue
  queue=$(compgen -G 'sw/sweep-tiny-*.queue')
  [[ -n $queue && $(wc -l < "$queue") == 4 ]] || fail "run: no 4-line sw/sweep-tiny-<hash>.queue: $(ls sw)"
  json_check run sw/batch-summary.jsonl 'len(rows) == 4' 'all(r["status"] == "finished" for r in rows)' \
    '[r["steps"] for r in rows] == [1, 1, 2, 2]' \
    'rows[1]["run_dir"] == "sw/tiny__train.steps=1__train.lr=2e-3"'
  # The same sweep again: the same queue file, every run skipped.
  run again bash "$sweep" configs/tiny.toml train.steps=1,2 train.lr=1e-3,2e-3 --run --runs=sw
  expect_rc again 0
  [[ $(compgen -G 'sw/sweep-tiny-*.queue' | wc -l) == 1 ]] || fail "again: a second queue file: $(ls sw)"
  json_check again sw/batch-summary.jsonl 'all(r["status"] == "skipped" for r in rows)'
}

case_start() {
  # A run directory that cannot be created (under a file) and a trainer that cannot be executed:
  # each a failed line saying why, and the queue goes on.
  : > afile
  printf '%s\n' 'configs/tiny.toml --train.run_dir=afile/sub' 'configs/tiny.toml --train.lr=1e-3' > q.txt
  run mkdir bash "$batch" q.txt
  expect_rc mkdir 1
  json_check mkdir runs/batch-summary.jsonl 'len(rows) == 2' \
    'rows[0]["status"] == "failed" and rows[0]["exit_code"] is None' \
    'rows[0]["error"] == "could not start: cannot create run directory '"'afile/sub'"': Not a directory"' \
    'rows[1]["status"] == "finished" and rows[1]["steps"] == 3'
  expect_file_text runs/batch-summary.md "| could not start: cannot create run directory 'afile/sub': Not a directory |"
  expect_text mkdir err "batch: run 1 could not start: cannot create run directory 'afile/sub': Not a directory; the queue goes on"
  printf '#!/nonexistent/interpreter\n' > broken
  chmod +x broken
  run exec env BCDTRAIN="$scratch/broken" bash "$batch" --runs r2 configs/tiny.toml
  expect_rc exec 1
  json_check exec r2/batch-summary.jsonl 'len(rows) == 1' \
    'rows[0]["status"] == "failed" and rows[0]["exit_code"] in (126, 127)' \
    'rows[0]["error"].startswith("could not start: ") and "broken" in rows[0]["error"]' \
    '"no summary.json" not in rows[0]["error"]'
}

case_kill() {
  printf '%s\n' 'configs/tiny.toml --train.steps=40 --stub.step_ms=30' > q.txt
  local slow=runs/tiny__train.steps=40__stub.step_ms=30
  mkdir tmp
  TMPDIR=$scratch/tmp bash "$batch" q.txt > kill.out 2> kill.err &
  local pid=$! trainer
  wait_for_step "$slow/checkpoints/step" 2 && kill -KILL "$pid"
  { wait "$pid"; } 2> /dev/null  # no "Killed" from this shell
  rc=$?
  expect_rc kill 137
  # The trainer (the stub: its pid in stub.pid) checkpoints and stops on its own, long before its
  # 40 steps, and tee ends with it.
  trainer=$(cat "$slow/stub.pid" 2> /dev/null)
  [[ -n $trainer ]] || fail "kill: no $slow/stub.pid"
  wait_until ended "${trainer:-0}" || fail "kill: the trainer outlived batch.sh by 60 s"
  expect_file_text "$slow/summary.json" '"status": "stopped"'
  expect_file_text "$slow/stub.log" "by TERM"
  [[ $(steps_run "$slow") != *" 40 "* ]] || fail "kill: the trainer ran to its end: $(steps_run "$slow")"
  wait_until no_batch_processes || fail "kill: still running after 60 s: $(batch_processes)"
  [[ -z $(ls -A tmp) ]] || fail "kill: left in TMPDIR: $(ls -A tmp)"
  # The next call: the lock's holder is dead, so it runs, and resumes the run from its checkpoint.
  local stopped_at
  stopped_at=$(cat "$slow/checkpoints/step" 2> /dev/null)
  run again bash "$batch" q.txt
  expect_rc again 0
  json_check again runs/batch-summary.jsonl 'len(rows) == 1' \
    'rows[0]["status"] == "finished" and rows[0]["steps"] == 40'
  expect_file_text "$slow/stub.log" "resume=auto start=${stopped_at:-?}"
}

case_lock() {
  printf '%s\n' 'configs/tiny.toml --train.steps=1000 --stub.step_ms=30' > q.txt
  printf '%s\n' 'configs/tiny.toml --train.lr=1e-3' > other.txt
  local slow=runs/tiny__train.steps=1000__stub.step_ms=30
  bash "$batch" q.txt > holder.out 2> holder.err &
  local pid=$!
  wait_for_step "$slow/checkpoints/step" 1
  # The same queue, and another queue into the same runs directory: refused, nothing touched.
  local name
  for name in same other; do
    run "$name" bash "$batch" "$([[ $name == same ]] && echo q.txt || echo other.txt)"
    expect_rc "$name" 2
    expect_text "$name" err "batch: runs directory 'runs' is in use by batch.sh (pid $pid); wait for it, or give another --runs"
    [[ $(wc -l < "$name.err") == 1 ]] || fail "$name: stderr is not one line: $(cat "$name.err")"
  done
  expect_absent other runs/tiny__train.lr=1e-3
  expect_absent same runs/batch-summary.jsonl
  # Another runs directory is free.
  run elsewhere bash "$batch" --runs runs2 other.txt
  expect_rc elsewhere 0
  kill -TERM "$pid"
  wait "$pid"
  rc=$?
  expect_rc holder 143
  [[ $(grep -c '^args:' "$slow/stub.log") == 1 ]] || fail "same: the run was started twice: $(cat "$slow/stub.log")"
  json_check holder runs/batch-summary.jsonl 'len(rows) == 1' 'rows[0]["status"] == "stopped"'
}

# real_setup: the built trainer as $BCDTRAIN, a tiny corpus in data/ and configs/real.toml; 1 when
# there is no trainer.
real_setup() {
  local bin=${BCDTRAIN_REAL:-}
  [[ -x $bin ]] || { fail "BCDTRAIN_REAL='$bin' is not the built bcdtrain (ctest sets it)"; return 1; }
  export BCDTRAIN=$bin
  run prep "$bin" prepare --input /usr/share/games/fortunes/science --out data --vocab-size 512
  expect_rc prep 0
  printf '%s\n' '[data]' 'path = "data"' '[model]' 'd_model = 64' 'n_layers = 2' 'n_heads = 4' 'd_ff = 128' \
    '[train]' 'batch_size = 2' 'seq_len = 32' 'log_every = 2' 'val_every = 3' 'val_batches = 1' \
    '[bcd]' 'enabled = true' 'switch_every = 2' '[sample]' 'prompts = []' > configs/real.toml
}

case_real() {
  real_setup || return
  printf '%s\n' 'configs/real.toml --train.steps=6' 'configs/real.toml --train.bogus=1' > q.txt
  run first bash "$batch" --runs runs q.txt
  expect_rc first 1
  json_check first runs/batch-summary.jsonl 'len(rows) == 2' \
    'rows[0]["status"] == "finished" and rows[0]["steps"] == 6 and rows[0]["total_steps"] == 6' \
    'rows[0]["final_loss"] > 0 and rows[0]["final_val_loss"] > 0 and rows[0]["tokens_per_s"] > 0' \
    'rows[0]["peak_compute_bytes"] > 0' \
    'rows[1]["status"] == "failed" and "unknown key [train] bogus" in rows[1]["error"]'
  local done_dir
  done_dir=$(python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["run_dir"])' \
    runs/batch-summary.jsonl 2> /dev/null)
  [[ -n $done_dir && -f $done_dir/summary.json && -f $done_dir/model.h5 ]] ||
    fail "first: no summary.json / model.h5 in '$done_dir'"
  run second bash "$batch" --runs runs q.txt
  expect_rc second 1
  json_check second runs/batch-summary.jsonl 'rows[0]["status"] == "skipped"' 'rows[1]["status"] == "failed"'
  run plot bash "$repo/scripts/plot.sh" "$done_dir" --out plots
  expect_rc plot 0
  for png in loss_vs_step loss_vs_time tokens_per_s memory stall active_block; do
    [[ -s plots/$png.png ]] || fail "plot: no plots/$png.png: $(tail -c 400 plot.err)"
  done
}

case_real_skip() {
  real_setup || return
  printf '%s\n' 'configs/real.toml --train.steps=4' > q.txt
  local done_dir=runs/real__train.steps=4
  run first bash "$batch" q.txt
  expect_rc first 0
  json_check first runs/batch-summary.jsonl 'rows[0]["status"] == "finished" and rows[0]["steps"] == 4'
  cp "$done_dir/summary.json" done.json
  # 1. A line whose train.run_dir holds that finished run, of another config (6 steps): failed,
  # naming the key, with none of the other run's figures; that run's summary.json stays.
  printf '%s\n' "configs/real.toml --train.steps=6 --train.run_dir=$done_dir" > other.txt
  run other bash "$batch" other.txt
  expect_rc other 1
  json_check other runs/batch-summary.jsonl 'len(rows) == 1' \
    'rows[0]["status"] == "failed" and rows[0]["exit_code"] == 2' \
    'rows[0]["steps"] is None and rows[0]["final_loss"] is None and rows[0]["total_steps"] is None' \
    're.match(r"bcdtrain: error: train --resume auto: runs/real__train.steps=4 holds a run of another config .*train.steps \(4 there, 6 given\)", rows[0]["error"])'
  cmp -s done.json "$done_dir/summary.json" || fail "other: $done_dir/summary.json was changed or removed"
  # 2. The config file edited since the run finished: failed, naming the key.
  cp configs/real.toml real.orig
  sed -i 's/^val_every = 3$/val_every = 2/' configs/real.toml
  run edited bash "$batch" q.txt
  expect_rc edited 1
  json_check edited runs/batch-summary.jsonl 'rows[0]["status"] == "failed" and rows[0]["steps"] is None' \
    '"holds a run of another config" in rows[0]["error"] and "train.val_every (3 there, 2 given)" in rows[0]["error"]'
  cmp -s done.json "$done_dir/summary.json" || fail "edited: $done_dir/summary.json was changed or removed"
  # 3. The config as it was: skipped, with the run's own figures.
  cp real.orig configs/real.toml
  run again bash "$batch" q.txt
  expect_rc again 0
  expect_text again out "$done_dir: finished already (4 steps); nothing to do"
  json_check again runs/batch-summary.jsonl 'rows[0]["status"] == "skipped" and rows[0]["steps"] == 4' \
    "rows[0]['final_loss'] == $(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["final_loss"])' done.json)"
}

case $case in
  queue | interrupt | naming | errors | start | kill | lock | sweep_grid | sweep_errors | sweep_run | real | real_skip)
    "case_$case" ;;
  *) echo "usage: tests/scripts/test_batch.sh queue|interrupt|naming|errors|start|kill|lock|sweep_grid|sweep_errors|sweep_run|real|real_skip [SCRATCH_DIR]" >&2; exit 2 ;;
esac
verdict test_batch
