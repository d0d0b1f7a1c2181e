#!/usr/bin/env python3
"""The Python path people use: `datasets` (streaming) reads the files, `tokenizers` encodes
batches of their text column. Prints "<documents> <tokens> <seconds>" (reading and tokenizing,
not the imports or tokenizer loading). Threads: RAYON_NUM_THREADS for tokenizers.

    python_baseline.py TOKENIZER.json json|parquet FILE...
"""
import sys
import time

from datasets import load_dataset
from tokenizers import Tokenizer

tok = Tokenizer.from_file(sys.argv[1])
kind, files = sys.argv[2], sys.argv[3:]
t0 = time.perf_counter()
ds = load_dataset(kind, data_files=files, split="train", streaming=True)
docs = tokens = 0
batch = []
for row in ds:
    batch.append(row["text"])
    if len(batch) == 1024:
        tokens += sum(len(e.ids) + 1 for e in tok.encode_batch(batch, add_special_tokens=False))
        docs += len(batch)
        batch = []
if batch:
    tokens += sum(len(e.ids) + 1 for e in tok.encode_batch(batch, add_special_tokens=False))
    docs += len(batch)
print(docs, tokens, time.perf_counter() - t0)
