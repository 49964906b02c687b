#!/usr/bin/env bash
# No argument: set-up, build, prepare the demo corpus (fortunes) if missing, train configs/tiny.toml
# and print samples. With arguments: `bcdtrain train` with them, e.g.
#   scripts/train.sh --config configs/tiny.toml --train.steps=50
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
if [[ $# -eq 0 ]]; then
  if [[ ! -f data/fortunes/tokens.h5 ]]; then
    build/bcdtrain prepare --input /usr/share/games/fortunes --out data/fortunes --vocab-size 2048
  fi
  # The demo starts afresh each time: an earlier demo's checkpoints (from ^C) are replaced.
  exec build/bcdtrain train --config configs/tiny.toml --overwrite
fi
exec build/bcdtrain train "$@"
