#!/usr/bin/env bash
# A low-RAM node end to end (scripts/bench.sh lowram): import -> train -> export of Llama-3.2-1B's
# shape (scripts/make_hf_model.py --layers 16: 1.24B parameters, 4.6 GiB in fp32, written by
# transformers as bf16 shards) inside memory limits below the model's fp32 size (train: 3.5 GiB;
# import, prepare and export: 1 GiB), so that no step can hold the whole model: `bcdtrain import` into a weights file, `prepare` of
# the fortunes with the model's tokenizer, `train` from the weights file for --steps steps on the
# CPU (BCD over attention/MLP halves and 8 vocabulary slices, every master and moment and every
# layer's weights homed on NVMe, a 2 GiB compute budget and a 1.5 GiB staging pool), and
# `bcdtrain export` of the trained weights to bf16 safetensors. The limit is a memory cgroup
# (v1 memory.limit_in_bytes or v2 memory.max, a child of this shell's own) when one can be made,
# which also counts the page cache the commands fill; where none can, the limit is checked on
# each command's peak RSS (GNU time) instead, and the JSON says which. Then the export is read
# back: the tensors the steps did not train are the input's bytes, the trained ones are not.
# Last line: one JSON object (no ratio: one side).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib.sh
source scripts/lib.sh

usage() {
  cat <<'EOF_USAGE'
usage: scripts/bench_lowram.sh [--limit-mib N] [--io-limit-mib N] [--steps N] [--nvme-dir DIR]
       scripts/bench.sh lowram [FLAGS...]   (builds bcdtrain first)
  --limit-mib N     train's memory limit, MiB (default 3584: below the model's 4.6 GiB in fp32;
                    its plan: 1.76 GiB of compute budget, a 1.46 GiB staging pool, the process)
  --io-limit-mib N  the limit of import, prepare and export, MiB (default 1024)
  --steps N       training steps (default 4: the head, then the last layer's halves, descending)
  --nvme-dir DIR  where the NVMe tier and the files go (default: a temporary directory)
  -h, --help      this text
The model is written once into ~/.cache/bcdtrain/bench (BCD_BENCH_CACHE moves it) by
scripts/make_hf_model.py with the Python of LibTorch's environment (transformers, from
scripts/setup.sh). The trainer is BCD_BUILD_DIR/bcdtrain (BCD_BUILD_DIR default build).
EOF_USAGE
}
limit_mib=3584 io_limit_mib=1024 steps=4 work=""
parse_flags "--limit-mib=limit_mib --io-limit-mib=io_limit_mib --steps=steps --nvme-dir=work" "$@"
no_args
check_int --limit-mib "$limit_mib" 512
check_int --io-limit-mib "$io_limit_mib" 512
check_int --steps "$steps"
flags_checked

build=${BCD_BUILD_DIR:-build}
bcd=$build/bcdtrain
# shellcheck source=scripts/bench_corpus.sh
source scripts/bench_corpus.sh
bench_require "$bcd"
bench_hf_model "$build" 16

cg="" own_work=0
on_exit() {
  [[ -z $cg ]] || rmdir "$cg" 2> /dev/null || true
  ((!own_work)) || rm -rf "$work"
}
trap on_exit EXIT
if [[ -z $work ]]; then
  work=$(mktemp -d "${TMPDIR:-/tmp}/bcd-bench-lowram.XXXXXX")
  own_work=1
fi
[[ $work != *[\"\\]* ]] || usage_error "--nvme-dir '$work': quotes and backslashes are not supported"
rm -rf "${work:?}"/{run0,run1,data,nvme,hf} && mkdir -p "$work/nvme"

# ---- The limit: a memory cgroup of our own, else peak RSS ----
cg_peak="" mode=rss
line=$(grep -E '^[0-9]+:memory:' /proc/self/cgroup || true)
if [[ -n $line && -w /sys/fs/cgroup/memory${line#*:memory:}/ ]]; then  # v1
  cg=/sys/fs/cgroup/memory${line#*:memory:}/bcd-lowram-$$
  if mkdir "$cg" 2> /dev/null && echo $((io_limit_mib << 20)) > "$cg/memory.limit_in_bytes" 2> /dev/null; then
    mode=cgroup-v1 cg_peak=memory.max_usage_in_bytes
    echo 0 > "$cg/memory.swappiness" 2> /dev/null || true
  else
    rmdir "$cg" 2> /dev/null || true
    cg=""
  fi
elif line=$(grep -E '^0::' /proc/self/cgroup) && [[ -w /sys/fs/cgroup${line#0::}/ ]]; then  # v2
  cg=/sys/fs/cgroup${line#0::}/bcd-lowram-$$
  if mkdir "$cg" 2> /dev/null && echo $((io_limit_mib << 20)) > "$cg/memory.max" 2> /dev/null; then
    mode=cgroup-v2 cg_peak=memory.peak
    echo 0 > "$cg/memory.swap.max" 2> /dev/null || true
  else
    rmdir "$cg" 2> /dev/null || true
    cg=""
  fi
fi
echo "model: $model (Llama-3.2-1B shape, 1.24B parameters, 4.6 GiB in fp32); limits by $mode" >&2

# phase NAME LIMIT_MIB CMD...: runs CMD inside the limit; appends
# "NAME SECONDS PEAK_RSS_KB CGROUP_PEAK_BYTES LIMIT_MIB".
phase() {
  local name=$1 limit=$2 peak=0
  shift 2
  if [[ -n $cg ]]; then
    if [[ $mode == cgroup-v1 ]]; then
      echo $((limit << 20)) > "$cg/memory.limit_in_bytes"
      echo 0 > "$cg/memory.max_usage_in_bytes"
    else
      echo $((limit << 20)) > "$cg/memory.max"
    fi
    # shellcheck disable=SC2016 # the inner shell expands them
    /usr/bin/time -f "%e %M" -o "$work/$name.time" sh -c 'echo $$ > "$0/cgroup.procs" && exec "$@"' "$cg" "$@" \
      > "$work/$name.log" 2>&1 || { cat "$work/$name.log" >&2; die "$name failed in a $limit MiB limit (above)"; }
    peak=$(cat "$cg/$cg_peak" 2> /dev/null || echo 0)
  else
    /usr/bin/time -f "%e %M" -o "$work/$name.time" "$@" > "$work/$name.log" 2>&1 ||
      { cat "$work/$name.log" >&2; die "$name failed"; }
  fi
  local s kb
  read -r s kb < "$work/$name.time"
  ((kb <= limit << 10)) || die "$name peaked at $((kb / 1024)) MiB of RSS, over its $limit MiB limit"
  echo "$name $s $kb $peak $limit" >> "$work/results"
  echo "$name: $s s, peak RSS $((kb / 1024)) MiB${cg:+, cgroup peak $((peak / 1048576)) MiB}" >&2
}

phase import "$io_limit_mib" "$bcd" import --hf "$model" --out "$work/run0/model.h5"
phase prepare "$io_limit_mib" "$bcd" prepare --input /usr/share/games/fortunes --out "$work/data" --tokenizer "$work/run0/tokenizer.json"
cat > "$work/train.toml" <<EOF
[model]
init_from = "$work/run0/model.h5"   # the imported weights give the shape
activation_checkpointing = true
[train]
device = "cpu"
dtype = "bf16"
steps = $steps
batch_size = 1
seq_len = 64
log_every = 1
val_every = 0
run_dir = "$work/run1"
[bcd]
enabled = true
switch_every = 1
order = "descending"                # the head, then the last layer's halves
blocks = "attn_mlp"
vocab_slices = 8
[data]
path = "$work/data"
[memory]
compute_bytes = "2GiB"
host_bytes = "1536MiB"
pinned_bytes = "1536MiB"
nvme_paths = ["$work/nvme"]
home = "nvme"
stream_weights = "on"
stream_home = "nvme"
[sample]
prompts = []
EOF
phase train "$limit_mib" "$bcd" train --config "$work/train.toml"
phase export "$io_limit_mib" "$bcd" export --checkpoint "$work/run1/model.h5" --hf "$work/hf" --dtype bf16

# ---- The export read back (outside the limit): untrained tensors are the input's bytes ----
"$python" - "$model" "$work/hf" "$work/results" "$mode" "$steps" <<'EOF'
import glob, json, os, sys
import torch
from safetensors import safe_open
src, out, results, mode, steps = sys.argv[1:6]
def tensors(d):
    m = {}
    for f in sorted(glob.glob(os.path.join(d, "*.safetensors"))):
        with safe_open(f, "pt") as h:
            for k in h.keys():
                m[k] = h.get_tensor(k)
    return m
a, b = tensors(src), tensors(out)
assert set(a) == set(b), f"tensor names differ: {sorted(set(a) ^ set(b))[:5]}"
same = [k for k in a if a[k].dtype == b[k].dtype and a[k].shape == b[k].shape
        and torch.equal(a[k].view(torch.int16), b[k].view(torch.int16))]  # bitwise
changed = sorted(set(a) - set(same))
rows = {l.split()[0]: l.split()[1:] for l in open(results)}
fp32_gib = sum(t.numel() for t in a.values()) * 4 / 2**30
out_j = {"benchmark": "lowram", "model": "Llama-3.2-1B shape (16 layers)", "params_billions": round(sum(t.numel() for t in a.values()) / 1e9, 3),
         "fp32_gib": round(fp32_gib, 2), "limit_by": mode, "steps": int(steps)}
for name, (s, kb, peak, limit) in rows.items():
    out_j[f"{name}_limit_mib"] = int(limit)
    out_j[f"{name}_s"] = float(s)
    out_j[f"{name}_peak_rss_mib"] = round(int(kb) / 1024)
    if mode.startswith("cgroup"):
        out_j[f"{name}_cgroup_peak_mib"] = round(int(peak) / 2**20)
out_j["tensors_unchanged"] = len(same)
out_j["tensors_trained"] = changed
out_j["ok"] = len(changed) > 0 and len(same) > 0 and all(int(r[3]) < fp32_gib * 1024 for r in rows.values())
print(json.dumps(out_j))
EOF
