#!/usr/bin/env bash
# `titan info --pp-schedule`: a pipeline schedule printed as each rank's actions, a simulated time
# grid and its bubble fraction next to the textbook one; the same as JSON; one-line refusals of an
# unknown schedule and of fewer microbatches than pipeline ranks. The expected values are the
# analytic ones: 1F1B at pp 4 with 8 microbatches idles (pp - 1) / (m + pp - 1) = 3/11 of the
# time, rank r holds pp - r activations and runs pp - 1 - r warm-up forwards.
set -u
titan=$1
fail() { echo "FAIL: $*"; exit 1; }
command -v python3 > /dev/null || { echo "SKIP: no python3"; exit 77; }

out=$("$titan" info --pp-schedule 1f1b --pp 4 --microbatches 8 2>&1) || fail "info --pp-schedule: $out"
grep -q "^pipeline schedule 1F1B: pp 4, 8 microbatches" <<<"$out" || fail "header: $out"
want=$(python3 -c 'print("%.6g" % (3 / 11))')
grep -q "^bubble fraction: $want (analytic for 1F1B: $want)$" <<<"$out" || fail "bubble line: $out"
grep -q "activations held per rank at most 4, 3, 2, 1$" <<<"$out" || fail "activations held: $out"
[ "$(grep -c '^rank [0-3]: ' <<<"$out")" -eq 4 ] || fail "action lines: $out"
[ "$(grep -c '^rank [0-3] |' <<<"$out")" -eq 4 ] || fail "grid rows: $out"
# Rank 0: unshard, then 3 warm-up forwards each sent on, then the steady state's first forward and
# the first gradient it waits for.
grep -q "^rank 0: Us0 F0s0 SA0s0>r1 F1s0 SA1s0>r1 F2s0 SA2s0>r1 F3s0 SA3s0>r1 RG0s0<r1 B0s0 " <<<"$out" ||
  fail "rank 0's actions: $out"
# The last rank: receive, forward, backward, send the gradient back; it starts after pp - 1 forwards.
grep -q "^rank 3: RA0s3<r2 Us3 F0s3 B0s3 SG0s3>r2 RA1s3<r2 " <<<"$out" || fail "rank 3's actions: $out"
grep -q "^rank 3 |\.  \.  \.  F0 B0 B0 F1 " <<<"$out" || fail "rank 3's grid row: $out"
echo "ok: 1F1B pp 4 m 8 printout"

js=$("$titan" info --pp-schedule 1F1B --pp 4 --microbatches 8 --json) || fail "--json: $js"
python3 - "$js" <<'PY' || fail "json: $js"
import json, sys
d = json.loads(sys.argv[1])
assert d["schedule"] == "1F1B" and d["pp"] == 4 and d["microbatches"] == 8 and d["stages_per_rank"] == 1, d
assert abs(d["analytic_bubble_fraction"] - 3 / 11) < 1e-9, d
assert abs(d["bubble_fraction"] - d["analytic_bubble_fraction"]) < 1e-9, d
ranks = d["ranks"]
assert len(ranks) == 4
for r, acts in enumerate(ranks):
    for m in range(8):  # one forward and one backward per microbatch, on stage r
        assert acts.count("F%ds%d" % (m, r)) == 1 and acts.count("B%ds%d" % (m, r)) == 1, (r, m, acts)
        if r > 0:
            assert acts.index("RA%ds%d<r%d" % (m, r, r - 1)) < acts.index("F%ds%d" % (m, r)), (r, m)
        if r < 3:
            assert acts.index("SA%ds%d>r%d" % (m, r, r + 1)) == acts.index("F%ds%d" % (m, r)) + 1, (r, m)
    assert acts[0 if r == 0 else 1] == "Us%d" % r and acts[-1] == "Rs%d" % r, acts
    # warm-up: pp - 1 - r forwards before the first backward
    first_b = next(i for i, a in enumerate(acts) if a.startswith("B"))
    assert sum(a.startswith("F") for a in acts[:first_b]) == 4 - r, (r, acts)
PY
echo "ok: --json"

out=$("$titan" info --pp-schedule Interleaved1F1B --pp 2 --microbatches 4 2>&1) || fail "interleaved: $out"
grep -q "4 stages (2 per rank; stage s on rank s % 2)" <<<"$out" || fail "interleaved placement: $out"
want=$(python3 -c 'print("%.6g" % (1 / 9))')
grep -q "^bubble fraction: $want (analytic for Interleaved1F1B: $want)$" <<<"$out" || fail "interleaved bubble: $out"
echo "ok: Interleaved1F1B defaults to 2 stages per rank"

err=$("$titan" info --pp-schedule ZeroBubble --pp 4 --microbatches 8 2>&1) && fail "unknown schedule accepted: $err"
[ "$(wc -l <<<"$err")" -eq 1 ] || fail "unknown schedule: not one line: $err"
grep -q "pipeline_parallel_schedule 'ZeroBubble' (known: GPipe, 1F1B, Interleaved1F1B)" <<<"$err" ||
  fail "unknown schedule: $err"
err=$("$titan" info --pp-schedule 1F1B --pp 4 --microbatches 2 2>&1) && fail "2 microbatches over 4 ranks accepted: $err"
[ "$(wc -l <<<"$err")" -eq 1 ] || fail "microbatches < pp: not one line: $err"
grep -q "pipeline_parallel_microbatches = 2 is less than pipeline_parallel_degree = 4" <<<"$err" ||
  fail "microbatches < pp: $err"
err=$("$titan" info --pp-schedule Interleaved1F1B --pp 4 --microbatches 6 2>&1) && fail "6 microbatches interleaved over 4 accepted"
grep -q "pipeline_parallel_microbatches = 6 is not a multiple of pipeline_parallel_degree = 4" <<<"$err" ||
  fail "interleaved multiple: $err"
echo "ok: refusals in one line: $err"

# What each pipeline rank holds (titan info --model M --pp P): debugmodel (tied, 4 layers) at pp2,
# batch 4 cut into 4 one-row microbatches of seq 32: rank 1 holds the last stage's layers, the
# final norm (256 f32) and the tied embedding's copy, so exactly 1024 bytes more than rank 0
# (embedding + as many layers); each rank sends 4 x 32 x 256 f32 = 131072 bytes a step (rank 0 the
# activations, rank 1 their gradients); --dp 2 halves the shards; --layers-per-stage 1 at pp4 over
# 6 layers of 0.6B gives the first and last stage 2 each.
json=$("$titan" info --model debugmodel --n-layers 4 --pp 2 --batch 4 --seq-len 32 --json) || fail "info --pp: $json"
json2=$("$titan" info --model debugmodel --n-layers 4 --pp 2 --batch 4 --seq-len 32 --dp 2 --json) || fail "info --pp --dp 2: $json2"
json4=$("$titan" info --model 0.6B --n-layers 6 --pp 4 --layers-per-stage 1 --json) || fail "info --pp 4: $json4"
python3 - "$json" "$json2" "$json4" <<'PY' || fail "info --pp: $json"
import json, sys
a, b, c = (json.loads(x) for x in sys.argv[1:4])
assert a["stages"] == 2 and a["layer_begin"] == [0, 2, 4] and a["microbatches"] == 4, a
r0, r1 = a["ranks"]
assert r0["stages"] == "stage 0: embedding + layers 0-1", r0
assert r1["stages"] == "stage 1: layers 2-3 + head (+ a copy of the tied embedding for the head)", r1
assert r1["rank_param_bytes"] - r0["rank_param_bytes"] == 1024, (r0, r1)
assert r0["sent_bytes_per_step"] == r1["sent_bytes_per_step"] == 4 * 32 * 256 * 4, (r0, r1)
assert r0["max_activations_held"] == 2 and r1["max_activations_held"] == 1, a
assert abs(a["bubble_fraction"] - 0.2) < 1e-12, a
for x, y in zip(a["ranks"], b["ranks"]):
    assert 0 <= y["rank_param_bytes"] - x["rank_param_bytes"] / 2 < 4096, (x, y)
assert c["layer_begin"] == [0, 2, 3, 4, 6], c
PY
err=$("$titan" info --model debugmodel --pp 2 --tp 2 2>&1) && fail "info --pp --tp accepted: $err"
[ "$(wc -l <<<"$err")" -eq 1 ] && grep -q "not together with --tp or --ep" <<<"$err" || fail "info --pp --tp: $err"
echo "ok: titan info --pp: each rank's stages, state and bytes sent"
echo PASS
