#!/usr/bin/env bash
# Pipeline-parallel training benchmark: titan's pp2 with each schedule (GPipe, 1F1B,
# Interleaved1F1B) against FSDP over the same 2 ranks and against one process, all in one run.
# 2 ranks on this 2-core machine, 1 thread each (the 1-process reference gets both threads).
# Model: the debugmodel flavor (4 layers, hidden 256, vocab 151,936, tied: 42M parameters), seq
# 128, global batch 4, f32: pp2 with local batch 4 cut into 4 microbatches of 1 row (2 stages of
# 2 layers; interleaved: 4 stages of 1 layer, 2 per rank), FSDP dp2 with local batch 2, one
# process with local batch 4.
#   usage: bench/distributed/pipeline.sh [TITAN_BIN=build/titan] ; STEPS=10 WARMUP=3 ROUNDS=2 SEQ=128 LAYERS=4
# Each round runs every side once; tokens/s is the global batch's tokens per second (median over
# the steady-state steps of all rounds; metrics.jsonl's per-rank `tps` x the data-parallel degree:
# the pp ranks share one batch, so `tps_total` would count it twice); memory the largest over
# rounds: the allocator peak of the largest rank and each rank's max RSS. The measured bubble is
# metrics.jsonl's `pp_bubble` (rank 0's 1 - compute / schedule run seconds), median over the steady
# steps, next to `titan info --pp-schedule NAME --pp 2 --microbatches M --json`'s bubble_fraction
# (the simulated schedule with equal stages, a backward twice a forward, free communication).
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
titan=${1:-$src/build/titan}
steps=${STEPS:-10} warmup=${WARMUP:-3} rounds=${ROUNDS:-2} seq=${SEQ:-128} layers=${LAYERS:-4} ranks=2
batch=4 micro=4
command -v mpirun >/dev/null || { echo "mpirun not found"; exit 1; }
source "$src/tests/cli/distributed/env.sh"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
cd "$src"
export OMP_NUM_THREADS=1
load() { cut -d' ' -f1-3 /proc/loadavg; }
echo "$ranks ranks, debugmodel $layers layers, seq $seq, global batch $batch, $steps steps ($warmup warm-up) x $rounds rounds"
echo "load before: $(load)" > "$out/load"

common=(--config recipes/debug.toml --model.n_layers "$layers" --training.seq_len "$seq"
        --training.global_batch_size "$batch" --training.steps "$steps" --metrics.perf_warmup_steps "$warmup"
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
pp=(--parallelism.pipeline_parallel_degree "$ranks" --parallelism.data_parallel_shard_degree 1
    --training.local_batch_size "$batch" --parallelism.pipeline_parallel_microbatch_size $((batch / micro)))

SECONDS=0
for ((r = 1; r <= rounds; r++)); do
  mkdir -p "$out/r$r"
  titan_run "$r" pp_gpipe "$ranks" "${pp[@]}" --parallelism.pipeline_parallel_schedule GPipe
  titan_run "$r" pp_1f1b "$ranks" "${pp[@]}" --parallelism.pipeline_parallel_schedule 1F1B
  titan_run "$r" pp_interleaved "$ranks" "${pp[@]}" --parallelism.pipeline_parallel_schedule Interleaved1F1B
  titan_run "$r" fsdp "$ranks" --parallelism.data_parallel_shard_degree -1 --training.local_batch_size $((batch / ranks))
  titan_run "$r" one 1 --compute.threads 2 --parallelism.data_parallel_shard_degree 1 --training.local_batch_size "$batch"
  echo "load after round $r: $(load)" | tee -a "$out/load"
done
for s in GPipe 1F1B Interleaved1F1B; do
  "$titan" info --pp-schedule "$s" --pp "$ranks" --microbatches "$micro" --json > "$out/predicted_$s.json"
done
echo "load after: $(load)" >> "$out/load"

python3 - "$out" "$ranks" <<'PY'
import glob, json, os, re, statistics, sys
out, ranks = sys.argv[1], int(sys.argv[2])
rounds = sorted(glob.glob(os.path.join(out, "r*")))
SETUP = re.compile(r"per rank: params ([\d.]+) MiB")
SIDES = [("one", "1 process, 2 threads", None, 1), ("fsdp", "FSDP dp2", None, 2),
         ("pp_gpipe", "pp2 GPipe", "GPipe", 1), ("pp_1f1b", "pp2 1F1B", "1F1B", 1),
         ("pp_interleaved", "pp2 Interleaved1F1B (2 stages/rank)", "Interleaved1F1B", 1)]
rows = {}
for name, label, sched, dp in SIDES:
    tps, bubble, per_round, peak, rss = [], [], [], 0.0, {}
    params = None
    for r in rounds:
        first = len(tps)
        for line in open(os.path.join(r, name, "metrics.jsonl")):
            m = json.loads(line)
            peak = max(peak, m.get("memory_peak_max_rank_gib", m["memory_peak_gib"]))
            if m.get("warmup"):
                continue
            tps.append(m["tps"] * dp)  # the global batch's tokens per second
            if "pp_bubble" in m:
                bubble.append(m["pp_bubble"])
        per_round.append(statistics.median(tps[first:]))
        for p in glob.glob(os.path.join(r, name + ".rss.*")):
            k = int(p.rsplit(".", 1)[1])
            rss[k] = max(rss.get(k, 0.0), int(open(p).read().split()[-1]) / 2**20)
        s = SETUP.search(open(os.path.join(r, name + ".log"), errors="replace").read())
        params = float(s.group(1)) if s else None
    pred = None
    if sched:
        pred = json.load(open(os.path.join(out, "predicted_%s.json" % sched)))["bubble_fraction"]
    rows[name] = dict(label=label, tps=statistics.median(tps), per_round=per_round, peak=peak, rss=rss,
                      bubble=statistics.median(bubble) if bubble else None, pred=pred, params=params, n=len(tps))
fsdp, one = rows["fsdp"]["tps"], rows["one"]["tps"]
print("| run | tokens/s (global) | vs FSDP dp2 | vs 1 process | rank 0 params MiB | allocator peak, largest rank GiB | max RSS per rank GiB | measured bubble (median) | predicted bubble |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
for name, *_ in SIDES:
    x = rows[name]
    f = lambda v, fmt: "-" if v is None else format(v, fmt)
    print("| %s | %.1f | %.2fx | %.2fx | %s | %.3f | %s | %s | %s |" % (
        x["label"], x["tps"], x["tps"] / fsdp, x["tps"] / one, f(x["params"], ".1f"), x["peak"],
        " / ".join("%.3f" % x["rss"][k] for k in sorted(x["rss"])), f(x["bubble"], ".3f"), f(x["pred"], ".3f")))
print()
print("tokens/s per round: " + "; ".join("%s %s" % (rows[n]["label"], " ".join("%.0f" % v for v in rows[n]["per_round"]))
                                          for n, *_ in SIDES))
print("steady steps per side: %d" % rows["one"]["n"])
PY
cat "$out/load"
