#!/usr/bin/env bash
# A LoRA run knows its base: its checkpoints and adapter folders record the base's fingerprint
# (config, tensor headers and sizes, sampled weight bytes). After the base folder's weights are
# replaced by another model's of the same shapes, `export --merge-lora`, `generate --adapter`
# and a resume are refused naming both fingerprints; --allow-other-base (train:
# --lora.allow_other_base true) goes ahead. On the unchanged base nothing is asked.
set -u
titan=$1 src=$2
fail() { echo "FAIL: $*"; exit 1; }
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
common=(--config "$src/recipes/debug.toml" --model.n_layers 1 --training.seq_len 32 --training.local_batch_size 2
        --metrics.enable_tensorboard false --checkpoint.export_dtype float32)
run() { "$titan" train "${common[@]}" "$@" > "$work/train.log" 2>&1 || { cat "$work/train.log"; fail "train $*"; }; }
run --job.dump_folder "$work/base" --training.steps 1 --checkpoint.interval 1000
run --job.dump_folder "$work/other" --training.steps 2 --checkpoint.interval 1000
base="$work/base/checkpoint/step-1-hf"
lora=(--checkpoint.initial_load_path "$base" --checkpoint.initial_load_in_hf true --lora.enable true --lora.rank 4
      --lora.alpha 8 --checkpoint.interval 2)
run --job.dump_folder "$work/a" "${lora[@]}" --training.steps 2
adapter="$work/a/checkpoint/step-2-hf"
grep -q '"base_fingerprint": "fnv1a64:' "$adapter/titan_base.json" || fail "no fingerprint in the adapter folder"
grep -q '"base_fingerprint": "fnv1a64:' "$work/a/checkpoint/step-2/state.json" || fail "no fingerprint in the checkpoint"
"$titan" export --from "$work/a/checkpoint/step-2" --output "$work/m1" --merge-lora > /dev/null || fail "merge on its own base"
"$titan" generate --model "$base" --adapter "$adapter" --prompt a --max-new-tokens 2 > /dev/null 2>&1 || fail "generate on its own base"

# The base's weights replaced by another model of the same shapes.
cp "$work/other/checkpoint/step-2-hf/model.safetensors" "$base/model.safetensors"
refused() { local out; out=$("$@" 2>&1) && fail "accepted: $*"
  printf '%s' "$out" | grep -qE "trained on a base with fingerprint fnv1a64:[0-9a-f]{16}; .* has fingerprint fnv1a64:[0-9a-f]{16}" ||
    fail "no fingerprints in: $out"
  echo "ok: $out"; }
refused "$titan" export --from "$work/a/checkpoint/step-2" --output "$work/m2" --merge-lora
[ -e "$work/m2" ] && fail "a refused export wrote its folder"
refused "$titan" generate --model "$base" --adapter "$adapter" --prompt a --max-new-tokens 2
refused "$titan" train "${common[@]}" --job.dump_folder "$work/a" "${lora[@]}" --training.steps 4
"$titan" export --from "$work/a/checkpoint/step-2" --output "$work/m2" --merge-lora --allow-other-base > /dev/null ||
  fail "--allow-other-base"
"$titan" generate --model "$base" --adapter "$adapter" --prompt a --max-new-tokens 2 --allow-other-base > /dev/null 2>&1 ||
  fail "generate --allow-other-base"
run --job.dump_folder "$work/a" "${lora[@]}" --training.steps 4 --lora.allow_other_base true
echo PASS
