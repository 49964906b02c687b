#!/usr/bin/env bash
# No argument: set-up and build of bcdtrain alone (scripts/setup.sh --product: its packages and
# LibTorch, the bcdtrain target; no test or benchmark package), prepare the demo corpus (fortunes)
# if missing, train configs/tiny.toml and print samples. With arguments: `bcdtrain train` with
# them, e.g.
#   scripts/train.sh --config configs/tiny.toml --train.steps=50
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib.sh
source scripts/lib.sh

usage() {
  cat <<'EOF_USAGE'
usage: scripts/train.sh                  set up, build, prepare the demo corpus, train the tiny demo
       scripts/train.sh TRAIN_ARGS...    set up, build, then build/bcdtrain train TRAIN_ARGS
  The set-up is bcdtrain's alone (scripts/setup.sh --product): its Debian packages and LibTorch
  (pip torch), and the bcdtrain target; scripts/test.sh installs and builds the rest.
  TRAIN_ARGS   --config FILE, --section.key=value overrides, --resume DIR|FILE|auto, --overwrite,
               --quiet (build/bcdtrain train --help has them all)
  -h, --help   this text
EOF_USAGE
}
# The flags of `bcdtrain train` (src/cli/main.cpp and train_commands.cpp), checked here so that a
# typo fails before the set-up's minutes; the trainer judges keys and values itself.
check_train_args() {
  while (($#)); do
    case $1 in
      -h | --help) usage; exit 0 ;;
      --config=?* | --resume=?* | --quiet | --quiet=* | --overwrite | --overwrite=*) ;;
      --config | --resume | --config= | --resume=) [[ $1 != *= && -n ${2:-} ]] || usage_error "${1%=} needs a value"; shift ;;
      --*.*=*) [[ ${1%%=*} == *.* ]] || usage_error "unknown flag '${1%%=*}'" ;;
      --*.*) (($# >= 2)) || usage_error "$1 needs a value (--section.key=VALUE)"; shift ;;
      -*) usage_error "unknown flag '${1%%=*}'" ;;
      *) usage_error "unexpected argument '$1'" ;;
    esac
    shift
  done
}
check_train_args "$@"

scripts/setup.sh --product
if [[ $# -eq 0 ]]; then
  if [[ ! -f data/fortunes/tokens.h5 ]]; then
    build/bcdtrain prepare --input /usr/share/games/fortunes --out data/fortunes --vocab-size 2048
  fi
  # The demo starts afresh each time: an earlier demo's checkpoints (from ^C) are replaced.
  exec build/bcdtrain train --config configs/tiny.toml --overwrite
fi
exec build/bcdtrain train "$@"
