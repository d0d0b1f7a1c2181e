#!/usr/bin/env bash
# A rank's step peak under tensor, context and data parallelism: `titan info --config` of the very
# job (distributed/step_memory.h) against the measured peak, metrics.jsonl's
# memory_peak_max_rank_gib (the allocator's peak of the largest rank, each rank a process under
# mpirun), within 10%, for each layout:
#  - debugmodel (2 layers, seq 1024, local batch 2), tp2: the peak is the head's (the tied
#    embedding's vocabulary shard with its gradient, the logits chunk of the shard);
#  - a model with a small vocabulary and wide layers (hidden 512, ffn 1536, 8 heads of 64, 8 KV
#    heads, 4 layers, vocabulary 1040, tokenizer of tests/fixtures/infer/tiny_chat; seq 2048), where
#    the layers' activations set the peak: tp2, cp2, dp_shard 2 x tp2, cp2 x tp2, cp2 without load
#    balancing under selective checkpointing, cp2 x tp2 under full checkpointing, tp2 without
#    sequence parallelism (its peak: the head), tp2 with bf16 GEMMs, and cp4 at seq 4096 under full
#    checkpointing, where context parallelism's whole-sequence K/V, dK/dV and the last chunk's dK/dV
#    parts are a quarter of the peak.
# TITAN_DIST_FULL=1 adds dp_shard 2 (FSDP alone), HSDP 2 x tp2, cp2 with bf16 GEMMs, debugmodel at
# cp2 and cp2 x tp2, cp2 without resharding after the forward or prefetch, and plain replication
# (dp_replicate 2). Skips (77) when mpirun is missing.
set -uo pipefail
titan=$1 src=$2
command -v mpirun >/dev/null || { echo "mpirun not found; skipping"; exit 77; }
source "$src/tests/cli/distributed/env.sh"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMP_NUM_THREADS=1

# The wide model: native init from its config.json, the tiny tokenizer beside it.
wide="$work/wide"
mkdir -p "$wide"
cp "$src/tests/fixtures/infer/tiny_chat/tokenizer.json" "$src/tests/fixtures/infer/tiny_chat/tokenizer_config.json" "$wide/"
cat > "$wide/config.json" <<'EOF'
{"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 512, "intermediate_size": 1536,
 "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 8, "head_dim": 64,
 "max_position_embeddings": 4096, "rms_norm_eps": 1e-06, "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"},
 "tie_word_embeddings": true, "vocab_size": 1040, "hidden_act": "silu", "attention_bias": false, "torch_dtype": "float32"}
EOF

base=(--config "$src/recipes/debug.toml" --training.steps 2 --metrics.log_freq 1 --metrics.enable_tensorboard false
      --checkpoint.enable false --checkpoint.last_save_in_hf false --compute.threads 1 --training.local_batch_size 2)
debugmodel=(--model.n_layers 2 --training.seq_len 1024)
widemodel=(--model.hf_assets_path "$wide" --training.seq_len 2048)
tp=(--parallelism.tensor_parallel_degree 2)
cp=(--parallelism.context_parallel_degree 2)
shard1=(--parallelism.data_parallel_shard_degree 1)

SECONDS=0
# check NAME NP ARGS...: train 2 steps of the job on NP ranks, then compare titan info's step peak
# per rank for the same job with the largest rank's measured peak.
check() {
  local name=$1 np=$2; shift 2
  common=("${base[@]}" "$@")
  run "$name" "$np"
  local p m
  p=$("$titan" info "${common[@]}" --json | sed -nE 's/.*"rank_step_peak_bytes": ([0-9]+).*/\1/p')
  m=$(tail -1 "$work/$name/metrics.jsonl" | sed -nE 's/.*"memory_peak_max_rank_gib":([0-9.e-]+).*/\1/p')
  [ -n "$p" ] && [ -n "$m" ] || fail "$name: no prediction ('$p') or measurement ('$m')"
  local at
  at=$("$titan" info "${common[@]}" --json | sed -nE 's/.*"rank_step_peak_at": "([^"]*)".*/\1/p')
  awk -v p="$p" -v m="$m" -v n="$name" -v at="$at" 'BEGIN { p /= 1048576; m *= 1024
        printf "%-16s step peak per rank: titan info %9.3f MiB, measured %9.3f MiB (measured / predicted %.4f; at the %s)\n", n, p, m, m / p, at
        exit !(m > 0.9 * p && m < 1.1 * p) }' || fail "$name: titan info's step peak is off by more than 10%"
}

check dm_tp2 2 "${debugmodel[@]}" "${tp[@]}" "${shard1[@]}"
check tp2 2 "${widemodel[@]}" "${tp[@]}" "${shard1[@]}"
check cp2 2 "${widemodel[@]}" "${cp[@]}" "${shard1[@]}"
check tp2dp2 4 "${widemodel[@]}" "${tp[@]}" --parallelism.data_parallel_shard_degree 2 --training.local_batch_size 1
check cp2tp2 4 "${widemodel[@]}" "${cp[@]}" "${tp[@]}" "${shard1[@]}"
check cp2_none_sel 2 "${widemodel[@]}" "${cp[@]}" "${shard1[@]}" --parallelism.context_parallel_load_balancer none \
    --activation_checkpoint.mode selective
check cp2tp2_full 4 "${widemodel[@]}" "${cp[@]}" "${tp[@]}" "${shard1[@]}" --activation_checkpoint.mode full
check tp2_nosp 2 "${widemodel[@]}" "${tp[@]}" "${shard1[@]}" --parallelism.enable_sequence_parallel false
check tp2_bf16 2 "${widemodel[@]}" "${tp[@]}" "${shard1[@]}" --training.mixed_precision_param bfloat16
check cp4_full 4 "${widemodel[@]}" --training.seq_len 4096 --training.local_batch_size 1 \
    --parallelism.context_parallel_degree 4 "${shard1[@]}" --activation_checkpoint.mode full
if [ "${TITAN_DIST_FULL:-0}" = 1 ]; then
  check dp2 2 "${widemodel[@]}" --parallelism.data_parallel_shard_degree 2 --training.local_batch_size 1
  check hsdp_tp2 4 "${widemodel[@]}" "${tp[@]}" "${shard1[@]}" --parallelism.data_parallel_replicate_degree 2 \
      --training.local_batch_size 1
  check cp2_bf16 2 "${widemodel[@]}" "${cp[@]}" "${shard1[@]}" --training.mixed_precision_param bfloat16
  check dm_cp2 2 "${debugmodel[@]}" "${cp[@]}" "${shard1[@]}"
  check dm_cp2tp2 4 "${debugmodel[@]}" "${cp[@]}" "${tp[@]}" "${shard1[@]}"
  check cp2_never 2 "${widemodel[@]}" "${cp[@]}" "${shard1[@]}" --parallelism.fsdp_reshard_after_forward never \
      --parallelism.fsdp_prefetch false
  check replicate2 2 "${widemodel[@]}" "${shard1[@]}" --parallelism.data_parallel_replicate_degree 2 \
      --training.local_batch_size 1
fi
echo "ok (${SECONDS}s)"
