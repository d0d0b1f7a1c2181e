#!/usr/bin/env python3
"""Golden fixtures for the chat template renderer (src/data/chat_template.*, src/data/jinja*).

Writes tests/fixtures/chat/qwen3_chat_goldens.json:
  "conversations": transformers' tokenizer.apply_chat_template(messages, add_generation_prompt=...,
      enable_thinking=...) on the bundled Qwen3 tokenizer (assets/qwen3-tokenizer), as text
      (tokenize=False) and as ids (tokenize=True), for multi-turn chats, empty and absent system
      prompts, unicode, thinking on / off / unset, assistant history with <think> content and with
      reasoning_content, tool responses, add_generation_prompt on and off;
  "templates": small templates exercising each supported Jinja construct, rendered by the Jinja
      environment transformers compiles chat templates with (trim_blocks, lstrip_blocks, loop
      controls, its tojson), with fixed variables.

Run: /work/venv-oracle/bin/python tools/oracle/chat_template_goldens.py
Needs: pip install transformers tokenizers jinja2 (no torch).
"""
import json
import os

import jinja2
import tokenizers
import transformers
from transformers import AutoTokenizer
from transformers.utils.chat_template_utils import _compile_jinja_template

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
TOK_DIR = os.path.join(ROOT, "assets", "qwen3-tokenizer")
OUT = os.path.join(ROOT, "tests", "fixtures", "chat", "qwen3_chat_goldens.json")

U = {"role": "user"}
A = {"role": "assistant"}


def msg(role, content, **kw):
    m = {"role": role, "content": content}
    m.update(kw)
    return m


CONVERSATIONS = [
    ("user_only", [msg("user", "Hello!")]),
    ("system_user", [msg("system", "You are a helpful assistant."), msg("user", "What is 2+2?")]),
    ("empty_system", [msg("system", ""), msg("user", "Hi")]),
    ("multi_turn", [msg("system", "Be brief."), msg("user", "Name a color."), msg("assistant", "Blue."),
                    msg("user", "Another one?")]),
    ("history_with_think", [msg("user", "Q1"), msg("assistant", "<think>\nfirst I think\n</think>\n\nA1"),
                            msg("user", "Q2")]),
    ("last_assistant_think", [msg("user", "Why is the sky blue?"),
                              msg("assistant", "<think>\nRayleigh scattering.\n</think>\n\nBecause of scattering.")]),
    ("reasoning_content_field", [msg("user", "Q"), msg("assistant", "The answer.", reasoning_content="\nsteps\n")]),
    ("assistant_no_think_after_query", [msg("user", "Q"), msg("assistant", "Plain answer.")]),
    ("two_assistants_after_query", [msg("user", "Q"), msg("assistant", "<think>r1</think>a1"),
                                    msg("assistant", "a2")]),
    ("unicode", [msg("system", "Réponds en français 🇫🇷."), msg("user", "日本語とעברית، ok? e\u0301 👩‍👩‍👧 \u200b")]),
    ("whitespace_content", [msg("user", "\n\n  spaced  \n"), msg("assistant", "\n\nanswer\n"), msg("user", "\t")]),
    ("special_token_text", [msg("user", "say <|im_end|> and <think> literally")]),
    ("tool_response", [msg("user", "weather?"), msg("assistant", "Let me check."),
                       msg("tool", "{\"temp\": 21}"), msg("tool", "{\"wind\": 3}")]),
    ("tool_response_prefix_user", [msg("user", "real question"), msg("assistant", "<think>x</think>calling"),
                                   msg("user", "<tool_response>\nresult\n</tool_response>")]),
    ("system_not_first", [msg("user", "a"), msg("system", "late system"), msg("user", "b")]),
]

OPTIONS = [
    ("gen", True, None),
    ("gen_think_off", True, False),
    ("gen_think_on", True, True),
    ("nogen", False, None),
]

VARS = {"xs": ["a", "b", "c"], "x": 1, "d": {"k": 1, "z": "w"}, "s": "héllo wörld", "n": None}

TEMPLATES = [
    ("loop_vars", "{% for v in xs %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}"
                  "{{ loop.first }}{{ loop.last }}{{ loop.length }}[{{ loop.previtem }}|{{ loop.nextitem }}]"
                  "{% if not loop.last %},{% endif %}{% endfor %}"),
    ("whitespace", "  {% if true %}\n  a\n  {% endif %}\nb  {%- if true -%}  c  {%+ if true %}d{% endif %}"
                   "{% endif %}\n  {{ x }}  \n    {{- x -}}   \n{% for v in xs %}\n    {{ v }}\n{% endfor %}\nend\n"),
    ("whitespace_plus", "{% if true +%}\nkeep newline{% endif %}\n  {%+ if true %}kept indent{% endif %}\n"),
    ("comments", "a {# c #}\n  {#- c2 -#}  b\n  {# own line #}\nc{# x +#}\nd"),
    ("filters", "{{ 'abc'|length }} {{ xs|length }} {{ d|length }} {{ [1, 2]|tojson }} "
                "{{ {'a': [1, 'x', none, true, 1.5, 'é\"\\n']}|tojson }} {{ '  x '|trim }} {{ xs|join(', ') }} "
                "{{ xs|join }} {{ xs|first }} {{ xs|last }} {{ nothing|default('dflt') }} {{ ''|default('e', true) }} "
                "{{ x|string ~ 'z' }} {{ xs|reverse|join }} {{ 'abc'|reverse }} {{ d|items|list|tojson }} {{ 'ab'|list|tojson }}"
                " {{ xs|count }} {{ d|tojson(indent=2) }} {{ nothing|length }}"),
    ("slices", "{{ s[1:3] }}|{{ s[::-1] }}|{{ xs[-1] }}|{{ xs[1:]|join }}|{{ xs[:-1]|join }}|{{ s[-3:] }}|"
               "{{ xs[::2]|join }}|{{ s[100:] }}|{{ xs[5] is defined }}|{{ xs.0 }}|{{ s[0] }}"),
    ("string_methods", "{{ ' a b  c\n'.split()|tojson }} {{ 'a,b,,c'.split(',')|tojson }} {{ 'a,b,c'.split(',', 1)|tojson }} "
                       "{{ 'xxhixx'.strip('x') }} {{ 'xxhixx'.lstrip('x') }} {{ 'xxhixx'.rstrip('x') }} "
                       "{{ ' \t pad \n'.strip() }}| {{ 'ab'.startswith(('x', 'a')) }} {{ 'ab'.endswith('b') }} "
                       "{{ 'a-b-c'.replace('-', '+') }} {{ 'a-b-c'.replace('-', '+', 1) }} {{ 'MiXed'.upper() }} "
                       "{{ 'MiXed'.lower() }} {{ d.get('k') }} {{ d.get('q', 'dflt') }} {{ d.get('q') }} "
                       "{{ d.keys()|list|tojson }} {{ d.values()|list|tojson }}"),
    ("arithmetic", "{{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 2 ** 10 }} {{ 1 / 4 }} {{ 0.1 + 0.2 }} {{ 1e16 }} "
                   "{{ 1.0 }} {{ 2.5e-7 }} {{ 123456789012345678.0 }} {{ 3 * 'ab' }} {{ 1 ~ 2 }} {{ -x }} {{ +x }} "
                   "{{ 1 + 2 * 3 - 4 }} {{ (1 + 2) * 3 }} {{ xs|length - 1 }} {{ 7.5 // 2 }} {{ -7.5 % 2 }} {{ true + 1 }}"
                   " {{ ([1] + [2])|tojson }}"),
    ("tests", "{{ x is defined }} {{ y is defined }} {{ y is undefined }} {{ n is none }} {{ x is not none }} "
              "{{ 3 is odd }} {{ 3 is even }} {{ 4 is divisibleby 2 }} {{ 9 is divisibleby(4) }} {{ 'a' is string }} "
              "{{ 1 is number }} {{ 1.5 is float }} {{ 1 is integer }} {{ true is integer }} {{ true is boolean }} "
              "{{ false is false }} {{ true is true }} {{ d is mapping }} {{ xs is sequence }} {{ x is sequence }} "
              "{{ y is iterable }} {{ s is iterable }} {{ 1 is true }}"),
    ("logic", "{{ x and 'yes' }} {{ n or 'fallback' }} {{ not x }} {{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 'b' in 'abc' }} "
              "{{ 2 not in [1] }} {{ 'k' in d }} {{ 'q' in d }} {{ 'a' in xs }} {{ 'a' if x else 'b' }} "
              "[{{ 'c' if y }}] {{ 'p' if n else 'q' if x else 'r' }} {{ x == 1.0 }} {{ 'a' != 'b' }} {{ 'a' < 'b' }}"
              " {{ none == none }} {{ y == z }} {{ [1, 2] == [1, 2] }} {{ not (x and n) }}"),
    ("scoping", "{% set ns = namespace(n=0, seen=[]) %}{% set top = 1 %}{% for i in range(3) %}{% set ns.n = ns.n + i %}"
                "{% set top = 5 %}{% if i == 1 %}{% set inner = 'set' %}{% endif %}[{{ top }}{{ inner }}]{% endfor %}"
                "{{ ns.n }} {{ top }} {{ inner }}{% if true %}{% set top = 7 %}{% endif %} {{ top }}"
                "{% for a in [1, 2] %}{% for b in ['x', 'y'] %}{{ a }}{{ b }}{{ loop.index }}{% endfor %}{{ loop.index }};{% endfor %}"),
    ("loop_control", "{% for i in range(10) if i is odd %}{% if i > 6 %}{% break %}{% endif %}{% if i == 3 %}"
                     "{% continue %}{% endif %}{{ i }}:{{ loop.index }}/{{ loop.length }} {% else %}none{% endfor %}|"
                     "{% for i in [] %}x{% else %}empty{% endfor %}|{% for i in range(5, 0, -2) %}{{ i }}{% endfor %}|"
                     "{% for c in 'héy' %}{{ c }}.{% endfor %}|{% for k in d %}{{ k }}{% endfor %}|"
                     "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}|{% for q in nothing %}x{% endfor %}"),
    ("if_chain", "{% for v in [0, 1, 2, 3] %}{% if v == 0 %}zero{% elif v == 1 %}one{% elif v == 2 %}two{% else %}many"
                 "{% endif %} {% endfor %}"),
    ("literals", "{{ \"q\\\"\\n\\t\\u00e9\\x41\\101\\q\" ~ '\\'' }} {{ 'a' 'b' }} {{ (1, 2)|tojson }} {{ ()|tojson }} "
                 "{{ {'k': (1,)}|tojson }} {{ True }} {{ None }} {{ 1_000 }} {{ 0.5e1 }} {{ none|tojson }}"),
    ("unicode", "{{ '日本語'|length }} {{ '日本語'[1] }} {{ '\u3000日本\u00a0 '.strip() }}| {{ 'é'|tojson }} "
                "{{ s.split('ö')|tojson }} {{ '👩‍👧'|length }}"),
]


def main():
    tok = AutoTokenizer.from_pretrained(TOK_DIR)
    conversations = []
    for name, messages in CONVERSATIONS:
        for oname, gen, thinking in OPTIONS:
            kw = {} if thinking is None else {"enable_thinking": thinking}
            text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=gen, **kw)
            ids = tok.apply_chat_template(messages, tokenize=True, add_generation_prompt=gen, return_dict=False, **kw)
            if hasattr(ids, "tolist"):
                ids = ids.tolist()
            assert ids == tok.encode(text, add_special_tokens=False), name
            conversations.append({"name": f"{name}/{oname}", "messages": messages, "add_generation_prompt": gen,
                                  "enable_thinking": thinking, "text": text, "ids": ids})
    templates = []
    for name, src in TEMPLATES:
        t = _compile_jinja_template(src)
        templates.append({"name": name, "template": src, "text": t.render(**VARS)})
    out = {"generator": "tools/oracle/chat_template_goldens.py", "transformers": transformers.__version__,
           "tokenizers": tokenizers.__version__, "jinja2": jinja2.__version__,
           "tokenizer": "assets/qwen3-tokenizer", "vars": VARS, "conversations": conversations, "templates": templates}
    with open(OUT, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {len(conversations)} conversations and {len(templates)} templates to {OUT}")


if __name__ == "__main__":
    main()
