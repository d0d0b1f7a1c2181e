#!/usr/bin/env python3
"""Golden fixtures for titan generate / eval (src/infer/*), from transformers (the oracle).

Writes tests/fixtures/infer/:
  tiny_chat/     an HF model folder: a tiny random Qwen3 (2 layers, hidden 48, vocab 1040, f32)
                 with a small tokenizer cut from the bundled Qwen3 one (the first 1000 BPE ids and
                 the merges among them, the 26 added tokens renumbered from 1000; the model's
                 vocabulary is larger than the tokenizer's, as Qwen3's is), Qwen3's chat template
                 and a generation_config.json with EOS [<|im_end|>, <|endoftext|>];
  eval_docs.jsonl  three documents for perplexity;
  generate.json  transformers' greedy generate(do_sample=False) for text, chat, EOS-ending,
                 repetition-penalty and left-padded batch cases: prompt ids, generated ids, decoded
                 text (skip_special_tokens) and the smallest top-1/top-2 logit gap met (ties would
                 make greedy ids fragile);
  cli_expect.txt the generated ids and eval losses above as plain lines, for tests/cli/*.sh;
  eval.json      the ids of eval_docs.jsonl as titan's dataset reads it (each document's ids, then
                 <|endoftext|>) by HF tokenizers, and the perplexity guide's sliding-window loop
                 for several (seq_len, stride): the exact token-weighted mean loss (sum of token
                 losses / count), the guide's own weighting, and the scored token count.

Run: /work/venv-oracle/bin/python tools/oracle/generate_goldens.py
Needs: pip install torch transformers tokenizers safetensors.
"""
import json
import os
import shutil

import tokenizers
import torch
import transformers
from transformers import AutoTokenizer, Qwen3Config, Qwen3ForCausalLM

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
SRC_TOK = os.path.join(ROOT, "assets", "qwen3-tokenizer")
OUT = os.path.join(ROOT, "tests", "fixtures", "infer")
MODEL_DIR = os.path.join(OUT, "tiny_chat")
N_BASE = 1000
MODEL_VOCAB = 1040


def cut_tokenizer():
    with open(os.path.join(SRC_TOK, "tokenizer.json"), encoding="utf-8") as f:
        t = json.load(f)
    vocab = {tok: i for tok, i in t["model"]["vocab"].items() if i < N_BASE}
    merges = [m for m in t["model"]["merges"] if m[0] in vocab and m[1] in vocab and (m[0] + m[1]) in vocab]
    t["model"]["vocab"] = vocab
    t["model"]["merges"] = merges
    remap = {}
    for k, a in enumerate(t["added_tokens"]):
        remap[a["id"]] = N_BASE + k
        a["id"] = N_BASE + k
    with open(os.path.join(MODEL_DIR, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(t, f, ensure_ascii=False)
    with open(os.path.join(SRC_TOK, "tokenizer_config.json"), encoding="utf-8") as f:
        c = json.load(f)
    c["added_tokens_decoder"] = {str(remap[int(k)]): v for k, v in c["added_tokens_decoder"].items()}
    with open(os.path.join(MODEL_DIR, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(c, f, ensure_ascii=False, indent=1)
    return remap


def build_model(eos_ids, pad_id):
    cfg = Qwen3Config(vocab_size=MODEL_VOCAB, hidden_size=48, intermediate_size=96, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=512,
                      rope_theta=10000.0, rms_norm_eps=1e-6, tie_word_embeddings=True, attention_bias=False,
                      use_sliding_window=False, eos_token_id=eos_ids, pad_token_id=pad_id, bos_token_id=None)
    cfg._attn_implementation = "eager"
    torch.manual_seed(2024)
    model = Qwen3ForCausalLM(cfg).float().eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(1.0 + 0.2 * torch.randn_like(p) if "norm" in name else 0.15 * torch.randn_like(p))
    model.generation_config.eos_token_id = eos_ids
    model.generation_config.pad_token_id = pad_id
    model.generation_config.do_sample = False
    return model


def greedy(model, ids, max_new, **kw):
    inp = torch.tensor([ids])
    out = model.generate(inp, attention_mask=torch.ones_like(inp), do_sample=False, max_new_tokens=max_new,
                         output_scores=True, return_dict_in_generate=True, **kw)
    gen = out.sequences[0, len(ids):].tolist()
    gap = min(float(torch.topk(s[0], 2).values[0] - torch.topk(s[0], 2).values[1]) for s in out.scores)
    return gen, gap


def main():
    if os.path.isdir(MODEL_DIR):
        shutil.rmtree(MODEL_DIR)
    os.makedirs(MODEL_DIR)
    remap = cut_tokenizer()
    tok = AutoTokenizer.from_pretrained(MODEL_DIR)
    eot, im_end = tok.convert_tokens_to_ids("<|endoftext|>"), tok.convert_tokens_to_ids("<|im_end|>")
    assert eot == N_BASE and im_end == remap[151645]
    model = build_model([im_end, eot], eot)
    model.save_pretrained(MODEL_DIR, safe_serialization=True)
    torch.set_num_threads(2)

    cases = []

    def add(name, prompt_ids, max_new, eos=None, finish=None, **kw):
        extra = dict(kw)
        if eos is not None:
            extra["eos_token_id"] = eos
        gen, gap = greedy(model, prompt_ids, max_new, **extra)
        eos_list = eos if eos is not None else [im_end, eot]
        eos_list = eos_list if isinstance(eos_list, list) else [eos_list]
        reason = "eos" if gen and gen[-1] in eos_list else "length"
        assert gap > 1e-3, (name, gap)
        cases.append({"name": name, "prompt_ids": prompt_ids, "max_new_tokens": max_new, "eos_ids": eos_list,
                      "repetition_penalty": kw.get("repetition_penalty", 1.0), "ids": gen,
                      "text": tok.decode(gen, skip_special_tokens=True), "finish_reason": reason, "min_gap": gap})
        return gen

    text_ids = tok.encode("Hello world, this is", add_special_tokens=False)
    first = add("text", text_ids, 24)
    chat_ids = tok.apply_chat_template([{"role": "user", "content": "Hi there!"}], tokenize=True,
                                       add_generation_prompt=True, enable_thinking=False, return_dict=False)
    add("chat", list(chat_ids), 16)
    stop_tok = first[5]
    add("eos_early", text_ids, 24, eos=[stop_tok])
    add("repetition_penalty", text_ids, 20, repetition_penalty=1.3)
    add("long_prompt", tok.encode("The quick brown fox jumps over the lazy dog. " * 4, add_special_tokens=False), 12)

    # Left-padded batch: transformers pads on the left with an attention mask; each row's greedy
    # ids equal its unpadded run.
    rows = [text_ids, tok.encode("Short", add_special_tokens=False), list(chat_ids)]
    width = max(len(r) for r in rows)
    inp = torch.tensor([[eot] * (width - len(r)) + r for r in rows])
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
    out = model.generate(inp, attention_mask=mask, do_sample=False, max_new_tokens=10)
    batch = []
    for r, row in enumerate(rows):
        gen = out[r, width:].tolist()
        # A row that ended early is filled with pad (= eot here); cut at its first EOS.
        for k, t in enumerate(gen):
            if t in (im_end, eot):
                gen = gen[:k + 1]
                break
        alone, _ = greedy(model, row, 10)
        assert gen == alone, (r, gen, alone)
        batch.append({"prompt_ids": row, "ids": gen})
    with open(os.path.join(OUT, "generate.json"), "w") as f:
        json.dump({"generator": "tools/oracle/generate_goldens.py", "transformers": transformers.__version__,
                   "torch": torch.__version__, "model": "tiny_chat", "cases": cases, "batch": batch,
                   "batch_max_new_tokens": 10}, f, ensure_ascii=False, indent=1)
        f.write("\n")

    # Perplexity (sliding windows, transformers' perplexity guide) on three documents.
    docs = []
    with open(os.path.join(ROOT, "data", "c4_sample", "c4_demo_300.jsonl"), encoding="utf-8") as f:
        for line in f:
            docs.append(json.loads(line)["text"][:700])
            if len(docs) == 3:
                break
    with open(os.path.join(OUT, "eval_docs.jsonl"), "w", encoding="utf-8") as f:
        for d in docs:
            f.write(json.dumps({"text": d}, ensure_ascii=False) + "\n")
    ids = []
    for d in docs:
        ids += tok.encode(d, add_special_tokens=False) + [eot]
    enc = torch.tensor([ids])
    runs = []
    for seq_len, stride in [(64, 32), (64, 64), (100, 37), (512, 512), (40, 5)]:
        nll_sum, count, guide_sum, guide_n, windows = 0.0, 0, 0.0, 0, 0
        prev_end = 0
        n = enc.size(1)
        for begin in range(0, n, stride):
            end = min(begin + seq_len, n)
            trg_len = end - prev_end
            input_ids = enc[:, begin:end]
            target = input_ids.clone()
            target[:, :-trg_len] = -100
            counted = int((target[:, 1:] != -100).sum())
            if counted > 0:
                with torch.no_grad():
                    loss = model(input_ids, labels=target).loss
                nll_sum += float(loss) * counted
                count += counted
                guide_sum += float(loss) * (trg_len - 1)
                guide_n += trg_len - 1
            windows += 1
            prev_end = end
            if end == n:
                break
        runs.append({"seq_len": seq_len, "stride": stride, "loss": nll_sum / count, "tokens": count,
                     "windows": windows, "guide_loss": guide_sum / guide_n})
        print(f"eval seq_len {seq_len} stride {stride}: loss {nll_sum / count:.6f} guide {guide_sum / guide_n:.6f} "
              f"tokens {count} windows {windows}")
    with open(os.path.join(OUT, "eval.json"), "w") as f:
        json.dump({"generator": "tools/oracle/generate_goldens.py", "transformers": transformers.__version__,
                   "tokenizers": tokenizers.__version__, "torch": torch.__version__, "model": "tiny_chat",
                   "data": "eval_docs.jsonl", "ids": ids, "runs": runs}, f, indent=1)
        f.write("\n")
    # The same numbers as plain lines for tests/cli/generate_eval.sh (bash, no JSON parser):
    #   gen <case> <finish_reason> <generated ids...>      eval <seq_len> <stride> <loss> <tokens>
    with open(os.path.join(OUT, "cli_expect.txt"), "w") as f:
        for c in cases:
            f.write(" ".join(["gen", c["name"], c["finish_reason"]] + [str(i) for i in c["ids"]]) + "\n")
        for r in runs:
            f.write(f"eval {r['seq_len']} {r['stride']} {r['loss']!r} {r['tokens']}\n")
    for c in cases:
        print(c["name"], c["finish_reason"], len(c["ids"]), "min gap", round(c["min_gap"], 4), repr(c["text"][:60]))


if __name__ == "__main__":
    main()
