#!/usr/bin/env bash
# Runs the MoE block benchmark side by side, one run: titan's grouped GEMM and reference loop
# (bench/moe/moe_bench), then PyTorch eager with transformers' Qwen3MoeSparseMoeBlock, same shapes.
# Usage: bench/moe/run.sh [build dir] [extra moe_bench / torch options, e.g. --tokens 1024]
# Needs a build with -DTITAN_BENCH=ON and the oracle venv (/work/venv-oracle or $TITAN_VENV).
set -eu
BUILD=${1:-build}
shift || true
VENV=${TITAN_VENV:-/work/venv-oracle}
THREADS=${THREADS:-2}
here=$(dirname "$0")
echo "# $(date -u +%FT%TZ) $(nproc) cpus, load: $(cut -d' ' -f1-3 /proc/loadavg), threads $THREADS"
OMP_NUM_THREADS=$THREADS "$BUILD/bench/moe/moe_bench" "$@"
# PyTorch with its best settings: OPENBLAS_CORETYPE unset (torch does not use it for these
# GEMMs anyway), the same thread count.
# Both experts implementations of transformers: eager (the loop) and grouped_mm.
for impl in eager grouped_mm; do
  env -u OPENBLAS_CORETYPE OMP_NUM_THREADS=$THREADS "$VENV/bin/python" "$here/torch_baseline.py" --threads "$THREADS" \
    --experts-impl $impl $(echo "$@" | sed -E 's/--ref-tokens [^ ]+//; s/--bf16//') 2>&1 | grep -v ExpertsInterface
done
