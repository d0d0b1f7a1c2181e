#!/usr/bin/env bash
# titan encode: ids per line and per JSON-lines record (expected ids from HF tokenizers), errors
# on malformed records naming stdin and the line, --skip-bad-lines, and a bad --tokenizer.
set -u
titan="$1"
fail() { echo "FAIL: $*"; exit 1; }

out=$(printf "Hello world, don't <|endoftext|> x\n\n日本語\n" | "$titan" encode) || fail "encode exited $?"
want=$'9707 1879 11 1513 944 220 151643 856\n\n101059 102819'
[ "$out" = "$want" ] || fail "line mode: got [$out] want [$want]"

out=$(printf '{"text": "Hello\\nworld"}\n{"text": ""}\n' | "$titan" encode --jsonl --threads 2) || fail "jsonl exited $?"
[ "$out" = $'9707 198 14615\n' ] || [ "$out" = "9707 198 14615" ] || fail "jsonl mode: got [$out]"

out=$(printf '{"text": "a"}\n{"text": \n' | "$titan" encode --jsonl 2>/dev/null) && fail "malformed line accepted"
[ "$out" = "64" ] || fail "records before a bad line: got [$out]"
err=$(printf '{"text": "a"}\n{"text": \n' | "$titan" encode --jsonl 2>&1 >/dev/null) && fail "malformed line accepted"
echo "$err" | grep -q "<stdin>:2: malformed JSON" || fail "malformed error: $err"
err=$(printf '{"txt": "a"}\n' | "$titan" encode --jsonl 2>&1 >/dev/null) && fail "missing text accepted"
echo "$err" | grep -q '<stdin>:1: no "text" field' || fail "missing text error: $err"

out=$(printf '{"text": "a"}\n{bad\n{"text": "b"}\n' | "$titan" encode --jsonl --skip-bad-lines 2>/tmp/titan_enc_err.$$) || fail "skip exited $?"
[ "$out" = $'64\n65' ] || fail "skip mode: got [$out]"
grep -q "skipped 1 bad lines" /tmp/titan_enc_err.$$ || fail "skip count not reported"
rm -f /tmp/titan_enc_err.$$

err=$(echo hi | "$titan" encode --tokenizer /nonexistent 2>&1) && fail "bad tokenizer accepted"
echo "$err" | grep -q "/nonexistent: tokenizer file not found" || fail "bad tokenizer error: $err"
err=$(echo hi | "$titan" encode --tokeniser x 2>&1) && fail "unknown option accepted"
echo "$err" | grep -q "did you mean --tokenizer" || fail "unknown option error: $err"
echo PASS
