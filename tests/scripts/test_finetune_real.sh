#!/usr/bin/env bash
# Tests of scripts/bench_finetune_real.sh and scripts/gguf_to_hf.py that convert and train nothing:
#   flags      --help; unknown and malformed flags exit 2 with one line naming the flag; good
#              flags pass the check (BCD_FLAGS_CHECK=1, as scripts/bench.sh checks them) without
#              starting the trainer or Python
#   unpermute  the converter's Q/K row order: llama.cpp's interleaved RoPE on the GGUF rows
#              (permute_rows of transformers' rows, as convert_hf_to_gguf.py writes them) must give
#              the attention scores transformers' rotate_half RoPE gives on the rows unpermute_rows
#              restores, for query heads and grouped key heads; a wrong order moves them by O(1).
#              Needs numpy: the Python of scripts/setup.sh's venv ($BCD_TEST_PYTHON); skipped
#              (exit 77) where it is missing.
# Usage: tests/scripts/test_finetune_real.sh flags|unpermute [SCRATCH_DIR]
# (ctest runs each case with a scratch directory in the build tree; by hand a temporary one.)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
script=$repo/scripts/bench_finetune_real.sh
# shellcheck source=harness.sh
source "$here/harness.sh" "${1:-}" "${2:-}"

case_flags() {
  # Stubs for what the benchmark would start: none may be called while flags are checked.
  local stubs=$scratch/stubs tool
  mkdir -p "$stubs"
  for tool in python3 python bcdtrain; do
    printf '#!/bin/sh\necho "%s $*" >> "%s/called"\nexit 99\n' "$tool" "$scratch" > "$stubs/$tool"
    chmod +x "$stubs/$tool"
  done
  local env=(env PATH="$stubs:$PATH" BCD_BUILD_DIR="$stubs" BCD_PYTHON="$stubs/python")
  run help "${env[@]}" bash "$script" --help
  expect_rc help 0
  expect_text help out "usage: scripts/bench_finetune_real.sh"
  expect_text help out "--bcd-args ARGS"
  # flag | expected message
  local bad=(
    "--no-such-flag|unknown flag '--no-such-flag'"
    "--rounds=0|--rounds: expected a positive integer, got '0'"
    "--steps=3|--steps: expected an integer of at least 4, got '3'"
    "--threads=two|--threads: expected an integer of at least 0, got 'two'"
    "--adamw-lr=fast|--adamw-lr: expected a positive number (e.g. 1e-4), got 'fast'"
    "--bcd-args=lr=1|--bcd-args/--adamw-args: 'lr=1' is not a trainer flag --section.key=value"
    "--adamw-args=--train.lr=1e-4 \$(touch x)|--bcd-args/--adamw-args: '\$(touch' is not a trainer flag"
    "--steps|--steps needs a value"
    "extra|unexpected argument 'extra'"
  )
  local c i=0
  for c in "${bad[@]}"; do
    i=$((i + 1))
    run "bad$i" "${env[@]}" bash "$script" "${c%%|*}"
    expect_rc "bad$i" 2
    expect_text "bad$i" err "bench_finetune_real: ${c#*|}"
    [[ $(wc -l < "$scratch/bad$i.err") == 1 ]] || fail "bad$i (${c%%|*}): stderr is not one line: $(cat "$scratch/bad$i.err")"
  done
  run good "${env[@]}" BCD_FLAGS_CHECK=1 bash "$script" --rounds 1 --steps=8 --adamw-lr 2e-4 --threads 0 \
    --val-batches 4 --bcd-args '--train.lr=1e-3 --bcd.switch_every=8' --adamw-args=--optim.beta2=0.99
  expect_rc good 0
  # An environment default is checked as the flag would be.
  run env_bad "${env[@]}" BENCH_ROUNDS=x bash "$script"
  expect_rc env_bad 2
  expect_text env_bad err "--rounds: expected a positive integer, got 'x'"
  [[ ! -e $scratch/called ]] || fail "the benchmark started work while checking flags: $(cat "$scratch/called")"
}

case_unpermute() {
  local py=${BCD_TEST_PYTHON:-}
  if [[ -z $py ]]; then
    local venv
    venv=${XDG_CACHE_HOME:-$HOME/.cache}/bcdtrain/torch-$(sed -n 's/^TORCH_VERSION=\([^ ]*\).*/\1/p' "$repo/scripts/setup.sh")
    py=$venv/bin/python
  fi
  if ! "$py" -c 'import numpy' 2> /dev/null; then
    echo "SKIP [$case]: no Python with numpy at '$py' (scripts/setup.sh makes the venv; or set BCD_TEST_PYTHON)"
    exit 77
  fi
  PYTHONPATH=$repo/scripts "$py" - << 'EOF' || fail "the Q/K row order (above)"
import numpy as np
from gguf_to_hf import permute_rows, unpermute_rows

rng = np.random.default_rng(0)
n_head, n_kv, d_head, C, T, theta = 6, 2, 16, 24, 7, 10000.0
inv = theta ** (-np.arange(0, d_head, 2) / d_head)        # (d_head/2,)
ang = np.arange(T)[:, None] * inv[None, :]                 # (T, d_head/2)
cos, sin = np.cos(ang), np.sin(ang)

def rope_halves(x):  # transformers: rotate_half pairs dimension i with i + d_head/2; x (T, H, d_head)
    a, b = x[..., : d_head // 2], x[..., d_head // 2 :]
    c, s = cos[:, None], sin[:, None]
    return np.concatenate([a * c - b * s, b * c + a * s], -1)

def rope_pairs(x):   # ggml's rope, mode 0: pairs (2i, 2i + 1)
    a, b = x[..., 0::2], x[..., 1::2]
    c, s = cos[:, None], sin[:, None]
    out = np.empty_like(x)
    out[..., 0::2], out[..., 1::2] = a * c - b * s, b * c + a * s
    return out

def scores(wq, wk, rope, x):  # (H, T, T) causal-free q.k with grouped keys
    q = rope((x @ wq.T).reshape(T, n_head, d_head))
    k = rope((x @ wk.T).reshape(T, n_kv, d_head))
    k = np.repeat(k, n_head // n_kv, axis=1)
    return np.einsum("thd,shd->hts", q, k)

x = rng.standard_normal((T, C))
wq_hf = rng.standard_normal((n_head * d_head, C))
wk_hf = rng.standard_normal((n_kv * d_head, C))
wq_gguf, wk_gguf = permute_rows(wq_hf, n_head), permute_rows(wk_hf, n_kv)  # as convert_hf_to_gguf writes
ref = scores(wq_hf, wk_hf, rope_halves, x)
errors = []
# The GGUF rows under ggml's RoPE are the model: the same scores as transformers' on the HF rows.
if not np.allclose(scores(wq_gguf, wk_gguf, rope_pairs, x), ref, atol=1e-9):
    errors.append("permute_rows does not map transformers' rows to the rows ggml's RoPE expects")
# The converter's inverse restores transformers' rows exactly.
if not (np.array_equal(unpermute_rows(wq_gguf, n_head), wq_hf) and np.array_equal(unpermute_rows(wk_gguf, n_kv), wk_hf)):
    errors.append("unpermute_rows(permute_rows(w)) != w")
# A wrong order would show: the permutation applied again instead of undone, or none.
wrong = {"permute_rows instead of unpermute_rows": (permute_rows(wq_gguf, n_head), permute_rows(wk_gguf, n_kv)),
         "no un-permutation": (wq_gguf, wk_gguf)}
for name, (wq, wk) in wrong.items():
    d = np.abs(scores(wq, wk, rope_halves, x) - ref).max()
    if d < 1e-2:
        errors.append(f"{name}: scores move by only {d:.2e}; the test cannot tell the order")
for e in errors:
    print("  " + e)
raise SystemExit(1 if errors else 0)
EOF
}

case "$case" in
  flags) case_flags ;;
  unpermute) case_unpermute ;;
  *) echo "usage: $0 flags|unpermute [SCRATCH_DIR]" >&2; exit 2 ;;
esac
verdict test_finetune_real
