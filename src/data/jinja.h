// A strict interpreter of the Jinja subset that Hugging Face chat templates use, with the settings
// transformers renders them with (trim_blocks, lstrip_blocks, loop controls, no autoescape, one
// trailing newline of the source dropped).
//
// Supported: text with {{ }}, {% %}, {# #} and the -/+ whitespace controls; statements if / elif /
// else, for (one name or a tuple of names, an `if` filter, else, loop.index/index0/revindex/
// revindex0/first/last/length/previtem/nextitem), set (a name or namespace.attr), break,
// continue, generation (rendered as its body); expressions with Python semantics: literals (str,
// int, float, true/false/none, lists, tuples, dicts), attributes, subscripts, slices, calls,
// `a if c else b`, or/and/not, comparisons (chained), in / not in, + - * / // % **, unary - +,
// `~`; tests defined, undefined, none, string, number, integer, float, boolean, true, false,
// mapping, sequence, iterable, odd, even, divisibleby; the filters and methods listed in
// jinja_eval.cpp; the globals namespace(), dict(), range() and raise_exception().
//
// Anything else (macro, call, include, extends, block, raw, with, filter blocks, an unknown
// filter or test) is an error naming the construct and the template line when the template is
// parsed; an unknown method or an unsupported value operation is an error when it is evaluated.
// Nothing is guessed.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace titan::data::jinja {

struct Value;
using List = std::vector<Value>;

// A Python dict with string keys, in insertion order.
struct Dict {
  std::vector<std::pair<std::string, Value>> items;
  const Value* find(std::string_view key) const;
  void set(const std::string& key, Value v);
};

struct Value {
  enum class Kind { Undefined, None, Bool, Int, Float, String, List, Dict, Namespace };
  Kind kind = Kind::Undefined;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::string s;                // the string; for Undefined the name that was looked up
  std::shared_ptr<List> list;   // List (tuples are lists too)
  std::shared_ptr<Dict> dict;   // Dict and Namespace (shared: a namespace is mutable by reference)

  static Value undefined(std::string name = "");
  static Value none();
  static Value boolean(bool v);
  static Value integer(int64_t v);
  static Value number(double v);
  static Value string(std::string v);
  static Value make_list(List v);
  static Value make_dict(Dict v);
  static Value make_namespace(Dict v);
  bool is(Kind k) const { return kind == k; }
};

class Template {
 public:
  // `origin` names the template in errors ("assets/x/tokenizer_config.json").
  static Template parse(std::string_view source, const std::string& origin);
  // Renders with `vars` as the global variables.
  std::string render(const Dict& vars) const;

  struct Impl;

 private:
  std::shared_ptr<const Impl> impl_;
};

}  // namespace titan::data::jinja
