#!/usr/bin/env bash
# LoRA on a Qwen3-MoE base's router and experts (PEFT target_parameters) end to end: a debug-moe
# base exported by titan, a LoRA run with [lora] target_parameters (experts' gate_up_proj and
# down_proj, the router weight) plus q_proj that writes a PEFT folder naming them, a resume that
# ends bit-equal to the uninterrupted run, `titan export --adapter` (the same bytes) and
# `--merge-lora` (the deltas merged into the experts and router), `titan generate --adapter` equal
# to the merged model, and (with a Python that has peft) peft.PeftModel.from_pretrained loading
# the titan-written folder with the same logits and transformers loading the merged export. The
# Python part is skipped without such a Python; the rest always runs.
set -euo pipefail
titan=$1 src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
common=(--config "$src/recipes/debug.toml" --model.name qwen3_moe --model.flavor debug-moe --model.n_layers 2
        --training.seq_len 32 --training.local_batch_size 2 --metrics.enable_tensorboard false
        --checkpoint.export_dtype float32 --lr_scheduler.warmup_steps 0 --lr_scheduler.decay_ratio 0)
run() { "$titan" train "${common[@]}" "$@" > "$work/train.log" 2>&1 || { cat "$work/train.log"; exit 1; }; }

run --job.dump_folder "$work/base" --training.steps 1 --checkpoint.interval 1000
base="$work/base/checkpoint/step-1-hf"
lora=(--checkpoint.initial_load_path "$base" --checkpoint.initial_load_in_hf true --lora.enable true --lora.rank 2
      --lora.alpha 4 --optimizer.lr 1e-2 --lora.target_modules '["model.layers.*.self_attn.q_proj"]'
      --lora.target_parameters '["model.layers.*.mlp.experts.*", "model.layers.0.mlp.gate.weight"]')

run --job.dump_folder "$work/a" "${lora[@]}" --training.steps 4 --checkpoint.interval 1000
grep -q "lora" "$work/train.log" || { echo "no [lora] line in the setup log"; cat "$work/train.log"; exit 1; }
run --job.dump_folder "$work/b" "${lora[@]}" --training.steps 2 --checkpoint.interval 2
run --job.dump_folder "$work/b" "${lora[@]}" --training.steps 4 --checkpoint.interval 2
adapter="$work/a/checkpoint/step-4-hf"
grep -q '"model.layers.1.mlp.experts.down_proj"' "$adapter/adapter_config.json" \
  || { echo "target_parameters missing from adapter_config.json"; cat "$adapter/adapter_config.json"; exit 1; }
grep -q 'mlp.experts.base_layer.lora_A.weight' "$adapter/adapter_model.safetensors" \
  || { echo "no nested experts wrapper name in the adapter file"; exit 1; }
cmp "$adapter/adapter_model.safetensors" "$work/b/checkpoint/step-4-hf/adapter_model.safetensors" \
  || { echo "resumed MoE LoRA run differs from the uninterrupted one"; exit 1; }

"$titan" export --from "$work/a/checkpoint/step-4" --output "$work/exported" --adapter
cmp "$adapter/adapter_model.safetensors" "$work/exported/adapter_model.safetensors"
"$titan" export --from "$work/a/checkpoint/step-4" --output "$work/merged" --merge-lora --dtype f32
# The merged experts differ from the base's.
if cmp -s "$base/model.safetensors" "$work/merged/model.safetensors"; then echo "--merge-lora changed nothing"; exit 1; fi

source "$src/tests/cli/lora/adapter_checks.sh"
check_adapter_against_merged "$titan" "$src" "$work" "$base" "$adapter" "$work/merged"
