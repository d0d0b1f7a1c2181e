#!/usr/bin/env bash
# bench/cuda/device_check.sh --dry-run on this build: its CPU parts must pass here (the ptxas
# spill gate when nvcc ran, verify kernels --device cuda and the kernel tests under the grid
# emulator, and 2 steps of the debug recipe through the cuda variants of the norms, SwiGLU,
# embedding, RoPE and attention matching the CPU losses within 1e-5, and 2 steps of a Qwen3-MoE
# debug model through moe.cuda matching moe.grouped_gemm).
set -euo pipefail
titan=$1
src=$2
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
build=$(cd "$(dirname "$titan")" && pwd)
if ! OUT=$out BUILD=$build bash "$src/bench/cuda/device_check.sh" --dry-run; then
  for f in "$out"/*.log; do echo "== $f"; tail -5 "$f"; done >&2
  echo "FAIL: device_check.sh --dry-run" >&2
  exit 1
fi
grep -q "^ok    loss curve" "$out/summary.txt" || { echo "FAIL: no loss curve comparison" >&2; exit 1; }
grep -q "^ok    MoE loss curve" "$out/summary.txt" || { echo "FAIL: no MoE loss curve comparison" >&2; exit 1; }
echo PASS
