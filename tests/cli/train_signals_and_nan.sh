#!/usr/bin/env bash
# `titan train` on SIGINT finishes the step, writes a checkpoint and exits 0; a diverging run stops
# with the step named; bad configs fail with one clear line.
set -uo pipefail
titan=$1 src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
common=(--config "$src/recipes/debug.toml" --model.n_layers 1 --training.seq_len 32 --training.local_batch_size 2
        --metrics.enable_tensorboard false --checkpoint.last_save_in_hf false)

# 1. SIGINT after the first logged step: clean exit with a checkpoint of the last finished step.
"$titan" train "${common[@]}" --job.dump_folder "$work/sig" --training.steps 100000 > "$work/sig.log" 2>&1 &
pid=$!
for _ in $(seq 1 600); do grep -q "step:  1 " "$work/sig.log" 2>/dev/null && break; sleep 0.1; done
kill -INT $pid
wait $pid
rc=$?
[ $rc -eq 0 ] || { echo "FAIL: exit status $rc after SIGINT"; cat "$work/sig.log"; exit 1; }
grep -q "stopping on signal 2" "$work/sig.log" || { echo "FAIL: no stop message"; cat "$work/sig.log"; exit 1; }
ls -d "$work"/sig/checkpoint/step-* > /dev/null 2>&1 || { echo "FAIL: no checkpoint written on SIGINT"; exit 1; }
echo "ok: SIGINT -> checkpoint $(ls "$work/sig/checkpoint") and exit 0"

# 2. A diverging run (absurd learning rate) stops with the step and reason named, non-zero status.
if "$titan" train "${common[@]}" --job.dump_folder "$work/nan" --training.steps 5 --optimizer.lr 1e30 \
     --checkpoint.enable false > "$work/nan.log" 2>&1; then
  echo "FAIL: diverging run exited 0"; cat "$work/nan.log"; exit 1
fi
grep -qE "error: step [0-9]+: (loss is|gradient norm is)" "$work/nan.log" || { echo "FAIL: no non-finite stop message"; tail -5 "$work/nan.log"; exit 1; }
echo "ok: $(grep -E 'error:' "$work/nan.log")"

# 3. Config mistakes: one line naming the key, with a suggestion.
out=$("$titan" train --config "$src/recipes/debug.toml" --training.setps 3 2>&1) && { echo "FAIL: typo accepted"; exit 1; }
echo "$out" | grep -q "steps" || { echo "FAIL: no suggestion: $out"; exit 1; }
[ "$(echo "$out" | wc -l)" -eq 1 ] || { echo "FAIL: error is not one line: $out"; exit 1; }
echo "ok: $out"
