#!/usr/bin/env bash
# Runs every libFuzzer target built in a fuzz build folder for a bounded time each.
#   usage: scripts/run-fuzzers.sh [BUILD_DIR=build-fuzz] [SECONDS=60] [FUZZER_NAME...]
# For a target named fuzz_X: the seed corpus is tests/fuzz/corpus/fuzz_X/ when present (new
# inputs go to BUILD_DIR/corpus/fuzz_X/, the committed seeds stay untouched), the dictionary is
# tests/fuzz/fuzz_X.dict when present. Crash reproducers land in BUILD_DIR/findings/fuzz_X/; turn
# each into a regression test. Exit status: non-zero when any fuzzer found a crash.
set -uo pipefail
build=${1:-build-fuzz}
seconds=${2:-60}
shift $(( $# > 2 ? 2 : $# ))
src=$(cd "$(dirname "$0")/.." && pwd)
[ -d "$build" ] || { echo "run-fuzzers: no build folder $build (configure with -DTITAN_FUZZ=ON)" >&2; exit 2; }

targets=()
if [ $# -gt 0 ]; then
  for n in "$@"; do targets+=("$build/$n"); done
else
  for f in "$build"/fuzz_*; do [ -f "$f" ] && [ -x "$f" ] && targets+=("$f"); done
fi
[ ${#targets[@]} -gt 0 ] || { echo "run-fuzzers: no fuzz_* executables in $build" >&2; exit 2; }

failed=()
for bin in "${targets[@]}"; do
  name=$(basename "$bin")
  [ -x "$bin" ] || { echo "run-fuzzers: $bin is not an executable" >&2; failed+=("$name"); continue; }
  work="$build/corpus/$name"
  findings="$build/findings/$name"
  mkdir -p "$work" "$findings"
  corpora=("$work")
  [ -d "$src/tests/fuzz/corpus/$name" ] && corpora+=("$src/tests/fuzz/corpus/$name")
  opts=(-max_total_time="$seconds" -timeout=10 -rss_limit_mb=4096 -print_final_stats=1
        -artifact_prefix="$findings/")
  [ -f "$src/tests/fuzz/$name.dict" ] && opts+=(-dict="$src/tests/fuzz/$name.dict")
  echo "== $name: ${seconds}s, corpus ${corpora[*]}"
  if ! OMP_NUM_THREADS=1 "$bin" "${opts[@]}" "${corpora[@]}" > "$build/$name.log" 2>&1; then
    echo "!! $name failed; see $build/$name.log and $findings/"
    tail -n 30 "$build/$name.log"
    failed+=("$name")
  else
    grep -E "stat::number_of_executed_units|stat::new_units_added" "$build/$name.log" | tr '\n' ' '
    echo
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "run-fuzzers: findings in: ${failed[*]}"
  exit 1
fi
echo "run-fuzzers: all ${#targets[@]} fuzzers ran ${seconds}s without findings"
