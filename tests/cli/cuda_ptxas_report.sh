#!/usr/bin/env bash
# tools/cuda/ptxas_report.sh (the register-spill gate of the nvcc build, cmake/cuda.cmake): a log
# without spills passes and lists every kernel; a spill in a hot kernel fails naming it; a spill
# in another kernel passes; an empty log fails. Runs without nvcc (the logs are written here).
set -euo pipefail
src=$2
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
entry() {  # name arch stores loads regs
  printf "ptxas info    : Compiling entry function '%s' for '%s'\n" "$1" "$2"
  printf "ptxas info    : Function properties for %s\n" "$1"
  printf "    0 bytes stack frame, %s bytes spill stores, %s bytes spill loads\n" "$3" "$4"
  printf "ptxas info    : Used %s registers, used 1 barriers, 384 bytes smem\n" "$5"
}
report=$src/tools/cuda/ptxas_report.sh
{ entry _Z13attention_fwdv sm_90 0 0 128; entry _Z10helper_fwdv sm_80 0 0 40; } > "$t/ok.txt"
out=$(bash "$report" --hot 'attention' "$t/ok.txt") || fail "a log without spills failed"
[ "$(echo "$out" | wc -l)" -eq 2 ] || fail "expected 2 kernels in the table, got: $out"
echo "$out" | grep -q "sm_90 *128 regs" || fail "registers not reported: $out"
{ entry _Z13attention_bwdv sm_90 24 32 255; } > "$t/hot.txt"
if err=$(bash "$report" --hot 'attention' "$t/ok.txt" "$t/hot.txt" 2>&1 >/dev/null); then fail "a spilling hot kernel passed"; fi
echo "$err" | grep -q "hot kernel _Z13attention_bwdv spills registers on sm_90 (24 bytes stored, 32 loaded)" ||
  fail "the failure does not name the kernel: $err"
{ entry _Z10helper_bwdv sm_90 8 8 255; } > "$t/cold.txt"
bash "$report" --hot 'attention' "$t/cold.txt" > /dev/null || fail "a spill outside the hot kernels failed"
: > "$t/empty.txt"
if bash "$report" "$t/empty.txt" > /dev/null 2>&1; then fail "an empty log passed"; fi
echo PASS
