#!/usr/bin/env bash
# The fine-tuning recipe (configs/finetune-tiny.toml, README "Fine-tuning an HF model on
# instruction data") end to end against the real trainer ($BCDTRAIN_REAL, set by ctest to the
# built binary), in about a minute on 2 CPU cores:
#   recipe  a tiny base model pretrained on two fortune files and exported as a Hugging Face
#           directory (bf16, as one is downloaded); instruction records from scripts/fortune_qa.py,
#           prepared with that directory's tokenizer.model and the plain template (a bad record
#           appended: refused naming file:line, then skipped with --skip-bad); the recipe's config
#           from hf:DIR with small overrides, its samples asked as plain-template questions; the
#           result exported with --hf (fp32), imported back and evaluated: its held-out loss
#           (response tokens of the validation records) equals the run's last evaluation in
#           metrics.jsonl and summary.json to 1e-5 relative, and is below the base model's; and
#           it answers a question laid out by --chat-template.
# Usage: BCDTRAIN_REAL=build/bcdtrain tests/scripts/test_finetune.sh recipe [SCRATCH_DIR]
# (ctest runs it with a scratch directory in the build tree; by hand a temporary one.)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
source "$here/harness.sh" "${1:-}" "${2:-}"
fortunes=/usr/share/games/fortunes
for need in python3 "$fortunes/science" "$fortunes/definitions" "$fortunes/riddles" "$fortunes/law"; do
  command -v "$need" > /dev/null || [[ -e $need ]] ||
    { echo "FAIL [$case]: $need not found (scripts/setup.sh installs it)" >&2; exit 1; }
done
cd "$scratch" || exit 1

# json_check NAME PYTHON_EXPR...: each expression is true, on `rows` (ft/metrics.jsonl's records),
# `summary` (ft/summary.json) and `ev` (NAME -> the JSON object of SCRATCH/NAME.out, eval's line).
json_check() {
  local name=$1
  shift
  python3 - "$@" << 'EOF' || fail "$name: checks failed (above)"
import json, sys
try:
    rows = [json.loads(line) for line in open("ft/metrics.jsonl")]
    summary = json.load(open("ft/summary.json"))
    ev = {n: json.loads(open(n + ".out").read().strip().splitlines()[-1])
          for n in ("eval_run", "eval_export", "eval_base")}
except (OSError, ValueError, IndexError) as e:
    sys.exit(f"  cannot read the run's or eval's output: {e}")
val = [r["val_loss"] for r in rows if "val_loss" in r]
rel = lambda a, b: abs(a - b) / abs(b)
bad = [expr for expr in sys.argv[1:] if not eval(expr, {"rows": rows, "summary": summary, "ev": ev, "val": val,
                                                     "rel": rel})]
for expr in bad:
    print(f"  false: {expr}", file=sys.stderr)
if bad:
    print(f"  val_loss in metrics.jsonl: {val}\n  summary.json: {json.dumps(summary)}\n  eval: {json.dumps(ev)}",
          file=sys.stderr)
sys.exit(1 if bad else 0)
EOF
}

case_recipe() {
  local bin=${BCDTRAIN_REAL:-}
  [[ -x $bin ]] || { fail "BCDTRAIN_REAL='$bin' is not the built bcdtrain (ctest sets it)"; return; }

  # The base model, standing in for one downloaded from Hugging Face. max_seq_len 128: an imported
  # weights file stores the default [train] seq_len (128), which `eval --checkpoint` windows by.
  run base_prep "$bin" prepare --input "$fortunes/science" "$fortunes/definitions" --out base-data --vocab-size 512
  expect_rc base_prep 0
  printf '%s\n' '[model]' 'd_model = 64' 'n_layers = 2' 'n_heads = 4' 'n_kv_heads = 2' 'd_ff = 128' \
    'max_seq_len = 128' '[train]' 'steps = 40' 'batch_size = 8' 'seq_len = 64' 'lr = 3e-3' 'warmup_steps = 5' \
    'run_dir = "base"' 'log_every = 10' 'val_batches = 2' '[data]' 'path = "base-data"' '[sample]' 'prompts = []' \
    > base.toml
  run base_train "$bin" train --config base.toml
  expect_rc base_train 0
  run base_export "$bin" export --checkpoint base/model.h5 --hf base-hf
  expect_rc base_export 0
  [[ -s base-hf/config.json && -s base-hf/model.safetensors && -s base-hf/tokenizer.model ]] ||
    { fail "base_export: base-hf lacks config.json, model.safetensors or tokenizer.model: $(ls base-hf)"; return; }

  # Instruction records, both forms; a bad one appended is refused naming its line, then skipped.
  run qa python3 "$repo/scripts/fortune_qa.py" "$fortunes/definitions" "$fortunes/riddles" "$fortunes/law"
  expect_rc qa 0
  local n
  n=$(wc -l < qa.out)
  ((n > 500)) || fail "qa: only $n records: $(cat qa.err)"
  grep -q '^{"prompt": ' qa.out && grep -q '^{"messages": ' qa.out ||
    fail "qa: expected {\"prompt\", \"response\"} and {\"messages\"} records; head: $(head -c 400 qa.out)"
  { cat qa.out; echo '{"prompt": "What is missing here?"}'; } > qa.jsonl
  run prep_bad "$bin" prepare --input qa.jsonl --out qa-data --tokenizer base-hf/tokenizer.model --chat-template plain
  expect_rc prep_bad 2
  expect_text prep_bad err "qa.jsonl:$((n + 1)):"
  [[ ! -e qa-data ]] || fail "prep_bad: qa-data was written"
  run prep "$bin" prepare --input qa.jsonl --out qa-data --tokenizer base-hf/tokenizer.model --chat-template plain \
    --skip-bad
  expect_rc prep 0
  expect_text prep out "instruction data (plain template; "
  expect_text prep out "; 1 bad record(s) skipped"

  # The recipe: its config from hf:DIR, smaller and shorter. log_every 1: step 1's loss is read.
  run ft "$bin" train --config "$repo/configs/finetune-tiny.toml" --model.init_from=hf:base-hf \
    --data.path=qa-data --train.run_dir=ft --train.steps=16 --train.batch_size=4 --train.val_every=8 \
    --train.log_every=1 --train.lr=1e-3 --bcd.switch_every=2 --sample.max_new_tokens=8
  expect_rc ft 0
  expect_text ft out "### Response:"
  [[ -s ft/model.h5 && -s ft/summary.json ]] || { fail "ft: no model.h5 / summary.json in ft: $(ls ft)"; return; }
  run eval_run "$bin" eval --run ft
  expect_rc eval_run 0

  # Back to Hugging Face (fp32: the loss must match the run's to 1e-5), and evaluated from there.
  run export "$bin" export --checkpoint ft/model.h5 --hf ft-hf --dtype fp32
  expect_rc export 0
  cmp -s ft-hf/tokenizer.model base-hf/tokenizer.model || fail "export: ft-hf/tokenizer.model is not the base model's"
  grep -q '"model_type": "llama"' ft-hf/config.json && grep -q '"torch_dtype": "float32"' ft-hf/config.json ||
    fail "export: ft-hf/config.json: $(head -c 600 ft-hf/config.json)"
  # eval reads bcdtrain weights files: the HF directory goes through import. Its batches are the
  # run's validation batches: batch size 4 and at most 64 (the recipe's val_batches) of them.
  run import "$bin" import --hf ft-hf --out ft-imported/model.h5
  expect_rc import 0
  run eval_export "$bin" eval --checkpoint ft-imported/model.h5 --data qa-data --batch-size 4 --batches 64
  expect_rc eval_export 0
  # The imported model has no dataset to take a template from: generate is told it.
  run generate "$bin" generate --checkpoint ft-imported/model.h5 --chat-template plain --prompt "What is a koan?" \
    --max-new-tokens 4
  expect_rc generate 0
  local asked=$'### Instruction:\nWhat is a koan?\n\n### Response:\n'  # grep -F would match any one line
  python3 -c 'import sys; sys.exit(sys.argv[1] not in open(sys.argv[2]).read())' "$asked" generate.out ||
    fail "generate: the prompt is not laid out by the plain template: $(head -c 400 generate.out)"
  run import_base "$bin" import --hf base-hf --out base-imported/model.h5
  expect_rc import_base 0
  run eval_base "$bin" eval --checkpoint base-imported/model.h5 --data qa-data --batch-size 4 --batches 64
  expect_rc eval_base 0

  json_check losses \
    'rows[0]["step"] == 1 and rows[0]["loss"] < 5.9' \
    'len(val) == 2 and rel(summary["final_val_loss"], val[-1]) < 1e-12' \
    'summary["status"] == "finished" and summary["steps"] == 16' \
    'rel(ev["eval_run"]["val_loss"], val[-1]) < 1e-5' \
    'rel(ev["eval_export"]["val_loss"], val[-1]) < 1e-5' \
    'ev["eval_export"]["val_loss"] < ev["eval_base"]["val_loss"] - 0.005'
}

case $case in
  recipe) "case_$case" ;;
  *) echo "usage: BCDTRAIN_REAL=build/bcdtrain tests/scripts/test_finetune.sh recipe [SCRATCH_DIR]" >&2; exit 2 ;;
esac
verdict test_finetune
