#!/usr/bin/env python3
"""Golden token ids from Hugging Face `tokenizers` for titan's tokenizer tests.

Run from the repository root with the oracle venv:
    /work/venv-oracle/bin/python tools/oracle/tokenizer_goldens.py
Writes tests/fixtures/tokenizer/{c4_en_train_first1000,c4_demo_300,adversarial,sweep,decode}.ttkg.

File format (little-endian), read by tests/unit/data/golden_file.h:
    magic b"TTKG", u32 version (1), u32 record count, then per record:
    u32 len + name bytes
    u32 len + unit bytes, u32 repeat     text = unit * repeat (raw bytes, may be invalid UTF-8)
    u32 token count, u64 FNV-1a-64 of the ids as u32 LE bytes
    u32 len + ids as unsigned LEB128 varints (len 0: only count and hash are stored)
Dataset files hold no text (unit empty, repeat 0): record i is line i of the dataset's JSONL file.
Sweep records hold no text either: the test rebuilds it with sweep_text() below.
Decode records: `unit` is the expected decode() output, ids are the input.
"""
import json
import os
import random
import struct
import sys

from tokenizers import Tokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOK = os.path.join(ROOT, "assets", "qwen3-tokenizer", "tokenizer.json")
OUT = os.path.join(ROOT, "tests", "fixtures", "tokenizer")


def fnv1a(ids):
    # FNV-1a, 64 bit, over the ids as little-endian u32 bytes.
    data = struct.pack("<%dI" % len(ids), *ids)
    h = 1469598103934665603
    p = 1099511628211
    m = 0xFFFFFFFFFFFFFFFF
    for b in data:
        h = ((h ^ b) * p) & m
    return h


def varints(ids):
    out = bytearray()
    for v in ids:
        while v >= 0x80:
            out.append((v & 0x7F) | 0x80)
            v >>= 7
        out.append(v)
    return bytes(out)


def record(name, unit, repeat, ids, store_ids=True):
    payload = varints(ids) if store_ids else b""
    name = name.encode()
    return (struct.pack("<I", len(name)) + name + struct.pack("<I", len(unit)) + unit + struct.pack("<I", repeat)
            + struct.pack("<IQ", len(ids), fnv1a(ids)) + struct.pack("<I", len(payload)) + payload)


def write(path, records):
    with open(path, "wb") as f:
        f.write(b"TTKG" + struct.pack("<II", 1, len(records)))
        for r in records:
            f.write(r)
    print("wrote %s (%d records, %d bytes)" % (os.path.relpath(path, ROOT), len(records), os.path.getsize(path)))


def text_of(raw):
    # What `tokenizers` sees for raw bytes: Python's decode with U+FFFD replacement.
    return raw.decode("utf-8", "replace")


def adversarial_cases():
    c = []
    s = lambda name, text, repeat=1: c.append((name, text.encode("utf-8", "surrogatepass"), repeat))
    b = lambda name, raw, repeat=1: c.append((name, raw, repeat))
    s("empty", "")
    s("emoji_zwj", "👍🏽 👨‍👩‍👧‍👦 family 🏳️‍🌈 flag ❤️‍🔥 🧑🏿‍🚀x🫠")
    s("emoji_only", "😀😃😄😁😆😅😂🤣")
    s("cjk", "日本語のテキスト、中文文本。한국어 텍스트 ｆｕｌｌｗｉｄｔｈ ＡＢＣ１２３")
    s("combining", "e\u0301 cafe\u0301 A\u030A\u0323 Z\u0351\u0346\u034a\u0300a\u0300l\u0489g\u0337o")
    s("nfc_changes", "\u212b \u2126 \u1e9b\u0323 \u1100\u1161\u11a8 o\u0308\u0304 \u0041\u030a \u00c5 q\u0307\u0323")
    s("nfc_mark_first", "\u0301start and \u0300\u0301\u0302 marks")
    s("rtl", "مرحبا بالعالم! שלום עולם. \u200fرقم ١٢٣\u200e abc \u202eevil\u202c")
    s("digits", "1234567890 3.14159 1,000,000 ١٢٣٤٥ ۱۲۳ Ⅻ ½ ² 0x1F 2024-01-01 𝟘𝟙𝟚")
    s("crlf", "line one\r\nline two\r\n\r\nline four\rcr only\n\n\n")
    s("whitespace_runs", "   leading and trailing   \t\t\tx  \n \n b    \n\t\n  \u00a0\u2003\u3000 x     ")
    s("unicode_spaces", "a\u180eb a\u2028b a\u2029b \u0085x y\u200bz \ufeffbom \u00a0\u00a0 \u1680 \u2000\u200a \u202f\u205f")
    s("only_spaces", "          ")
    s("only_newlines", "\n\n\n\r\n")
    s("contractions", "I'm you're we've they'll he'd it's can't DON'T I'M YOU'RE She'S 'll 'd'")
    s("contractions_unicode", "I’m you’re don’t it‘s ʼtis 'ſ 'K ''s ' s 'S'T")
    s("special_tokens", "<|endoftext|>a<|endoftext|>b <|im_start|>user\nhi<|im_end|>\n")
    s("special_partial", "<|endoftext <|im_start|<|im_start|><|im_end|>< |endoftext| > <|endoftext|><|endoftext|>")
    s("think_tools", "<think>\nreason\n</think>\n\n<tool_call>{\"a\": 1}</tool_call> <|fim_prefix|>x<|fim_suffix|>")
    s("code", "def f(x):\n    return x**2  # square\n\tif (a && b) { c->d[0] = '\\n'; }\n")
    s("controls", "a\x00b\x01c\x7f\x1b[31mred\x1b[0m\x0b\x0c")
    s("punct_runs", "!!!??? ... --- *** ((([[[{{{ ''' \"\"\" ``` ~~~ @@@ ### $$$ %%% ^^^ &&& ;;; ::: ,,,")
    s("mixed_scripts", "Привет мир! Γειά σου Κόσμε! नमस्ते दुनिया ສະບາຍດີ ជំរាបសួរ ❤ 🇺🇸🇩🇪")
    s("long_word", "supercalifragilisticexpialidocious" * 40)
    s("url_email", "https://example.com/path?q=1&r=2#frag mailto:someone@example.org")
    b("invalid_ff", b"\xff")
    b("invalid_mid", b"abc\x80def\xfe")
    b("invalid_truncated", b"\xe2\x82 x \xf0\x9f\x98 y \xc3")
    b("invalid_surrogate", b"\xed\xa0\x80\xed\xbf\xbf")
    b("invalid_overlong", b"\xc0\xaf\xe0\x80\xaf\xf0\x80\x80\xaf")
    b("invalid_above_max", b"\xf4\x90\x80\x80\xf5\x80")
    b("invalid_mixed", "valid ✓ ".encode() + b"\x80\x80" + "日本".encode() + b"\xe6\x97" + b" end<|endoftext|>\xff")
    b("1mb_mixed_line", "The quick brown fox jumps over the lazy dog 1234, ünïcödé 日本 🙂! don't ".encode(), 13000)
    b("1mb_single_letter", b"a", 1 << 20)
    b("1mb_spaces", b" ", 1 << 20)
    b("1mb_digits", b"0123456789", 104858)
    return c


# Kaktovik numerals (Unicode 15.0): PCRE2 10.42 has them as \p{N}, the Oniguruma inside
# `tokenizers` 0.23 does not, so the two split them differently; left out of the sweep and
# documented as the one known divergence (docs/data.md).
KAKTOVIK = range(0x1D2C0, 0x1D2D4)


def sweep_text(start, end):
    # Every scalar value in [start, end) in the contexts that exercise the regex classes.
    parts = []
    for cp in range(start, end):
        if 0xD800 <= cp <= 0xDFFF or cp in KAKTOVIK:
            continue
        ch = chr(cp)
        parts.append(" " + ch + "a" + ch + "1" + ch + "\n")
    return "".join(parts)


SWEEP_BLOCK = 0x8000


def main():
    tok = Tokenizer.from_file(TOK)
    os.makedirs(OUT, exist_ok=True)
    for name in ["c4_en_train_first1000", "c4_demo_300"]:
        with open(os.path.join(ROOT, "data", "c4_sample", name + ".jsonl"), encoding="utf-8") as f:
            texts = [json.loads(line)["text"] for line in f if line.strip()]
        encs = tok.encode_batch(texts)
        write(os.path.join(OUT, name + ".ttkg"),
              [record(str(i), b"", 0, e.ids) for i, e in enumerate(encs)])

    recs = []
    for name, unit, repeat in adversarial_cases():
        ids = tok.encode(text_of(unit * repeat)).ids
        recs.append(record(name, unit, repeat, ids))
    write(os.path.join(OUT, "adversarial.ttkg"), recs)

    recs = []
    # Planes 4-13 are unassigned and 15-16 private use: nothing there behaves unlike plane 14's
    # unassigned code points, so the sweep covers planes 0-3 and 14.
    for start in list(range(0, 0x40000, SWEEP_BLOCK)) + list(range(0xE0000, 0xF0000, SWEEP_BLOCK)):
        ids = tok.encode(sweep_text(start, start + SWEEP_BLOCK)).ids
        recs.append(record("sweep:%d:%d" % (start, start + SWEEP_BLOCK), b"", 0, ids, store_ids=False))
    write(os.path.join(OUT, "sweep.ttkg"), recs)

    # Decode goldens: slices of real encodings cut anywhere (so UTF-8 sequences break), random ids.
    rng = random.Random(1234)
    vocab_n = tok.get_vocab_size(with_added_tokens=True)
    sources = [text_of(u * min(r, 3)) for _, u, r in adversarial_cases() if u]
    recs = []
    for k in range(300):
        if k % 3 == 2:
            ids = [rng.randrange(vocab_n) for _ in range(rng.randrange(1, 12))]
        else:
            ids = tok.encode(rng.choice(sources)).ids
            if ids:
                a = rng.randrange(len(ids))
                ids = ids[a:a + rng.randrange(1, 20)]
        out = tok.decode(ids, skip_special_tokens=False)
        recs.append(record("decode:%d" % k, out.encode("utf-8"), 1, ids))
    write(os.path.join(OUT, "decode.ttkg"), recs)


if __name__ == "__main__":
    sys.exit(main())
