#!/usr/bin/env bash
# Tensor parallelism over MPI (debugmodel, 2 layers, seq 32, global batch 4, 20 steps), each run's
# loss curve against one process's within 1e-5 relative:
#  - tp2 (sequence parallel), tp2 without sequence parallelism, tp4 (oversubscribed);
#  - debug-moe (8 experts, each split like a dense MLP) at tp2;
#  - debug-qwen3_5 (Gated DeltaNet + gated attention) at tp2 x dp2, and its checkpoint resumed on one process;
#  - a 2-D mesh: dp_shard 2 x tp 2 (4 ranks);
#  - a 3-D mesh: dp_replicate 2 x dp_shard 2 x tp 2 (8 ranks, oversubscribed);
#  - a checkpoint written by tp2 x dp2 resumes on one process with the same next losses;
#  - `titan info --tp 2 --dp 2` predicts the measured per-rank state within 10%.
# Skips (77) when mpirun is missing.
set -uo pipefail
titan=$1 src=$2
command -v mpirun >/dev/null || { echo "mpirun not found; skipping"; exit 77; }
source "$src/tests/cli/distributed/env.sh"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMP_NUM_THREADS=1
common=(--config "$src/recipes/debug.toml" --model.n_layers 2 --training.seq_len 32 --training.global_batch_size 4
        --training.steps 20 --metrics.log_freq 1 --metrics.enable_tensorboard false --checkpoint.last_save_in_hf false
        --lr_scheduler.warmup_steps 2 --compute.threads 1 --checkpoint.keep_latest_k 0)

SECONDS=0
run one 1 --training.local_batch_size 4 --checkpoint.enable false
run tp2 2 --training.local_batch_size 4 --parallelism.tensor_parallel_degree 2 --parallelism.data_parallel_shard_degree 1 \
    --checkpoint.enable false
run tp2_nosp 2 --training.local_batch_size 4 --parallelism.tensor_parallel_degree 2 \
    --parallelism.data_parallel_shard_degree 1 --parallelism.enable_sequence_parallel false --checkpoint.enable false
run tp4 4 --training.local_batch_size 4 --parallelism.tensor_parallel_degree 4 --parallelism.data_parallel_shard_degree 1 \
    --checkpoint.enable false
run tp2dp2 4 --training.local_batch_size 2 --parallelism.tensor_parallel_degree 2 --parallelism.data_parallel_shard_degree 2 \
    --checkpoint.enable true --checkpoint.interval 6
run mesh3d 8 --training.local_batch_size 1 --parallelism.tensor_parallel_degree 2 --parallelism.data_parallel_shard_degree 2 \
    --parallelism.data_parallel_replicate_degree 2 --checkpoint.enable false
for r in tp2 tp2_nosp tp4 tp2dp2 mesh3d; do
  echo -n "$r vs 1: "; compare "$work/one/metrics.jsonl" "$work/$r/metrics.jsonl" || fail "$r curve differs"
done
moe=(--model.name qwen3_moe --model.flavor debug-moe --training.local_batch_size 4 --checkpoint.enable false)
run moe_one 1 "${moe[@]}"
run moe_tp2 2 "${moe[@]}" --parallelism.tensor_parallel_degree 2 --parallelism.data_parallel_shard_degree 1
echo -n "moe tp2 vs 1: "; compare "$work/moe_one/metrics.jsonl" "$work/moe_tp2/metrics.jsonl" || fail "moe tp2 curve differs"
# Qwen3.5 (debug-qwen3_5: 3 Gated DeltaNet layers, then gated attention) at tp2 x dp2, against one
# process; its step-6 checkpoint (in_proj_qkv and conv1d saved as boxes of each q/k/v part) resumes
# on one process with the same next losses.
q35=(--model.name qwen3_5 --model.flavor debug-qwen3_5 --model.n_layers 4 --training.steps 10)
run q35_one 1 "${q35[@]}" --training.local_batch_size 4 --checkpoint.enable false
run q35_tp2dp2 4 "${q35[@]}" --training.local_batch_size 2 --parallelism.tensor_parallel_degree 2 \
    --parallelism.data_parallel_shard_degree 2 --checkpoint.enable true --checkpoint.interval 6
echo -n "qwen3_5 tp2 x dp2 vs 1: "; compare "$work/q35_one/metrics.jsonl" "$work/q35_tp2dp2/metrics.jsonl" ||
  fail "qwen3_5 tp2 x dp2 curve differs"
mkdir -p "$work/q35_resumed/checkpoint"
mv "$work/q35_tp2dp2/checkpoint/step-6" "$work/q35_resumed/checkpoint/"
run q35_resumed 1 "${q35[@]}" --training.local_batch_size 4 --checkpoint.enable true --checkpoint.interval 100
grep -q "resumed from .*step-6" "$work/q35_resumed.log" || fail "qwen3_5: no resume from step-6"
echo -n "qwen3_5 resumed on 1 vs uninterrupted: "; compare "$work/q35_one/metrics.jsonl" "$work/q35_resumed/metrics.jsonl" ||
  fail "qwen3_5 resume"
grep -q "tensor parallel 2" "$work/tp2dp2.log" || { grep "\[titan\]" "$work/tp2dp2.log"; fail "no tensor-parallel layout in the setup line"; }

# tp2 x dp2's step-6 checkpoint resumes on one process.
mkdir -p "$work/resumed/checkpoint"
mv "$work/tp2dp2/checkpoint/step-6" "$work/resumed/checkpoint/"
run resumed 1 --training.local_batch_size 4 --checkpoint.enable true --checkpoint.interval 100
grep -q "resumed from .*step-6" "$work/resumed.log" || fail "no resume from step-6"
echo -n "resumed on 1 vs uninterrupted: "; compare "$work/one/metrics.jsonl" "$work/resumed/metrics.jsonl" || fail "resume"

# Per-rank state: predicted by titan info vs the setup line of the 4-rank run (params MiB).
measured=$(grep -o "per rank: params [0-9.]* MiB" "$work/tp2dp2.log" | head -1 | grep -o "[0-9.]*")
predicted=$("$titan" info --model debugmodel --n-layers 2 --tp 2 --dp 2 2>&1 | grep -o "params [0-9.]* MiB" | head -1 | grep -o "[0-9.]*")
[ -n "$measured" ] && [ -n "$predicted" ] || fail "no per-rank params (measured '$measured', predicted '$predicted')"
awk -v m="$measured" -v p="$predicted" 'BEGIN { r = (p - m) / m; if (r < 0) r = -r;
  printf "per-rank params: measured %.3f MiB, predicted %.3f MiB (%.1f%%)\n", m, p, 100 * r; exit r > 0.10 }' ||
  fail "titan info's per-rank params are off by more than 10%"
echo "ok (${SECONDS}s)"
