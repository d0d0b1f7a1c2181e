// titan chat: an interactive conversation through the model's chat template. Each stdin line is
// a user turn; the reply streams to stdout and joins the history (Qwen3's template then drops the
// reply's <think> block from earlier turns, as transformers does). "/reset" clears the history,
// "/exit" or end of input quits. Ctrl-C (SIGINT) stops the reply being written (what was written
// stays in the history) and returns to the prompt; at the prompt it does nothing. Works on a pipe
// as on a terminal (the "> " prompt is shown only on a terminal).
//
//   titan chat --model DIR|CHECKPOINT_STEP [--system TEXT] [--thinking on|off]
//              [--max-new-tokens N] [--temperature T] [--top-k K] [--top-p P] [--min-p P]
//              [--repetition-penalty R] [--seed S] [--stop STRING]... [--dtype f32|bf16]
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "cli/infer_common.h"
#include "core/error.h"
#include "core/signal_stack.h"
#include "infer/cached_source.h"

namespace titan::cli {
namespace {

std::atomic<bool> g_interrupt{false};
extern "C" void on_sigint(int) { g_interrupt.store(true); }

int cmd_chat(const std::vector<std::string>& argv_in) {
  std::vector<std::string> argv = argv_in;
  const std::vector<std::string> stops = take_repeated(argv, "stop");
  Args args(argv, {"allow-other-base"});
  args.check_known({"model", "adapter", "tokenizer", "system", "thinking", "max-new-tokens", "temperature", "top-k", "top-p",
                    "min-p", "repetition-penalty", "seed", "dtype", "kernels", "allow-other-base"});
  TITAN_CHECK(args.positional().empty(), "unexpected argument '", args.positional().empty() ? "" : args.positional()[0], "'");
  InferenceModel m = load_inference_model(args);
  TITAN_CHECK(data::ChatTemplate::available(m.tokenizer_dir), m.tokenizer_dir, ": no chat template to chat with");
  const data::ChatTemplate tmpl = data::ChatTemplate::load(m.tokenizer_dir);
  const data::ChatOptions copt = chat_options(args);
  infer::GenerateOptions opt = generation_options(args, m, stops, /*chat=*/true);
  infer::CachedLogitsSource src(*m.model);
  const bool tty = ::isatty(0) == 1 && ::isatty(2) == 1;
  // SA_RESTART: a Ctrl-C at the prompt does not break the read of the next line; SA_ONSTACK: the
  // handler's frame goes on an alternate stack (core/signal_stack.h: oneDNN's GEMM kernels point
  // rsp at the heap, and a Ctrl-C may land in the prefill).
  prepare_signal_stacks();
  struct sigaction sa {};
  sa.sa_handler = on_sigint;
  sa.sa_flags = SA_RESTART | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  opt.interrupt = &g_interrupt;
  // Test hook (tests/cli/chat_tmux.sh): a pause after each streamed piece, so that a Ctrl-C sent
  // by the test lands inside a reply on a model that would otherwise answer in milliseconds.
  const char* delay_env = std::getenv("TITAN_CHAT_PIECE_DELAY_MS");
  const long delay_ms = delay_env ? std::strtol(delay_env, nullptr, 10) : 0;

  std::vector<data::ChatMessage> history;
  if (args.has("system")) history.push_back({"system", args.get("system"), std::nullopt});
  const size_t base = history.size();
  uint64_t turn = 0;
  std::string line;
  for (;;) {
    if (tty) std::fprintf(stderr, "> ");
    if (!std::getline(std::cin, line)) break;
    if (line == "/exit") break;
    if (line == "/reset") {
      history.resize(base);
      std::fprintf(stderr, "[history cleared]\n");
      continue;
    }
    if (line.empty()) continue;
    history.push_back({"user", line, std::nullopt});
    const std::vector<uint32_t> prompt = tmpl.encode(m.tokenizer, history, copt);
    opt.first_stream = turn++;  // each turn draws from its own stream
    g_interrupt.store(false);    // a Ctrl-C typed at the prompt does not stop this reply
    const auto res = infer::generate(src, m.tokenizer, {prompt}, opt, [&](size_t, const std::string& piece) {
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
      if (delay_ms > 0) ::usleep(useconds_t(delay_ms) * 1000);
    });
    std::printf("\n");
    std::fflush(stdout);
    if (res[0].finish == infer::FinishReason::Interrupted) std::fprintf(stderr, "[reply interrupted]\n");
    if (res[0].finish == infer::FinishReason::Length)
      std::fprintf(stderr, "[reply cut at --max-new-tokens %lld]\n", static_cast<long long>(opt.stop.max_new_tokens));
    history.push_back({"assistant", res[0].text, std::nullopt});
  }
  return 0;
}

}  // namespace

TITAN_COMMAND("chat", "interactive chat through the model's chat template", cmd_chat);

}  // namespace titan::cli
