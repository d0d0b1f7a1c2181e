#!/usr/bin/env python3
"""Dump the scalars of TensorBoard event files with TensorBoard's own reader.

Checks that titan's natively written event files (src/train/tensorboard.cpp) are readable by
TensorBoard. Needs the `tensorboard` package (pip install tensorboard into /work/venv-oracle);
never needed to build or test titan.

usage: tb_read.py LOGDIR_OR_EVENT_FILE [--json]
Prints one line per scalar: tag, step, value (or a JSON object {tag: [[step, value], ...]}).
Exits non-zero when nothing could be read.
"""
import argparse
import json
import sys

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("path", help="a log folder or one events.out.tfevents.* file")
    ap.add_argument("--json", action="store_true", help="print JSON instead of text lines")
    args = ap.parse_args()

    acc = EventAccumulator(args.path, size_guidance={"scalars": 0})  # 0: keep every event
    acc.Reload()
    tags = acc.Tags().get("scalars", [])
    if not tags:
        print(f"tb_read: no scalars found in {args.path}", file=sys.stderr)
        return 1
    out = {t: [[e.step, e.value] for e in acc.Scalars(t)] for t in sorted(tags)}
    if args.json:
        print(json.dumps(out))
    else:
        for tag, events in out.items():
            for step, value in events:
                print(f"{tag}\t{step}\t{value:.9g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
