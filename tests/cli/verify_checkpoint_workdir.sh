#!/usr/bin/env bash
# titan verify checkpoint --workdir: never deletes what the command did not create. A folder that
# exists and is not empty (the checkpoint itself, say) is refused and left as it was; a new folder
# is created and removed again; an empty folder is used and left empty; the default is a fresh
# folder of its own under $TMPDIR.
set -u
titan="$1"; src="$2"
fail() { echo "FAIL: $*"; exit 1; }
w=$(mktemp -d); trap 'rm -rf "$w"' EXIT
cp -r "$src/tests/fixtures/io/tied_bf16" "$w/ck"
listing() { (cd "$1" && find . -printf '%p %s\n' | sort); }
before=$(listing "$w/ck")

# The checkpoint as its own workdir: refused, nothing lost.
err=$("$titan" verify checkpoint "$w/ck" --workdir "$w/ck" 2>&1) && fail "workdir = checkpoint accepted"
echo "$err" | grep -q -- "--workdir $w/ck: exists and is not empty" || fail "error: $err"
[ "$(echo "$err" | wc -l)" -eq 1 ] || fail "error is not one line: $err"
[ "$(listing "$w/ck")" = "$before" ] || fail "the checkpoint changed"
# Any non-empty folder: refused, its files stay.
mkdir "$w/busy"; echo keep > "$w/busy/notes.txt"
"$titan" verify checkpoint "$w/ck" --workdir "$w/busy" > /dev/null 2>&1 && fail "non-empty workdir accepted"
[ "$(cat "$w/busy/notes.txt")" = keep ] || fail "a file in the refused workdir was lost"
# A folder that does not exist: created, used, removed.
"$titan" verify checkpoint "$w/ck" --workdir "$w/new" --quiet > "$w/log" 2>&1 || fail "new workdir: $(cat "$w/log")"
grep -q "export round trip exact" "$w/log" || fail "no verdict: $(cat "$w/log")"
[ ! -e "$w/new" ] || fail "the workdir it created was left behind"
# With --keep the export stays and its place is said.
"$titan" verify checkpoint "$w/ck" --workdir "$w/kept" --quiet --keep > "$w/log" 2>&1 || fail "--keep: $(cat "$w/log")"
[ -f "$w/kept/model.safetensors" ] || fail "--keep did not keep the export"
grep -q "kept the export in $w/kept" "$w/log" || fail "--keep does not say where: $(cat "$w/log")"
# An empty folder: used, emptied of what it wrote, the folder itself stays.
mkdir "$w/empty"
"$titan" verify checkpoint "$w/ck" --workdir "$w/empty" --quiet > "$w/log" 2>&1 || fail "empty workdir: $(cat "$w/log")"
[ -d "$w/empty" ] || fail "the empty workdir given was removed"
[ -z "$(ls -A "$w/empty")" ] || fail "files left in the empty workdir: $(ls -A "$w/empty")"
# The default: a fresh folder under TMPDIR, removed; other things there are untouched.
mkdir -p "$w/tmp/titan-verify-$$"; echo keep > "$w/tmp/titan-verify-$$/x"
TMPDIR="$w/tmp" "$titan" verify checkpoint "$w/ck" --quiet > "$w/log" 2>&1 || fail "default workdir: $(cat "$w/log")"
[ "$(ls -A "$w/tmp")" = "titan-verify-$$" ] || fail "TMPDIR after the run: $(ls -A "$w/tmp")"
[ "$(cat "$w/tmp/titan-verify-$$/x")" = keep ] || fail "another folder in TMPDIR was touched"
echo PASS
