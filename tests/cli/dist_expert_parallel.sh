#!/usr/bin/env bash
# Expert parallelism over MPI (debug-moe: 8 experts, top-2, every layer sparse; 2 layers, seq 32,
# global batch 4, 6 steps), each run's loss curve against one process's within 1e-5 relative:
#  - ep2 on 2 ranks (dp_shard 2: each rank holds 4 experts of each layer, whole);
#  - dp_shard 4 x ep 2 on 4 ranks (oversubscribed: each expert sharded over 2 ranks);
#  - every step of both logs dispatch_bytes > 0 in metrics.jsonl, and the setup line names the
#    expert-parallel degree;
#  - ep2's step-3 checkpoint (its step-6 one removed) resumes on one process and at dp_shard 4 x
#    ep 2 with the same losses for steps 4..6;
#  - the HF export joins the experts of the ranks: with a vanishing learning rate dp_shard 4 x ep 2's
#    is one process's byte for byte; after 6 steps ep2's and dp_shard 4 x ep 2's have one process's
#    names, dtypes, shapes and byte ranges, each tensor within 1e-5 relative (needs python3);
#    `titan verify checkpoint` reassembles ep2's per-rank expert pieces;
#  - bad layouts stop every rank with one line naming the key: expert_parallel_degree 3 on 2 ranks,
#    and ep 2 with a dense model.
# Skips (77) when mpirun is missing.
set -uo pipefail
titan=$1 src=$2
command -v mpirun >/dev/null || { echo "mpirun not found; skipping"; exit 77; }
source "$src/tests/cli/distributed/env.sh"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMP_NUM_THREADS=1
common=(--config "$src/recipes/debug.toml" --model.name qwen3_moe --model.flavor debug-moe --model.n_layers 2
        --training.seq_len 32 --training.global_batch_size 4 --training.steps 6 --metrics.log_freq 1
        --metrics.enable_tensorboard false --lr_scheduler.warmup_steps 2 --compute.threads 1
        --checkpoint.keep_latest_k 0 --checkpoint.interval 3 --checkpoint.export_dtype float32)
ep2=(--parallelism.data_parallel_shard_degree 2 --parallelism.expert_parallel_degree 2)
ep2dp4=(--parallelism.data_parallel_shard_degree 4 --parallelism.expert_parallel_degree 2)

SECONDS=0
run one 1 --training.local_batch_size 4 --checkpoint.enable true --checkpoint.last_save_in_hf true
run ep2 2 --training.local_batch_size 2 "${ep2[@]}" --checkpoint.enable true --checkpoint.last_save_in_hf true
run ep2dp4 4 --training.local_batch_size 1 "${ep2dp4[@]}" --checkpoint.enable true --checkpoint.last_save_in_hf true
for r in ep2 ep2dp4; do
  echo -n "$r vs 1: "; compare "$work/one/metrics.jsonl" "$work/$r/metrics.jsonl" || fail "$r curve differs"
  grep -q "expert parallel 2" "$work/$r.log" || { grep "\[titan\]" "$work/$r.log"; fail "$r: no expert-parallel layout in the setup line"; }
  # Every step dispatches tokens to the other ep rank (6 lines, each with dispatch_bytes > 0).
  awk -v r="$r" '{ n++; if (match($0, /"dispatch_bytes":[0-9]+/)) { b = substr($0, RSTART + 17, RLENGTH - 17) + 0 } else b = 0
                   if (b <= 0) { print r ": a step without dispatch_bytes: " $0; bad = 1 }
                   if (min == "" || b < min) min = b; if (b > max) max = b }
       END { printf "%s: dispatch_bytes on %d steps, %.3f to %.3f MiB per step (rank 0)\n", r, n, min / 1048576, max / 1048576
             exit bad || n != 6 }' "$work/$r/metrics.jsonl" || fail "$r: dispatch_bytes missing from metrics.jsonl"
done
if grep -q dispatch_bytes "$work/one/metrics.jsonl"; then fail "one process logged dispatch_bytes"; fi

# ep2's step-3 checkpoint (step 6 removed) resumes on one process and on 4 ranks at dp_shard 4 x ep 2.
[ -d "$work/ep2/checkpoint/step-3" ] && [ -d "$work/ep2/checkpoint/step-6" ] || fail "ep2 wrote no step-3 / step-6 checkpoint"
for r in resumed1 resumed_ep2dp4; do mkdir -p "$work/$r/checkpoint"; cp -r "$work/ep2/checkpoint/step-3" "$work/$r/checkpoint/"; done
run resumed1 1 --training.local_batch_size 4 --checkpoint.enable true --checkpoint.last_save_in_hf false
run resumed_ep2dp4 4 --training.local_batch_size 1 "${ep2dp4[@]}" --checkpoint.enable true --checkpoint.last_save_in_hf false
for r in resumed1 resumed_ep2dp4; do
  grep -q "resumed from .*step-3" "$work/$r.log" || fail "$r: no resume from step-3"
  [ "$(curve "$work/$r/metrics.jsonl" | cut -d' ' -f1 | tr '\n' ' ')" = "4 5 6 " ] || fail "$r: logged steps are not 4 5 6"
  echo -n "$r (from ep2's step 3) vs uninterrupted: "; compare "$work/one/metrics.jsonl" "$work/$r/metrics.jsonl" || fail "$r"
done

# The HF exports: an ep run's joins the experts of its ranks into one process's tensor set. With a
# vanishing learning rate (1e-30: every weight keeps its initial value) dp_shard 4 x ep 2's export
# is one process's byte for byte; after the 6 trained steps, ep2's and dp_shard 4 x ep 2's have the
# same header (names, dtypes, shapes, byte ranges) and every tensor within 1e-5 relative (L2) of
# one process's. (Single elements differ more: AdamW's m / sqrt(v) turns a gradient element at
# rounding level into a whole lr step; FSDP dp2 without EP reaches 1.2e-4 of a tensor's largest
# magnitude too.)
run still_one 1 --training.local_batch_size 4 --training.steps 1 --optimizer.lr 1e-30 --checkpoint.enable true \
    --checkpoint.last_save_in_hf true
run still_ep2dp4 4 --training.local_batch_size 1 "${ep2dp4[@]}" --training.steps 1 --optimizer.lr 1e-30 \
    --checkpoint.enable true --checkpoint.last_save_in_hf true
for f in model.safetensors config.json; do
  cmp "$work/still_one/checkpoint/step-1-hf/$f" "$work/still_ep2dp4/checkpoint/step-1-hf/$f" ||
    fail "untrained export: dp_shard 4 x ep 2's $f is not one process's"
done
echo "HF export at lr 1e-30: dp_shard 4 x ep 2's model.safetensors is byte for byte one process's"
"$titan" verify checkpoint "$work/ep2/checkpoint/step-6" --quiet > "$work/verify.log" 2>&1 ||
  { cat "$work/verify.log"; fail "titan verify checkpoint of ep2's step-6 (per-rank expert pieces)"; }
echo "ep2's step-6: $(tail -1 "$work/verify.log")"
a="$work/one/checkpoint/step-6-hf"
command -v python3 > /dev/null || echo "no python3: the trained exports are not compared"
for r in ep2 ep2dp4; do
  command -v python3 > /dev/null || break
  b="$work/$r/checkpoint/step-6-hf"
  [ -f "$a/model.safetensors" ] && [ -f "$b/model.safetensors" ] || fail "no step-6 HF export (1: $(ls "$a" 2>&1); $r: $(ls "$b" 2>&1))"
  cmp -s "$a/config.json" "$b/config.json" || fail "config.json differs between the 1-process and $r exports"
  echo -n "$r's HF export vs 1: "
  python3 - "$a/model.safetensors" "$b/model.safetensors" <<'PY' || fail "$r's HF export differs from one process's"
import json, math, struct, sys
from array import array
def load(p):
    raw = open(p, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    head = json.loads(raw[8:8 + n]); head.pop("__metadata__", None)
    return head, raw[8 + n:]
(ha, da), (hb, db) = load(sys.argv[1]), load(sys.argv[2])
if ha != hb:
    print("headers differ: only in 1:", sorted(set(ha) - set(hb))[:5], "only in the ep run:", sorted(set(hb) - set(ha))[:5],
          "different entries:", [k for k in ha if k in hb and ha[k] != hb[k]][:5]); sys.exit(1)
worst, worst_name, worst_el, equal = 0.0, "-", 0.0, 0
for name, e in ha.items():
    assert e["dtype"] == "F32", name
    lo, hi = e["data_offsets"]
    if da[lo:hi] == db[lo:hi]: equal += 1; continue
    x, y = array("f", da[lo:hi]), array("f", db[lo:hi])
    d2 = sum((u - v) ** 2 for u, v in zip(x, y)); n2 = sum(u * u for u in x)
    r = math.sqrt(d2 / n2) if n2 > 0 else math.inf
    if r > worst: worst, worst_name = r, name
    worst_el = max(worst_el, max(abs(u - v) for u, v in zip(x, y)) / max(abs(u) for u in x))
print(f"{len(ha)} tensors, same names, dtypes, shapes and byte ranges ({len(da)} bytes), {equal} bit-equal; "
      f"worst relative L2 difference {worst:.2e} ({worst_name}), worst element {worst_el:.2e} of its tensor's largest")
sys.exit(worst > 1e-5)
PY
done

# Bad layouts: every rank stops with one line naming expert_parallel_degree, status non-zero.
bad() {
  local name=$1 want=$2; shift 2
  if mpirun "${MPIRUN_ARGS[@]}" -np 2 "$titan" train "${common[@]}" --job.dump_folder "$work/$name" \
       --checkpoint.enable false "$@" > "$work/$name.log" 2>&1; then fail "$name: accepted"; fi
  local line; line=$(grep -m1 "titan: error" "$work/$name.log")
  [ -n "$line" ] || { tail -20 "$work/$name.log"; fail "$name: no 'titan: error' line"; }
  grep -q -- "$want" <<< "$line" || { echo "$line"; fail "$name: the error does not say '$want'"; }
  echo "$name: $line"
}
bad bad_ep3 "expert_parallel_degree = 3" --training.local_batch_size 2 --parallelism.data_parallel_shard_degree 2 \
    --parallelism.expert_parallel_degree 3
bad bad_dense "no MoE layers" --model.name qwen3 --model.flavor debugmodel --training.local_batch_size 2 "${ep2[@]}"
echo "ok (${SECONDS}s)"
