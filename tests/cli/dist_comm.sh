#!/usr/bin/env bash
# The Comm collectives under MPI: the dist unit tests run with 1, 2 and 3 ranks (3: chunks that do
# not divide evenly). Skips (77) when mpirun is missing.
set -euo pipefail
BIN=$1
TEST=$(dirname "$BIN")/test_distributed
command -v mpirun >/dev/null || { echo "mpirun not found; skipping"; exit 77; }
[ -x "$TEST" ] || { echo "missing $TEST (build target test_distributed)"; exit 1; }
source "$2/tests/cli/distributed/env.sh"
for np in 2 3; do
  echo "== $np ranks"
  OMP_NUM_THREADS=1 mpirun "${MPIRUN_ARGS[@]}" -np $np "$TEST" --gtest_brief=1
done
