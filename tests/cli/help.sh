#!/usr/bin/env bash
# Every command and action answers --help and -h (the first thing a new user types; it ended in
# "option --help needs a value"): its usage on stdout, status 0, every option the command accepts
# named with its meaning (train: the pointer to --help-config). And export's one dtype rule: the
# source's dtype unless --dtype asks otherwise, said in the summary line.
set -u
titan="$1"; src="$2"
fail() { echo "FAIL: $*"; exit 1; }
w=$(mktemp -d); trap 'rm -rf "$w"' EXIT
cmds=$("$titan" --help 2>&1 | sed -n 's/^  \([a-z]*\) .*/\1/p')
[ -n "$cmds" ] || fail "no command list"
for c in $cmds; do
  for h in --help -h; do
    out=$("$titan" $c $h 2>"$w/err"); rc=$?
    [ $rc -eq 0 ] || fail "titan $c $h: status $rc: $(cat "$w/err")"
    printf '%s' "$out" | head -1 | grep -q "^usage: titan $c" || fail "titan $c $h: no usage line: $out"
  done
  # Every option of the command's check_known lists is in its help.
  f="$src/src/cli/$c.cpp"
  [ -f "$f" ] || continue
  for o in $(awk '/check_known\(\{/,/\}\);/' "$f" | grep -o '"[a-z][a-z-]*"' | tr -d '"' | sort -u); do
    "$titan" $c --help | grep -q -- "--$o" || fail "titan $c --help does not name --$o"
  done
  echo "ok: titan $c --help"
done
for a in "verify kernels" "verify checkpoint" "cache info" "cache clear" "data make-arithmetic" "import gguf"; do
  out=$("$titan" $a --help) || fail "titan $a --help: status $?"
  printf '%s' "$out" | head -1 | grep -q "^usage: titan ${a%% *}" || fail "titan $a --help: $out"
done
for o in op json; do "$titan" verify kernels --help | grep -q -- "--$o" || fail "verify kernels --help lacks --$o"; done
for o in workdir keep quiet; do "$titan" verify checkpoint --help | grep -q -- "--$o" || fail "verify checkpoint lacks --$o"; done
"$titan" train --help | grep -q -- "--help-config" || fail "train --help does not point to --help-config"
"$titan" generate --model x --prompt --help > /dev/null || fail "--help after an option"

# export keeps the source's dtype unless asked, and says which it wrote
out=$("$titan" export --from "$src/tests/fixtures/io/untied_sharded" --output "$w/f32" --tokenizer "$src/assets/qwen3-tokenizer") ||
  fail "export: $out"
grep -q '"torch_dtype": "float32"' "$w/f32/config.json" || fail "f32 source exported as $(grep dtype "$w/f32/config.json")"
printf '%s' "$out" | grep -q "(f32, the source's dtype" || fail "summary: $out"
out=$("$titan" export --from "$w/f32" --output "$w/bf16" --dtype bf16) || fail "export --dtype: $out"
printf '%s' "$out" | grep -q "(bf16, as --dtype asked)" || fail "summary: $out"
"$titan" export --from "$w/bf16" --output "$w/again" > "$w/out" || fail "re-export"
grep -q '"torch_dtype": "bfloat16"' "$w/again/config.json" || fail "bf16 source exported as $(grep dtype "$w/again/config.json")"
echo PASS
