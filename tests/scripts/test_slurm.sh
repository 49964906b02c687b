#!/usr/bin/env bash
# Tests of scripts/slurm/train.sbatch without Slurm: stub srun, scontrol and scancel
# (fixtures/slurm/, first on PATH) and a stub trainer (fixtures/slurm/bcdtrain_stub.sh) that
# records each rank's arguments, variables and signals; the SLURM_* variables are those of a
# 2-node x 2-GPU allocation. They build nothing and need bash and coreutils:
#   launch   the srun line and what each of the 4 ranks gets: train --config CONFIG OVERRIDES
#            --resume auto, one MASTER_ADDR (the first node) and MASTER_PORT (from the job id),
#            SLURM_PROCID/LOCALID/NTASKS/NTASKS_PER_NODE, no stale RANK/WORLD_SIZE, NCCL/Gloo
#            variables passed through; ranks per node from --gpus-per-node, --gres, or
#            --ntasks-per-node; the trainer found beside the script or in the submit directory
#   requeue  USR1 (twice) to the script: one scancel --signal=TERM, one SIGTERM per rank, srun
#            never signalled, `scontrol requeue JOBID` when the ranks exit 143; no requeue when
#            they finish (0) or fail (2) or were stopped otherwise (SIGINT, Slurm ending the job)
#   errors   no config, a missing config, a missing trainer, bad overrides, outside a job: exit 2
#            naming it, and srun never called
# Usage: tests/scripts/test_slurm.sh launch|requeue|errors [SCRATCH_DIR]
# (ctest runs each case with a scratch directory in the build tree; by hand a temporary one.)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
script=$repo/scripts/slurm/train.sbatch
stubs=$here/fixtures/slurm
source "$here/harness.sh" "${1:-}" "${2:-}"
[[ -f $script ]] || { echo "FAIL [$case]: $script is missing" >&2; exit 1; }
for f in srun scontrol scancel bcdtrain_stub.sh; do
  [[ -x $stubs/$f ]] || { echo "FAIL [$case]: $stubs/$f is missing or not executable" >&2; exit 1; }
done
cd "$scratch" || exit 1
mkdir -p configs
echo '[train]' > configs/tiny.toml

# expect_lines NAME FILE LINE...: FILE holds exactly these lines.
expect_lines() {
  local name=$1 file=$2
  shift 2
  local want
  want=$(printf '%s\n' "$@")
  [[ $(cat "$file" 2> /dev/null) == "$want" ]] ||
    fail "$name: $(basename "$file") holds [$(tr '\n' '|' < "$file" 2> /dev/null)], expected [$(tr '\n' '|' <<< "$want")]"
}
expect_absent() { [[ ! -e $2 ]] || fail "$1: $(basename "$2") exists: $(head -c 300 "$2")"; }

# The variables of a 2-node x 2-GPU allocation (sbatch --nodes=2 --gpus-per-node=h100:2), plus
# stale torchrun variables from the submitting shell and the interfaces to pass through.
allocation=(
  SLURM_JOB_ID=12345 SLURM_JOB_NUM_NODES=2 SLURM_NNODES=2 "SLURM_JOB_NODELIST=gpu[07-08]"
  SLURM_GPUS_PER_NODE=h100:2 SLURM_GPUS_ON_NODE=2 SLURM_CPUS_ON_NODE=32 SLURM_RESTART_COUNT=0
  RANK=5 WORLD_SIZE=9 LOCAL_RANK=1 LOCAL_WORLD_SIZE=3 MASTER_ADDR=login-node
  NCCL_SOCKET_IFNAME=ib0 GLOO_SOCKET_IFNAME=eth1
)
# sbatch_env NAME: a fresh record directory NAME.d for the stubs; sets $env_base, the environment
# the script runs in (no SLURM_*, torchrun or stub variables inherited from the caller).
sbatch_env() {
  rm -rf "$scratch/$1.d"
  mkdir -p "$scratch/$1.d"
  env_base=(env -u SLURM_GPUS_PER_NODE -u SLURM_GPUS_ON_NODE -u SLURM_NTASKS_PER_NODE
    -u SLURM_JOB_ID -u SLURM_JOB_NUM_NODES -u SLURM_NNODES -u SLURM_JOB_NODELIST
    -u SLURM_CPUS_ON_NODE -u SLURM_SUBMIT_DIR -u MASTER_PORT -u BCDTRAIN -u STUB_TRAINER
    "PATH=$stubs:$PATH" "SLURM_STUB_DIR=$scratch/$1.d" "SLURM_SUBMIT_DIR=$scratch")
}
# run NAME [VAR=VALUE...] -- ARG...: the script under $env_base, the allocation and the VARs,
# stdout and stderr to NAME.out and .err, its exit status in $rc. BCDTRAIN is the stub unless a
# VAR sets it (BCDTRAIN= unsets it); SCRIPT=PATH runs another copy of the script.
run() {
  local name=$1
  shift
  local vars=() s=$script
  while [[ $1 != -- ]]; do
    if [[ $1 == SCRIPT=* ]]; then s=${1#SCRIPT=}; else vars+=("$1"); fi
    shift
  done
  shift
  sbatch_env "$name"
  "${env_base[@]}" "${allocation[@]}" "BCDTRAIN=$stubs/bcdtrain_stub.sh" "${vars[@]}" \
    bash "$s" "$@" > "$name.out" 2> "$name.err"
  rc=$?
}
# wait_for NAME FILE...: until every FILE exists (the stubs write them), at most 20 s.
wait_for() {
  local name=$1 f
  shift
  local deadline=$((SECONDS + 20))
  for f in "$@"; do
    until [[ -e $f ]]; do
      ((SECONDS < deadline)) || { fail "$name: $(basename "$f") did not appear within 20 s"; return 1; }
      sleep 0.05
    done
  done
}
# wait_for_text NAME FILE TEXT: until FILE holds TEXT, at most 20 s.
wait_for_text() {
  local deadline=$((SECONDS + 20))
  until grep -qF -- "$3" "$2" 2> /dev/null; do
    ((SECONDS < deadline)) || { fail "$1: $(basename "$2") did not show \"$3\" within 20 s"; return 1; }
    sleep 0.05
  done
}

# check_ranks NAME N ARG...: ranks 0..N-1 (and no more) ran the stub with these arguments; the
# rendezvous and rank variables each rank got are consistent.
check_ranks() {
  local name=$1 n=$2 r per_node
  shift 2
  local d=$scratch/$name.d
  per_node=$(sed -n 's/^--ntasks-per-node=//p' "$d/srun.argv" 2> /dev/null)
  for ((r = 0; r < n; r++)); do
    [[ -f $d/rank$r.argv ]] || { fail "$name: rank $r did not run"; continue; }
    expect_lines "$name rank $r" "$d/rank$r.argv" "$@"
    local e=$d/rank$r.env
    grep -qx "SLURM_PROCID=$r" "$e" || fail "$name rank $r: SLURM_PROCID is not $r: $(tr '\n' ' ' < "$e")"
    grep -qx "SLURM_NTASKS=$n" "$e" || fail "$name rank $r: SLURM_NTASKS is not $n: $(tr '\n' ' ' < "$e")"
    grep -qx "SLURM_NTASKS_PER_NODE=$per_node" "$e" ||
      fail "$name rank $r: SLURM_NTASKS_PER_NODE is not $per_node: $(tr '\n' ' ' < "$e")"
    grep -qx "SLURM_LOCALID=$((r % per_node))" "$e" || fail "$name rank $r: SLURM_LOCALID is not $((r % per_node))"
    if grep -E '^(RANK|WORLD_SIZE|LOCAL_RANK|LOCAL_WORLD_SIZE)=' "$e" > /dev/null; then
      fail "$name rank $r: torchrun variables reach the trainer (it would prefer them): $(grep -E '^(RANK|WORLD|LOCAL)' "$e" | tr '\n' ' ')"
    fi
    [[ $(grep '^MASTER_' "$e") == "$(grep '^MASTER_' "$d/rank0.env")" ]] ||
      fail "$name rank $r: MASTER_ADDR/PORT differ from rank 0's: $(grep '^MASTER_' "$e" | tr '\n' ' ')"
  done
  [[ ! -e $d/rank$n.argv ]] || fail "$name: more than $n ranks ran"
}

case_launch() {
  local d cfg=configs/tiny.toml
  local want=(train --config "$cfg" --train.lr=1e-3 --bcd.switch_every=20 --resume auto)

  run two_nodes STUB_TRAINER=exit0 -- "$cfg" --train.lr=1e-3 --bcd.switch_every=20
  expect_rc two_nodes 0
  d=$scratch/two_nodes.d
  expect_lines two_nodes "$d/srun.argv" --export=ALL --nodes=2 --ntasks=4 --ntasks-per-node=2 \
    --cpus-per-task=16 --kill-on-bad-exit=0 "$stubs/bcdtrain_stub.sh" "${want[@]}"
  check_ranks two_nodes 4 "${want[@]}"
  local e
  for e in MASTER_ADDR=gpu07 MASTER_PORT=29845 SLURM_JOB_ID=12345 NCCL_SOCKET_IFNAME=ib0 GLOO_SOCKET_IFNAME=eth1; do
    grep -qx "$e" "$d/rank3.env" 2> /dev/null || fail "two_nodes rank 3: lacks $e: $(tr '\n' ' ' < "$d/rank3.env")"
  done
  grep -qx 'show hostnames gpu\[07-08\]' "$d/scontrol.calls" 2> /dev/null ||
    fail "two_nodes: MASTER_ADDR not from scontrol show hostnames: $(cat "$d/scontrol.calls" 2>&1)"
  expect_absent two_nodes "$d/scancel.calls"
  expect_text two_nodes err "2 node(s) x 2 rank(s), store gpu07:29845"

  # Ranks per node: --gres=gpu:4 on one node (no SLURM_GPUS_PER_NODE), a CPU-only run of
  # --ntasks-per-node=3 on 2 nodes, nothing at all; an explicit MASTER_PORT; a bare override list.
  run gres STUB_TRAINER=exit0 SLURM_GPUS_PER_NODE= SLURM_GPUS_ON_NODE=4 SLURM_JOB_NUM_NODES=1 \
    SLURM_JOB_NODELIST=gpu03 MASTER_PORT=40001 -- "$cfg"
  expect_rc gres 0
  grep -qx -- --ntasks-per-node=4 "$scratch/gres.d/srun.argv" 2> /dev/null || fail "gres: not 4 ranks per node"
  check_ranks gres 4 train --config "$cfg" --resume auto
  grep -qx MASTER_PORT=40001 "$scratch/gres.d/rank0.env" 2> /dev/null || fail "gres: MASTER_PORT=40001 not kept"
  grep -qx MASTER_ADDR=gpu03 "$scratch/gres.d/rank0.env" 2> /dev/null || fail "gres: MASTER_ADDR is not gpu03"

  run cpu STUB_TRAINER=exit0 SLURM_GPUS_PER_NODE= SLURM_GPUS_ON_NODE= SLURM_NTASKS_PER_NODE=3 -- "$cfg"
  expect_rc cpu 0
  grep -qx -- --ntasks=6 "$scratch/cpu.d/srun.argv" 2> /dev/null || fail "cpu: not 6 ranks on 2 nodes"
  check_ranks cpu 6 train --config "$cfg" --resume auto

  run nothing STUB_TRAINER=exit0 SLURM_GPUS_PER_NODE= SLURM_GPUS_ON_NODE= SLURM_CPUS_ON_NODE= -- "$cfg"
  expect_rc nothing 0
  grep -qx -- --cpus-per-task=1 "$scratch/nothing.d/srun.argv" 2> /dev/null || fail "nothing: --cpus-per-task is not 1"
  check_ranks nothing 2 train --config "$cfg" --resume auto

  # The trainer without BCDTRAIN: build/bcdtrain of the repository holding the script; under
  # sbatch, which runs a copy in its spool directory, the submit directory's.
  mkdir -p fakerepo/scripts/slurm fakerepo/build spool submit/build
  cp "$script" fakerepo/scripts/slurm/train.sbatch
  touch fakerepo/scripts/setup.sh
  cp "$stubs/bcdtrain_stub.sh" fakerepo/build/bcdtrain
  cp "$stubs/bcdtrain_stub.sh" submit/build/bcdtrain
  cp "$script" spool/slurm_script
  run beside STUB_TRAINER=exit0 BCDTRAIN= "SCRIPT=$scratch/fakerepo/scripts/slurm/train.sbatch" -- "$cfg"
  expect_rc beside 0
  grep -qx "$scratch/fakerepo/build/bcdtrain" "$scratch/beside.d/srun.argv" 2> /dev/null ||
    fail "beside: not the repository's build/bcdtrain: $(tr '\n' ' ' < "$scratch/beside.d/srun.argv")"
  run spool STUB_TRAINER=exit0 BCDTRAIN= "SCRIPT=$scratch/spool/slurm_script" "SLURM_SUBMIT_DIR=$scratch/submit" -- "$cfg"
  expect_rc spool 0
  grep -qx "$scratch/submit/build/bcdtrain" "$scratch/spool.d/srun.argv" 2> /dev/null ||
    fail "spool: not the submit directory's build/bcdtrain: $(tr '\n' ' ' < "$scratch/spool.d/srun.argv")"
  check_ranks spool 4 train --config "$cfg" --resume auto
}

# start NAME SIGNAL...: runs the script in the background (its own process group, so that SIGINT
# is not ignored in it) with the stub trainer waiting for SIGTERM, waits for the 4 ranks, then
# sends each SIGNAL to the script, waiting after the first one for the ranks to have one signal
# each (or, for SIGTERM, for the script to have said so). Leaves its pid in $pid.
start() {
  local name=$1 r
  shift
  sbatch_env "$name"
  local d=$scratch/$name.d
  set -m
  "${env_base[@]}" "${allocation[@]}" "BCDTRAIN=$stubs/bcdtrain_stub.sh" "STUB_TRAINER=$stub_mode" \
    bash "$script" configs/tiny.toml --train.steps=100 > "$name.out" 2> "$name.err" &
  pid=$!
  set +m
  wait_for "$name" "$d/rank0.ready" "$d/rank1.ready" "$d/rank2.ready" "$d/rank3.ready"
}
# finish NAME: lets the ranks end their "checkpoint" and waits for the script; $rc.
finish() {
  touch "$scratch/$1.d/release"
  wait "$pid"
  rc=$?
}
# signals_each NAME N: every rank recorded N SIGTERMs (0: no file).
signals_each() {
  local r d=$scratch/$1.d
  for r in 0 1 2 3; do
    if (($2 == 0)); then
      expect_absent "$1 rank $r" "$d/rank$r.signals"
    else
      expect_lines "$1 rank $r" "$d/rank$r.signals" TERM
    fi
  done
}

case_requeue() {
  local d r
  # The time limit: USR1, then a second USR1 while the ranks checkpoint.
  stub_mode=signal
  start usr1
  d=$scratch/usr1.d
  kill -USR1 "$pid"
  wait_for usr1 "$d/rank0.signals" "$d/rank1.signals" "$d/rank2.signals" "$d/rank3.signals"
  kill -USR1 "$pid"
  wait_for_text usr1 usr1.err "SIGUSR1 again"
  finish usr1
  expect_rc usr1 143
  signals_each usr1 1
  expect_lines usr1 "$d/scancel.calls" "--signal=TERM 12345"
  expect_absent usr1 "$d/srun.signals"
  grep -qx 'requeue 12345' "$d/scontrol.calls" 2> /dev/null ||
    fail "usr1: no scontrol requeue 12345: $(cat "$d/scontrol.calls" 2>&1)"
  expect_text usr1 err "requeueing job 12345"

  # The run reached its last step as the signal came: it finished, nothing to requeue.
  stub_mode=finish
  start finished
  kill -USR1 "$pid"
  finish finished
  expect_rc finished 0
  signals_each finished 1
  grep -q requeue "$scratch/finished.d/scontrol.calls" 2> /dev/null && fail "finished: a finished run was requeued"

  # Ctrl-C under salloc: the ranks checkpoint and stop, no requeue.
  stub_mode=signal
  start interrupt
  d=$scratch/interrupt.d
  kill -INT "$pid"
  wait_for interrupt "$d/rank0.signals" "$d/rank1.signals" "$d/rank2.signals" "$d/rank3.signals"
  finish interrupt
  expect_rc interrupt 143
  signals_each interrupt 1
  expect_lines interrupt "$d/scancel.calls" "--signal=TERM 12345"
  grep -q requeue "$d/scontrol.calls" 2> /dev/null && fail "interrupt: requeued after SIGINT"

  # Slurm ends the job (scancel, preemption, the hard limit): SIGTERM to the script, which must
  # not add one to the SIGTERM Slurm sends each rank itself (played here by the test).
  start ending
  d=$scratch/ending.d
  kill -TERM "$pid"
  wait_for_text ending ending.err "SIGTERM"
  signals_each ending 0
  expect_absent ending "$d/scancel.calls"
  while read -r r; do kill -TERM "$r"; done < "$d/tasks.pids"
  wait_for ending "$d/rank0.signals" "$d/rank1.signals" "$d/rank2.signals" "$d/rank3.signals"
  finish ending
  expect_rc ending 143
  signals_each ending 1
  grep -q requeue "$d/scontrol.calls" 2> /dev/null && fail "ending: requeued after SIGTERM"

  # No signal: the trainer's exit status, and no requeue.
  local mode want
  for mode in exit0:0 exit2:2; do
    want=${mode#*:}
    run "$mode" STUB_TRAINER=${mode%:*} -- configs/tiny.toml
    expect_rc "$mode" "$want"
    d=$scratch/$mode.d
    [[ -f $d/rank3.argv ]] || fail "$mode: rank 3 did not run"
    expect_absent "$mode" "$d/scancel.calls"
    grep -q requeue "$d/scontrol.calls" 2> /dev/null && fail "$mode: requeued"
  done
}

case_errors() {
  # name | variables | arguments | what stderr must say
  local cases=(
    "no_config||  |no config given"
    "missing_config||nope.toml|config 'nope.toml' not found"
    "flag_first||--train.lr=1|expected the config first, got '--train.lr=1'"
    "no_binary|BCDTRAIN=$scratch/none|configs/tiny.toml|no trainer at $scratch/none"
    "no_binary_path|BCDTRAIN=no-such-bcdtrain|configs/tiny.toml|no trainer 'no-such-bcdtrain' on PATH"
    "overwrite||configs/tiny.toml --overwrite|'--overwrite': give overrides only"
    "resume||configs/tiny.toml --resume=auto|'--resume=auto': give overrides only"
    "positional||configs/tiny.toml extra|'extra': expected an override"
    "no_job|SLURM_JOB_ID=|configs/tiny.toml|not inside a Slurm job (SLURM_JOB_ID is not set)"
  )
  local c name vars args want
  for c in "${cases[@]}"; do
    IFS='|' read -r name vars args want <<< "$c"
    local v=()
    [[ -n $vars ]] && v=("$vars")
    # shellcheck disable=SC2086  # args is a word list on purpose
    run "$name" "${v[@]}" -- $args
    expect_rc "$name" 2
    expect_text "$name" err "$want"
    expect_absent "$name" "$scratch/$name.d/srun.argv"
  done
  # Under sbatch (a copy in the spool directory) without BCDTRAIN: the submit directory's trainer.
  mkdir -p spool submit
  cp "$script" spool/slurm_script
  run no_default BCDTRAIN= "SCRIPT=$scratch/spool/slurm_script" "SLURM_SUBMIT_DIR=$scratch/submit" -- configs/tiny.toml
  expect_rc no_default 2
  expect_text no_default err "no trainer at $scratch/submit/build/bcdtrain (build it with scripts/setup.sh, or set BCDTRAIN)"
}

case $case in
  launch) case_launch ;;
  requeue) case_requeue ;;
  errors) case_errors ;;
  *) echo "usage: $0 launch|requeue|errors [SCRATCH_DIR]" >&2; exit 2 ;;
esac
verdict test_slurm
