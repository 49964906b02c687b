#!/usr/bin/env bash
# Plots of one or more training runs from their metrics.jsonl: runs `bcdtrain plot` with these
# arguments (the binary draws them with gnuplot; `bcdtrain plot --help` has the flags, the PNGs and
# the exit statuses). Kept for users and scripts that call plot.sh. The binary: $BCD_BINARY when
# set, else build/bcdtrain of this clone. Exit status: bcdtrain plot's; 2 when the binary is missing.
set -euo pipefail
script_dir=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=scripts/lib.sh
source "$script_dir/lib.sh"

usage() {
  cat <<'EOF_USAGE'
usage: scripts/plot.sh RUN_DIR... [--out DIR]
  Runs build/bcdtrain plot (or $BCD_BINARY plot) with these arguments: the PNGs of each run's
  metrics.jsonl, into --out DIR (default: RUN_DIR/plots for one run, ./plots for several).
  -h, --help  this text; with the binary built, `bcdtrain plot --help` (every flag and output)
EOF_USAGE
}

bin=${BCD_BINARY:-$(dirname "$script_dir")/build/bcdtrain}
if [[ ! -x $bin ]]; then
  for a in "$@"; do
    case $a in -h | --help) usage; exit 0 ;; esac
  done
  die "no bcdtrain at $bin (build it with scripts/setup.sh, or set BCD_BINARY)"
fi
exec "$bin" plot "$@"
