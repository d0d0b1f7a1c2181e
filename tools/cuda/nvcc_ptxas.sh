#!/usr/bin/env bash
# nvcc_ptxas.sh LOG NVCC ARGS...: runs NVCC ARGS (which include -Xptxas -v), keeps its stderr
# (ptxas's per-kernel registers and spills) in LOG and shows it only when the compile fails.
set -u
log=$1
shift
"$@" 2> "$log"
rc=$?
if [ $rc -ne 0 ]; then cat "$log" >&2; fi
exit $rc
