#!/usr/bin/env bash
# A folder where a file is expected (a job file, a token-id file, a tokenizer.json, an input text)
# is one error line "<path>: is a directory" and a non-zero exit, never an empty file that quietly
# runs the default job.
set -u
titan="$1"; src="$2"
fail() { echo "FAIL: $*"; exit 1; }
w=$(mktemp -d); trap 'rm -rf "$w"' EXIT
mkdir -p "$w/dir" "$w/tok/tokenizer.json"
cd "$w"  # a job that wrongly ran would write its outputs here

check() {  # check COMMAND...: fails with "<w>/...: is a directory" on one line
  local out rc
  out=$("$@" 2>&1 < /dev/null); rc=$?
  [ $rc -ne 0 ] && [ $rc -lt 128 ] || fail "status $rc: $* -> $out"
  [ "$(printf '%s\n' "$out" | wc -l)" -eq 1 ] || fail "not one line: $out"
  printf '%s' "$out" | grep -qE "$w/[^ ]*: is a directory" || fail "no 'is a directory': $out"
  echo "ok: $out"
}
check "$titan" train --config "$w/dir" --training.steps 1
check "$titan" info --config "$w/dir"
check "$titan" score --model "$src/tests/fixtures/io/tied_bf16" --tokens "$w/dir"
check "$titan" encode --tokenizer "$w/tok"
[ -z "$(ls -A "$w/dir")" ] || fail "something was written into the folder"
echo PASS
