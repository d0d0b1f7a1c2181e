#!/usr/bin/env bash
# Faults in a data-parallel run end every rank within a bounded time, with a clear error:
#  1. ranks started with different configs (MPMD launch) all stop naming the config hash mismatch;
#  2. a rank killed mid-run (SIGKILL) takes the whole job down (mpirun ends the others), no hang;
#  3. SIGTERM to one rank stops every rank after the same step, with a checkpoint, status 0;
#  4. a rank that hangs without dying (SIGSTOP) is caught by the other rank's collective watchdog
#     ([comm] timeouts): the job ends soon after the timeout, naming the call that waited.
# Skips (77) when mpirun is missing. Needs test_distributed (case 4) next to titan.
set -uo pipefail
titan=$1 src=$2
command -v mpirun >/dev/null || { echo "mpirun not found; skipping"; exit 77; }
source "$src/tests/cli/distributed/env.sh"
test_distributed=$(dirname "$titan")/test_distributed
[ -x "$test_distributed" ] || { echo "missing $test_distributed (build target test_distributed)"; exit 1; }
work=$(mktemp -d)
mpid=
cleanup() { [ -n "$mpid" ] && kill -9 "$mpid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
export OMP_NUM_THREADS=1
common=(--config "$src/recipes/debug.toml" --model.n_layers 1 --training.seq_len 32 --training.local_batch_size 1
        --metrics.enable_tensorboard false --checkpoint.last_save_in_hf false --checkpoint.enable false
        --compute.threads 1 --parallelism.data_parallel_shard_degree -1 --metrics.log_freq 1)

# 1. Mismatched configs: rank 1 has another learning rate.
SECONDS=0
if timeout 60 mpirun "${MPIRUN_ARGS[@]}" -np 1 "$titan" train "${common[@]}" --job.dump_folder "$work/a" --training.steps 3 \
     : -np 1 "$titan" train "${common[@]}" --job.dump_folder "$work/a" --training.steps 3 --optimizer.lr 2e-3 \
     > "$work/mismatch.log" 2>&1; then
  fail "mismatched configs ran"
fi
[ $SECONDS -lt 60 ] || fail "mismatch took ${SECONDS}s (timeout)"
for r in 0 1; do
  grep -q "titan: error (rank $r of 2): ranks disagree on the job config hash (rank 0: [0-9a-f]*, rank 1: [0-9a-f]*)" \
    "$work/mismatch.log" || { cat "$work/mismatch.log"; fail "rank $r did not report the mismatch"; }
done
echo "ok: mismatch -> $(grep -m1 'rank 0 of 2' "$work/mismatch.log") (${SECONDS}s)"

# 2. Kill rank 1 after the first step: mpirun must end rank 0 and exit non-zero.
mpirun "${MPIRUN_ARGS[@]}" -np 2 "$titan" train "${common[@]}" --job.dump_folder "$work/k" --training.steps 100000 \
  > "$work/kill.log" 2>&1 &
mpid=$!
for _ in $(seq 1 600); do grep -q "step:  1 " "$work/kill.log" 2>/dev/null && break; sleep 0.1; done
grep -q "step:  1 " "$work/kill.log" || fail "2-rank run did not reach step 1: $(tail -3 "$work/kill.log")"
ranks=($(pgrep -P "$mpid"))
[ ${#ranks[@]} -eq 2 ] || fail "expected 2 rank processes under mpirun $mpid, found ${#ranks[@]}"
victim=${ranks[1]}
kill -9 "$victim"
SECONDS=0
for _ in $(seq 1 300); do kill -0 "$mpid" 2>/dev/null || break; sleep 0.1; done
kill -0 "$mpid" 2>/dev/null && fail "mpirun still running 30 s after a rank died"
wait "$mpid"; rc=$?
mpid=
[ $rc -ne 0 ] || fail "mpirun exited 0 after a rank was killed"
# The ranks are gone (a zombie still answers kill -0, so look at the process state).
alive() { local st; st=$(ps -o stat= -p "$1" 2>/dev/null) && [ -n "$st" ] && [ "${st:0:1}" != Z ]; }
for p in "${ranks[@]}"; do
  for _ in $(seq 1 100); do alive "$p" || break; sleep 0.1; done
  alive "$p" && { ps -o pid,stat,cmd -p "$p"; fail "rank process $p survived"; }
done
echo "ok: killed rank pid $victim -> job ended in ${SECONDS}s with status $rc"

# 3. SIGTERM to rank 1 only: all ranks agree to stop, rank 0 checkpoints.
mpirun "${MPIRUN_ARGS[@]}" -np 2 "$titan" train "${common[@]}" --job.dump_folder "$work/t" --training.steps 100000 \
  --checkpoint.enable true > "$work/term.log" 2>&1 &
mpid=$!
for _ in $(seq 1 600); do grep -q "step:  2 " "$work/term.log" 2>/dev/null && break; sleep 0.1; done
ranks=($(pgrep -P "$mpid"))
[ ${#ranks[@]} -eq 2 ] || fail "expected 2 rank processes under mpirun $mpid, found ${#ranks[@]}"
kill -TERM "${ranks[1]}"
for _ in $(seq 1 300); do kill -0 "$mpid" 2>/dev/null || break; sleep 0.1; done
kill -0 "$mpid" 2>/dev/null && fail "mpirun still running 30 s after SIGTERM to rank 1"
wait "$mpid"; rc=$?
mpid=
[ $rc -eq 0 ] || { tail -5 "$work/term.log"; fail "exit status $rc after SIGTERM to one rank"; }
grep -q "another rank received a stop signal" "$work/term.log" || fail "no stop message: $(tail -3 "$work/term.log")"
ls -d "$work"/t/checkpoint/step-* > /dev/null 2>&1 || fail "no checkpoint after SIGTERM"
echo "ok: SIGTERM to rank 1 -> $(grep 'another rank' "$work/term.log"), checkpoint $(ls "$work/t/checkpoint")"

# 4. Rank 1 stops itself (SIGSTOP) while rank 0 waits in a barrier with a 3 s timeout
#    (WatchdogJob.HungRankEndsTheJob in tests/unit/distributed/test_watchdog.cpp): rank 0's watchdog
#    prints its line and exits 1, mpirun ends rank 1.
TITAN_TEST_HANG=1 mpirun "${MPIRUN_ARGS[@]}" -x TITAN_TEST_HANG -np 2 "$test_distributed" \
  --gtest_filter=WatchdogJob.HungRankEndsTheJob > "$work/hang.log" 2>&1 &
mpid=$!
SECONDS=0
ranks=()
for _ in $(seq 1 300); do ranks=($(pgrep -P "$mpid")); [ ${#ranks[@]} -eq 2 ] && break; sleep 0.1; done
[ ${#ranks[@]} -eq 2 ] || fail "expected 2 rank processes under mpirun $mpid, found ${#ranks[@]}"
for _ in $(seq 1 400); do kill -0 "$mpid" 2>/dev/null || break; sleep 0.1; done
kill -0 "$mpid" 2>/dev/null && { cat "$work/hang.log"; fail "mpirun still running 40 s after the start of a job with a 3 s timeout"; }
wait "$mpid"; rc=$?
mpid=
[ $rc -ne 0 ] || { cat "$work/hang.log"; fail "mpirun exited 0 with a hung rank"; }
[ $SECONDS -ge 3 ] || { cat "$work/hang.log"; fail "the job ended after ${SECONDS}s, before the 3 s timeout"; }
grep -q "titan: error (rank 0 of 2): MPI_Barrier has not completed after 3\.[0-9] s (\[comm\] train_timeout_seconds = 3); another rank is hung or unreachable" \
  "$work/hang.log" || { cat "$work/hang.log"; fail "no watchdog message from rank 0"; }
grep -q "passed a barrier" "$work/hang.log" && { cat "$work/hang.log"; fail "a barrier completed without rank 1"; }
for p in "${ranks[@]}"; do
  for _ in $(seq 1 100); do alive "$p" || break; sleep 0.1; done
  alive "$p" && { ps -o pid,stat,cmd -p "$p"; fail "rank process $p survived"; }
done
echo "ok: hung rank 1 (SIGSTOP) -> $(grep -o 'MPI_Barrier has not completed.*= 3)' "$work/hang.log"); job ended in ${SECONDS}s with status $rc"
