#!/usr/bin/env bash
# LoRA under fully sharded data parallelism (debugmodel, 1 layer, an HF base exported here, rank 4
# on every linear, seq 32, global batch 4, 8 steps, the base frozen and sharded, the adapters'
# gradients reduced and their AdamW sharded):
#  - 2 ranks (FSDP), 2 ranks with full activation checkpointing, and 4 ranks as 2 x 2 (HSDP) give
#    the 1-process loss curve within 1e-5 relative, and their trained adapters (the PEFT folder
#    written at the end) equal the 1-process ones within 2e-5 of the largest adapter element (reached 4.2e-6);
#  - the checkpoint holds only the adapters, as pieces per rank; a 2-rank run resumed from its
#    step-4 checkpoint on 2 ranks ends with adapters bit-equal to the uninterrupted 2-rank run,
#    and resumed on 1 rank it continues the 1-process curve;
#  - with [lora] dropout 0.1 (masks keyed by seed, step and global sample), 2 ranks give the
#    1-process curve (and adapters within 2e-4 of peak: AdamW amplifies rounding, see below), so
#    the masks do not depend on the rank count; the curve is not
#    the dropout-free one, and a 1-process run resumed from step 4 ends bit-equal;
#  - a Qwen3-MoE base (debug-moe, torchtitan init, no HF folder) with adapters on its q/v
#    projections, its experts and its routers ([lora] target_parameters): 2 ranks give the
#    1-process curve, and its 2-rank checkpoint resumes on 1 rank; naming the experts in
#    target_modules is refused with an error pointing to target_parameters;
#  - the setup line reports the base shard and the sharded adapter optimizer, and `titan info
#    --config JOB --dp 2` predicts the per-rank memory after setup within 10%.
# Skips (77) when mpirun is missing.
set -uo pipefail
titan=$1 src=$2
command -v mpirun >/dev/null || { echo "mpirun not found; skipping"; exit 77; }
source "$src/tests/cli/distributed/env.sh"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMP_NUM_THREADS=1
base_args=(--config "$src/recipes/debug.toml" --model.n_layers 1 --training.seq_len 32 --metrics.enable_tensorboard false
           --compute.threads 1 --checkpoint.export_dtype float32)
# The base: one step of full training, exported as an HF folder.
"$titan" train "${base_args[@]}" --job.dump_folder "$work/base" --training.steps 1 --training.local_batch_size 2 \
  > "$work/base.log" 2>&1 || { tail -20 "$work/base.log"; fail "base run"; }
base="$work/base/checkpoint/step-1-hf"
common=("${base_args[@]}" --training.local_batch_size 1 --training.global_batch_size 4 --training.steps 8
        --metrics.log_freq 1 --lr_scheduler.warmup_steps 2 --parallelism.data_parallel_shard_degree -1
        --checkpoint.keep_latest_k 0 --checkpoint.last_save_in_hf true
        --checkpoint.initial_load_path "$base" --checkpoint.initial_load_in_hf true
        --lora.enable true --lora.rank 4 --lora.alpha 8 --optimizer.lr 1e-2)  # targets: every q/k/v/o and MLP projection
# The f32 data of a safetensors file, one value per line (header: 8-byte length, then JSON).
floats() {
  local n; n=$(od -An -tu8 -N8 "$1" | tr -d ' ')
  tail -c +$((n + 9)) "$1" | od -An -tf4 -v | tr -s ' ' '\n' | sed '/^$/d'
}
# adapters A B [TOL]: the PEFT adapter folders A and B (same names and shapes) agree within TOL
# (default 2e-5) of A's largest element.
adapters() {
  local a=$1/adapter_model.safetensors b=$2/adapter_model.safetensors tol=${3:-2e-5}
  [ -f "$a" ] && [ -f "$b" ] || { echo "missing $a or $b"; return 1; }
  [ "$(head -c 8 "$a" | od -An -tu8)" = "$(head -c 8 "$b" | od -An -tu8)" ] || { echo "headers differ"; return 1; }
  paste -d' ' <(floats "$a") <(floats "$b") | awk -v tol="$tol" '
    { d = $1 - $2; if (d < 0) d = -d; if (d > w) w = d; m = ($1 < 0 ? -$1 : $1); if (m > peak) peak = m; n++ }
    END { printf "%d adapter elements, max difference %.2e of peak %.3g (%.2e)\n", n, w, peak, w / peak
          exit !(n > 0 && peak > 0 && w <= tol * peak) }'
}

SECONDS=0
run one 1 --checkpoint.enable true --checkpoint.interval 4
run two 2 --checkpoint.enable true --checkpoint.interval 4
grep -q "lora: .* adapted modules" "$work/two.log" || fail "no [lora] setup line on 2 ranks"
grep -q "data parallel: 2 rank(s), fully sharded" "$work/two.log" || fail "2 ranks are not fully sharded: $(grep 'data parallel' "$work/two.log")"
echo -n "2 ranks vs 1: "; compare "$work/one/metrics.jsonl" "$work/two/metrics.jsonl" || fail "2-rank curve differs"
echo -n "2 ranks vs 1, adapters: "; adapters "$work/one/checkpoint/step-8-hf" "$work/two/checkpoint/step-8-hf" ||
  fail "2-rank adapters differ"
# titan info --config JOB --dp 2 predicts the per-rank live memory after setup within 10%.
pred=$("$titan" info "${common[@]}" --dp 2 --json | sed -nE 's/.*"rank_state_bytes": ([0-9]+).*/\1/p')
meas=$(sed -nE 's/.*memory after setup: ([0-9.]+) GiB.*/\1/p' "$work/two.log")
awk -v p="$pred" -v m="$meas" 'BEGIN { p /= 1073741824; printf "per rank: titan info %.4f GiB, measured %.4f GiB\n", p, m
                                       exit !(m > 0.9 * p && m < 1.1 * p) }' || fail "titan info --dp 2 is off by more than 10%"
# The checkpoint: the adapters' pieces per rank, no base weights.
for r in 0 1; do
  f="$work/two/checkpoint/step-4/model.rank-$r-of-2.tensors"
  [ -f "$f" ] || fail "rank $r wrote no checkpoint piece: $(ls "$work/two/checkpoint/step-4")"
  grep -q "lora_A" "$f" || fail "rank $r's piece holds no adapter"
  ! grep -q "embed_tokens" "$f" || fail "base weights in a LoRA checkpoint"
done

# Resume: 2 -> 2 ranks ends bit-equal; 2 -> 1 rank continues the 1-process curve.
for name in two_resumed two_to_one; do
  mkdir -p "$work/$name/checkpoint"; cp -r "$work/two/checkpoint/step-4" "$work/$name/checkpoint/"
done
run two_resumed 2 --checkpoint.enable true --checkpoint.interval 100
grep -q "resumed from .*step-4" "$work/two_resumed.log" || fail "2 ranks did not resume"
cmp "$work/two/checkpoint/step-8-hf/adapter_model.safetensors" "$work/two_resumed/checkpoint/step-8-hf/adapter_model.safetensors" ||
  fail "the resumed 2-rank adapters differ from the uninterrupted run's"
echo "resume 2 -> 2 ranks: adapters bit-equal"
run two_to_one 1 --checkpoint.enable true --checkpoint.interval 100
grep -q "resumed from .*step-4" "$work/two_to_one.log" || fail "1 rank did not resume"
echo -n "resume 2 -> 1 vs uninterrupted: "; compare "$work/one/metrics.jsonl" "$work/two_to_one/metrics.jsonl" || fail "2 -> 1 resume"

# Activation checkpointing under FSDP, and hybrid sharding (2 replicas of a 2-rank shard group).
run ckpt 2 --checkpoint.enable false --activation_checkpoint.mode full
echo -n "2 ranks, full activation checkpointing vs 1: "; compare "$work/one/metrics.jsonl" "$work/ckpt/metrics.jsonl" ||
  fail "checkpointed curve differs"
echo -n "2 ranks, full activation checkpointing vs 1, adapters: "
adapters "$work/one/checkpoint/step-8-hf" "$work/ckpt/checkpoint/step-8-hf" || fail "checkpointed adapters differ"
run hybrid 4 --checkpoint.enable false --parallelism.data_parallel_replicate_degree 2
grep -q "hybrid (HSDP): sharded over 2 ranks x 2 replicas" "$work/hybrid.log" || fail "no hybrid layout in the setup line"
echo -n "4 ranks as 2 x 2 (HSDP) vs 1: "; compare "$work/one/metrics.jsonl" "$work/hybrid/metrics.jsonl" || fail "hybrid curve differs"
echo -n "4 ranks as 2 x 2 (HSDP) vs 1, adapters: "
adapters "$work/one/checkpoint/step-8-hf" "$work/hybrid/checkpoint/step-8-hf" || fail "hybrid adapters differ"

# Dropout: the same masks for 1 and 2 ranks, and after a resume.
run drop_one 1 --checkpoint.enable true --checkpoint.interval 4 --lora.dropout 0.1
run drop_two 2 --checkpoint.enable false --lora.dropout 0.1
echo -n "dropout 0.1, 2 ranks vs 1: "; compare "$work/drop_one/metrics.jsonl" "$work/drop_two/metrics.jsonl" ||
  fail "dropout curve depends on the rank count"
# AdamW amplifies f32 rounding more with dropout: one process with local batch 2 instead of 1
# (the same masks, other GEMM shapes) already moves the adapters by 4.1e-5 of peak (3.6e-6
# without dropout), while a mask that differed would move the loss far more than 1e-5.
echo -n "dropout 0.1, 2 ranks vs 1, adapters: "
adapters "$work/drop_one/checkpoint/step-8-hf" "$work/drop_two/checkpoint/step-8-hf" 2e-4 || fail "dropout adapters differ"
! compare "$work/one/metrics.jsonl" "$work/drop_one/metrics.jsonl" > /dev/null || fail "dropout 0.1 changed nothing"
mkdir -p "$work/drop_resumed/checkpoint"; cp -r "$work/drop_one/checkpoint/step-4" "$work/drop_resumed/checkpoint/"
run drop_resumed 1 --checkpoint.enable true --checkpoint.interval 100 --lora.dropout 0.1
grep -q "resumed from .*step-4" "$work/drop_resumed.log" || fail "the dropout run did not resume"
cmp "$work/drop_one/checkpoint/step-8-hf/adapter_model.safetensors" \
  "$work/drop_resumed/checkpoint/step-8-hf/adapter_model.safetensors" || fail "the resumed dropout run differs"
echo "dropout 0.1, resume 4 -> 8: adapters bit-equal"

# MoE: the frozen sparse layers shard like the dense ones (the base from torchtitan's init).
moe=(--model.name qwen3_moe --model.flavor debug-moe --model.n_layers 2 --checkpoint.initial_load_in_hf false
     --checkpoint.last_save_in_hf false --training.global_batch_size 2 --training.steps 3
     --lora.target_modules '["model.layers.*.self_attn.[qv]_proj"]'
     --lora.target_parameters '["model.layers.*.mlp.experts.*", "model.layers.*.mlp.gate.weight"]')
run moe_one 1 "${moe[@]}" --checkpoint.enable false
run moe_two 2 "${moe[@]}" --checkpoint.enable true --checkpoint.interval 2
echo -n "MoE, 2 ranks vs 1: "; compare "$work/moe_one/metrics.jsonl" "$work/moe_two/metrics.jsonl" || fail "MoE curve differs"
mkdir -p "$work/moe_resumed/checkpoint"; cp -r "$work/moe_two/checkpoint/step-2" "$work/moe_resumed/checkpoint/"
run moe_resumed 1 "${moe[@]}" --checkpoint.enable true --checkpoint.interval 100
grep -q "resumed from .*step-2" "$work/moe_resumed.log" || fail "the MoE run did not resume"
echo -n "MoE, resume 2 -> 1 ranks vs uninterrupted: "
compare "$work/moe_one/metrics.jsonl" "$work/moe_resumed/metrics.jsonl" || fail "MoE resume differs"
if "$titan" train "${common[@]}" "${moe[@]}" --lora.target_modules '["model.layers.*.mlp.experts.*.gate_proj"]' \
     --job.dump_folder "$work/moe_experts" > "$work/moe_experts.log" 2>&1; then fail "LoRA on MoE experts was not refused"; fi
grep -q "name them in \[lora\] target_parameters" "$work/moe_experts.log" ||
  fail "unclear refusal: $(tail -1 "$work/moe_experts.log")"
# A bf16 base ([lora] base_dtype = "bfloat16"), sharded: bf16 shards all-gathered in bf16.
#  - Exactness: the bf16 weights are the f32 ones rounded once, so one process equals the f32 base
#    with bf16 matmuls (mixed_precision_param) bit for bit, and so do 2 sharded ranks (bf16 shards
#    vs f32 shards rounded per gather), and 2 ranks with full activation checkpointing.
#  - Against one process: bf16 matmuls amplify the f32 reduction order of the adapter gradients
#    (an adapter element that moves by 1 ulp can round to another bf16), the f32 base with bf16
#    matmuls as much (5.0e-5 on 2 ranks, FSDP or replicated, over these 8 steps): 2 ranks and
#    2 x 2 HSDP follow the 1-process curve within 2e-4 relative. (Their adapters are not compared
#    with one process element by element: AdamW turns a near-zero gradient whose sign flips into
#    a full-size step of the other sign, 0.14 of the peak element after 8 steps at lr 1e-2, the
#    f32 base with bf16 matmuls alike; the bit-equalities above pin the arithmetic instead.)
#  - A 2-rank run resumed from step 4 ends bit-equal; `titan info --dp 2` predicts the memory after
#    setup within 10%, below the f32 base's, and the step peak per rank within 10% (f32 base too).
bf=(--lora.base_dtype bfloat16)
run bf_one 1 --checkpoint.enable false "${bf[@]}"
run mp_one 1 --checkpoint.enable false --training.mixed_precision_param bfloat16
echo -n "bf16 base vs f32 base with bf16 matmuls, 1 process: "
cmp <(curve "$work/mp_one/metrics.jsonl") <(curve "$work/bf_one/metrics.jsonl") && echo "losses bit-equal" ||
  fail "the bf16 base does not compute the f32 base's bf16 step"
run bf_two 2 --checkpoint.enable true --checkpoint.interval 4 "${bf[@]}"
grep -q "frozen base in bf16" "$work/bf_two.log" || fail "the 2-rank run does not say its base is bf16"
run mp_two 2 --checkpoint.enable false --training.mixed_precision_param bfloat16
echo -n "bf16 base vs f32 base with bf16 matmuls, 2 sharded ranks: "
cmp <(curve "$work/mp_two/metrics.jsonl") <(curve "$work/bf_two/metrics.jsonl") && echo "losses bit-equal" ||
  fail "the sharded bf16 base does not compute the sharded f32 base's bf16 step"
cmp "$work/mp_two/checkpoint/step-8-hf/adapter_model.safetensors" "$work/bf_two/checkpoint/step-8-hf/adapter_model.safetensors" ||
  fail "the sharded bf16 base's adapters differ from the sharded f32 base's with bf16 matmuls"
echo -n "bf16 base, 2 ranks vs 1: "; compare "$work/bf_one/metrics.jsonl" "$work/bf_two/metrics.jsonl" 2e-4 ||
  fail "bf16-base 2-rank curve differs"
pred_bf=$("$titan" info "${common[@]}" "${bf[@]}" --dp 2 --json | sed -nE 's/.*"rank_state_bytes": ([0-9]+).*/\1/p')
mib() { sed -nE 's/.*memory after setup: .* GiB live \(([0-9.]+) MiB.*/\1/p' "$1"; }
awk -v p="$pred_bf" -v m="$(mib "$work/bf_two.log")" -v p32="$pred" -v m32="$(mib "$work/two.log")" 'BEGIN {
      p /= 1048576; p32 /= 1048576
      printf "bf16 base, per rank after setup: titan info %.2f MiB, measured %.2f MiB (f32 base: %.2f, %.2f)\n", p, m, p32, m32
      exit !(m > 0.9 * p && m < 1.1 * p && p < p32 && m < m32) }' ||
  fail "titan info --dp 2 for a bf16 base is off by more than 10%, or not below the f32 base"
# ... and a rank's step peak (the allocator's largest peak of any rank), f32 and bf16 base. (Here
# the bf16 one is the larger: bf16 GEMMs round this model's tied f32 embedding, its largest
# tensor, into a bf16 lm_head copy each step, as the f32 base with bf16 matmuls does.)
for run_name in two bf_two; do
  x=(); [ "$run_name" = bf_two ] && x=("${bf[@]}")
  p=$("$titan" info "${common[@]}" "${x[@]}" --dp 2 --json | sed -nE 's/.*"rank_step_peak_bytes": ([0-9]+).*/\1/p')
  m=$(tail -1 "$work/$run_name/metrics.jsonl" | sed -nE 's/.*"memory_peak_max_rank_gib":([0-9.e-]+).*/\1/p')
  awk -v p="$p" -v m="$m" -v r="$run_name" 'BEGIN { p /= 1073741824
        printf "%s: step peak per rank, titan info %.4f GiB, measured %.4f GiB (%.3f)\n", r, p, m, m / p
        exit !(m > 0.9 * p && m < 1.1 * p) }' || fail "titan info's step peak per rank is off by more than 10% ($run_name)"
done
mkdir -p "$work/bf_resumed/checkpoint"; cp -r "$work/bf_two/checkpoint/step-4" "$work/bf_resumed/checkpoint/"
run bf_resumed 2 --checkpoint.enable true --checkpoint.interval 100 "${bf[@]}"
grep -q "resumed from .*step-4" "$work/bf_resumed.log" || fail "the bf16-base run did not resume"
cmp "$work/bf_two/checkpoint/step-8-hf/adapter_model.safetensors" "$work/bf_resumed/checkpoint/step-8-hf/adapter_model.safetensors" ||
  fail "the resumed bf16-base adapters differ from the uninterrupted run's"
echo "bf16 base, resume 2 -> 2 ranks: adapters bit-equal"
run bf_ckpt 2 --checkpoint.enable false "${bf[@]}" --activation_checkpoint.mode full
cmp "$work/bf_two/checkpoint/step-8-hf/adapter_model.safetensors" "$work/bf_ckpt/checkpoint/step-8-hf/adapter_model.safetensors" ||
  fail "bf16 base, 2 ranks: full activation checkpointing changed the adapters"
echo "bf16 base, 2 ranks, full activation checkpointing: adapters bit-equal to the run without"
run bf_hybrid 4 --checkpoint.enable false "${bf[@]}" --parallelism.data_parallel_replicate_degree 2
echo -n "bf16 base, 4 ranks as 2 x 2 (HSDP) vs 1: "
compare "$work/bf_one/metrics.jsonl" "$work/bf_hybrid/metrics.jsonl" 2e-4 || fail "bf16-base hybrid curve differs"
echo "ok ($SECONDS s)"
