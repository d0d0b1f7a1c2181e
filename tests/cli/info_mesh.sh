#!/usr/bin/env bash
# `titan info --mesh`: the device mesh of a job laid out without launching it — degrees after the
# rules, group sizes, every rank's coordinates (tp fastest) — and the rules' refusals naming keys.
set -u
titan=$1
fail() { echo "FAIL: $*"; exit 1; }

out=$("$titan" info --mesh --world 8 --tp 2 --dp-replicate 2 2>&1) || fail "info --mesh: $out"
grep -q "dp_replicate=2 dp_shard=2 cp=1 tp=2 pp=1 ep=1 (world 8)" <<<"$out" || fail "degrees: $out"
grep -q "fsdp 2 (dp_shard x cp), batch 4" <<<"$out" || fail "groups: $out"
grep -q "refused today" <<<"$out" && fail "tp > 1 is said to be refused for training: $out"
cp=$("$titan" info --mesh --world 4 --cp 2 2>&1) || fail "info --mesh --cp 2: $cp"
grep -q "refused today" <<<"$cp" && fail "cp > 1 is said to be refused for training: $cp"
grep -q "cp rank c holds chunks c and 3 - c of 4" <<<"$cp" || fail "no context-parallel layout: $cp"
# rank 5 = dp_replicate 1, dp_shard 0, tp 1 (row-major pp, dp_replicate, dp_shard, cp, tp).
row=$(awk '$1 == 5' <<<"$out")
[ "$(echo $row)" = "5 0 1 0 0 1 0 1 2" ] || fail "rank 5's coordinates: '$row'"$'\n'"$out"
echo "ok: 2 x 2 x 2 mesh laid out"

js=$("$titan" info --mesh --world 4 --ep 2 --json) || fail "--json"
grep -q '"expert_fsdp": 2' <<<"$js" || fail "json: $js"
grep -q '\[0, 0, 3, 0, 0, 1, 1, 3\]' <<<"$js" || fail "json rank 3: $js"
echo "ok: --json"

err=$("$titan" info --mesh --world 8 --tp 3 2>&1) && fail "tp 3 of 8 ranks accepted"
grep -q "tensor_parallel_degree" <<<"$err" && [ "$(wc -l <<<"$err")" -eq 1 ] || fail "refusal: $err"
err=$("$titan" info --mesh --world 2 --tp 2 --model 0.6B 2>&1) || fail "0.6B tp 2: $err"
err=$("$titan" info --mesh --world 4 --ep 4 --model debug-moe 2>&1)
rc=$?
if [ $rc -ne 0 ]; then grep -q "num_experts" <<<"$err" || fail "ep refusal: $err"; fi
err=$("$titan" info --mesh --world 3 --tp 3 --model 0.6B 2>&1) && fail "tp 3 of 16 heads accepted"
grep -q "does not divide the model's attention heads" <<<"$err" || fail "heads refusal: $err"
echo "ok: refusals name the keys: $err"
echo PASS
