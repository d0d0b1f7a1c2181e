#!/usr/bin/env python3
"""The Python path people use: `datasets` (streaming) reads the files, `tokenizers` encodes
batches of their text column. Prints "<documents> <tokens> <seconds> <capped>" (reading and
tokenizing, not the imports or tokenizer loading). Threads: RAYON_NUM_THREADS for tokenizers.
BASELINE_MAX_SECONDS (default 0: none) stops after the first batch that ends past that many
seconds (capped = 1): a rate over the file's first part, for files the Python path would take
most of an hour to read whole.

    python_baseline.py TOKENIZER.json json|parquet FILE...
"""
import os
import sys
import time

from datasets import load_dataset
from tokenizers import Tokenizer

tok = Tokenizer.from_file(sys.argv[1])
kind, files = sys.argv[2], sys.argv[3:]
t0 = time.perf_counter()
ds = load_dataset(kind, data_files=files, split="train", streaming=True)
max_seconds = float(os.environ.get("BASELINE_MAX_SECONDS", "0"))
docs = tokens = 0
capped = 0
batch = []
for row in ds:
    batch.append(row["text"])
    if len(batch) == 1024:
        tokens += sum(len(e.ids) + 1 for e in tok.encode_batch(batch, add_special_tokens=False))
        docs += len(batch)
        batch = []
        if max_seconds > 0 and time.perf_counter() - t0 > max_seconds:
            capped = 1
            break
if batch:
    tokens += sum(len(e.ids) + 1 for e in tok.encode_batch(batch, add_special_tokens=False))
    docs += len(batch)
print(docs, tokens, time.perf_counter() - t0, capped)
