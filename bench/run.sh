#!/usr/bin/env bash
# All side-by-side benchmarks (make bench). Each prints its own table; see bench/*/RESULTS.md.
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
bash "$src/bench/train_step/run.sh" "$src/build/titan"
if command -v mpirun >/dev/null; then bash "$src/bench/distributed/run.sh" "$src/build/titan"; else echo "mpirun not found: skipping bench/distributed"; fi
