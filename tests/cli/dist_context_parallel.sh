#!/usr/bin/env bash
# Context parallelism over MPI: 20 steps of the debug recipe and of debug-moe (2 layers, seq 64,
# global batch 4), each run's loss curve against one process's within 1e-5 relative:
#  - cp2 (head-tail chunks), cp2 without load balancing, cp4 (oversubscribed);
#  - 2-D meshes: cp2 x tp2 and dp_shard 2 x cp2 (FSDP over dp_shard x cp), 4 ranks;
#  - a 3-D mesh: dp_replicate 2 x cp2 x tp2 (8 ranks, oversubscribed; its first 8 steps), with full
#    activation checkpointing and 2 accumulation micro-batches per step;
#  - packed documents (block_causal) at cp2 against one process's packed run;
#  - debug-moe at dp_shard 2 x cp2, and at cp2 x ep2 (experts split over the cp ranks; 8 steps);
#  - cp2's step-10 checkpoint resumes at tp2 with the same next losses.
# Skips (77) when mpirun is missing.
set -uo pipefail
titan=$1 src=$2
command -v mpirun >/dev/null || { echo "mpirun not found; skipping"; exit 77; }
source "$src/tests/cli/distributed/env.sh"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMP_NUM_THREADS=1
common=(--config "$src/recipes/debug.toml" --model.n_layers 2 --training.seq_len 64 --training.global_batch_size 4
        --training.steps 20 --metrics.log_freq 1 --metrics.enable_tensorboard false --checkpoint.last_save_in_hf false
        --lr_scheduler.warmup_steps 2 --compute.threads 1 --checkpoint.keep_latest_k 0 --checkpoint.enable false)
cp=(--parallelism.context_parallel_degree)

SECONDS=0
run one 1 --training.local_batch_size 4
run cp2 2 --training.local_batch_size 4 "${cp[@]}" 2 --parallelism.data_parallel_shard_degree 1 \
    --checkpoint.enable true --checkpoint.interval 10
run cp2_none 2 --training.local_batch_size 4 "${cp[@]}" 2 --parallelism.data_parallel_shard_degree 1 \
    --parallelism.context_parallel_load_balancer none
run cp4 4 --training.local_batch_size 4 "${cp[@]}" 4 --parallelism.data_parallel_shard_degree 1
run cp2tp2 4 --training.local_batch_size 4 "${cp[@]}" 2 --parallelism.tensor_parallel_degree 2 \
    --parallelism.data_parallel_shard_degree 1
run dp2cp2 4 --training.local_batch_size 2 "${cp[@]}" 2 --parallelism.data_parallel_shard_degree 2
run mesh3d 8 --training.local_batch_size 1 --training.steps 8 "${cp[@]}" 2 \
    --parallelism.tensor_parallel_degree 2 --parallelism.data_parallel_replicate_degree 2 \
    --parallelism.data_parallel_shard_degree 1 --activation_checkpoint.mode full
for r in cp2 cp2_none cp4 cp2tp2 dp2cp2; do
  echo -n "$r vs 1: "; compare "$work/one/metrics.jsonl" "$work/$r/metrics.jsonl" || fail "$r curve differs"
done
# The 8-step runs against one process's 8 steps (the learning-rate schedule spans the run's steps).
run one8 1 --training.local_batch_size 4 --training.steps 8
echo -n "mesh3d vs 1: "; compare "$work/one8/metrics.jsonl" "$work/mesh3d/metrics.jsonl" || fail "mesh3d curve differs"
grep -q "context parallel 2" "$work/cp2tp2.log" || { grep "\[titan\]" "$work/cp2tp2.log"; fail "no context-parallel layout in the setup line"; }

# Packed documents: the chunk borders cut documents; attention and RoPE follow the global positions.
run packed_one 1 --training.local_batch_size 4 --model.attn_mask_type block_causal
run packed_cp2 2 --training.local_batch_size 4 --model.attn_mask_type block_causal "${cp[@]}" 2 \
    --parallelism.data_parallel_shard_degree 1
echo -n "packed cp2 vs 1: "; compare "$work/packed_one/metrics.jsonl" "$work/packed_cp2/metrics.jsonl" || fail "packed cp2"

# debug-moe (8 experts, top-2, every layer sparse).
moe=(--model.name qwen3_moe --model.flavor debug-moe)
run moe_one 1 --training.local_batch_size 4 "${moe[@]}"
run moe_dp2cp2 4 --training.local_batch_size 2 "${moe[@]}" "${cp[@]}" 2 --parallelism.data_parallel_shard_degree 2
echo -n "moe dp2 x cp2 vs 1: "; compare "$work/moe_one/metrics.jsonl" "$work/moe_dp2cp2/metrics.jsonl" || fail "moe"
# Expert parallelism over the cp ranks: each MoE block dispatches its rank's own tokens.
run moe_cp2ep2 2 --training.local_batch_size 4 "${moe[@]}" "${cp[@]}" 2 --parallelism.expert_parallel_degree 2 \
    --parallelism.data_parallel_shard_degree 1 --training.steps 8
run moe_one8 1 --training.local_batch_size 4 "${moe[@]}" --training.steps 8
echo -n "moe cp2 x ep2 vs 1: "; compare "$work/moe_one8/metrics.jsonl" "$work/moe_cp2ep2/metrics.jsonl" || fail "moe ep"

# cp2's step-10 checkpoint resumes at tp2.
mkdir -p "$work/resumed/checkpoint"
mv "$work/cp2/checkpoint/step-10" "$work/resumed/checkpoint/"
run resumed 2 --training.local_batch_size 4 --parallelism.tensor_parallel_degree 2 \
    --parallelism.data_parallel_shard_degree 1 --checkpoint.enable true --checkpoint.interval 100
grep -q "resumed from .*step-10" "$work/resumed.log" || fail "no resume from step-10"
echo -n "cp2 -> tp2 resumed vs uninterrupted: "; compare "$work/one/metrics.jsonl" "$work/resumed/metrics.jsonl" || fail "resume"
echo "ok (${SECONDS}s)"
