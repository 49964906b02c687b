#!/usr/bin/env bash
# Plots of one or more training runs from their metrics.jsonl (gnuplot, PNG): loss against step
# and wall time, tokens/s, peak memory per tier, stall per block switch and the active block, one
# series per run, so that runs (BCD against AdamW, sweep points) compare on one plot. The data
# files and gnuplot scripts come from scripts/plot_metrics.py; plots.json lists each plot's series.
# Exit status: 0 plots written; 1 gnuplot failed; 2 bad flags, a run dir without metrics.jsonl, a
# malformed metrics.jsonl (file:line) or gnuplot/python3 missing.
set -uo pipefail
script_dir=$(cd "$(dirname "$0")" && pwd)

usage() {
  cat <<'EOF'
usage: scripts/plot.sh RUN_DIR... [--out DIR]
  RUN_DIR     a run directory of `bcdtrain train` (its metrics.jsonl); one series per run,
              named by the directory's last path component (more components when they clash)
  --out DIR   where the PNGs and plots.json go (default: RUN_DIR/plots for one run, ./plots
              for several)
  -h, --help  this text
Writes loss_vs_step.png, loss_vs_time.png, tokens_per_s.png, memory.png, stall.png and
active_block.png; a plot with no series (no run switched blocks, no BCD run) is skipped and
said so on stdout and in plots.json ("skipped": why). Exit status: 0 written, 1 gnuplot failed,
2 bad flags or input, or gnuplot missing (scripts/setup.sh installs it).
EOF
}
usage_error() {
  echo "plot: $1 (see scripts/plot.sh --help)" >&2
  exit 2
}

# ---- Flags ----
out_dir="" runs=()
while (($#)); do
  flag=$1 value="" has_value=0
  if [[ $flag == --*=* ]]; then value=${flag#*=} flag=${flag%%=*} has_value=1; fi
  case $flag in
    -h | --help) usage; exit 0 ;;
    --out)
      if ((!has_value)); then
        (($# >= 2)) || usage_error "$flag needs a value"
        value=$2
        shift
      fi
      [[ -n $value ]] || usage_error "$flag needs a value"
      out_dir=$value ;;
    -*) usage_error "unknown flag '$flag'" ;;
    *) runs+=("$flag") ;;
  esac
  shift
done
((${#runs[@]})) || usage_error "no RUN_DIR given"
for r in "${runs[@]}"; do
  [[ -d $r ]] || usage_error "$r: not a directory"
  [[ -f $r/metrics.jsonl ]] || usage_error "$r: no metrics.jsonl there (not a run dir of bcdtrain train?)"
done
if [[ -z $out_dir ]]; then
  if ((${#runs[@]} == 1)); then out_dir=${runs[0]}/plots; else out_dir=plots; fi
fi

# gnuplot is looked for after the records are read (plot_metrics.py): bad input is named first.
command -v python3 > /dev/null || { echo "plot: python3 not found (scripts/setup.sh installs it)" >&2; exit 2; }
exec python3 "$script_dir/plot_metrics.py" "$out_dir" "${runs[@]}"
