#!/usr/bin/env bash
# Distributed training benchmark: titan's fully sharded data parallelism (FSDP) against its plain
# replication and one process, and against PyTorch (torch.distributed over gloo: FSDP2 and DDP)
# on the same model, batch shape and steps, all in one run. 2 ranks on this 2-core machine,
# 1 thread each (the 1-process reference gets both threads). Model: the debugmodel flavor (4
# layers, hidden 256, vocab 151,936, tied: 42M parameters, 0.63 GiB of f32 training state),
# seq 128, local batch 1, global batch = ranks, f32.
#   usage: bench/distributed/run.sh [TITAN_BIN=build/titan] ; STEPS=12 WARMUP=3 ROUNDS=3 SEQ=128 LAYERS=4
# Each round runs every side once (titan: FSDP, replicated, FSDP without prefetch, FSDP without
# resharding, tensor parallel over the ranks (sequence parallel, the whole batch on each rank),
# 1 process; then PyTorch FSDP2 and DDP); throughput is the median over the
# steady-state steps of all rounds, memory the largest over rounds. Prints one table with ratios.
# Python (baselines and parsing only): $TITAN_ORACLE_PYTHON, else .venv-oracle/bin/python.
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
titan=${1:-$src/build/titan}
steps=${STEPS:-12} warmup=${WARMUP:-3} rounds=${ROUNDS:-3} seq=${SEQ:-128} layers=${LAYERS:-4} ranks=2
py=${TITAN_ORACLE_PYTHON:-$src/.venv-oracle/bin/python}
[ -x "$py" ] || py=/work/venv-oracle/bin/python
command -v mpirun >/dev/null || { echo "mpirun not found"; exit 1; }
source "$src/tests/cli/distributed/env.sh"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
cd "$src"
jemalloc=$(ls /usr/lib/x86_64-linux-gnu/libjemalloc.so.2 2>/dev/null || true)
export OMP_NUM_THREADS=1
load() { cut -d' ' -f1-3 /proc/loadavg; }
echo "$ranks ranks, debugmodel $layers layers, seq $seq, local batch 1, $steps steps ($warmup warm-up) x $rounds rounds"
echo "load before: $(load)" > "$out/load"

common=(--config recipes/debug.toml --model.n_layers "$layers" --training.seq_len "$seq" --training.local_batch_size 1
        --training.global_batch_size "$ranks" --training.steps "$steps" --metrics.perf_warmup_steps "$warmup"
        --metrics.log_freq 1 --metrics.enable_tensorboard false --checkpoint.enable false
        --checkpoint.last_save_in_hf false)
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
torch_run() {  # torch_run ROUND WRAP
  env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE ${jemalloc:+LD_PRELOAD=$jemalloc} "$py" bench/distributed/torch_baseline.py \
    --wrap "$2" --ranks "$ranks" --threads 1 --layers "$layers" --seq "$seq" --batch 1 --steps "$((steps - warmup))" \
    --warmup "$warmup" --port "$((29500 + $$ % 2000))" > "$out/r$1/torch-$2.log" 2>&1 ||
    { tail -20 "$out/r$1/torch-$2.log"; echo "pytorch $2 failed"; exit 1; }
  grep '^{' "$out/r$1/torch-$2.log" | tail -1 > "$out/r$1/torch-$2.json"
  echo "  pytorch $2 ($ranks ranks) done at ${SECONDS}s"
}

SECONDS=0
for ((r = 1; r <= rounds; r++)); do
  mkdir -p "$out/r$r"
  titan_run "$r" fsdp "$ranks" --parallelism.data_parallel_shard_degree -1
  titan_run "$r" replicated "$ranks" --parallelism.data_parallel_shard_degree 1 \
    --parallelism.data_parallel_replicate_degree "$ranks"
  titan_run "$r" fsdp_no_prefetch "$ranks" --parallelism.data_parallel_shard_degree -1 --parallelism.fsdp_prefetch false
  titan_run "$r" fsdp_no_reshard "$ranks" --parallelism.data_parallel_shard_degree -1 \
    --parallelism.fsdp_reshard_after_forward never
  titan_run "$r" tp2 "$ranks" --parallelism.data_parallel_shard_degree 1 --parallelism.tensor_parallel_degree "$ranks" \
    --training.local_batch_size "$ranks"
  titan_run "$r" one 1 --compute.threads 2 --parallelism.data_parallel_shard_degree 1
  torch_run "$r" fsdp
  torch_run "$r" ddp
  echo "load after round $r: $(load)" | tee -a "$out/load"
done
"$titan" info --model debugmodel --n-layers "$layers" --seq-len "$seq" --dp "$ranks" --json > "$out/info.json"
echo "load after: $(load)" >> "$out/load"
"$py" bench/distributed/report.py "$out" "$ranks"
