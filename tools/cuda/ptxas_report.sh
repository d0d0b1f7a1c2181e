#!/usr/bin/env bash
# ptxas_report.sh [--hot REGEX] LOG...: the `nvcc -Xptxas -v` logs of the .cu files as one table
# (arch, registers, stack, spill stores, spill loads, kernel name), and exit 1 when a kernel whose
# (mangled) name matches REGEX spills registers, or when no kernel was found at all.
set -euo pipefail
hot=''
if [ "${1:-}" = "--hot" ]; then hot=$2; shift 2; fi
[ $# -gt 0 ] || { echo "usage: ptxas_report.sh [--hot REGEX] LOG..." >&2; exit 2; }
for f in "$@"; do [ -r "$f" ] || { echo "ptxas_report.sh: $f: cannot read" >&2; exit 2; }; done
awk -v hot="$hot" '
  /Compiling entry function/ {
    match($0, /function .[^'"'"']+/); name = substr($0, RSTART + 10, RLENGTH - 10)
    match($0, /for .sm_[0-9a-z]+/); arch = substr($0, RSTART + 5, RLENGTH - 5)
  }
  /bytes stack frame/ { stack = $1; stores = $5; loads = $9 }
  /Used [0-9]+ registers/ {
    match($0, /Used [0-9]+ registers/); regs = substr($0, RSTART + 5, RLENGTH - 15)
    printf "%-6s %4s regs %5s stack %5s spill-st %5s spill-ld  %s\n", arch, regs, stack, stores, loads, name
    n++
    if (hot != "" && name ~ hot && (stores + 0 > 0 || loads + 0 > 0)) {
      printf "ptxas_report.sh: hot kernel %s spills registers on %s (%s bytes stored, %s loaded)\n", name, arch, stores, loads > "/dev/stderr"
      bad = 1
    }
  }
  END {
    if (n == 0) { print "ptxas_report.sh: no kernel in the logs" > "/dev/stderr"; exit 1 }
    exit bad
  }' "$@"
