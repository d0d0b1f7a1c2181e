#!/usr/bin/env bash
# LoRA on a dense Qwen3.5 from the command line: a debug-qwen3_5 base (one step of full training,
# exported), a LoRA run on it with adapters on every Gated DeltaNet projection (linear_attn.*), the
# gated attention's q/k/v/o_proj and the MLP, under full activation checkpointing, whose loss falls
# below the frozen base's on the same batches; the PEFT folder it writes has PEFT's names for the
# new projections; `titan score/generate --adapter` on the base equal the --merge-lora export; `titan
# info` predicts the LoRA step's peak memory within 10%.
set -uo pipefail
titan=$1 src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
source "$src/tests/cli/common/peak_check.sh"  # peak_check NAME METRICS ARGS...
common=(--config "$src/recipes/qwen3_5_debug.toml" --model.hf_assets_path "$src/assets/qwen3-tokenizer"
        --training.seq_len 32 --training.local_batch_size 2 --metrics.enable_tensorboard false
        --checkpoint.export_dtype float32 --lr_scheduler.warmup_steps 0 --lr_scheduler.decay_ratio 0
        --checkpoint.interval 1000)
run() { "$titan" train "${common[@]}" "$@" > "$work/train.log" 2>&1 || { cat "$work/train.log"; fail "train $*"; }; }
losses() { grep -o '"loss": *[0-9.e+-]*' "$1/metrics.jsonl" | sed 's/.*: *//'; }

run --job.dump_folder "$work/base" --training.steps 1
base="$work/base/checkpoint/step-1-hf"
from=(--checkpoint.initial_load_path "$base" --checkpoint.initial_load_in_hf true --training.steps 8)
# the frozen base on the same batches (lr ~ 0), then LoRA
run --job.dump_folder "$work/frozen" "${from[@]}" --optimizer.lr 1e-12
lora=(--optimizer.lr 1e-2 --lora.enable true --lora.rank 4 --lora.alpha 8
      --lora.target_modules 'model.layers.*.linear_attn.*,model.layers.*.self_attn.[qkvo]_proj,model.layers.*.mlp.*_proj'
      --activation_checkpoint.mode full)
run --job.dump_folder "$work/a" "${from[@]}" "${lora[@]}"
grep -q "lora: 31 adapted modules" "$work/train.log" || { cat "$work/train.log"; fail "expected 31 adapted modules"; }
peak_check "LoRA on debug-qwen3_5" "$work/a/metrics.jsonl" "${common[@]}" "${from[@]}" "${lora[@]}"
mapfile -t F < <(losses "$work/frozen")
mapfile -t A < <(losses "$work/a")
[ "${#A[@]}" -eq 8 ] && [ "${#F[@]}" -eq 8 ] || fail "expected 8 logged losses: ${A[*]} / ${F[*]}"
awk -v a="${A[7]}" -v f="${F[7]}" 'BEGIN { exit !(a == a + 0 && a < f - 0.5) }' ||
  fail "LoRA did not lower the loss: LoRA ${A[*]}; frozen base ${F[*]}"
echo "ok: LoRA step 8 loss ${A[7]} (frozen base ${F[7]})"

adapter="$work/a/checkpoint/step-8-hf"
for n in linear_attn.in_proj_qkv linear_attn.in_proj_z linear_attn.in_proj_b linear_attn.in_proj_a \
         linear_attn.out_proj self_attn.q_proj mlp.down_proj; do
  grep -aq "base_model.model.model.layers.0.$n.lora_A.weight\|base_model.model.model.layers.3.$n.lora_A.weight" \
    "$adapter/adapter_model.safetensors" || fail "no PEFT-named adapter for $n"
done
"$titan" export --from "$work/a/checkpoint/step-8" --output "$work/merged" --merge-lora --dtype f32 > /dev/null ||
  fail "export --merge-lora"
printf '151643 791 3974 13876 38835 1939 916 279\n9707 11 1879 0 220 16 17 18\n' > "$work/tokens.txt"
la=$("$titan" score --model "$base" --adapter "$adapter" --tokens "$work/tokens.txt" --json | sed 's/.*"loss": *\([0-9.e+-]*\).*/\1/')
lm=$("$titan" score --model "$work/merged" --tokens "$work/tokens.txt" --json | sed 's/.*"loss": *\([0-9.e+-]*\).*/\1/')
awk -v a="$la" -v b="$lm" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a == a + 0 && d <= 1e-5) }' ||
  fail "score --adapter $la, merged $lm"
g1=$("$titan" generate --model "$base" --adapter "$adapter" --prompt "The capital" --max-new-tokens 6)
g2=$("$titan" generate --model "$work/merged" --prompt "The capital" --max-new-tokens 6)
[ "$g1" = "$g2" ] || fail "generate --adapter ($g1) differs from the merged model ($g2)"
echo "ok: score --adapter $la = merged $lm; generate equal"
