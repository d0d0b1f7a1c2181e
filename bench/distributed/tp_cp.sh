#!/usr/bin/env bash
# Tensor and context parallelism against data parallelism and one process: tokens/s and the bytes
# each rank sends per step, measured (metrics.jsonl: tp_bytes, cp_bytes over the tp / cp group,
# gather_bytes of FSDP's parameter all-gathers) and, for tp and cp, the analytic count beside it.
# Same model, batch and steps for every side, all in one run: debugmodel (hidden 256, 8 heads / 4 KV
# heads of 32, vocab 151,936), LAYERS layers, a global batch of 2 rows of SEQ tokens, f32:
#   one   1 process, 2 threads (both rows)
#   dp2   FSDP over 2 ranks (a row each)
#   tp2   tensor parallel 2 with sequence parallelism (both ranks both rows, half of each layer)
#   cp2   context parallel 2, head-tail chunks (both ranks both rows, half of each row's tokens;
#         FSDP over dp_shard x cp = 2)
# 2 ranks x 1 thread on this 2-core machine (mpirun options of tests/cli/distributed/env.sh).
#   usage: bench/distributed/tp_cp.sh [TITAN_BIN=build/titan] ; STEPS=10 WARMUP=3 SEQ=512 LAYERS=4 ROUNDS=2
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
titan=${1:-$src/build/titan}
steps=${STEPS:-10} warmup=${WARMUP:-3} seq=${SEQ:-512} layers=${LAYERS:-4} rounds=${ROUNDS:-2}
command -v mpirun >/dev/null || { echo "mpirun not found"; exit 1; }
source "$src/tests/cli/distributed/env.sh"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
cd "$src"
export OMP_NUM_THREADS=1
load() { cut -d' ' -f1-3 /proc/loadavg; }
echo "debugmodel $layers layers, 2 rows x seq $seq per step, $steps steps ($warmup warm-up) x $rounds rounds; load $(load)"
common=(--config recipes/debug.toml --model.n_layers "$layers" --training.seq_len "$seq" --training.global_batch_size 2
        --training.steps "$steps" --metrics.perf_warmup_steps "$warmup" --metrics.log_freq 1
        --metrics.enable_tensorboard false --checkpoint.enable false --checkpoint.last_save_in_hf false)
go() {  # go ROUND NAME NP ARGS...
  local dir=$out/r$1/$2 np=$3 name=$2
  mkdir -p "$out/r$1"
  shift 3
  if [ "$np" = 1 ]; then "$titan" train "${common[@]}" --job.dump_folder "$dir" "$@" > "$dir.log" 2>&1
  else mpirun "${MPIRUN_ARGS[@]}" -np "$np" "$titan" train "${common[@]}" --compute.threads 1 --job.dump_folder "$dir" "$@" \
         > "$dir.log" 2>&1; fi || { tail -20 "$dir.log"; echo "$2 failed"; exit 1; }
  echo "  $name done at ${SECONDS}s"
}
SECONDS=0
for ((r = 1; r <= rounds; r++)); do
  go "$r" one 1 --compute.threads 2 --training.local_batch_size 2 --parallelism.data_parallel_shard_degree 1
  go "$r" dp2 2 --training.local_batch_size 1 --parallelism.data_parallel_shard_degree 2
  go "$r" tp2 2 --training.local_batch_size 2 --parallelism.data_parallel_shard_degree 1 \
    --parallelism.tensor_parallel_degree 2
  go "$r" cp2 2 --training.local_batch_size 2 --parallelism.data_parallel_shard_degree 1 \
    --parallelism.context_parallel_degree 2
done
echo "load after: $(load)"
python3 - "$out" "$rounds" "$layers" "$seq" <<'PY'
import json, statistics, sys
out, rounds, L, S = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
H, D, nkv, B, n = 256, 32, 4, 2, 2   # debugmodel; 2 rows per step; 2 ranks
T = B * S
def steady(name):
    tps, by = [], {}
    for r in range(1, rounds + 1):
        for line in open(f"{out}/r{r}/{name}/metrics.jsonl"):
            j = json.loads(line)
            if "loss" not in j or j["step"] <= 3: continue
            tps.append(j.get("tps_total", j["tps"]))
            for k in ("tp_bytes", "cp_bytes", "gather_bytes"): by[k] = j.get(k, 0)
    return statistics.median(tps), by
# tp2 with sequence parallelism, per step: an all-gather of T/n rows or a reduce-scatter of T rows
# of H floats sends u = (n-1) (T/n) H 4 bytes; 4 per layer forward (before/after attention and MLP),
# 4 backward, the embedding's 2 and the head's 2; the cross-entropy's row maxima (all-gather of T)
# and exp sums + target logits (all-reduce of 2T); the norms' partial gradients (all-reduce of
# 2H + 2D per layer, H for the final norm). Ring volumes as comm::Comm::sent_bytes counts them.
u = (n - 1) * (T // n) * H * 4
ar = lambda N: 2 * (n - 1) * -(-N // n) * 4
tp_analytic = (8 * L + 4) * u + (n - 1) * T * 4 + ar(2 * T) + L * (2 * ar(H) + 2 * ar(D)) + ar(H)
# cp2: each layer all-gathers K and V (forward, again in the backward) and reduce-scatters dK, dV:
# 3 x 2 x (n-1) x (T/n) x nkv D 4 bytes.
cp_analytic = L * 3 * 2 * (n - 1) * (T // n) * nkv * D * 4
one, _ = steady("one")
print(f"\n| run | tokens/s (all ranks) | vs 1 process | tp/cp bytes sent per rank per step | analytic | measured / analytic | FSDP gathered MiB per step |")
print("|---|---:|---:|---:|---:|---:|---:|")
for name in ("one", "dp2", "tp2", "cp2"):
    tps, by = steady(name)
    sent = by.get("tp_bytes", 0) + by.get("cp_bytes", 0)
    ana = tp_analytic if name == "tp2" else cp_analytic if name == "cp2" else 0
    print(f"| {name} | {tps:.1f} | {tps / one:.2f}x | {sent / 2**20:.3f} MiB | {ana / 2**20:.3f} MiB | "
          f"{(sent / ana if ana else float('nan')):.4f} | {by.get('gather_bytes', 0) / 2**20:.1f} |")
PY
