#!/usr/bin/env python3
"""Parses the outputs of bench/distributed/moe_ep.sh and prints its table with ratios.

usage: moe_ep_report.py OUT_DIR
OUT_DIR holds r1/, r2/, ... (one per round): per run NAME (one, one_2t, fsdp, fsdp_no_prefetch, fsdp_ep) a dump folder NAME/
(metrics.jsonl), its console log NAME.log (rank 0) and NAME.rss.RANK (max RSS in KiB from
/usr/bin/time); plus info_fsdp.json and info_ep.json (titan info --dp 2 [--ep 2] --json) and load.
"""
import glob
import json
import os
import re
import statistics
import sys

MIB = 2**20
SETUP = re.compile(r"per rank: params ([\d.]+) MiB, grads ([\d.]+) MiB, optimizer ([\d.]+) MiB, "
                   r"gathered units up to ([\d.]+) MiB")
RUNS = [("one", "1 process, 1 thread"), ("one_2t", "1 process, 2 threads"), ("fsdp", "FSDP dp_shard 2 (no EP)"),
        ("fsdp_no_prefetch", "FSDP dp_shard 2, no prefetch (no EP)"), ("fsdp_ep", "FSDP dp_shard 2 x ep 2")]


def run(rounds, name):
    tps, comm, dispatch, gather, peak, rss, per_round, rss_ranks = [], [], [], [], 0.0, 0.0, [], {}
    setup = None
    for r in rounds:
        first = len(tps)
        with open(os.path.join(r, name, "metrics.jsonl")) as f:
            for line in f:
                m = json.loads(line)
                peak = max(peak, m.get("memory_peak_max_rank_gib", m["memory_peak_gib"]))
                dispatch.append(m.get("dispatch_bytes", 0))
                gather.append(m.get("gather_bytes", 0))
                if m.get("warmup"):
                    continue
                tps.append(m.get("tps_total", m["tps"]))
                comm.append(m.get("comm_pct", 0.0))
        per_round.append(statistics.median(tps[first:]))
        s = SETUP.search(open(os.path.join(r, name + ".log"), errors="replace").read())
        if s:
            setup = tuple(float(x) for x in s.groups())
        for p in glob.glob(os.path.join(r, name + ".rss.*")):
            gib = int(open(p).read().split()[-1]) / 2**20
            rank = p.rsplit(".", 1)[1]
            rss_ranks[rank] = max(rss_ranks.get(rank, 0.0), gib)
            rss = max(rss, gib)
    return {"tps": statistics.median(tps), "comm": statistics.median(comm), "steps": len(tps), "peak": peak,
            "rss": rss, "rss_ranks": [rss_ranks[k] for k in sorted(rss_ranks)], "setup": setup,
            "dispatch": statistics.mean(dispatch) / MIB, "dispatch_range": (min(dispatch) / MIB, max(dispatch) / MIB),
            "gather": statistics.mean(gather) / MIB, "per_round": per_round}


def main():
    out = sys.argv[1]
    rounds = sorted(glob.glob(os.path.join(out, "r[0-9]*")))
    res = {name: run(rounds, name) for name, _ in RUNS}
    one, fsdp = res["one"], res["fsdp"]
    print("| run | tokens/s total | vs 1 process (1 thread) | vs FSDP | comm % | dispatch MiB/step | gathered MiB/step "
          "| params / grads / optimizer MiB per rank | allocator peak GiB (largest rank) | vs 1 | vs FSDP "
          "| max RSS GiB per rank | vs 1 | vs FSDP |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, label in RUNS:
        x = res[name]
        st = "%.1f / %.1f / %.1f" % x["setup"][:3] if x["setup"] else "(whole model)"
        print(f"| {label} | {x['tps']:.1f} | {x['tps'] / one['tps']:.2f}x | {x['tps'] / fsdp['tps']:.2f}x "
              f"| {x['comm']:.1f} | {x['dispatch']:.3f} | {x['gather']:.1f} | {st} | {x['peak']:.3f} "
              f"| {x['peak'] / one['peak']:.2f}x | {x['peak'] / fsdp['peak']:.2f}x "
              f"| {' / '.join('%.3f' % v for v in x['rss_ranks'])} | {x['rss'] / one['rss']:.2f}x "
              f"| {x['rss'] / fsdp['rss']:.2f}x |")
    print()
    print("tokens/s per round: " + "; ".join(
        f"{label} " + " ".join("%.0f" % v for v in res[name]["per_round"]) for name, label in RUNS))
    ep = res["fsdp_ep"]
    info_ep = json.load(open(os.path.join(out, "info_ep.json")))
    info_fsdp = json.load(open(os.path.join(out, "info_fsdp.json")))
    pred = info_ep["rank_dispatch_bytes_per_step"] / MIB
    lo, hi = ep["dispatch_range"]
    print(f"dispatch per step (rank 0): measured mean {ep['dispatch']:.3f} MiB (steps {lo:.3f} to {hi:.3f}), "
          f"titan info --ep 2 predicts {pred:.3f} MiB (evenly routed): measured / predicted {ep['dispatch'] / pred:.3f}")
    for label, info, x in (("FSDP", info_fsdp, fsdp), ("FSDP x ep 2", info_ep, ep)):
        if x["setup"]:
            print(f"per-rank params {label}: measured {x['setup'][0]:.3f} MiB, titan info {info['rank_param_bytes'] / MIB:.3f} MiB")
    if "experts_per_rank" in info_ep:
        print(f"experts per rank under ep 2: {info_ep['experts_per_rank']} of each layer, "
              f"{info_ep['rank_expert_bytes'] / MIB:.3f} MiB of f32 weights")
    print(open(os.path.join(out, "load")).read().strip())


if __name__ == "__main__":
    main()
