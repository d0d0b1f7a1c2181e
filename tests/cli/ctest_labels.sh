#!/usr/bin/env bash
# The quick suite stays quick: the long end-to-end checks (the SFT arithmetic demonstration, the
# multi-rank CLI runs) are their own ctest entries labelled `long`, left out of `ctest -LE long`
# (make test) and run by `ctest -L long` (make test-long); the trainer unit tests stay quick.
set -u
titan="$1"; src="$2"
fail() { echo "FAIL: $*"; exit 1; }
build=$(dirname "$titan")
[ -f "$build/CTestTestfile.cmake" ] || { echo "no CTestTestfile.cmake next to $titan"; exit 77; }
cd "$build"
long=$(ctest -N -L long | sed -n 's/^ *Test *#[0-9]*: *//p')
quick=$(ctest -N -LE long | sed -n 's/^ *Test *#[0-9]*: *//p')
for t in trainer_sft_arithmetic cli_dist_train cli_dist_sft cli_lora_dist; do
  grep -qx "$t" <<<"$long" || fail "$t is not labelled long"
  grep -qx "$t" <<<"$quick" && fail "$t is in the quick suite"
done
grep -qx train_trainer <<<"$quick" || fail "the trainer unit tests left the quick suite"
grep -qx cli_ctest_labels <<<"$quick" || fail "this test is not in the quick suite"
# the quick trainer entry must not run the demonstration
ctest -N -V -R '^train_trainer$' | grep -q -- '--gtest_filter=-SftArithmetic' || fail "trainer still runs SftArithmetic"
grep -q 'ctest.*-LE long' "$src/Makefile" || fail "make test does not run ctest -LE long"
grep -q 'test-long:' "$src/Makefile" || fail "no make test-long"
grep -q 'make test-long' "$src/.ci/run" || fail ".ci/run does not run make test-long"
echo PASS
