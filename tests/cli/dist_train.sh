#!/usr/bin/env bash
# Fully sharded data-parallel training over MPI (debugmodel, 1 layer, seq 32, global batch 4,
# 20 steps):
#  - 2 and 4 ranks (oversubscribed), and 4 ranks as 2 replicas of a 2-rank shard group (HSDP),
#    give the 1-process loss curve within 1e-5 relative;
#  - every rank writes its own checkpoint pieces; a checkpoint written by 2 ranks resumes on 1
#    rank and one written by 4 ranks on 2 ranks, continuing the uninterrupted curve (resharding);
#  - the metrics carry per-rank and total tokens/s and the communication share;
#  - parameters, gradients and AdamW state per rank fall as 1/N, and `titan info --dp N` predicts
#    the measured per-rank memory within 10%.
# TITAN_DIST_FULL=1 adds replicated (data_parallel_replicate_degree 2) and no-resharding /
# no-prefetch runs. Skips (77) when mpirun is missing.
set -uo pipefail
titan=$1 src=$2
command -v mpirun >/dev/null || { echo "mpirun not found; skipping"; exit 77; }
source "$src/tests/cli/distributed/env.sh"
# Checkpoints (0.45 GB each) go to tmpfs when it has room: fsync on the disk costs more than the
# training steps.
shm_free=$(df -Pk /dev/shm 2>/dev/null | awk 'NR==2 { print $4 }')
if [ -n "$shm_free" ] && [ "$shm_free" -gt 4000000 ]; then work=$(mktemp -d -p /dev/shm); else work=$(mktemp -d); fi
trap 'rm -rf "$work"' EXIT
export OMP_NUM_THREADS=1
common=(--config "$src/recipes/debug.toml" --model.n_layers 1 --training.seq_len 32 --training.local_batch_size 1
        --training.global_batch_size 4 --training.steps 20 --metrics.log_freq 1 --metrics.enable_tensorboard false
        --checkpoint.last_save_in_hf false --lr_scheduler.warmup_steps 2 --compute.threads 1
        --parallelism.data_parallel_shard_degree -1 --checkpoint.keep_latest_k 0)

SECONDS=0
run one 1 --checkpoint.enable false
run two 2 --checkpoint.enable true --checkpoint.interval 10
run four 4 --checkpoint.enable true --checkpoint.interval 10
[ "$(curve "$work/one/metrics.jsonl" | wc -l)" -eq 20 ] || fail "1-rank run logged $(wc -l < "$work/one/metrics.jsonl") steps"
echo -n "2 ranks vs 1: "; compare "$work/one/metrics.jsonl" "$work/two/metrics.jsonl" || fail "2-rank curve differs"
echo -n "4 ranks vs 1: "; compare "$work/one/metrics.jsonl" "$work/four/metrics.jsonl" || fail "4-rank curve differs"
[ -f "$work/two/checkpoint/step-10/state.json" ] || fail "no checkpoint step-10 from 2 ranks"
for r in 0 1 2 3; do
  [ -f "$work/four/checkpoint/step-10/model.rank-$r-of-4.tensors" ] && [ -f "$work/four/checkpoint/step-10/optimizer.rank-$r-of-4.tensors" ] ||
    fail "rank $r of 4 wrote no checkpoint pieces: $(ls "$work/four/checkpoint/step-10")"
done

# Resume with another rank count from the step-10 checkpoints: 2 -> 1 and 4 -> 2.
resume() {  # resume NAME FROM NP
  mkdir -p "$work/$1/checkpoint"
  mv "$work/$2/checkpoint/step-10" "$work/$1/checkpoint/"
  rm -rf "$work/$2/checkpoint"
  run "$1" "$3" --checkpoint.enable true --checkpoint.interval 100
  rm -rf "$work/$1/checkpoint"
  grep -q "resumed from .*step-10" "$work/$1.log" || fail "$1 did not resume"
  [ "$(curve "$work/$1/metrics.jsonl" | head -1 | cut -d' ' -f1)" = 11 ] || fail "$1 does not start at step 11"
  echo -n "resume $1 vs uninterrupted: "; compare "$work/one/metrics.jsonl" "$work/$1/metrics.jsonl" || fail "$1 resume"
}
resume two_to_one two 1
resume four_to_two four 2

# Hybrid: 2 replicas of a 2-rank shard group (HSDP).
run hybrid 4 --checkpoint.enable false --parallelism.data_parallel_replicate_degree 2
grep -q "hybrid (HSDP): sharded over 2 ranks x 2 replicas" "$work/hybrid.log" || fail "no hybrid layout in the setup line"
echo -n "4 ranks as 2 x 2 (HSDP) vs 1: "; compare "$work/one/metrics.jsonl" "$work/hybrid/metrics.jsonl" || fail "hybrid curve differs"

if [ "${TITAN_DIST_FULL:-0}" = 1 ]; then
  run replicated 2 --checkpoint.enable false --parallelism.data_parallel_shard_degree 1 \
    --parallelism.data_parallel_replicate_degree 2
  grep -q "2 rank(s), replicated" "$work/replicated.log" || fail "replicate degree 2 did not replicate"
  echo -n "2 ranks replicated vs 1: "; compare "$work/one/metrics.jsonl" "$work/replicated/metrics.jsonl" || fail "replicated"
  run keep 2 --checkpoint.enable false --parallelism.fsdp_reshard_after_forward never --parallelism.fsdp_prefetch false
  echo -n "2 ranks, no resharding, no prefetch vs 1: "; compare "$work/one/metrics.jsonl" "$work/keep/metrics.jsonl" || fail "keep"
fi

# Metrics: per-rank and total throughput, communication share (rank 0 writes them).
last=$(tail -1 "$work/four/metrics.jsonl")
for k in '"world":4' '"tps_total":' '"comm_pct":' '"comm_wait_pct":' '"memory_peak_max_rank_gib":'; do
  echo "$last" | grep -q "$k" || fail "4-rank metrics.jsonl lacks $k: $last"
done
grep -q "tps(4 ranks):" "$work/four.log" || fail "no total tps on the console"
[ "$(grep -c '^.*step: 10 ' "$work/four.log")" -eq 1 ] || fail "more than one rank logged"

# Memory: parameters, gradients and optimizer state per rank fall as 1/N (the shards pad each
# unit to a multiple of N: a few elements); titan info --dp N predicts the live memory after setup.
mib() { sed -nE "s/.*per rank: .*$1 ([0-9.]+) MiB.*/\1/p" "$2"; }
live() { sed -nE 's/.*memory after setup: ([0-9.]+) GiB.*/\1/p' "$1"; }
for k in params grads optimizer; do
  a=$(mib $k "$work/one.log") b=$(mib $k "$work/two.log") c=$(mib $k "$work/four.log")
  echo "$k MiB per rank: 1 rank $a, 2 ranks $b, 4 ranks $c"
  awk -v a="$a" -v b="$b" -v c="$c" 'BEGIN { exit !(a > 0 && b * 2 > a * 0.999 && b * 2 < a * 1.001 && c * 4 > a * 0.999 && c * 4 < a * 1.001) }' ||
    fail "$k per rank is not 1/N"
done
echo "live GiB after setup: 1 rank $(live "$work/one.log"), 2 ranks $(live "$work/two.log"), 4 ranks $(live "$work/four.log")"
for np in 2 4; do
  name=$([ $np = 2 ] && echo two || echo four)
  pred=$("$titan" info --model debugmodel --n-layers 1 --seq-len 32 --dp $np --json | sed -nE 's/.*"rank_state_bytes": ([0-9]+).*/\1/p')
  meas=$(live "$work/$name.log")
  awk -v p="$pred" -v m="$meas" 'BEGIN { p /= 1073741824; printf "dp %s: titan info %.3f GiB, measured %.3f GiB\n", "'$np'", p, m
                                         exit !(m > 0.9 * p && m < 1.1 * p) }' || fail "titan info --dp $np is off by more than 10%"
done
# The job path sizes the same rank: titan info --config JOB --dp N.
job=$("$titan" info --config "$src/recipes/debug.toml" --model.n_layers 1 --training.seq_len 32 \
  --parallelism.data_parallel_shard_degree -1 --dp 4 --json | sed -nE 's/.*"rank_state_bytes": ([0-9]+).*/\1/p')
flavor=$("$titan" info --model debugmodel --n-layers 1 --seq-len 32 --dp 4 --json | sed -nE 's/.*"rank_state_bytes": ([0-9]+).*/\1/p')
[ -n "$job" ] && [ "$job" = "$flavor" ] || fail "titan info --config --dp 4 gives '$job', --model gives '$flavor'"
echo "ok ($SECONDS s)"
