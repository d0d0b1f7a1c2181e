#!/usr/bin/env python3
"""HF `tokenizers` baseline for bench/tokenizer/run.sh: tokens/s of encode_batch on the "text"
fields of a JSON-lines file. Threads come from RAYON_NUM_THREADS (set by run.sh); JSON parsing and
tokenizer loading are not timed. Prints: <tokens> <seconds>."""
import json
import sys
import time

from tokenizers import Tokenizer

tok = Tokenizer.from_file(sys.argv[1])
with open(sys.argv[2], encoding="utf-8") as f:
    texts = [json.loads(line)["text"] for line in f if line.strip()]
best = None
for _ in range(int(sys.argv[3]) if len(sys.argv) > 3 else 3):
    t0 = time.perf_counter()
    encs = tok.encode_batch(texts)
    dt = time.perf_counter() - t0
    best = dt if best is None else min(best, dt)
print(sum(len(e.ids) for e in encs), best)
