#!/usr/bin/env bash
# Expert parallelism benchmark: an MoE model (the debug-moe flavor: 8 experts of 128, top-2, every
# layer sparse, hidden 256, vocab 151,936) trained by titan on 2 ranks with FSDP alone
# (data_parallel_shard_degree 2: each rank holds a half of every unit, experts included), with
# FSDP and expert parallelism (expert_parallel_degree 2: each rank holds 4 experts of each layer
# whole and sends its tokens' rows to the other rank's experts; FSDP's prefetch is off under EP, so
# FSDP without prefetch runs too, to tell the two costs apart), and on one process for reference
# (1 thread, as each rank: the ratios' reference; and 2 threads, as bench/distributed/run.sh's);
# all in one run. 2 ranks on this 2-core machine, 1 thread each; seq 128, local batch 1, global
# batch 2 (one process: 2 accumulated micro-batches), f32.
#   usage: bench/distributed/moe_ep.sh [TITAN_BIN=build/titan] ; STEPS=10 WARMUP=3 ROUNDS=2 SEQ=128 LAYERS=2 (about 3 min here)
# Each round runs every side once; tokens/s is the median over the steady-state steps of all rounds,
# dispatch MiB/step the mean over every step of all rounds (metrics.jsonl's dispatch_bytes: rank
# 0's sends to the other ep rank, forward and backward), memory the largest over ranks and rounds.
# `titan info --ep 2` gives the predicted dispatch bytes (evenly routed) and per-rank state.
# Needs mpirun, /usr/bin/time and python3 (parsing only). Prints one table with ratios.
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
titan=${1:-$src/build/titan}
steps=${STEPS:-10} warmup=${WARMUP:-3} rounds=${ROUNDS:-2} seq=${SEQ:-128} layers=${LAYERS:-2} ranks=2
command -v mpirun >/dev/null || { echo "mpirun not found"; exit 1; }
source "$src/tests/cli/distributed/env.sh"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
cd "$src"
export OMP_NUM_THREADS=1
load() { cut -d' ' -f1-3 /proc/loadavg; }
echo "$ranks ranks, debug-moe $layers layers, seq $seq, local batch 1, $steps steps ($warmup warm-up) x $rounds rounds"
echo "load before: $(load)" > "$out/load"

common=(--config recipes/debug.toml --model.name qwen3_moe --model.flavor debug-moe --model.n_layers "$layers"
        --training.seq_len "$seq" --training.local_batch_size 1 --training.global_batch_size "$ranks"
        --training.steps "$steps" --metrics.perf_warmup_steps "$warmup" --metrics.log_freq 1
        --metrics.enable_tensorboard false --checkpoint.enable false --checkpoint.last_save_in_hf false)
# Every rank under /usr/bin/time: its max RSS lands in DIR.rss.RANK.
per_rank_time='exec /usr/bin/time -f %M -o "$0.rss.${OMPI_COMM_WORLD_RANK:-0}" "$@"'
titan_run() {  # titan_run ROUND NAME NP ARGS...
  local name=$2 dir=$out/r$1/$2 np=$3; shift 3
  if [ "$np" = 1 ]; then
    bash -c "$per_rank_time" "$dir" "$titan" train "${common[@]}" --job.dump_folder "$dir" "$@" > "$dir.log" 2>&1
  else
    mpirun "${MPIRUN_ARGS[@]}" -np "$np" bash -c "$per_rank_time" "$dir" "$titan" train "${common[@]}" \
      --compute.threads 1 --job.dump_folder "$dir" "$@" > "$dir.log" 2>&1
  fi || { tail -20 "$dir.log"; echo "titan $name failed"; exit 1; }
  echo "  titan $name ($np rank(s)) done at ${SECONDS}s"
}

SECONDS=0
for ((r = 1; r <= rounds; r++)); do
  mkdir -p "$out/r$r"
  titan_run "$r" fsdp "$ranks" --parallelism.data_parallel_shard_degree "$ranks"
  titan_run "$r" fsdp_no_prefetch "$ranks" --parallelism.data_parallel_shard_degree "$ranks" \
    --parallelism.fsdp_prefetch false
  titan_run "$r" fsdp_ep "$ranks" --parallelism.data_parallel_shard_degree "$ranks" \
    --parallelism.expert_parallel_degree "$ranks"
  titan_run "$r" one 1 --compute.threads 1 --parallelism.data_parallel_shard_degree 1
  titan_run "$r" one_2t 1 --compute.threads 2 --parallelism.data_parallel_shard_degree 1
  echo "load after round $r: $(load)" | tee -a "$out/load"
done
info=(--model debug-moe --n-layers "$layers" --seq-len "$seq" --batch 1 --dp "$ranks" --json)
"$titan" info "${info[@]}" > "$out/info_fsdp.json"
"$titan" info "${info[@]}" --ep "$ranks" > "$out/info_ep.json"
echo "load after: $(load)" >> "$out/load"
python3 bench/distributed/moe_ep_report.py "$out"
