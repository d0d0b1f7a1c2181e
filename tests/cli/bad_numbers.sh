#!/usr/bin/env bash
# Every numeric option, environment variable and step-N folder name: a bad value is one error line
# that names the option (or variable, or folder) and the value, and a non-zero exit, never a bare
# "stoi"; "-1" is not read as 2^64 - 1.
set -u
titan="$1"; src="$2"
fail() { echo "FAIL: $*"; exit 1; }
w=$(mktemp -d); trap 'rm -rf "$w"' EXIT
printf '{"text": "a"}\n' > "$w/a.jsonl"

# expect_error NEEDLE... -- COMMAND...: the command fails with one line holding every needle.
expect_error() {
  local needles=()
  while [ "$1" != -- ]; do needles+=("$1"); shift; done
  shift
  local out rc
  out=$("$@" 2>&1 < /dev/null); rc=$?
  [ $rc -ne 0 ] || fail "accepted: $* -> $out"
  [ $rc -lt 128 ] || fail "crashed (status $rc): $*"
  [ "$(printf '%s\n' "$out" | wc -l)" -eq 1 ] || fail "not one line: $* -> $out"
  for n in "${needles[@]}"; do
    printf '%s' "$out" | grep -qF -- "$n" || fail "'$n' missing from: $out ($*)"
  done
  if printf '%s' "$out" | grep -qE 'sto(i|l|ll|ul|ull|d)\b'; then fail "bare conversion error: $out"; fi
  echo "ok: $out"
}

expect_error "--max-shard-bytes" "'abc'" -- "$titan" export --from "$src/tests/fixtures/io/tied_bf16" --output "$w/o" --max-shard-bytes abc
expect_error "--max-shard-bytes" "'-1'" -- "$titan" export --from "$src/tests/fixtures/io/tied_bf16" --output "$w/o" --max-shard-bytes -1
[ ! -e "$w/o" ] || fail "export wrote output despite a bad option"
expect_error "--threads" "'abc'" -- "$titan" tokenize --input "$w/a.jsonl" --output "$w/a.bin" --threads abc
expect_error "--threads" "100000" -- "$titan" tokenize --input "$w/a.jsonl" --output "$w/a.bin" --threads 100000
expect_error "--threads" "'x'" -- "$titan" encode --threads x
expect_error "--threads" "-2" -- "$titan" encode --threads -2
expect_error "--dp" "'abc'" -- "$titan" info --model debugmodel --dp abc
expect_error "--dp" "0" -- "$titan" info --model debugmodel --dp 0
expect_error "--seq-len" "'2k'" -- "$titan" info --model debugmodel --seq-len 2k
expect_error "--n-layers" "'two'" -- "$titan" info --model debugmodel --n-layers two
expect_error "--n-layers" "9" -- "$titan" info --model debugmodel --n-layers 9
expect_error "--dp" "'abc'" -- "$titan" info --config "$src/recipes/debug.toml" --dp abc
expect_error "--dp" "needs" -- "$titan" info --config "$src/recipes/debug.toml" --dp
expect_error "TITAN_NUM_THREADS" "'abc'" -- env TITAN_NUM_THREADS=abc "$titan" info --model debugmodel
expect_error "TITAN_NUM_THREADS" "100000" -- env TITAN_NUM_THREADS=100000 "$titan" info --model debugmodel
TITAN_NUM_THREADS=1 "$titan" info --model debugmodel > /dev/null || fail "TITAN_NUM_THREADS=1 refused"
TITAN_NUM_THREADS= "$titan" info --model debugmodel > /dev/null || fail "an empty TITAN_NUM_THREADS refused"
# A step folder whose name is not step-N.
mkdir -p "$w/ck/step-abc" && echo '{}' > "$w/ck/step-abc/state.json"
expect_error "step-abc" "step-N" -- "$titan" export --from "$w/ck/step-abc" --output "$w/o2"
expect_error "step-abc" "step-N" -- "$titan" verify checkpoint "$w/ck/step-abc"
echo PASS
