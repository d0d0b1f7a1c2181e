#!/usr/bin/env bash
# titan verify kernels: exits 0 with every row ok; --json gives one array with the documented keys;
# the transposed-layout RoPE's f32 forward rows for q and k show max_abs_diff exactly 0; a bad --op is an error.
# Usage: verify_kernels.sh <titan binary> <source dir>
set -u
TITAN="$1"
fail() { echo "FAIL: $*" >&2; exit 1; }

table=$("$TITAN" verify kernels) || fail "verify kernels exited non-zero: $(echo "$table" | grep FAIL | head -5)"
echo "$table" | tail -1 | grep -q ", 0 failed$" || fail "summary line: $(echo "$table" | tail -1)"
echo "$table" | head -1 | grep -q "^op  *variant  *dtype  *shape  *direction  *max_abs_diff  *max_rel_diff  *ok" ||
  fail "table header: $(echo "$table" | head -1)"

json=$("$TITAN" verify kernels --json) || fail "verify kernels --json exited non-zero"
[[ "$json" == \[* ]] || fail "--json output is not an array"
rows=$(echo "$json" | grep -o '{[^}]*}')
n=$(echo "$rows" | wc -l)
[ "$n" -ge 50 ] || fail "only $n rows"
for key in op variant dtype shape direction max_abs_diff max_rel_diff ok; do
  c=$(echo "$rows" | grep -c "\"$key\":")
  [ "$c" -eq "$n" ] || fail "key $key in $c of $n rows"
done
echo "$rows" | grep -q '"ok":false' && fail "a row failed"
# Every op family has rows (the reference-only ones do not, until another variant registers).
for op in gemm linear rope attention moe; do
  echo "$rows" | grep -q "\"op\":\"$op\"" || fail "no rows for op $op"
done

# The transposed-layout RoPE in f32, forward: q and k rows, each exactly 0.0 (listed under its
# name, not its alias "fused").
echo "$rows" | grep '"op":"rope"' | grep -q '"variant":"fused"' && fail "rope rows under the alias fused"
rope=$(echo "$rows" | grep '"op":"rope"' | grep '"variant":"transposed"' | grep '"dtype":"f32"' | grep '"direction":"forward"')
for t in q k; do
  r=$(echo "$rope" | grep "\"shape\":\"$t:")
  [ -n "$r" ] || fail "no transposed rope f32 forward rows for $t"
  bad=$(echo "$r" | grep -v '"max_abs_diff":0.0,')
  [ -z "$bad" ] || fail "transposed rope $t rows not exactly 0: $bad"
done

# One op only, and an unknown op.
only=$("$TITAN" verify kernels --op moe --json) || fail "--op moe exited non-zero"
echo "$only" | grep -o '{[^}]*}' | grep -vq '"op":"moe"' && fail "--op moe printed other ops"
if err=$("$TITAN" verify kernels --op nosuch 2>&1); then fail "--op nosuch succeeded"; fi
echo "$err" | grep -q "unknown op 'nosuch'" || fail "--op nosuch error: $err"
echo "ok: $n rows"
