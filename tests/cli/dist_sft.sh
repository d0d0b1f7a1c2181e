#!/usr/bin/env bash
# Supervised fine-tuning on chat data under fully sharded data parallelism (debug-chat, 1 layer,
# block-causal packing, seq 64, global batch 4, 8 steps, validation every 4 steps):
#  - 2 ranks give the 1-process training loss curve and validation losses within 1e-5 relative
#    (the held-out set is the same rows for any rank count);
#  - a checkpoint written by 2 ranks at step 4 resumes on 1 rank, and one written by 1 rank resumes
#    on 2 ranks, at the next chat row, each continuing the uninterrupted curve (training and
#    validation losses).
# Skips (77) when mpirun is missing.
set -uo pipefail
titan=$1 src=$2
command -v mpirun >/dev/null || { echo "mpirun not found; skipping"; exit 77; }
source "$src/tests/cli/distributed/env.sh"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMP_NUM_THREADS=1
"$titan" data make-arithmetic --output "$work/data" --max-operand 9 --valid 20 > /dev/null || { echo "FAIL: data"; exit 1; }
common=(--config "$src/recipes/sft_arithmetic.toml" --model.n_layers 1 --training.seq_len 64 --training.local_batch_size 1
        --training.global_batch_size 4 --training.steps 8 --metrics.log_freq 1 --metrics.enable_tensorboard false
        --checkpoint.last_save_in_hf false --lr_scheduler.warmup_steps 2 --compute.threads 1
        --parallelism.data_parallel_shard_degree -1 --checkpoint.keep_latest_k 0
        --model.hf_assets_path "$src/assets/qwen3-tokenizer"
        --training.dataset_path "$work/data/train.jsonl" --validation.dataset_path "$work/data/valid.jsonl"
        --validation.freq 4 --validation.steps 3 --validation.local_batch_size 1 --validation.seq_len 64)
# Training lines only, and "step validation_loss" lines.
train_lines() { grep -v validation_loss "$1" > "$1.train"; echo "$1.train"; }
vcurve() { grep validation_loss "$1" | sed -E 's/.*"step":([0-9]+).*"validation_loss":([^,]*).*/\1 \2/'; }
vcompare() {
  paste -d' ' <(vcurve "$1") <(vcurve "$2") | awk '{ d = $2 - $4; if (d < 0) d = -d; r = d / $2; if (r > w) w = r
    if ($1 != $3 || r > 1e-5) bad = 1; n++ } END { printf "%d validations, worst relative difference %.2e\n", n, w; exit bad || n == 0 }'
}

SECONDS=0
run one 1 --checkpoint.enable true --checkpoint.interval 4
run two 2 --checkpoint.enable true --checkpoint.interval 4
grep -q "chat data: 80 conversations" "$work/one.log" || fail "no chat data line: $(grep chat "$work/one.log")"
echo -n "2 ranks vs 1 (training): "; compare "$(train_lines "$work/one/metrics.jsonl")" "$(train_lines "$work/two/metrics.jsonl")" ||
  fail "2-rank curve differs"
[ "$(vcurve "$work/one/metrics.jsonl" | wc -l)" -eq 2 ] || fail "expected validations at steps 4 and 8"
echo -n "2 ranks vs 1 (validation): "; vcompare "$work/one/metrics.jsonl" "$work/two/metrics.jsonl" || fail "validation differs"

# resume_check NAME FROM RANKS LABEL: step 4 of run FROM resumed on RANKS ranks ends as the
# uninterrupted run "one" does, training and validation (step 8).
resume_check() {
  mkdir -p "$work/$1/checkpoint"
  mv "$work/$2/checkpoint/step-4" "$work/$1/checkpoint/"
  run "$1" "$3" --checkpoint.enable true --checkpoint.interval 100
  grep -q "resumed from .*step-4" "$work/$1.log" || fail "did not resume ($4)"
  echo -n "resume $4 vs uninterrupted: "
  compare "$(train_lines "$work/one/metrics.jsonl")" "$(train_lines "$work/$1/metrics.jsonl")" || fail "resume $4 differs"
  echo -n "resume $4 (validation at step 8): "
  vcompare <(grep '"step":8,' "$work/one/metrics.jsonl") "$work/$1/metrics.jsonl" || fail "resumed validation $4 differs"
}
resume_check resumed two 1 "2 -> 1 ranks"
resume_check resumed2 one 2 "1 -> 2 ranks"
echo "ok"
