#!/usr/bin/env python3
"""Parses the outputs of bench/distributed/run.sh and prints its table with ratios.

usage: report.py OUT_DIR RANKS
OUT_DIR holds r1/, r2/, ... (one per round): per titan run NAME a dump folder NAME/ (metrics.jsonl),
its console log NAME.log (rank 0) and NAME.rss.RANK (max RSS in KiB from /usr/bin/time); per
PyTorch run torch-WRAP.json (one line from torch_baseline.py); plus info.json (titan info --dp
RANKS --json) and load (load averages).
"""
import glob
import json
import os
import re
import statistics
import sys

GIB = 2**30
SETUP = re.compile(r"per rank: params ([\d.]+) MiB, grads ([\d.]+) MiB, optimizer ([\d.]+) MiB, "
                   r"gathered units up to ([\d.]+) MiB")
LIVE = re.compile(r"memory after setup: ([\d.]+) GiB live")

TITAN = [("one", "titan 1 process, 2 threads"), ("replicated", "titan replicated (DP)"),
         ("fsdp", "titan FSDP (prefetch)"), ("fsdp_no_prefetch", "titan FSDP, no prefetch"),
         ("fsdp_no_reshard", "titan FSDP, reshard never"), ("tp2", "titan tensor parallel (SP)")]
TORCH = [("ddp", "pytorch DDP (gloo)"), ("fsdp", "pytorch FSDP2 (gloo)")]


def titan_run(rounds, name):
    tps, comm, peak, rss, per_round = [], [], 0.0, 0.0, []
    setup = live = None
    for r in rounds:
        first = len(tps)
        with open(os.path.join(r, name, "metrics.jsonl")) as f:
            for line in f:
                m = json.loads(line)
                peak = max(peak, m.get("memory_peak_max_rank_gib", m["memory_peak_gib"]))
                if m.get("warmup"):
                    continue
                tps.append(m.get("tps_total", m["tps"]))
                comm.append(m.get("comm_pct", 0.0))
        per_round.append(statistics.median(tps[first:]))
        log = open(os.path.join(r, name + ".log"), errors="replace").read()
        setup = tuple(float(x) for x in SETUP.search(log).groups())
        live = float(LIVE.search(log).group(1))
        for p in glob.glob(os.path.join(r, name + ".rss.*")):
            rss = max(rss, int(open(p).read().split()[-1]) / 2**20)
    return {"tps": statistics.median(tps), "comm": statistics.median(comm), "steps": len(tps), "peak": peak,
            "rss": rss, "setup": setup, "live": live, "per_round": per_round}


def torch_run(rounds, wrap):
    runs = [json.loads(open(os.path.join(r, f"torch-{wrap}.json")).read()) for r in rounds]
    return {"tps": statistics.median(x["tokens_per_s_total"] for x in runs),
            "rss": max(max(x["max_rss_gib"]) for x in runs), "base": max(max(x["base_rss_gib"]) for x in runs),
            "per_round": [x["tokens_per_s_total"] for x in runs]}


def cell(v, fmt):
    return "-" if v is None else format(v, fmt)


def main():
    out, ranks = sys.argv[1], int(sys.argv[2])
    rounds = sorted(glob.glob(os.path.join(out, "r*")))
    t = {name: titan_run(rounds, name) for name, _ in TITAN}
    p = {wrap: torch_run(rounds, wrap) for wrap, _ in TORCH}
    info = json.load(open(os.path.join(out, "info.json")))
    rep = t["replicated"]
    print(open(os.path.join(out, "load")).read().rstrip())
    print(f"{len(rounds)} round(s); titan medians over {rep['steps']} steady-state steps per run; "
          f"memory = largest rank, largest round\n")
    head = (f"{'run':28} {'tok/s total':>11} {'x repl':>7} {'comm %':>7} {'params/grads/optim MiB':>23} "
            f"{'gather MiB':>10} {'live GiB':>8} {'peak GiB':>8} {'x repl':>7} {'max RSS GiB':>11} {'x repl':>7}")
    print(head)
    print("-" * len(head))
    for name, label in TITAN:
        x = t[name]
        pgo = "/".join(f"{v:.1f}" for v in x["setup"][:3])
        print(f"{label:28} {x['tps']:11.1f} {x['tps'] / rep['tps']:6.2f}x {x['comm']:7.1f} {pgo:>23} "
              f"{x['setup'][3]:10.1f} {x['live']:8.3f} {x['peak']:8.3f} {x['peak'] / rep['peak']:6.2f}x "
              f"{x['rss']:11.3f} {x['rss'] / rep['rss']:6.2f}x")
    for wrap, label in TORCH:
        x = p[wrap]
        print(f"{label:28} {x['tps']:11.1f} {x['tps'] / rep['tps']:6.2f}x {'-':>7} {'-':>23} {'-':>10} {'-':>8} "
              f"{'-':>8} {'-':>7} {x['rss']:11.3f} {x['rss'] / rep['rss']:6.2f}x")
    f, one = t["fsdp"], t["one"]
    print("\ntok/s per round (noise):", "; ".join(
        label + " " + " ".join(f"{v:.0f}" for v in x["per_round"])
        for label, x in [(lab, t[n]) for n, lab in TITAN] + [(lab, p[w]) for w, lab in TORCH]))
    print("FSDP / replicated, per rank: params %.3f, grads %.3f, optimizer %.3f, live after setup %.3f, "
          "allocator peak %.3f, max RSS %.3f; tokens/s %.3f" % (
              f["setup"][0] / rep["setup"][0], f["setup"][1] / rep["setup"][1], f["setup"][2] / rep["setup"][2],
              f["live"] / rep["live"], f["peak"] / rep["peak"], f["rss"] / rep["rss"], f["tps"] / rep["tps"]))
    print("FSDP no prefetch / prefetch tokens/s %.3f; reshard never / default %.3f; "
          "%d ranks / 1 process (same 2 cores): FSDP %.3f, replicated %.3f" % (
              t["fsdp_no_prefetch"]["tps"] / f["tps"], t["fsdp_no_reshard"]["tps"] / f["tps"], ranks,
              f["tps"] / one["tps"], rep["tps"] / one["tps"]))
    tp = t["tp2"]
    print("tensor parallel / FSDP (same ranks, same global batch): tokens/s %.3f, per-rank params %.3f, "
          "live after setup %.3f, allocator peak %.3f, max RSS %.3f" % (
              tp["tps"] / f["tps"], tp["setup"][0] / f["setup"][0], tp["live"] / f["live"], tp["peak"] / f["peak"],
              tp["rss"] / f["rss"]))
    print("titan info --dp %d: state %.3f GiB per rank (measured live %.3f), + gathered %.3f GiB "
          "(state + gathered %.3f; measured peak %.3f incl. activations); replicated state %.3f GiB" % (
              ranks, info["rank_state_bytes"] / GIB, f["live"], info["rank_gather_bytes"] / GIB,
              (info["rank_state_bytes"] + info["rank_gather_bytes"]) / GIB, f["peak"],
              (info["param_bytes"] + info["grad_bytes"] + info["optimizer_bytes"]) / GIB))
    print("largest unit: the tied embedding, %.1f%% of the parameters (%d of %d)" % (
        100 * info["embedding_params"] / info["params"], info["embedding_params"], info["params"]))
    print("titan / pytorch: FSDP vs FSDP2 tokens/s %.2fx, max RSS %.2fx; replicated vs DDP tokens/s %.2fx, "
          "max RSS %.2fx (pytorch RSS before the model: %.3f GiB per rank)" % (
              f["tps"] / p["fsdp"]["tps"], f["rss"] / p["fsdp"]["rss"], rep["tps"] / p["ddp"]["tps"],
              rep["rss"] / p["ddp"]["rss"], max(p["fsdp"]["base"], p["ddp"]["base"])))


if __name__ == "__main__":
    main()
