#!/usr/bin/env python3
"""Writes the Parquet fixtures of tests/unit/data/test_parquet.cpp with pyarrow (the oracle):
text and chat columns in every encoding, codec and page version the reader supports, nulls,
several row groups and pages, and expected.json with each file's rows as pyarrow reads them.

    /work/venv/bin/python tools/oracle/parquet_fixtures.py tests/fixtures/parquet
"""
import json
import os
import sys

import pyarrow as pa
import pyarrow.parquet as pq


def texts(n, seed):
    words = ["alpha", "beta", "gamma", "delta", "caf\u00e9", "\u6f22\u5b57", "emoji \U0001F600", "tab\there",
             "line\nbreak", ""]
    out = []
    x = seed
    for i in range(n):
        x = (x * 1103515245 + 12345) % (1 << 31)
        k = 1 + x % 7
        out.append(" ".join(words[(x >> s) % len(words)] for s in range(k)) + f" #{i % 13}")
    return out


def chat_rows():
    msg = pa.struct([("role", pa.string()), ("content", pa.string())])
    rows = [
        [{"role": "user", "content": "What is 2+2?"}, {"role": "assistant", "content": "4"}],
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi \u00e9"},
         {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "Bye"},
         {"role": "assistant", "content": "Bye."}],
        [],  # an empty list
        None,  # a null list
        [{"role": "user", "content": None}, {"role": "assistant", "content": "no question"}],
        [{"role": "user", "content": "only a question"}, {"role": "assistant", "content": ""}],
    ]
    return rows, pa.list_(msg)


def main(out):
    os.makedirs(out, exist_ok=True)
    expected = {}

    def write(name, table, column, **kw):
        pq.write_table(table, os.path.join(out, name), **kw)
        back = pq.read_table(os.path.join(out, name)).column(column).to_pylist()
        meta = pq.ParquetFile(os.path.join(out, name)).metadata
        expected[name] = {"column": column, "rows": back, "row_groups": meta.num_row_groups}

    t = texts(50, 1)
    t[7] = None
    write("text_plain_snappy.parquet", pa.table({"text": pa.array(t, pa.string()), "id": list(range(50))}), "text",
          compression="snappy", use_dictionary=False, row_group_size=20)
    t = texts(60, 2)
    write("text_dict_zstd_v2.parquet", pa.table({"id": list(range(60)), "text": pa.array(t, pa.string())}), "text",
          compression="zstd", use_dictionary=True, row_group_size=25, data_page_version="2.0")
    t = texts(400, 3)
    t[100] = None
    write("text_dict_gzip_pages.parquet", pa.table({"text": pa.array(t, pa.string())}), "text", compression="gzip",
          use_dictionary=True, data_page_size=512, row_group_size=300)
    t = texts(30, 4)
    schema = pa.schema([pa.field("content", pa.string(), nullable=False), pa.field("n", pa.int64())])
    write("text_required_none.parquet", pa.table({"content": t, "n": list(range(30))}, schema=schema), "content",
          compression="none", use_dictionary=False, data_page_size=256)
    rows, typ = chat_rows()
    write("chat_snappy.parquet", pa.table({"messages": pa.array(rows, typ), "source": ["a"] * len(rows)}), "messages",
          compression="snappy", row_group_size=4)
    write("chat_dict_zstd_v2.parquet", pa.table({"messages": pa.array(rows * 3, typ)}), "messages",
          compression="zstd", use_dictionary=True, data_page_version="2.0", row_group_size=7)
    # Bytes that are not UTF-8 in a binary column named text.
    write("text_invalid_utf8.parquet",
          pa.table({"text": pa.array([b"fine", b"caf\xe9", b"also fine"], pa.binary())}), "text",
          compression="none", use_dictionary=False)
    for v in expected.values():
        v["rows"] = [r if not isinstance(r, bytes) else None for r in v["rows"]]
    with open(os.path.join(out, "expected.json"), "w") as f:
        json.dump(expected, f, ensure_ascii=False, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures/parquet")
