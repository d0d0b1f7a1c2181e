#!/usr/bin/env bash
# LoRA end to end: a base exported by titan, a LoRA run on it (frozen base) that writes a PEFT
# adapter folder at its end, `titan export --adapter` (the same bytes) and `--merge-lora`, a
# resume that ends bit-equal to the uninterrupted run, `titan score/generate --adapter` equal to
# the merged model, and (with a Python that has peft) peft.PeftModel.from_pretrained giving the
# same logits. The peft part is skipped without such a Python; the rest always runs.
set -euo pipefail
titan=$1 src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
common=(--config "$src/recipes/debug.toml" --model.n_layers 1 --training.seq_len 32 --training.local_batch_size 2
        --metrics.enable_tensorboard false --checkpoint.export_dtype float32 --lr_scheduler.warmup_steps 0
        --lr_scheduler.decay_ratio 0)  # a constant lr: a 2-step run resumed to 4 follows the 4-step run
run() { "$titan" train "${common[@]}" "$@" > "$work/train.log" 2>&1 || { cat "$work/train.log"; exit 1; }; }

# The base: one step of full training, exported.
run --job.dump_folder "$work/base" --training.steps 1 --checkpoint.interval 1000
base="$work/base/checkpoint/step-1-hf"
lora=(--checkpoint.initial_load_path "$base" --checkpoint.initial_load_in_hf true --lora.enable true --lora.rank 4
      --lora.alpha 8 --optimizer.lr 1e-2)

# 4 LoRA steps straight, and 2 + a resume to 4.
run --job.dump_folder "$work/a" "${lora[@]}" --training.steps 4 --checkpoint.interval 1000
grep -q "lora" "$work/train.log" || { echo "no [lora] line in the setup log"; cat "$work/train.log"; exit 1; }
run --job.dump_folder "$work/b" "${lora[@]}" --training.steps 2 --checkpoint.interval 2
run --job.dump_folder "$work/b" "${lora[@]}" --training.steps 4 --checkpoint.interval 2
adapter="$work/a/checkpoint/step-4-hf"
test -f "$adapter/adapter_config.json" && test -f "$adapter/adapter_model.safetensors"
# The checkpoint holds the adapters only (no base weight).
if grep -q "embed_tokens" "$work/a/checkpoint/step-4/model.tensors"; then echo "base weights in a LoRA checkpoint"; exit 1; fi
cmp "$adapter/adapter_model.safetensors" "$work/b/checkpoint/step-4-hf/adapter_model.safetensors" \
  || { echo "resumed LoRA run differs from the uninterrupted one"; exit 1; }

# [lora] base_dtype = "bfloat16": the frozen base in bf16 trains bit-identically to the f32 base with
# bf16 GEMMs (mixed_precision_param = bfloat16): the same adapters after 2 steps.
run --job.dump_folder "$work/bf16" "${lora[@]}" --training.steps 2 --checkpoint.interval 1000 --lora.base_dtype bfloat16
grep -q "frozen base in bf16" "$work/train.log" || { echo "no bf16-base line in the setup log"; cat "$work/train.log"; exit 1; }
run --job.dump_folder "$work/mp" "${lora[@]}" --training.steps 2 --checkpoint.interval 1000 \
  --training.mixed_precision_param bfloat16
cmp "$work/bf16/checkpoint/step-2-hf/adapter_model.safetensors" "$work/mp/checkpoint/step-2-hf/adapter_model.safetensors" \
  || { echo "a bf16 base trains differently from an f32 base with bf16 GEMMs"; exit 1; }
if "$titan" train "${common[@]}" --job.dump_folder "$work/nolora" --training.steps 1 --lora.base_dtype bfloat16 \
  2> "$work/err.txt" > /dev/null; then
  echo "base_dtype bf16 without [lora] enable must be refused"; exit 1
fi
grep -q "base_dtype" "$work/err.txt" || { cat "$work/err.txt"; exit 1; }
# [lora] round_adapters = false (A and B unrounded in their bf16 GEMMs, as PEFT on a bf16 base):
# a different trajectory from the rounded one, so a resume across the change is refused.
run --job.dump_folder "$work/bf16u" "${lora[@]}" --training.steps 2 --checkpoint.interval 1000 --lora.base_dtype bfloat16 \
  --lora.round_adapters false
if cmp -s "$work/bf16/checkpoint/step-2-hf/adapter_model.safetensors" \
  "$work/bf16u/checkpoint/step-2-hf/adapter_model.safetensors"; then
  echo "round_adapters false trained the same adapters as the rounded ones"; exit 1
fi
if "$titan" train "${common[@]}" --job.dump_folder "$work/bf16" "${lora[@]}" --training.steps 3 --checkpoint.interval 1000 \
  --lora.base_dtype bfloat16 --lora.round_adapters false 2> "$work/err.txt" > /dev/null; then
  echo "resuming a rounded-adapter run with round_adapters false must be refused"; exit 1
fi
grep -q "lora.round_adapters true -> false" "$work/err.txt" || { cat "$work/err.txt"; exit 1; }
if "$titan" train "${common[@]}" --job.dump_folder "$work/nolora2" --training.steps 1 --lora.round_adapters false \
  2> "$work/err.txt" > /dev/null; then
  echo "round_adapters without [lora] enable must be refused"; exit 1
fi
grep -q "round_adapters" "$work/err.txt" || { cat "$work/err.txt"; exit 1; }

"$titan" export --from "$work/a/checkpoint/step-4" --output "$work/exported" --adapter
cmp "$adapter/adapter_model.safetensors" "$work/exported/adapter_model.safetensors"
"$titan" export --from "$work/a/checkpoint/step-4" --output "$work/merged" --merge-lora --dtype f32
if "$titan" export --from "$work/a/checkpoint/step-4" --output "$work/plain" 2> "$work/err.txt"; then
  echo "a plain export of a LoRA checkpoint must be refused"; exit 1
fi
grep -q -- "--merge-lora" "$work/err.txt"

source "$src/tests/cli/lora/adapter_checks.sh"
check_adapter_against_merged "$titan" "$src" "$work" "$base" "$adapter" "$work/merged"
