#!/usr/bin/env bash
# Temporary token files and the token cache: SIGTERM in the middle of `titan tokenize` leaves no
# <out>.bin.tmp.* behind; `titan cache info` says where the cache is and what it holds, and
# `titan cache clear` empties it of its own files only.
set -u
titan="$1"; src="$2"
fail() { echo "FAIL: $*"; exit 1; }
w=$(mktemp -d); trap 'rm -rf "$w"' EXIT
c4="$src/data/c4_sample/c4_en_train_first1000.jsonl"

# 1. SIGTERM while tokenizing (40 copies of the C4 sample: long enough to be caught at work).
inputs=(); for i in $(seq 40); do inputs+=("$c4"); done
mkdir "$w/out"
"$titan" tokenize --input "${inputs[@]}" --output "$w/out/big.bin" --quiet --threads 1 2> "$w/tok.log" &
pid=$!
for _ in $(seq 1 600); do ls "$w"/out/big.bin.tmp.* > /dev/null 2>&1 && break; sleep 0.05; done
ls "$w"/out/big.bin.tmp.* > /dev/null 2>&1 || fail "no temporary file seen while tokenizing"
kill -TERM $pid
wait $pid; rc=$?
[ $rc -eq 143 ] || fail "status $rc after SIGTERM (expected 143): $(cat "$w/tok.log")"
[ -z "$(ls -A "$w/out")" ] || fail "left behind after SIGTERM: $(ls -A "$w/out")"
echo "ok: SIGTERM -> status $rc, nothing left in the output folder"

# 2. cache info / clear, with the cache where TITAN_CACHE_DIR says.
export TITAN_CACHE_DIR="$w/cache"
out=$("$titan" cache info) || fail "info on a missing cache: $out"
echo "$out" | grep -q "^cache    $w/cache" || fail "info does not name the folder: $out"
echo "$out" | grep -q "0 token files" || fail "info on a missing cache: $out"
"$titan" train --config "$src/recipes/debug.toml" --model.n_layers 1 --training.seq_len 32 --training.local_batch_size 1 \
  --training.steps 1 --checkpoint.enable false --metrics.enable_tensorboard false --checkpoint.last_save_in_hf false \
  --job.dump_folder "$w/run" --training.dataset c4_demo > "$w/train.log" 2>&1 || fail "train: $(tail -3 "$w/train.log")"
echo keep > "$w/cache/notes.txt"
# A user's files named like the cache's: never removed (judged by what is inside, not the name).
head -c 5000 /dev/urandom > "$w/cache/weights-0123456789abcdef.bin"
echo '{"mine": true}' > "$w/cache/peak_flops.json"
out=$("$titan" cache info) || fail "info: $out"
echo "$out" | grep -q "1 token files" || fail "info after a run: $out"
echo "$out" | grep -q "c4_demo_300-[0-9a-f]\{16\}\.bin" || fail "info does not list the file: $out"
echo "ok: $(echo "$out" | head -2 | tr '\n' ' ')"
out=$("$titan" cache clear) || fail "clear: $out"
echo "$out" | grep -q "removed 1 token files" || fail "clear: $out"
[ "$(ls -A "$w/cache" | tr '\n' ' ')" = "notes.txt peak_flops.json weights-0123456789abcdef.bin " ] ||
  fail "cache folder after clear: $(ls -A "$w/cache")"
grep -q mine "$w/cache/peak_flops.json" || fail "the user's peak_flops.json was changed"
"$titan" cache info | grep -q "0 token files" || fail "not empty after clear"
err=$("$titan" cache frob 2>&1) && fail "unknown cache action accepted"
echo "$err" | grep -q "info" || fail "unknown action error: $err"
echo PASS
