#!/usr/bin/env bash
# Qwen3-MoE from the command line: `titan score` reports transformers' loss (router aux loss
# included when the config's output_router_logits is true) and dumps gradients under per-expert
# names; `titan info --config` sizes the reduced 30B-A3B recipe without building it; `titan train`
# runs a small MoE model with `model.layers.*.mlp=moe.grouped_gemm` (one log line per sparse layer)
# and the loss falls; `titan generate` runs on its checkpoint and on its HF export (same ids, f32
# and bf16), and `titan info` predicts its step's peak memory within 10% of the measured one;
# overrides that do not fit the model are refused.
set -uo pipefail
titan=$1 src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
fx=$src/tests/fixtures/qwen3_moe
source "$src/tests/cli/common/peak_check.sh"  # peak_check NAME METRICS ARGS...

for name in aux_norm noaux_nonorm_tied step2_mlponly; do
  got=$("$titan" score --model "$fx/$name" --tokens "$fx/$name/tokens.txt" --json) || fail "score $name: $got"
  want=$(grep -o '"loss": *[0-9.e+-]*' "$fx/$name/golden.json" | head -1 | sed 's/.*: *//')
  gl=$(echo "$got" | sed 's/.*"loss": *\([0-9.e+-]*\).*/\1/')
  awk -v a="$gl" -v b="$want" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 1e-5) }' ||
    fail "score $name: loss $gl, transformers $want"
  echo "ok: score $name loss $gl (transformers $want)"
done

"$titan" score --model "$fx/aux_norm" --tokens "$fx/aux_norm/tokens.txt" --dump-grads "$work/g.safetensors" > /dev/null ||
  fail "dump-grads"
grep -aq '"model.layers.1.mlp.experts.7.down_proj.weight"' "$work/g.safetensors" || fail "no per-expert grad names"
grep -aq 'experts.gate_up_proj' "$work/g.safetensors" && fail "fused names in the gradient dump"
echo "ok: --dump-grads uses per-expert names"

out=$("$titan" info --config "$src/recipes/qwen3_30b_a3b_4layer_moe.toml") || fail "info: $out"
echo "$out" | grep -q '^parameters *1906330624 ' || fail "recipe params: $out"
echo "$out" | grep -q '^fits *NO: .* exceeds a 24 GiB machine' || fail "recipe does not say it is too big: $out"
out=$("$titan" info --config "$src/recipes/qwen3_30b_a3b_4layer_moe.toml" --model.num_experts 16 --json) || fail "$out"
echo "$out" | grep -q '"params": 999967744,' || fail "16 experts: $out"
echo "ok: info sizes the reduced recipe (1.9B params, over 24 GiB; 1.0B with 16 experts)"

common=(--config "$src/recipes/debug.toml" --model.name qwen3_moe --model.flavor debug-moe --model.n_layers 2
        --training.seq_len 32 --training.local_batch_size 2 --training.steps 4 --lr_scheduler.warmup_steps 1
        --optimizer.lr 3e-3 --metrics.enable_tensorboard false --checkpoint.enable false
        --checkpoint.last_save_in_hf false)
"$titan" train "${common[@]}" --job.dump_folder "$work/moe" --kernels.replace 'model.layers.*.mlp=moe.grouped_gemm' \
  > "$work/moe.log" 2>&1 || { cat "$work/moe.log"; fail "train"; }
n=$(grep -c '^\[kernels\] model.layers.[0-9]*.mlp: moe.grouped_gemm -> moe.grouped_gemm$' "$work/moe.log")
[ "$n" -eq 2 ] || { cat "$work/moe.log"; fail "expected 2 replacement lines (2 sparse layers), got $n"; }
mapfile -t L < <(grep -o '"loss": *[0-9.e+-]*' "$work/moe/metrics.jsonl" | sed 's/.*: *//')
[ "${#L[@]}" -eq 4 ] || fail "expected 4 logged losses, got ${#L[@]}"
awk -v a="${L[0]}" -v b="${L[3]}" 'BEGIN { exit !(a == a + 0 && b == b + 0 && b < a - 0.5) }' ||
  fail "loss did not fall: ${L[*]}"
echo "ok: 2 MoE layers replaced; losses ${L[*]}"
peak_check "debug-moe (2 layers)" "$work/moe/metrics.jsonl" "${common[@]}"

# Auxiliary-loss-free balancing: the expert biases are training state, so a run resumed from its
# step-2 checkpoint continues exactly like the uninterrupted run.
lb=("${common[@]}" --model.load_balance_coeff 0.01 --checkpoint.enable true --checkpoint.interval 2
    --checkpoint.keep_latest_k 0 --job.dump_folder "$work/lb")
"$titan" train "${lb[@]}" > "$work/lb.log" 2>&1 || { cat "$work/lb.log"; fail "train with load_balance_coeff"; }
grep -aq 'model.layers.1.mlp.expert_bias' "$work"/lb/checkpoint/step-2/* || fail "expert bias not checkpointed"
mapfile -t U < <(grep -o '"loss": *[0-9.e+-]*' "$work/lb/metrics.jsonl" | sed 's/.*: *//')
rm -rf "$work/lb/checkpoint/step-4"
"$titan" train "${lb[@]}" > "$work/lb2.log" 2>&1 || { cat "$work/lb2.log"; fail "resume"; }
grep -q 'resumed from .*step-2' "$work/lb2.log" || fail "did not resume: $(cat "$work/lb2.log")"
# The resumed run replaced the lines of steps 3 and 4 (logged after the step-2 checkpoint).
mapfile -t R < <(grep -o '"loss": *[0-9.e+-]*' "$work/lb/metrics.jsonl" | sed 's/.*: *//')
[ "${#U[@]}" -eq 4 ] && [ "${#R[@]}" -eq 4 ] && [ "${R[*]}" = "${U[*]}" ] ||
  fail "resumed losses differ: ${R[*]} (uninterrupted: ${U[*]})"
echo "ok: load_balance_coeff run resumes exactly (${R[*]})"

# Generation on the MoE run's checkpoint and on its HF export: the same greedy ids from both, in f32
# and with bf16 weights (the export in f32 so that the norms are the checkpoint's values).
gen() {  # model dtype -> the generated ids
  "$titan" generate --model "$1" --prompt-ids "3 14 15 92 65" --max-new-tokens 6 --temperature 0 --dtype "$2" --json \
    2> "$work/gen.err" | sed -n 's/.*"ids":\[\([0-9,]*\)\].*/\1/p'
}
"$titan" export --from "$work/lb/checkpoint" --output "$work/lb_hf" --dtype f32 > "$work/export.log" 2>&1 ||
  { cat "$work/export.log"; fail "export of the MoE checkpoint"; }
for dt in f32 bf16; do
  a=$(gen "$work/lb/checkpoint" $dt) b=$(gen "$work/lb_hf" $dt)
  [ "$(tr ',' '\n' <<< "$a" | grep -c .)" = 6 ] || fail "generate $dt on the MoE checkpoint: [$a] $(cat "$work/gen.err")"
  [ "$a" = "$b" ] || fail "generate $dt: checkpoint ids [$a], HF export ids [$b]"
  echo "ok: MoE generate $dt, checkpoint = HF export: $a"
done

out=$("$titan" train "${common[@]}" --job.dump_folder "$work/x" --model.name qwen3 --model.flavor debugmodel \
  --model.num_experts 4 2>&1) && fail "num_experts accepted on a dense model"
echo "$out" | grep -q "num_experts / top_k apply to qwen3_moe models only" || fail "$out"
out=$("$titan" train "${common[@]}" --job.dump_folder "$work/x" --model.flavor debugmodel 2>&1) && fail "qwen3_moe on dense"
echo "$out" | grep -q "name is qwen3_moe but the model (flavor debugmodel) is a dense qwen3" || fail "$out"
out=$("$titan" train "${common[@]}" --job.dump_folder "$work/x" --model.top_k 9 2>&1) && fail "top_k 9 of 8 accepted"
echo "$out" | grep -q "num_experts_per_tok must be in \[1, num_experts = 8\], got 9" || fail "$out"
echo "ok: bad overrides refused"
