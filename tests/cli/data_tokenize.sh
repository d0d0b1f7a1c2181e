#!/usr/bin/env bash
# titan tokenize: writes a token file whose header and ids match `titan encode`, and fails with a
# clear message (file and line) on a malformed JSON line, a missing text field or an empty input.
set -u
titan="$1"; src="$2"
fail() { echo "FAIL: $*"; exit 1; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

printf '{"text": "Hello world"}\n{"text": "日本語"}\n' > "$tmp/a.jsonl"
printf 'plain text\nfile\n' > "$tmp/b.txt"
"$titan" tokenize --input "$tmp/a.jsonl" "$tmp/b.txt" --output "$tmp/out.bin" --quiet 2>"$tmp/log" || fail "tokenize exited $?: $(cat "$tmp/log")"
[ "$(head -c 8 "$tmp/out.bin")" = "TITANTOK" ] || fail "bad magic"
# Header: token count at offset 24 (u64), document count at 32.
count=$(od -An -t u8 -j 24 -N 8 "$tmp/out.bin" | tr -d ' ')
docs=$(od -An -t u8 -j 32 -N 8 "$tmp/out.bin" | tr -d ' ')
ids=$(od -An -t u4 -j 64 -v "$tmp/out.bin" | tr -s ' \n' ' ' | sed 's/^ //; s/ $//')
e1=$(printf '{"text": "Hello world"}\n' | "$titan" encode --jsonl)
e2=$(printf '{"text": "日本語"}\n' | "$titan" encode --jsonl)
e3=$(printf '{"text": "plain text\\nfile\\n"}\n' | "$titan" encode --jsonl)
want="$e1 151643 $e2 151643 $e3 151643"
[ "$ids" = "$want" ] || fail "ids: got [$ids] want [$want]"
[ "$docs" = 3 ] || fail "document count $docs"
[ "$count" = "$(echo $want | wc -w)" ] || fail "token count $count"
grep -q "wrote $tmp/out.bin (3 documents" "$tmp/log" || fail "summary line missing: $(cat "$tmp/log")"

printf '{"text": "a"}\n{"text": "b"\n' > "$tmp/bad.jsonl"
err=$("$titan" tokenize --input "$tmp/bad.jsonl" --output "$tmp/x.bin" --quiet 2>&1) && fail "malformed accepted"
echo "$err" | grep -q "bad.jsonl:2: malformed JSON" || fail "malformed error: $err"
echo "$err" | grep -q "(pass --skip-bad-lines to skip such lines)" || fail "hint does not name tokenize's option: $err"
echo "$err" | grep -q -- "--data\." && fail "hint names a job option that does not exist: $err"
[ ! -e "$tmp/x.bin" ] || fail "output written despite the error"
"$titan" tokenize --input "$tmp/bad.jsonl" --output "$tmp/x.bin" --skip-bad-lines --quiet 2>&1 | grep -q "skipped 1 bad lines" || fail "skip"
printf '{"body": "a"}\n' > "$tmp/nt.jsonl"
err=$("$titan" tokenize --input "$tmp/nt.jsonl" --output "$tmp/x.bin" 2>&1) && fail "missing text accepted"
echo "$err" | grep -q 'nt.jsonl:1: no "text" field' || fail "missing text error: $err"
: > "$tmp/empty.jsonl"
err=$("$titan" tokenize --input "$tmp/empty.jsonl" --output "$tmp/x.bin" 2>&1) && fail "empty accepted"
echo "$err" | grep -q "empty.jsonl: no documents" || fail "empty error: $err"
err=$("$titan" tokenize --input "$tmp/missing.jsonl" --output "$tmp/x.bin" 2>&1) && fail "missing input accepted"
echo "$err" | grep -q "missing.jsonl" || fail "missing input error: $err"
echo PASS
