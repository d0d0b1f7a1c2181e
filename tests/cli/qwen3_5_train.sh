#!/usr/bin/env bash
# Qwen3.5 from the command line: `titan score` gives transformers' loss on the tiny golden
# checkpoints (dense and MoE, tools/oracle/qwen3_5_goldens.py); the native debug recipe
# (recipes/qwen3_5_debug.toml, Gated DeltaNet + gated attention layers) trains, shortened, with
# falling loss, and so does its MoE flavor (shared expert included), each step's peak memory within
# 10% of what `titan info` predicts for the job.
set -uo pipefail
titan=$1 src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
fx=$src/tests/fixtures/qwen3_5
source "$src/tests/cli/common/peak_check.sh"  # peak_check NAME METRICS ARGS...

for name in dense_lin_lin_full dense_full_lin_gqa1 moe_lin_full; do
  got=$("$titan" score --model "$fx/$name" --tokens "$fx/$name/tokens.txt" --json) || fail "score $name: $got"
  want=$(grep -o '"loss": *[0-9.e+-]*' "$fx/$name/golden.json" | head -1 | sed 's/.*: *//')
  gl=$(echo "$got" | sed 's/.*"loss": *\([0-9.e+-]*\).*/\1/')
  awk -v a="$gl" -v b="$want" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 1e-5) }' ||
    fail "score $name: loss $gl, transformers $want"
  echo "ok: score $name loss $gl (transformers $want)"
done

for flavor in debug-qwen3_5 debug-qwen3_5-moe; do
  args=(--config "$src/recipes/qwen3_5_debug.toml" --model.flavor "$flavor"
        --model.hf_assets_path "$src/assets/qwen3-tokenizer" --training.seq_len 32 --training.local_batch_size 2
        --training.steps 4 --lr_scheduler.warmup_steps 1 --optimizer.lr 3e-3 --metrics.enable_tensorboard false
        --checkpoint.enable false --checkpoint.last_save_in_hf false --job.dump_folder "$work/$flavor")
  "$titan" train "${args[@]}" > "$work/$flavor.log" 2>&1 || { cat "$work/$flavor.log"; fail "train $flavor"; }
  mapfile -t L < <(grep -o '"loss": *[0-9.e+-]*' "$work/$flavor/metrics.jsonl" | sed 's/.*: *//')
  [ "${#L[@]}" -eq 4 ] || fail "$flavor: expected 4 logged losses, got ${#L[@]}"
  awk -v a="${L[0]}" -v b="${L[3]}" 'BEGIN { exit !(a == a + 0 && b == b + 0 && b < a - 0.5) }' ||
    fail "$flavor: loss did not fall: ${L[*]}"
  echo "ok: $flavor trains; losses ${L[*]}"
  peak_check "$flavor" "$work/$flavor/metrics.jsonl" "${args[@]}"
done

# The HF path (recipes/qwen3_5_0_8b_finetune.toml) on a stand-in for the published checkpoint: the
# debug model's HF export (Qwen3_5ForCausalLM; one step at a negligible lr, so it is still the
# random init and has not seen the windows the fine-tune starts on) is loaded, fine-tuned with
# falling loss in bf16 mixed precision, and exported back with the same tensor names, which score
# and generate read.
"$titan" train --config "$src/recipes/qwen3_5_debug.toml" --model.n_layers 4 --training.seq_len 32 \
  --training.local_batch_size 1 --training.steps 1 --optimizer.lr 1e-9 --metrics.enable_tensorboard false --checkpoint.interval 1 \
  --job.dump_folder "$work/base" > "$work/base.log" 2>&1 || { tail -5 "$work/base.log"; fail "base export"; }
base=$(ls -d "$work"/base/checkpoint/step-1-hf) || fail "no HF export of the base run"
grep -q '"Qwen3_5ForCausalLM"' "$base/config.json" || fail "base export's architectures: $(grep -A1 architectures "$base/config.json")"
"$titan" train --config "$src/recipes/qwen3_5_0_8b_finetune.toml" --model.hf_assets_path "$base" \
  --checkpoint.initial_load_path "$base" --training.seq_len 32 --training.steps 4 --optimizer.lr 3e-3 \
  --lr_scheduler.warmup_steps 1 --checkpoint.interval 4 --checkpoint.export_dtype float32 \
  --activation_checkpoint.mode full --metrics.enable_tensorboard false --job.dump_folder "$work/ft" \
  > "$work/ft.log" 2>&1 || { tail -20 "$work/ft.log"; fail "the HF-path recipe"; }
mapfile -t L < <(grep -o '"loss": *[0-9.e+-]*' "$work/ft/metrics.jsonl" | sed 's/.*: *//')
[ "${#L[@]}" -eq 4 ] || fail "HF path: expected 4 logged losses, got ${#L[@]}"
awk -v a="${L[0]}" -v b="${L[3]}" 'BEGIN { exit !(a == a + 0 && b == b + 0 && b < a) }' ||
  fail "HF path: loss did not fall: ${L[*]}"
out="$work/ft/checkpoint/step-4-hf"
names() { grep -ao '"model\.[^"]*"' "$1"/*.safetensors | sed 's/^[^:]*://' | sort -u; }
[ "$(names "$base" | grep -c linear_attn)" -gt 10 ] || fail "no Gated DeltaNet tensors named in $base: $(names "$base" | head -3)"
[ "$(names "$base")" = "$(names "$out")" ] || fail "the export's tensor names differ from the loaded checkpoint's"
printf '1 2 3 4 5 6 7 8\n' > "$work/ids.txt"
"$titan" score --model "$out" --tokens "$work/ids.txt" --json > "$work/score.json" || fail "score the export: $(cat "$work/score.json")"
"$titan" generate --model "$out" --prompt "The" --temperature 0 --max-new-tokens 4 > "$work/gen.txt" 2>&1 ||
  fail "generate from the export: $(tail -2 "$work/gen.txt")"
echo "ok: the HF-path recipe loads a Qwen3_5ForCausalLM folder, trains (losses ${L[*]}) and exports the same names"
