#!/usr/bin/env bash
# Qwen3.5 from the command line: `titan score` gives transformers' loss on the tiny golden
# checkpoints (dense and MoE, tools/oracle/qwen3_5_goldens.py); the native debug recipe
# (recipes/qwen3_5_debug.toml, Gated DeltaNet + gated attention layers) trains, shortened, with
# falling loss, and so does its MoE flavor (shared expert included).
set -uo pipefail
titan=$1 src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
fx=$src/tests/fixtures/qwen3_5

for name in dense_lin_lin_full dense_full_lin_gqa1 moe_lin_full; do
  got=$("$titan" score --model "$fx/$name" --tokens "$fx/$name/tokens.txt" --json) || fail "score $name: $got"
  want=$(grep -o '"loss": *[0-9.e+-]*' "$fx/$name/golden.json" | head -1 | sed 's/.*: *//')
  gl=$(echo "$got" | sed 's/.*"loss": *\([0-9.e+-]*\).*/\1/')
  awk -v a="$gl" -v b="$want" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 1e-5) }' ||
    fail "score $name: loss $gl, transformers $want"
  echo "ok: score $name loss $gl (transformers $want)"
done

for flavor in debug-qwen3_5 debug-qwen3_5-moe; do
  "$titan" train --config "$src/recipes/qwen3_5_debug.toml" --model.flavor "$flavor" \
    --model.hf_assets_path "$src/assets/qwen3-tokenizer" --training.seq_len 32 --training.local_batch_size 2 \
    --training.steps 4 --lr_scheduler.warmup_steps 1 --optimizer.lr 3e-3 --metrics.enable_tensorboard false \
    --checkpoint.enable false --checkpoint.last_save_in_hf false --job.dump_folder "$work/$flavor" \
    > "$work/$flavor.log" 2>&1 || { cat "$work/$flavor.log"; fail "train $flavor"; }
  mapfile -t L < <(grep -o '"loss": *[0-9.e+-]*' "$work/$flavor/metrics.jsonl" | sed 's/.*: *//')
  [ "${#L[@]}" -eq 4 ] || fail "$flavor: expected 4 logged losses, got ${#L[@]}"
  awk -v a="${L[0]}" -v b="${L[3]}" 'BEGIN { exit !(a == a + 0 && b == b + 0 && b < a - 0.5) }' ||
    fail "$flavor: loss did not fall: ${L[*]}"
  echo "ok: $flavor trains; losses ${L[*]}"
done
