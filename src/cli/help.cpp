// `titan <command> --help` / `-h` (and `titan <command> <action> --help`): each command's usage,
// every option with its default and meaning, printed to stdout with status 0 (main.cpp).
#include <map>
#include <string>

#include "cli/command.h"

namespace titan::cli {
namespace {

// The options generate, chat, eval and score share (cli/infer_common.h).
#define TITAN_MODEL_OPTIONS                                                                          \
  "  --model DIR|CHECKPOINT     an HF folder or a training checkpoint step folder (required)\n"    \
  "  --adapter DIR              a PEFT LoRA adapter folder applied to the model (not merged)\n"     \
  "  --tokenizer DIR            tokenizer folder (default: the model folder when it has a\n"        \
  "                             tokenizer.json, else the bundled Qwen3 tokenizer)\n"                \
  "  --dtype f32|bf16           compute dtype (default: f32)\n"                                     \
  "  --kernels cpu|reference    kernel set (default: cpu)\n"                                       \
  "  --allow-other-base         use adapters on a base whose fingerprint is not the one they were\n" \
  "                             trained on\n"

#define TITAN_SAMPLING_OPTIONS                                                                       \
  "  --max-new-tokens N         tokens to generate at most (default: generation_config.json's\n"    \
  "                             max_new_tokens, else 256)\n"                                        \
  "  --temperature T            0: greedy (default: generation_config.json's when do_sample,\n"     \
  "                             else 0)\n"                                                          \
  "  --top-k K                  keep the K most likely tokens (default: 50 when sampling, else 0)\n" \
  "  --top-p P                  nucleus sampling mass (default: 1.0)\n"                             \
  "  --min-p P                  drop tokens below P times the best one's probability (default: 0)\n" \
  "  --repetition-penalty R     transformers' repetition penalty (default: 1.0)\n"                  \
  "  --seed S                   sampling seed (default: 0)\n"                                       \
  "  --stop STRING              stop when the text ends with STRING (repeatable)\n"

const std::map<std::string, std::string>& texts() {
  static const std::map<std::string, std::string> t = {
      {"train",
       "usage: titan train --config FILE.toml [--section.key VALUE ...]\n"
       "Trains or fine-tunes a model as the job file says (recipes/*.toml); any job key can be\n"
       "overridden on the command line (--training.steps 10, --job.dump_folder out).\n"
       "  --config FILE              the TOML job file (also --job.config_file; default: none, every\n"
       "                             key at its default)\n"
       "  --section.key VALUE        one job key (type, default and allowed values: --help-config)\n"
       "  --help-config              list every section and key with its type, default, allowed\n"
       "                             values and meaning, then exit\n"
       "Under mpirun every rank runs the same command (data parallel, fully sharded).\n"},
      {"export",
       "usage: titan export --from DIR --output DIR [options]\n"
       "Writes a training checkpoint (or an HF folder: dtype conversion, resharding) as a Hugging\n"
       "Face folder, whole or not at all (a temporary sibling renamed into place).\n"
       "  --from DIR                 a training checkpoint step folder or an HF folder (required)\n"
       "  --output DIR               the folder to write (required; refused when not empty unless\n"
       "                             --replace)\n"
       "  --dtype f32|bf16|f16       dtype of the written weights (default: the source's: an HF\n"
       "                             folder's torch_dtype, a training checkpoint's f32, a merged\n"
       "                             LoRA export its base's); the summary line says which\n"
       "  --tokenizer DIR            tokenizer files to copy (default: the HF source folder, or for\n"
       "                             --merge-lora the base folder, else the bundled tokenizer)\n"
       "  --max-shard-bytes N        shard the weights above N bytes (default: 5000000000)\n"
       "  --adapter                  a LoRA run's checkpoint: write its adapters as a PEFT folder\n"
       "  --merge-lora               a LoRA run's checkpoint: write its base with the adapters merged\n"
       "  --replace                  replace what a non-empty --output holds\n"
       "  --allow-other-base         a LoRA checkpoint whose base folder's fingerprint is not the one\n"
       "                             it recorded: export anyway\n"},
      {"import",
       "usage: titan import gguf FILE --output DIR [--dtype f32|bf16] [--replace]\n"
       "Converts a GGUF model file (llama.cpp's container, quantized or not) to a Hugging Face\n"
       "folder, written whole or not at all.\n"
       "  gguf FILE                  the GGUF file (the only import format)\n"
       "  --output DIR               the folder to write (required; refused when not empty unless\n"
       "                             --replace)\n"
       "  --dtype f32|bf16           dtype of the written weights (default: f32)\n"
       "  --replace                  replace what a non-empty --output holds\n"},
      {"import gguf", ""},  // same as import
      {"generate",
       "usage: titan generate --model DIR (--prompt TEXT | --prompt-ids \"ID ...\" | --prompts FILE.jsonl)\n"
       "                      [options]\n"
       "Generates text (transformers' sampling semantics); one prompt streams to stdout.\n"
       TITAN_MODEL_OPTIONS
       "  --prompt TEXT              one text prompt\n"
       "  --prompt-ids \"ID ...\"      one prompt as token ids\n"
       "  --prompts FILE.jsonl       one prompt per line: {\"prompt\"}, {\"prompt_ids\"} or {\"messages\"}\n"
       "  --chat                     put text prompts through the chat template (one user turn)\n"
       "  --system TEXT              with --chat: a system message first\n"
       "  --thinking on|off          with --chat: the template's enable_thinking (default: the\n"
       "                             template's own default)\n"
       TITAN_SAMPLING_OPTIONS
       "  --batch-size N             prompts of --prompts generated together (default: 8)\n"
       "  --json                     one JSON line per prompt instead of streamed text\n"},
      {"chat",
       "usage: titan chat --model DIR [options]\n"
       "Interactive chat through the model's chat template (one line per turn on stdin).\n"
       TITAN_MODEL_OPTIONS
       "  --system TEXT              a system message first\n"
       "  --thinking on|off          the template's enable_thinking (default: the template's default)\n"
       TITAN_SAMPLING_OPTIONS},
      {"eval",
       "usage: titan eval --model DIR --data FILE... [options]\n"
       "Loss and perplexity on text, JSON-lines or token (.bin) files (sliding windows).\n"
       TITAN_MODEL_OPTIONS
       "  --data FILE...             the files to evaluate (required)\n"
       "  --seq-len N                window length (default: min(max_position_embeddings, 2048))\n"
       "  --stride S                 window step, <= --seq-len (default: --seq-len, no overlap)\n"
       "  --field NAME               JSON-lines text field (default: text)\n"
       "  --json                     print {\"loss\", \"perplexity\", \"tokens\"} only\n"
       "  --quiet                    no progress bar\n"},
      {"score",
       "usage: titan score --model DIR --tokens FILE [options]\n"
       "Mean next-token loss of a model on token id lines (one sequence per line).\n"
       "  --model DIR                an HF folder (required)\n"
       "  --tokens FILE              token ids, one sequence per line, all of one length (required)\n"
       "  --adapter DIR              a PEFT LoRA adapter folder applied to the model\n"
       "  --kernels cpu|reference    kernel set (default: cpu)\n"
       "  --compute f32|bf16         compute dtype (default: f32)\n"
       "  --dump-logits FILE         write the logits as safetensors\n"
       "  --dump-grads FILE          write every parameter's gradient as safetensors\n"
       "  --allow-other-base         use --adapter on a base it was not trained on\n"
       "  --json                     print the loss as JSON\n"},
      {"tokenize",
       "usage: titan tokenize --input FILE [FILE...] --output FILE.bin [options]\n"
       "Text files (JSON lines or plain text) into one token file for training.\n"
       "  --input FILE [FILE...]     the sources (required; a folder: its files)\n"
       "  --output FILE.bin          the token file (required; never one of the inputs)\n"
       "  --tokenizer DIR            tokenizer folder (default: the bundled Qwen3 tokenizer)\n"
       "  --field NAME               JSON-lines text field (default: text)\n"
       "  --threads N                tokenizer threads, 0: all (default: 0)\n"
       "  --skip-bad-lines           skip malformed JSON lines instead of stopping\n"
       "  --quiet                    no progress bar\n"},
      {"encode",
       "usage: titan encode [--tokenizer DIR] [--jsonl] [options] < INPUT\n"
       "Token ids of each stdin line (or each JSON line's text), one line of ids per input line.\n"
       "  --tokenizer DIR            tokenizer folder (default: the bundled Qwen3 tokenizer)\n"
       "  --jsonl                    stdin is JSON lines; encode each line's --field\n"
       "  --field NAME               with --jsonl: the text field (default: text)\n"
       "  --threads N                tokenizer threads, 0: all (default: 0)\n"
       "  --skip-bad-lines           with --jsonl: skip malformed lines\n"},
      {"info",
       "usage: titan info --model DIR|FLAVOR [options] | --config FILE.toml [--dp N] [--json]\n"
       "                  | --peak [--threads N] [--remeasure] [--json]\n"
       "                  | --mesh --world N [--dp-replicate R --dp-shard S --cp C --tp T --pp P --ep E] [--model M]\n"
       "                  | --pp-schedule NAME --pp P --microbatches M [--stages-per-rank V] [--json]\n"
       "Parameters, FLOPs per token and training memory of a model folder, flavor or job; --peak:\n"
       "the peak FLOP/s MFU divides by on this machine; --mesh: the device mesh of N ranks;\n"
       "--pp-schedule: a pipeline schedule's actions per rank, simulated time grid and bubble.\n"
       "  --model DIR|FLAVOR         an HF folder or a flavor name (debugmodel, 0.6B, ...)\n"
       "  --config FILE.toml         a training job: its model, batch and parallelism\n"
       "  --seq-len N                sequence length for FLOPs and memory (default: 2048)\n"
       "  --dp N                     data-parallel ranks; with --tp / --cp: the FSDP shard ranks per tp x cp\n"
       "                             block, FSDP then spanning --dp x --cp ranks (default: 1)\n"
       "  --n-layers N               count only the first N layers (default: all)\n"
       "  --batch N                  micro-batch for the memory estimate (default: 1; with --pp: P)\n"
       "  --lora-rank R              LoRA rank for the memory estimate, 0: none (default: 0)\n"
       "  --lora-base-dtype f32|bf16 the frozen base's dtype under LoRA (default: f32)\n"
       "  --checkpointing MODE       none, selective or full activation checkpointing for the step peak\n"
       "                             (default: none)\n"
       "  --dtype float32|bfloat16   the GEMM inputs of the step peak, [training] mixed_precision_param\n"
       "                             (default: float32)\n"
       "  --sequence-parallel B      with --tp: enable_sequence_parallel, true or false (default: true)\n"
       "  --cp-load-balancer LB      with --cp: headtail or none (default: headtail)\n"
       "  --fsdp-prefetch B          the step peak with FSDP's prefetch thread, true or false (the\n"
       "                             trainer runs none under tensor parallelism; default: true)\n"
       "  --peak                     measure or read the cached peak FLOP/s\n"
       "  --threads N                with --peak: threads, 0: this process's (default: 0)\n"
       "  --remeasure                with --peak: measure again, replacing the cache\n"
       "  --mesh                     lay out the device mesh (degrees, groups, each rank's coordinates)\n"
       "  --world N                  with --mesh: ranks in the job (default: 1)\n"
       "  --dp-replicate R           data_parallel_replicate_degree: HSDP replicas of the --dp shard ranks\n"
       "                             (each rank holds the same); with --mesh, the mesh's (default: 1)\n"
       "  --dp-shard S               with --mesh: data_parallel_shard_degree, -1: the rest (default: -1)\n"
       "  --cp C                     context_parallel_degree: per-rank memory and step peak of C cp ranks\n"
       "                             (seq / C tokens each); with --mesh, the mesh's cp degree (default: 1)\n"
       "  --tp T                     tensor_parallel_degree: per-rank memory and step peak of T tp ranks x\n"
       "                             --dp FSDP ranks; with --mesh, the mesh's tp degree (default: 1)\n"
       "  --pp P                     pipeline_parallel_degree: with --model, what each of P pipeline ranks\n"
       "                             holds (stages, state, bytes sent, bubble); with --mesh or\n"
       "                             --pp-schedule, the degree (default: 1)\n"
       "  --pp-schedule NAME         GPipe, 1F1B or Interleaved1F1B (any case): print its schedule\n"
       "  --schedule NAME            with --model --pp: the schedule (default: 1F1B)\n"
       "  --microbatches M           with --pp-schedule: microbatches per step (default: P); with\n"
       "                             --model --pp: --batch is cut into M (default: one row each)\n"
       "  --stages-per-rank V        with --pp-schedule or --pp: virtual stages per rank (default: 2\n"
       "                             for Interleaved1F1B, which needs >= 2; 1 otherwise)\n"
       "  --layers-per-stage L       with --model --pp: layers of each middle stage, the first and last\n"
       "                             share the rest (default: split evenly)\n"
       "  --ep E                     expert_parallel_degree: per-rank expert memory and dispatch bytes of\n"
       "                             E ep ranks within --dp FSDP ranks; with --mesh, the mesh's ep degree\n"
       "  --json                     machine-readable output\n"},
      {"cache",
       "usage: titan cache info|clear [--dir D]\n"
       "The token cache (tokenized datasets) and the measured peaks: where, what it holds, emptying.\n"
       "  info                       where the cache is and what it holds\n"
       "  clear                      remove the files the cache wrote (nothing else in the folder)\n"
       "  --dir D                    the cache folder (default: $TITAN_CACHE_DIR, else\n"
       "                             $XDG_CACHE_HOME/titan, else ~/.cache/titan)\n"},
      {"cache info", ""},
      {"cache clear", ""},
      {"data",
       "usage: titan data make-arithmetic --output DIR [options]\n"
       "Generated datasets: make-arithmetic writes the SFT demonstration's chat data,\n"
       "DIR/train.jsonl and DIR/valid.jsonl.\n"
       "  --output DIR               the folder (required; files of those names that are not this\n"
       "                             dataset are refused unless --replace)\n"
       "  --max-operand N            operands 0..N (default: 99)\n"
       "  --valid N                  questions held out for validation (default: 200)\n"
       "  --train N                  training questions, -1: all the rest (default: -1)\n"
       "  --seed S                   shuffle seed (default: 0)\n"
       "  --replace                  overwrite train.jsonl / valid.jsonl whatever they hold\n"},
      {"data make-arithmetic", ""},
      {"verify",
       "usage: titan verify checkpoint DIR [options] | titan verify kernels [options]\n"
       "Numerical self-checks.\n"
       "  checkpoint DIR             load, export and reload a checkpoint; every tensor must match\n"
       "  kernels                    every kernel variant against its reference\n"
       "Options: titan verify checkpoint --help, titan verify kernels --help.\n"},
      {"verify checkpoint",
       "usage: titan verify checkpoint DIR [--workdir D] [--keep] [--quiet]\n"
       "Loads DIR, exports it (f32), reloads the export: every key and value must round-trip.\n"
       "  --workdir D                where the export goes (new or empty; default: a temporary folder)\n"
       "  --keep                     keep the export\n"
       "  --quiet                    only the summary line\n"},
      {"verify kernels",
       "usage: titan verify kernels [--op NAME] [--device cpu|cuda] [--json]\n"
       "Every kernel variant against its reference on random shapes.\n"
       "  --op NAME                  only this op (default: every op)\n"
       "  --device cuda              only the cuda variants (under the grid emulator without a GPU)\n"
       "  --json                     machine-readable rows\n"},
  };
  return t;
}

}  // namespace

std::string command_help(const std::string& command, const std::string& action) {
  const auto& t = texts();
  if (!action.empty()) {
    auto it = t.find(command + " " + action);
    if (it != t.end() && !it->second.empty()) return it->second;
  }
  auto it = t.find(command);
  return it == t.end() ? std::string() : it->second;
}

}  // namespace titan::cli
