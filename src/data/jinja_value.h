// Value semantics and built-ins shared by the Jinja evaluator (internal to src/data/jinja*):
// Python's truthiness, equality, slicing and printing; the filters, tests, methods and globals.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "data/jinja.h"

namespace titan::data::jinja {

using Kwargs = std::vector<std::pair<std::string, Value>>;

// Limits that keep a hostile template from exhausting memory, stack or time: items a range(),
// repetition or iteration makes; bytes of rendered text and of any one value (strings' bytes plus
// 16 per list item or dict entry, nested values counted as if printed); levels of an expression
// (a left-deep chain of 20,000 `+` is 20,000 levels) and of statements; levels of a nested value;
// and the steps of one rendering (expressions and statements 1, a loop iteration 16, one step per
// 64 units of each value made), which ends loop bombs within a second (a few under sanitizers):
// a real template rendering thousands of turns takes well under 1% of it.
constexpr int64_t kMaxItems = int64_t(1) << 20;
constexpr size_t kMaxOutputBytes = size_t(64) << 20;
constexpr int kMaxDepth = 200;
constexpr int kMaxValueDepth = 100;
constexpr int64_t kMaxSteps = int64_t(1) << 22;
constexpr int64_t kLoopIterationSteps = 16;

// Where an error happened: the template's origin and line.
struct Site {
  const std::string& origin;
  int line;
  [[noreturn]] void fail(const std::string& msg) const;
};

const char* kind_name(const Value& v);
bool is_num(const Value& v);      // int, float or bool (Python's bool is an int)
bool is_intlike(const Value& v);  // int or bool
int64_t as_int(const Value& v);
double as_double(const Value& v);
bool truthy(const Value& v);
bool equals(const Value& a, const Value& b);
// The indices a Python slice [start:stop:step] selects from n elements (null: omitted).
std::vector<int64_t> slice_indices(int64_t n, const Value* start, const Value* stop, const Value* step, const Site& at);
// str(v) as Jinja prints it (undefined: ""); lists, dicts and namespaces are refused.
std::string to_str(const Value& v, const Site& at);
// The items a for loop or filter iterates: list items, dict keys, string characters, nothing
// for undefined.
List iterate(const Value& v, const Site& at);
void need_defined(const Value& v, const Site& at, const std::string& what);
// The size of v in the units above; an error when it is over kMaxOutputBytes, nested deeper than
// kMaxValueDepth or (inside != nullptr) contains the namespace or dict `inside`.
int64_t value_size(const Value& v, const Site& at, const Dict* inside = nullptr);
// The k-th code point of s (k < 0 counts from the end) as a string; undefined when out of range.
Value code_point_at(const std::string& s, int64_t k);

// jinja_builtins.cpp
Value call_method(const Value& o, const std::string& name, const List& pos, const Kwargs& kw, const Site& at);
Value apply_filter(const std::string& name, const Value& v, const List& pos, const Kwargs& kw, const Site& at);
bool apply_test(const std::string& name, const Value& v, const List& pos, const Site& at);
// Functions called by a name that is not a variable: namespace, dict, range, raise_exception.
Value call_global(const std::string& name, const List& pos, const Kwargs& kw, const Site& at);

}  // namespace titan::data::jinja
