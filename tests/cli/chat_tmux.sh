#!/usr/bin/env bash
# titan chat in a real terminal (tmux: send-keys, capture-pane) on the tiny model fixture: the
# "> " prompt, a streamed reply equal to `generate --chat`, history kept across turns (the second
# reply equals generate on the whole conversation), /reset, Ctrl-C stopping a reply but not the
# program, /exit. SKIPs (77) without tmux (scripts/install-deps.sh installs it).
set -u
titan="$1" src="$2"
command -v tmux > /dev/null || { echo "SKIP: tmux is not installed (scripts/install-deps.sh installs it)"; exit 77; }
fail() { echo "FAIL: $*"; [ -n "${sock:-}" ] && tmux -S "$sock" capture-pane -p -t t 2>/dev/null | tail -20; exit 1; }
M="$src/tests/fixtures/infer/tiny_chat"
work=$(mktemp -d)
sock="$work/tmux.sock"
trap 'tmux -S "$sock" kill-server 2>/dev/null; rm -rf "$work"' EXIT
export TITAN_CACHE_DIR="$work/cache" OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
opts=(--model "$M" --max-new-tokens 16)  # thinking unset: --prompts takes no --thinking

# Expected replies, from generate (itself checked against transformers in generate_eval.sh).
reply1=$("$titan" generate --chat "${opts[@]}" --prompt "Hi there!" 2>/dev/null) || fail "generate --chat exited $?"
j1=$("$titan" generate --chat "${opts[@]}" --prompt "Hi there!" --json 2>/dev/null) || fail "generate --json exited $?"
esc1=$(sed -n 's/.*"text":"\(.*\)","finish_reason".*/\1/p' <<< "$j1")
printf '{"messages": [{"role": "user", "content": "Hi there!"}, {"role": "assistant", "content": "%s"}, {"role": "user", "content": "Again"}]}\n' \
  "$esc1" > "$work/conv.jsonl"
j2=$("$titan" generate --prompts "$work/conv.jsonl" "${opts[@]}" 2>/dev/null) || fail "generate --prompts exited $?"
esc2=$(sed -n 's/.*"text":"\(.*\)","finish_reason".*/\1/p' <<< "$j2")
[ -n "$esc1" ] && [ -n "$esc2" ] || fail "empty expected replies: [$j1] [$j2]"
# JSON-escapes stdin as result_json does (nlohmann: backslash, quote, \n, \t, other controls \u00XX).
json_escape() {
  perl -0777 -pe 's/\\/\\\\/g; s/"/\\"/g; s/\n/\\n/g; s/\t/\\t/g; s/([\x00-\x1f])/sprintf("\\u%04x", ord($1))/ge'
}

# History through a pipe: the second reply is the whole conversation's continuation.
piped=$(printf 'Hi there!\nAgain\n/exit\n' | "$titan" chat "${opts[@]}" 2>/dev/null) || fail "piped chat exited $?"
[ "${piped:0:${#reply1}}" = "$reply1" ] || fail "piped first reply: [$piped] vs [$reply1]"
got2=$(printf '%s' "${piped:$((${#reply1} + 1))}" | json_escape)
[ "$got2" = "$esc2" ] || fail "second reply does not continue the history: [$got2] vs [$esc2]"

# The terminal session. The replies' exact text is checked above through a pipe (the tiny model
# writes control characters that a terminal interprets), so the pane checks the interaction: the
# prompt count, a reply after each turn, the status lines. Each wait polls the pane for up to 60 s
# (the machine may be loaded).
pane() { tmux -S "$sock" capture-pane -p -J -t t -S -200; }
wait_until() {  # description, command...
  local what=$1
  shift
  for _ in $(seq 600); do
    "$@" && return 0
    sleep 0.1
  done
  fail "timed out waiting for $what"
}
prompts_at_least() { [ "$(pane | grep -c '^> ')" -ge "$1" ]; }
has() { pane | grep -qF -- "$1"; }
replied() { [ -n "$(pane | grep -A1 -F '> Hi there!' | sed -n 2p | tr -d ' ')" ]; }  # the line after the turn
start_chat() {  # extra environment, max new tokens (a tmux server start can fail spuriously: 3 tries)
  for _ in 1 2 3; do
    tmux -S "$sock" new-session -d -s t -x 200 -y 60 \
      "$1 '$titan' chat --model '$M' --max-new-tokens $2; echo \"[exit \$?]\"; sleep 600" && return 0
    sleep 1
  done
  fail "tmux new-session"
}

start_chat "" 16
wait_until "the prompt" prompts_at_least 1
tmux -S "$sock" send-keys -t t "Hi there!" Enter
wait_until "the first reply" replied
wait_until "the prompt after the reply" prompts_at_least 2
tmux -S "$sock" send-keys -t t "/reset" Enter
wait_until "[history cleared]" has "[history cleared]"
tmux -S "$sock" send-keys -t t "/exit" Enter
wait_until "[exit 0]" has "[exit 0]"
tmux -S "$sock" kill-server

# Ctrl-C inside a long reply slowed down to 0.3 s a piece (400 tokens: two minutes): the reply
# stops, the program returns to its prompt, and /exit still ends it normally.
start_chat "TITAN_CHAT_PIECE_DELAY_MS=300" 400
wait_until "the prompt" prompts_at_least 1
tmux -S "$sock" send-keys -t t "Hi there!" Enter
wait_until "the reply to start" replied
tmux -S "$sock" send-keys -t t C-c
wait_until "[reply interrupted]" has "[reply interrupted]"
wait_until "the prompt after the interrupted reply" prompts_at_least 2
tmux -S "$sock" send-keys -t t "/exit" Enter
wait_until "[exit 0]" has "[exit 0]"
echo "PASS: chat in tmux (prompt, replies, history, /reset, Ctrl-C, /exit)"
