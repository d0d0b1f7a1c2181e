#!/usr/bin/env bash
# Qwen3-MoE trained on cuda:0 ([compute] device = "cuda"; under the grid emulator in a build
# without a GPU): a 2-layer debug-moe model with expert-bias balancing gives the CPU run's losses
# within 1e-5 relative over 3 steps, its step-2 checkpoint holds the expert biases (GPU tensors),
# and a run resumed from it continues exactly like the uninterrupted GPU run.
set -uo pipefail
titan=$1 src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
losses() { grep -o '"loss": *[0-9.e+-]*' "$1/metrics.jsonl" | sed 's/.*: *//'; }

common=(--config "$src/recipes/debug.toml" --model.name qwen3_moe --model.flavor debug-moe --model.n_layers 2
        --model.hf_assets_path "$src/assets/qwen3-tokenizer" --model.load_balance_coeff 0.01
        --training.steps 3 --training.seq_len 32 --training.local_batch_size 2 --lr_scheduler.warmup_steps 1
        --metrics.enable_tensorboard false)
"$titan" train "${common[@]}" --checkpoint.enable false --job.dump_folder "$work/cpu" > "$work/cpu.log" 2>&1 ||
  { cat "$work/cpu.log"; fail "train on the CPU"; }
gpu=("${common[@]}" --compute.device cuda --checkpoint.enable true --checkpoint.interval 2
     --checkpoint.keep_latest_k 0 --checkpoint.last_save_in_hf false --job.dump_folder "$work/gpu")
"$titan" train "${gpu[@]}" > "$work/gpu.log" 2>&1 || { cat "$work/gpu.log"; fail "train on cuda:0"; }
mapfile -t C < <(losses "$work/cpu")
mapfile -t U < <(losses "$work/gpu")
[ "${#C[@]}" -eq 3 ] && [ "${#U[@]}" -eq 3 ] || fail "expected 3 losses each: cpu ${C[*]}, cuda:0 ${U[*]}"
for i in 0 1 2; do
  awk -v a="${C[$i]}" -v b="${U[$i]}" 'BEGIN { d = (a - b) / a; if (d < 0) d = -d; exit !(d <= 1e-5) }' ||
    fail "step $((i + 1)): cpu loss ${C[$i]}, cuda:0 ${U[$i]}"
done
echo "ok: cuda:0 losses ${U[*]} (cpu ${C[*]})"
grep -aq 'model.layers.1.mlp.expert_bias' "$work"/gpu/checkpoint/step-2/* || fail "expert bias not checkpointed"
rm -rf "$work/gpu/checkpoint/step-3"
"$titan" train "${gpu[@]}" > "$work/gpu2.log" 2>&1 || { cat "$work/gpu2.log"; fail "resume on cuda:0"; }
grep -q 'resumed from .*step-2' "$work/gpu2.log" || fail "did not resume: $(cat "$work/gpu2.log")"
mapfile -t R < <(losses "$work/gpu")
[ "${#R[@]}" -eq 3 ] && [ "${R[*]}" = "${U[*]}" ] || fail "resumed losses differ: ${R[*]} (uninterrupted: ${U[*]})"
echo "ok: the cuda:0 run resumes exactly (${R[*]})"
echo PASS
