// Jinja built-ins with Python semantics (see jinja.h for the list):
// filters length, count, tojson(indent=), trim, string, first, last, join, default / d, list,
// reverse, items, safe; string methods startswith, endswith, split, strip, lstrip, rstrip,
// replace, upper and lower (ASCII text only); dict methods get, items, keys, values; globals
// namespace(), dict(), range(), raise_exception(). Undefined values follow Jinja's default
// Undefined: false, empty when printed or iterated, length 0, an error on attribute access.
#include <algorithm>
#include <cctype>

#include "core/error.h"
#include "data/jinja_text.h"
#include "data/jinja_value.h"

namespace titan::data::jinja {
namespace {

using K = Value::Kind;

// Positional argument k, or the keyword argument `name`; nullptr when absent.
const Value* arg(const List& pos, const Kwargs& kw, size_t k, const char* name) {
  if (k < pos.size()) return &pos[k];
  for (auto& [n, v] : kw)
    if (n == name) return &v;
  return nullptr;
}

void check_arity(const std::string& what, const List& pos, const Kwargs& kw, size_t max_pos,
                 std::initializer_list<const char*> names, const Site& at) {
  if (pos.size() > max_pos) at.fail(what + " takes at most " + std::to_string(max_pos) + " positional arguments");
  for (auto& [n, v] : kw) {
    bool ok = false;
    for (const char* m : names) ok = ok || n == m;
    if (!ok) at.fail(what + " has no argument '" + n + "'");
  }
}

std::string str_arg(const Value* v, const std::string& what, const Site& at) {
  if (!v || v->kind != K::String) at.fail(what + " needs a string argument");
  return v->s;
}

Value string_method(const Value& o, const std::string& name, const List& pos, const Kwargs& kw, const Site& at) {
  const std::string what = "str." + name + "()";
  if (name == "startswith" || name == "endswith") {
    check_arity(what, pos, kw, 1, {}, at);
    if (pos.empty()) at.fail(what + " needs an argument");
    List cands = pos[0].kind == K::List ? *pos[0].list : List{pos[0]};
    for (auto& c : cands) {
      const std::string x = str_arg(&c, what, at);
      const bool fits = o.s.size() >= x.size();
      if (fits && (name == "startswith" ? o.s.compare(0, x.size(), x) == 0
                                        : o.s.compare(o.s.size() - x.size(), x.size(), x) == 0))
        return Value::boolean(true);
    }
    return Value::boolean(false);
  }
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    check_arity(what, pos, kw, 1, {"chars"}, at);
    const Value* a = arg(pos, kw, 0, "chars");
    std::string chars;
    const bool given = a && a->kind != K::None;
    if (given) chars = str_arg(a, what, at);
    return Value::string(py_strip(o.s, given ? &chars : nullptr, name != "rstrip", name != "lstrip"));
  }
  if (name == "split") {
    check_arity(what, pos, kw, 2, {"sep", "maxsplit"}, at);
    const Value* sep = arg(pos, kw, 0, "sep");
    const Value* mx = arg(pos, kw, 1, "maxsplit");
    std::string s;
    const bool given = sep && sep->kind != K::None;
    if (given) {
      s = str_arg(sep, what, at);
      if (s.empty()) at.fail("str.split() with an empty separator");
    }
    if (mx && !is_intlike(*mx)) at.fail(what + ": maxsplit must be an int");
    List l;
    std::vector<std::string> parts = py_split(o.s, given ? &s : nullptr, mx ? as_int(*mx) : -1);
    if (int64_t(parts.size()) > kMaxItems) at.fail(what + " into more than " + std::to_string(kMaxItems) + " parts");
    for (auto& part : parts) l.push_back(Value::string(std::move(part)));
    return Value::make_list(std::move(l));
  }
  if (name == "replace") {
    check_arity(what, pos, kw, 3, {}, at);
    if (pos.size() < 2) at.fail(what + " needs two arguments");
    const std::string from = str_arg(&pos[0], what, at), to = str_arg(&pos[1], what, at);
    if (pos.size() > 2 && !is_intlike(pos[2])) at.fail(what + ": count must be an int");
    const int64_t count = pos.size() > 2 ? as_int(pos[2]) : -1;
    if (from.empty()) at.fail(what + " with an empty pattern is not supported");
    std::string r;
    size_t from_pos = 0;
    for (int64_t n = 0; count < 0 || n < count; ++n) {
      size_t hit = o.s.find(from, from_pos);
      if (hit == std::string::npos) break;
      r.append(o.s, from_pos, hit - from_pos);
      r += to;
      from_pos = hit + from.size();
      if (r.size() > kMaxOutputBytes) at.fail(what + ": result too large");
    }
    r.append(o.s, from_pos, std::string::npos);
    return Value::string(std::move(r));
  }
  if (name == "upper" || name == "lower") {
    check_arity(what, pos, kw, 0, {}, at);
    std::string r = o.s;
    for (char& c : r) {
      const auto u = static_cast<unsigned char>(c);
      if (u >= 0x80) at.fail(what + " on non-ASCII text is not supported");
      c = char(name == "upper" ? std::toupper(u) : std::tolower(u));
    }
    return Value::string(std::move(r));
  }
  at.fail("method " + what + " is not supported");
}

}  // namespace

Value call_method(const Value& o, const std::string& name, const List& pos, const Kwargs& kw, const Site& at) {
  need_defined(o, at, "calling ." + name + "()");
  if (o.kind == K::String) return string_method(o, name, pos, kw, at);
  const std::string what = std::string(kind_name(o)) + "." + name + "()";
  if (o.kind == K::Dict) {
    if (name == "get") {
      check_arity(what, pos, kw, 2, {}, at);
      if (pos.empty()) at.fail(what + " needs a key");
      const Value* v = pos[0].kind == K::String ? o.dict->find(pos[0].s) : nullptr;
      return v ? *v : (pos.size() > 1 ? pos[1] : Value::none());
    }
    if (name == "items" || name == "keys" || name == "values") {
      check_arity(what, pos, kw, 0, {}, at);
      List l;
      for (auto& [k, v] : o.dict->items) {
        if (name == "items") l.push_back(Value::make_list({Value::string(k), v}));
        else l.push_back(name == "keys" ? Value::string(k) : v);
      }
      return Value::make_list(std::move(l));
    }
  }
  at.fail("method " + what + " is not supported");
}

Value apply_filter(const std::string& n, const Value& v, const List& pos, const Kwargs& kw, const Site& at) {
  const std::string what = "filter '" + n + "'";
  if (n == "default" || n == "d") {
    check_arity(what, pos, kw, 2, {"default_value", "boolean"}, at);
    const Value* def = arg(pos, kw, 0, "default_value");
    const Value* boolean = arg(pos, kw, 1, "boolean");
    const bool use = v.kind == K::Undefined || (boolean && truthy(*boolean) && !truthy(v));
    return use ? (def ? *def : Value::string("")) : v;
  }
  if (n == "safe") return v;
  if (n == "string") return Value::string(to_str(v, at));
  if (n == "length" || n == "count") {
    check_arity(what, pos, kw, 0, {}, at);
    switch (v.kind) {
      case K::Undefined: return Value::integer(0);
      case K::String: return Value::integer(int64_t(code_points(v.s).size()));
      case K::List: return Value::integer(int64_t(v.list->size()));
      case K::Dict: return Value::integer(int64_t(v.dict->items.size()));
      default: at.fail(std::string("length of a ") + kind_name(v));
    }
  }
  if (n == "tojson") {
    check_arity(what, pos, kw, 1, {"indent", "ensure_ascii", "separators", "sort_keys"}, at);
    const Value* ind = arg(pos, kw, 0, "indent");
    for (auto& [k, x] : kw) {
      if ((k == "ensure_ascii" || k == "sort_keys") && truthy(x)) at.fail("tojson(" + k + "=true) is not supported");
      if (k == "separators" && x.kind != K::None) at.fail("tojson(separators=...) is not supported");
    }
    const bool indented = ind && ind->kind != K::None;
    if (indented && !is_intlike(*ind)) at.fail("tojson(indent=) must be an int");
    if (v.kind == K::Undefined || v.kind == K::Namespace) at.fail(std::string("tojson of a ") + kind_name(v));
    return Value::string(py_json_dumps(v, indented ? std::clamp<int64_t>(as_int(*ind), 0, 64) : -1));
  }
  need_defined(v, at, what);
  if (n == "trim") {
    check_arity(what, pos, kw, 1, {"chars"}, at);
    const Value* c = arg(pos, kw, 0, "chars");
    std::string chars;
    const bool given = c && c->kind != K::None;
    if (given) chars = str_arg(c, what, at);
    return Value::string(py_strip(to_str(v, at), given ? &chars : nullptr, true, true));
  }
  if (n == "first" || n == "last") {
    List l = iterate(v, at);
    if (l.empty()) return Value::undefined(n);
    return n == "first" ? l.front() : l.back();
  }
  if (n == "join") {
    check_arity(what, pos, kw, 1, {"d"}, at);
    const Value* d = arg(pos, kw, 0, "d");
    const std::string sep = d ? to_str(*d, at) : "";
    std::string r;
    List l = iterate(v, at);
    for (size_t k = 0; k < l.size(); ++k) {
      r += (k ? sep : "") + to_str(l[k], at);
      if (r.size() > kMaxOutputBytes) at.fail(what + ": result too large");
    }
    return Value::string(std::move(r));
  }
  if (n == "list") return Value::make_list(iterate(v, at));
  if (n == "reverse") {
    List l = iterate(v, at);
    std::reverse(l.begin(), l.end());
    if (v.kind != K::String) return Value::make_list(std::move(l));
    std::string r;
    for (auto& c : l) r += c.s;
    return Value::string(std::move(r));
  }
  if (n == "items") {
    if (v.kind != K::Dict) at.fail(std::string("filter 'items' of a ") + kind_name(v));
    List l;
    for (auto& [k, x] : v.dict->items) l.push_back(Value::make_list({Value::string(k), x}));
    return Value::make_list(std::move(l));
  }
  at.fail("unsupported filter '" + n + "'");
}

bool apply_test(const std::string& n, const Value& v, const List& pos, const Site& at) {
  if (n == "defined") return v.kind != K::Undefined;
  if (n == "undefined") return v.kind == K::Undefined;
  if (n == "none") return v.kind == K::None;
  if (n == "string") return v.kind == K::String;
  if (n == "number") return is_num(v);
  if (n == "integer") return v.kind == K::Int;
  if (n == "float") return v.kind == K::Float;
  if (n == "boolean") return v.kind == K::Bool;
  if (n == "true") return v.kind == K::Bool && v.b;
  if (n == "false") return v.kind == K::Bool && !v.b;
  if (n == "mapping") return v.kind == K::Dict;
  if (n == "sequence") return v.kind == K::String || v.kind == K::List || v.kind == K::Dict;
  if (n == "iterable") return v.kind == K::String || v.kind == K::List || v.kind == K::Dict || v.kind == K::Undefined;
  if (!is_intlike(v)) at.fail("test '" + n + "' needs an int, got a " + kind_name(v));
  if (n == "odd") return as_int(v) % 2 != 0;
  if (n == "even") return as_int(v) % 2 == 0;
  if (n != "divisibleby") at.fail("unsupported test '" + n + "'");
  if (pos.size() != 1 || !is_intlike(pos[0]) || as_int(pos[0]) == 0)
    at.fail("test 'divisibleby' needs one non-zero int argument");
  const int64_t d = as_int(pos[0]);
  return d == -1 || as_int(v) % d == 0;
}

Value call_global(const std::string& n, const List& pos, const Kwargs& kw, const Site& at) {
  if (n == "namespace" || n == "dict") {
    Dict d;
    if (!pos.empty()) {
      if (pos.size() > 1 || pos[0].kind != K::Dict) at.fail(n + "() takes keyword arguments or one dict");
      d = *pos[0].dict;
    }
    for (auto& [k, v] : kw) d.set(k, v);
    return n == "dict" ? Value::make_dict(std::move(d)) : Value::make_namespace(std::move(d));
  }
  if (n == "range") {
    if (!kw.empty() || pos.empty() || pos.size() > 3) at.fail("range() takes 1 to 3 int arguments");
    for (auto& p : pos)
      if (!is_intlike(p)) at.fail("range() takes int arguments");
    const int64_t b = pos.size() > 1 ? as_int(pos[0]) : 0, e = pos.size() > 1 ? as_int(pos[1]) : as_int(pos[0]);
    const int64_t st = pos.size() > 2 ? as_int(pos[2]) : 1;
    if (st == 0) at.fail("range() step cannot be zero");
    const double count = st > 0 ? (double(e) - double(b)) / double(st) : (double(b) - double(e)) / double(-st);
    if (count > double(kMaxItems)) at.fail("range() of more than " + std::to_string(kMaxItems) + " items");
    List l;
    for (int64_t k = b; st > 0 ? k < e : k > e; k += st) {
      l.push_back(Value::integer(k));
      if ((st > 0 && k > INT64_MAX - st) || (st < 0 && k < INT64_MIN - st)) break;
    }
    return Value::make_list(std::move(l));
  }
  if (n == "raise_exception")
    at.fail("the template raised an exception: " + (pos.empty() ? std::string() : to_str(pos[0], at)));
  if (n == "strftime_now") at.fail("strftime_now() is not supported (the output would depend on the clock)");
  at.fail("'" + n + "' is undefined and is not a supported function");
}

}  // namespace titan::data::jinja
