#!/usr/bin/env bash
# `titan train` claims its run folder (issue 10):
#  1. a second run on a folder in use exits at once naming the pid that holds it (the first run
#     keeps training, its metrics.jsonl whole);
#  2. under mpirun, every rank of such a second job stops with that error (no deadlock);
#  3. the lock file of a killed (SIGKILL) run blocks nothing;
#  4. an unusable checkpoint folder fails before step 1 with one line naming it and the reason.
set -uo pipefail
titan=$1 src=$2
work=$(mktemp -d)
pid=
cleanup() { [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }
common=(--config "$src/recipes/debug.toml" --model.n_layers 1 --training.seq_len 32 --training.local_batch_size 1
        --metrics.enable_tensorboard false --checkpoint.last_save_in_hf false --checkpoint.enable false
        --metrics.log_freq 1 --compute.threads 1)

# 1. The first run trains on; the second exits at once.
"$titan" train "${common[@]}" --job.dump_folder "$work/run" --training.steps 100000 > "$work/first.log" 2>&1 &
pid=$!
for _ in $(seq 1 600); do grep -q "step:  1 " "$work/first.log" 2>/dev/null && break; sleep 0.1; done
grep -q "step:  1 " "$work/first.log" || { cat "$work/first.log"; fail "the first run did not start"; }
out=$("$titan" train "${common[@]}" --job.dump_folder "$work/run" --training.steps 3 2>&1) && fail "second run exited 0"
[ "$(echo "$out" | wc -l)" -eq 1 ] || fail "error is not one line: $out"
echo "$out" | grep -q "$work/run is in use by pid $pid " || fail "no 'in use by pid $pid': $out"
echo "$out" | grep -q "step:" && fail "the second run trained: $out"
echo "ok: $out"

# 2. The same under mpirun: rank 0 cannot take the lock, and every rank fails with its error.
if command -v mpirun > /dev/null; then
  source "$src/tests/cli/distributed/env.sh"
  SECONDS=0
  timeout 120 mpirun "${MPIRUN_ARGS[@]}" -np 2 "$titan" train "${common[@]}" --job.dump_folder "$work/run" \
    --training.steps 3 --parallelism.data_parallel_shard_degree -1 > "$work/mpi.log" 2>&1 && fail "MPI job exited 0"
  [ $SECONDS -lt 120 ] || fail "the MPI job hung (${SECONDS}s)"
  for r in 0 1; do
    grep -q "rank $r of 2): $work/run is in use by pid $pid " "$work/mpi.log" || { cat "$work/mpi.log"; fail "rank $r"; }
  done
  echo "ok: 2 ranks stopped in ${SECONDS}s: $(grep -m1 'rank 1 of 2' "$work/mpi.log")"
fi

# 3. SIGKILL leaves titan.lock behind with the dead pid; the next run takes the folder.
kill -KILL "$pid"
wait "$pid" 2>/dev/null
[ "$(cat "$work/run/titan.lock")" = "$pid" ] || fail "titan.lock does not hold the killed pid"
lines=$(wc -l < "$work/run/metrics.jsonl")
python3 -c 'import json,sys; [json.loads(l) for l in open(sys.argv[1])]' "$work/run/metrics.jsonl" 2>/dev/null ||
  { command -v python3 > /dev/null && fail "torn metrics.jsonl lines"; }
pid=
"$titan" train "${common[@]}" --job.dump_folder "$work/run" --training.steps 2 > "$work/third.log" 2>&1 ||
  { cat "$work/third.log"; fail "a stale lock file blocked the next run"; }
echo "ok: after SIGKILL ($lines metrics lines), the next run took the folder"

# 4. A checkpoint folder that cannot be created: refused before step 1.
touch "$work/afile"
out=$("$titan" train "${common[@]}" --job.dump_folder "$work/ck" --training.steps 50 --checkpoint.enable true \
        --checkpoint.folder "$work/afile/ckpt" 2>&1) && fail "unusable checkpoint folder accepted"
[ "$(echo "$out" | wc -l)" -eq 1 ] || fail "error is not one line: $out"
echo "$out" | grep -q "$work/afile/ckpt: cannot create the checkpoint folder: Not a directory" || fail "$out"
echo "ok: $out"
