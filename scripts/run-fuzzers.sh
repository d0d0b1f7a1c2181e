#!/usr/bin/env bash
# Runs every libFuzzer binary (fuzz_*) found in a build folder for a fixed time each.
#   usage: scripts/run-fuzzers.sh [BUILD_DIR=build-fuzz] [SECONDS=60] [NAME_FILTER]
# Seeds come from tests/fuzz/corpus/<name>/ when that folder exists; new inputs go to
# BUILD_DIR/fuzz-corpus/<name>/ (so the repository's seeds stay small) and crash inputs to
# BUILD_DIR/fuzz-artifacts/<name>/. A crash makes the script exit non-zero; turn the input into a
# regression test by copying it to tests/fuzz/regressions/<name>/.
set -uo pipefail
build="${1:-build-fuzz}"
seconds="${2:-60}"
filter="${3:-}"
root="$(cd "$(dirname "$0")/.." && pwd)"
[ -d "$build" ] || { echo "run-fuzzers: no build folder $build (make fuzz builds it)" >&2; exit 2; }
found=0; failed=()
for bin in $(find "$build" -maxdepth 2 -type f -name 'fuzz_*' -perm -u+x | sort); do
  name="$(basename "$bin")"
  [ -n "$filter" ] && [[ "$name" != *"$filter"* ]] && continue
  found=$((found + 1))
  work="$build/fuzz-corpus/$name"; art="$build/fuzz-artifacts/$name"
  mkdir -p "$work" "$art"
  seeds=(); [ -d "$root/tests/fuzz/corpus/$name" ] && seeds=("$root/tests/fuzz/corpus/$name")
  echo "run-fuzzers: $name for ${seconds}s"
  if ! "$bin" -max_total_time="$seconds" -timeout=60 -rss_limit_mb=4096 -print_final_stats=1 \
       -artifact_prefix="$art/" "$work" "${seeds[@]}" > "$build/fuzz-$name.log" 2>&1; then
    echo "run-fuzzers: $name FAILED; see $build/fuzz-$name.log and $art/"
    tail -n 30 "$build/fuzz-$name.log"
    failed+=("$name")
  else
    grep -E "stat::number_of_executed_units|stat::new_units_added" "$build/fuzz-$name.log" | tr '\n' ' '; echo
  fi
done
[ "$found" -gt 0 ] || { echo "run-fuzzers: no fuzz_* binaries in $build" >&2; exit 2; }
if [ ${#failed[@]} -gt 0 ]; then echo "run-fuzzers: failures: ${failed[*]}"; exit 1; fi
echo "run-fuzzers: $found fuzzers ran clean"
