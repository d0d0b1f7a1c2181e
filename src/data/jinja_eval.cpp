// Evaluation of a parsed Jinja template (see jinja.h) with Python's semantics for values.
//
// Filters: length, count, tojson(indent=), trim, string, first, last, join, default / d, list,
// reverse, items, safe. String methods: startswith, endswith, split, strip, lstrip, rstrip,
// replace, upper and lower (ASCII text only). Dict methods: get, items, keys, values. Globals:
// namespace(), dict(), range(), raise_exception(). Undefined values follow Jinja's default
// Undefined: false, empty when printed or iterated, length 0, an error on attribute access or
// arithmetic.
#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "core/error.h"
#include "data/jinja_ast.h"
#include "data/jinja_text.h"

namespace titan::data::jinja {

const Value* Dict::find(std::string_view key) const {
  for (auto& [k, v] : items)
    if (k == key) return &v;
  return nullptr;
}

void Dict::set(const std::string& key, Value v) {
  for (auto& [k, old] : items)
    if (k == key) {
      old = std::move(v);
      return;
    }
  items.emplace_back(key, std::move(v));
}

Value Value::undefined(std::string name) {
  Value v;
  v.s = std::move(name);
  return v;
}
Value Value::none() {
  Value v;
  v.kind = Kind::None;
  return v;
}
Value Value::boolean(bool b) {
  Value v;
  v.kind = Kind::Bool;
  v.b = b;
  return v;
}
Value Value::integer(int64_t i) {
  Value v;
  v.kind = Kind::Int;
  v.i = i;
  return v;
}
Value Value::number(double f) {
  Value v;
  v.kind = Kind::Float;
  v.f = f;
  return v;
}
Value Value::string(std::string s) {
  Value v;
  v.kind = Kind::String;
  v.s = std::move(s);
  return v;
}
Value Value::make_list(List l) {
  Value v;
  v.kind = Kind::List;
  v.list = std::make_shared<List>(std::move(l));
  return v;
}
Value Value::make_dict(Dict d) {
  Value v;
  v.kind = Kind::Dict;
  v.dict = std::make_shared<Dict>(std::move(d));
  return v;
}
Value Value::make_namespace(Dict d) {
  Value v = make_dict(std::move(d));
  v.kind = Kind::Namespace;
  return v;
}

namespace {

using K = Value::Kind;

const char* kind_name(const Value& v) {
  switch (v.kind) {
    case K::Undefined: return "undefined";
    case K::None: return "none";
    case K::Bool: return "bool";
    case K::Int: return "int";
    case K::Float: return "float";
    case K::String: return "str";
    case K::List: return "list";
    case K::Dict: return "dict";
    case K::Namespace: return "namespace";
  }
  return "?";
}

bool is_num(const Value& v) { return v.kind == K::Int || v.kind == K::Float || v.kind == K::Bool; }
bool is_intlike(const Value& v) { return v.kind == K::Int || v.kind == K::Bool; }
int64_t as_int(const Value& v) { return v.kind == K::Bool ? int64_t(v.b) : v.i; }
double as_double(const Value& v) { return v.kind == K::Float ? v.f : double(as_int(v)); }

bool truthy(const Value& v) {
  switch (v.kind) {
    case K::Undefined:
    case K::None: return false;
    case K::Bool: return v.b;
    case K::Int: return v.i != 0;
    case K::Float: return v.f != 0;
    case K::String: return !v.s.empty();
    case K::List: return !v.list->empty();
    case K::Dict: return !v.dict->items.empty();
    case K::Namespace: return true;
  }
  return false;
}

bool equals(const Value& a, const Value& b) {
  if (is_num(a) && is_num(b)) {
    if (is_intlike(a) && is_intlike(b)) return as_int(a) == as_int(b);
    return as_double(a) == as_double(b);
  }
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case K::Undefined:
    case K::None: return true;
    case K::String: return a.s == b.s;
    case K::List:
      if (a.list->size() != b.list->size()) return false;
      for (size_t k = 0; k < a.list->size(); ++k)
        if (!equals((*a.list)[k], (*b.list)[k])) return false;
      return true;
    case K::Dict: {
      if (a.dict->items.size() != b.dict->items.size()) return false;
      for (auto& [k, v] : a.dict->items) {
        const Value* o = b.dict->find(k);
        if (!o || !equals(v, *o)) return false;
      }
      return true;
    }
    case K::Namespace: return a.dict == b.dict;
    default: return false;
  }
}

// Python-like slice of n elements: the selected indices.
std::vector<int64_t> slice_indices(int64_t n, const Value* start, const Value* stop, const Value* step) {
  int64_t st = step ? as_int(*step) : 1;
  TITAN_CHECK(st != 0, "slice step cannot be zero");
  auto clamp = [&](const Value* v, int64_t def) {
    if (!v) return def;
    int64_t x = as_int(*v);
    if (x < 0) x += n;
    if (st > 0) return std::min(std::max<int64_t>(x, 0), n);
    return std::min(std::max<int64_t>(x, -1), n - 1);
  };
  int64_t b = clamp(start, st > 0 ? 0 : n - 1), e = clamp(stop, st > 0 ? n : -1);
  std::vector<int64_t> idx;
  for (int64_t k = b; st > 0 ? k < e : k > e; k += st) idx.push_back(k);
  return idx;
}

struct LoopFlow {
  enum F { Normal, Break, Continue } f = Normal;
};

class Evaluator {
 public:
  Evaluator(const std::string& origin, const Dict& vars) : origin_(origin), vars_(vars) { scopes_.emplace_back(); }

  std::string run(const Body& body) {
    exec(body);
    return std::move(out_);
  }

 private:
  [[noreturn]] void fail_at(int line, const std::string& msg) const {
    fail(origin_, ": chat template line ", line, ": ", msg);
  }

  std::string to_str(const Value& v, int line) const {
    switch (v.kind) {
      case K::Undefined: return "";
      case K::None: return "None";
      case K::Bool: return v.b ? "True" : "False";
      case K::Int: return std::to_string(v.i);
      case K::Float: return py_float_repr(v.f);
      case K::String: return v.s;
      default: fail_at(line, std::string("printing a ") + kind_name(v) + " is not supported");
    }
  }
  void need_defined(const Value& v, int line, const char* what) const {
    if (v.kind == K::Undefined) fail_at(line, "'" + v.s + "' is undefined (" + what + ")");
  }

  // ---- statements --------------------------------------------------------------------------
  LoopFlow::F exec(const Body& body) {
    for (const Stmt& s : body) {
      switch (s.k) {
        case Stmt::K::Text: out_ += s.text; break;
        case Stmt::K::Output: out_ += to_str(eval(*s.expr), s.line); break;
        case Stmt::K::If: {
          bool done = false;
          for (auto& [cond, b] : s.branches) {
            if (truthy(eval(*cond))) {
              done = true;
              if (auto f = exec(b); f != LoopFlow::Normal) return f;
              break;
            }
          }
          if (!done) {
            if (auto f = exec(s.else_body); f != LoopFlow::Normal) return f;
          }
          break;
        }
        case Stmt::K::For: exec_for(s); break;
        case Stmt::K::Set: {
          Value v = eval(*s.expr);
          if (s.targets.size() == 1) {
            scopes_.back()[s.targets[0]] = std::move(v);
          } else {
            Value ns = lookup(s.targets[0]);
            if (ns.kind != K::Namespace)
              fail_at(s.line, "cannot set attribute '" + s.targets[1] + "' of a " + kind_name(ns) + " (only namespace())");
            ns.dict->set(s.targets[1], std::move(v));
          }
          break;
        }
        case Stmt::K::Break: return LoopFlow::Break;
        case Stmt::K::Continue: return LoopFlow::Continue;
        case Stmt::K::Generation:
          if (auto f = exec(s.body); f != LoopFlow::Normal) return f;
          break;
      }
    }
    return LoopFlow::Normal;
  }

  List iterate(const Value& v, int line) const {
    switch (v.kind) {
      case K::Undefined: return {};
      case K::List: return *v.list;
      case K::Dict: {
        List keys;
        for (auto& kv : v.dict->items) keys.push_back(Value::string(kv.first));
        return keys;
      }
      case K::String: {
        List chars;
        for (uint32_t c : code_points(v.s)) chars.push_back(Value::string(from_code_points(&c, 1)));
        return chars;
      }
      default: fail_at(line, std::string("cannot iterate over a ") + kind_name(v));
    }
  }

  void bind_targets(std::unordered_map<std::string, Value>& scope, const std::vector<std::string>& targets,
                    const Value& item, int line) {
    if (targets.size() == 1) {
      scope[targets[0]] = item;
      return;
    }
    if (item.kind != K::List || item.list->size() != targets.size())
      fail_at(line, "cannot unpack a " + std::string(kind_name(item)) + " into " + std::to_string(targets.size()) + " names");
    for (size_t k = 0; k < targets.size(); ++k) scope[targets[k]] = (*item.list)[k];
  }

  void exec_for(const Stmt& s) {
    List all = iterate(eval(*s.expr), s.line), items;
    if (s.filter) {
      for (const Value& it : all) {
        scopes_.emplace_back();
        bind_targets(scopes_.back(), s.targets, it, s.line);
        bool keep = truthy(eval(*s.filter));
        scopes_.pop_back();
        if (keep) items.push_back(it);
      }
    } else {
      items = std::move(all);
    }
    if (items.empty()) {
      exec(s.else_body);
      return;
    }
    const int64_t n = int64_t(items.size());
    for (int64_t k = 0; k < n; ++k) {
      Dict loop;
      loop.set("index0", Value::integer(k));
      loop.set("index", Value::integer(k + 1));
      loop.set("revindex0", Value::integer(n - 1 - k));
      loop.set("revindex", Value::integer(n - k));
      loop.set("first", Value::boolean(k == 0));
      loop.set("last", Value::boolean(k == n - 1));
      loop.set("length", Value::integer(n));
      loop.set("depth", Value::integer(1));
      loop.set("depth0", Value::integer(0));
      loop.set("previtem", k > 0 ? items[size_t(k - 1)] : Value::undefined("loop.previtem"));
      loop.set("nextitem", k + 1 < n ? items[size_t(k + 1)] : Value::undefined("loop.nextitem"));
      scopes_.emplace_back();
      bind_targets(scopes_.back(), s.targets, items[size_t(k)], s.line);
      scopes_.back()["loop"] = Value::make_dict(std::move(loop));
      LoopFlow::F f = exec(s.body);
      scopes_.pop_back();
      if (f == LoopFlow::Break) break;
    }
  }

  Value lookup(const std::string& name) const {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
      auto f = it->find(name);
      if (f != it->end()) return f->second;
    }
    if (const Value* v = vars_.find(name)) return *v;
    return Value::undefined(name);
  }

  // ---- expressions -------------------------------------------------------------------------
  Value eval(const Expr& e) {
    switch (e.k) {
      case Expr::K::Literal: return e.literal;
      case Expr::K::Name: return lookup(e.name);
      case Expr::K::Attr: {
        Value o = eval(*e.args[0]);
        need_defined(o, e.line, ("reading attribute '" + e.name + "'").c_str());
        if (o.kind == K::Dict || o.kind == K::Namespace) {
          const Value* v = o.dict->find(e.name);
          return v ? *v : Value::undefined(e.name);
        }
        return Value::undefined(e.name);
      }
      case Expr::K::Item: return item(eval(*e.args[0]), eval(*e.args[1]), e.line);
      case Expr::K::Slice: {
        Value o = eval(*e.args[0]);
        need_defined(o, e.line, "slicing");
        Value parts[3];
        const Value* p[3] = {nullptr, nullptr, nullptr};
        for (int k = 0; k < 3; ++k) {
          if (!e.args[size_t(k) + 1]) continue;
          parts[k] = eval(*e.args[size_t(k) + 1]);
          if (parts[k].kind == K::None) continue;
          if (!is_intlike(parts[k])) fail_at(e.line, std::string("slice index must be an int, got a ") + kind_name(parts[k]));
          p[k] = &parts[k];
        }
        if (o.kind == K::List) {
          List out;
          for (int64_t k : slice_indices(int64_t(o.list->size()), p[0], p[1], p[2])) out.push_back((*o.list)[size_t(k)]);
          return Value::make_list(std::move(out));
        }
        if (o.kind == K::String) {
          std::vector<uint32_t> cps = code_points(o.s), sel;
          for (int64_t k : slice_indices(int64_t(cps.size()), p[0], p[1], p[2])) sel.push_back(cps[size_t(k)]);
          return Value::string(from_code_points(sel.data(), sel.size()));
        }
        fail_at(e.line, std::string("cannot slice a ") + kind_name(o));
      }
      case Expr::K::Call: return call(e);
      case Expr::K::Filter: return filter(e);
      case Expr::K::Test: {
        bool r = test(e);
        return Value::boolean(e.negated ? !r : r);
      }
      case Expr::K::Neg:
      case Expr::K::Pos: {
        Value v = eval(*e.args[0]);
        need_defined(v, e.line, "unary sign");
        if (!is_num(v)) fail_at(e.line, std::string("bad operand type for unary sign: ") + kind_name(v));
        if (e.k == Expr::K::Pos) return is_intlike(v) ? Value::integer(as_int(v)) : v;
        return is_intlike(v) ? Value::integer(-as_int(v)) : Value::number(-v.f);
      }
      case Expr::K::Not: return Value::boolean(!truthy(eval(*e.args[0])));
      case Expr::K::And: {
        Value a = eval(*e.args[0]);
        return truthy(a) ? eval(*e.args[1]) : a;
      }
      case Expr::K::Or: {
        Value a = eval(*e.args[0]);
        return truthy(a) ? a : eval(*e.args[1]);
      }
      case Expr::K::Cond:
        if (truthy(eval(*e.args[0]))) return eval(*e.args[1]);
        return e.args[2] ? eval(*e.args[2]) : Value::undefined("(if without else)");
      case Expr::K::Binary: return binary(e.name, eval(*e.args[0]), eval(*e.args[1]), e.line);
      case Expr::K::Compare: {
        Value left = eval(*e.args[0]);
        for (size_t k = 0; k < e.ops.size(); ++k) {
          Value right = eval(*e.args[k + 1]);
          if (!compare(e.ops[k], left, right, e.line)) return Value::boolean(false);
          left = std::move(right);
        }
        return Value::boolean(true);
      }
      case Expr::K::ListLit:
      case Expr::K::TupleLit: {
        List l;
        for (auto& a : e.args) l.push_back(eval(*a));
        return Value::make_list(std::move(l));
      }
      case Expr::K::DictLit: {
        Dict d;
        for (size_t k = 0; k + 1 < e.args.size(); k += 2) {
          Value key = eval(*e.args[k]);
          if (key.kind != K::String) fail_at(e.line, "dict keys must be strings");
          d.set(key.s, eval(*e.args[k + 1]));
        }
        return Value::make_dict(std::move(d));
      }
    }
    fail_at(e.line, "unknown expression");
  }

  Value item(const Value& o, const Value& key, int line) const {
    need_defined(o, line, "subscript");
    if (o.kind == K::Dict || o.kind == K::Namespace) {
      if (key.kind != K::String) return Value::undefined("[key]");
      const Value* v = o.dict->find(key.s);
      return v ? *v : Value::undefined(key.s);
    }
    if ((o.kind == K::List || o.kind == K::String) && is_intlike(key)) {
      if (o.kind == K::List) {
        int64_t n = int64_t(o.list->size()), k = as_int(key);
        if (k < 0) k += n;
        return (k < 0 || k >= n) ? Value::undefined("[" + std::to_string(as_int(key)) + "]") : (*o.list)[size_t(k)];
      }
      std::vector<uint32_t> cps = code_points(o.s);
      int64_t n = int64_t(cps.size()), k = as_int(key);
      if (k < 0) k += n;
      if (k < 0 || k >= n) return Value::undefined("[" + std::to_string(as_int(key)) + "]");
      return Value::string(from_code_points(&cps[size_t(k)], 1));
    }
    return Value::undefined("[]");
  }

  bool compare(const std::string& op, const Value& a, const Value& b, int line) const {
    if (op == "==") return equals(a, b);
    if (op == "!=") return !equals(a, b);
    if (op == "in" || op == "notin") {
      bool r;
      switch (b.kind) {
        case K::Undefined: r = false; break;
        case K::String:
          if (a.kind != K::String) fail_at(line, std::string("'in <string>' requires a string, not a ") + kind_name(a));
          r = b.s.find(a.s) != std::string::npos;
          break;
        case K::List:
          r = false;
          for (auto& x : *b.list) r = r || equals(a, x);
          break;
        case K::Dict: r = a.kind == K::String && b.dict->find(a.s) != nullptr; break;
        default: fail_at(line, std::string("'in' needs a string, list or dict, not a ") + kind_name(b));
      }
      return op == "in" ? r : !r;
    }
    need_defined(a, line, "comparison");
    need_defined(b, line, "comparison");
    int c;
    if (is_num(a) && is_num(b)) {
      double x = as_double(a), y = as_double(b);
      if (is_intlike(a) && is_intlike(b)) c = as_int(a) < as_int(b) ? -1 : (as_int(a) > as_int(b) ? 1 : 0);
      else c = x < y ? -1 : (x > y ? 1 : 0);
    } else if (a.kind == K::String && b.kind == K::String) {
      c = a.s.compare(b.s);  // UTF-8 byte order is code point order
    } else {
      fail_at(line, "cannot compare a " + std::string(kind_name(a)) + " with a " + kind_name(b) + " using " + op);
    }
    if (op == "<") return c < 0;
    if (op == ">") return c > 0;
    if (op == "<=") return c <= 0;
    return c >= 0;
  }

  Value binary(const std::string& op, const Value& a, const Value& b, int line) const {
    if (op == "~") return Value::string(to_str(a, line) + to_str(b, line));
    need_defined(a, line, ("operator " + op).c_str());
    need_defined(b, line, ("operator " + op).c_str());
    auto bad = [&]() -> Value {
      fail_at(line, "unsupported operand types for " + op + ": " + kind_name(a) + " and " + kind_name(b));
    };
    if (op == "+") {
      if (a.kind == K::String && b.kind == K::String) return Value::string(a.s + b.s);
      if (a.kind == K::List && b.kind == K::List) {
        List l = *a.list;
        l.insert(l.end(), b.list->begin(), b.list->end());
        return Value::make_list(std::move(l));
      }
    }
    if (op == "*") {
      const Value* str = a.kind == K::String || a.kind == K::List ? &a : (b.kind == K::String || b.kind == K::List ? &b : nullptr);
      const Value* cnt = str == &a ? &b : &a;
      if (str && is_intlike(*cnt)) {
        int64_t n = std::max<int64_t>(0, as_int(*cnt));
        if (str->kind == K::String) {
          std::string r;
          for (int64_t k = 0; k < n; ++k) r += str->s;
          return Value::string(std::move(r));
        }
        List l;
        for (int64_t k = 0; k < n; ++k) l.insert(l.end(), str->list->begin(), str->list->end());
        return Value::make_list(std::move(l));
      }
    }
    if (!is_num(a) || !is_num(b)) return bad();
    const bool ints = is_intlike(a) && is_intlike(b);
    const int64_t x = as_int(a), y = as_int(b);
    const double u = as_double(a), w = as_double(b);
    if (op == "+") return ints ? Value::integer(x + y) : Value::number(u + w);
    if (op == "-") return ints ? Value::integer(x - y) : Value::number(u - w);
    if (op == "*") return ints ? Value::integer(x * y) : Value::number(u * w);
    if (op == "/" || op == "//" || op == "%") {
      if (w == 0) fail_at(line, "division by zero");
      if (op == "/") return Value::number(u / w);
      if (ints) {
        int64_t q = x / y, r = x % y;
        if (r != 0 && ((r < 0) != (y < 0))) {
          --q;
          r += y;
        }
        return op == "//" ? Value::integer(q) : Value::integer(r);
      }
      double q = std::floor(u / w);
      return op == "//" ? Value::number(q) : Value::number(u - q * w);
    }
    if (op == "**") {
      if (ints && y >= 0) {
        int64_t r = 1;
        for (int64_t k = 0; k < y; ++k) r *= x;
        return Value::integer(r);
      }
      return Value::number(std::pow(u, w));
    }
    return bad();
  }

  // ---- calls, methods, filters, tests ------------------------------------------------------
  std::vector<Value> eval_args(const Expr& e, size_t first) {
    std::vector<Value> out;
    for (size_t k = first; k < e.args.size(); ++k) out.push_back(eval(*e.args[k]));
    return out;
  }
  // Positional or keyword argument `k` named `name` (nullptr when absent).
  const Value* arg(const std::vector<Value>& pos, const std::vector<std::pair<std::string, Value>>& kw, size_t k,
                   const char* name) const {
    if (k < pos.size()) return &pos[k];
    for (auto& [n, v] : kw)
      if (n == name) return &v;
    return nullptr;
  }
  std::vector<std::pair<std::string, Value>> eval_kwargs(const Expr& e) {
    std::vector<std::pair<std::string, Value>> kw;
    for (auto& [n, x] : e.kwargs) kw.emplace_back(n, eval(*x));
    return kw;
  }
  void check_arity(const std::string& what, const std::vector<Value>& pos, const std::vector<std::pair<std::string, Value>>& kw,
                   size_t max_pos, std::initializer_list<const char*> names, int line) const {
    if (pos.size() > max_pos) fail_at(line, what + " takes at most " + std::to_string(max_pos) + " arguments");
    for (auto& [n, v] : kw) {
      bool ok = false;
      for (const char* m : names) ok = ok || n == m;
      if (!ok) fail_at(line, what + " has no argument '" + n + "'");
    }
  }
  std::string str_arg(const Value* v, const std::string& what, int line) const {
    if (!v || v->kind != K::String) fail_at(line, what + " needs a string argument");
    return v->s;
  }

  Value call(const Expr& e) {
    const Expr& callee = *e.args[0];
    std::vector<Value> pos = eval_args(e, 1);
    auto kw = eval_kwargs(e);
    if (callee.k == Expr::K::Attr) return method(eval(*callee.args[0]), callee.name, pos, kw, e.line);
    if (callee.k == Expr::K::Name && lookup(callee.name).kind == K::Undefined) {
      const std::string& n = callee.name;
      if (n == "namespace" || n == "dict") {
        Dict d;
        if (!pos.empty()) {
          if (pos.size() > 1 || pos[0].kind != K::Dict) fail_at(e.line, n + "() takes keyword arguments or one dict");
          d = *pos[0].dict;
        }
        for (auto& [k, v] : kw) d.set(k, v);
        return n == "dict" ? Value::make_dict(std::move(d)) : Value::make_namespace(std::move(d));
      }
      if (n == "range") {
        if (!kw.empty() || pos.empty() || pos.size() > 3) fail_at(e.line, "range() takes 1 to 3 int arguments");
        for (auto& p : pos)
          if (!is_intlike(p)) fail_at(e.line, "range() takes int arguments");
        int64_t b = pos.size() > 1 ? as_int(pos[0]) : 0, end = pos.size() > 1 ? as_int(pos[1]) : as_int(pos[0]);
        int64_t st = pos.size() > 2 ? as_int(pos[2]) : 1;
        if (st == 0) fail_at(e.line, "range() step cannot be zero");
        List l;
        for (int64_t k = b; st > 0 ? k < end : k > end; k += st) l.push_back(Value::integer(k));
        return Value::make_list(std::move(l));
      }
      if (n == "raise_exception")
        fail_at(e.line, "the template raised an exception: " + (pos.empty() ? std::string() : to_str(pos[0], e.line)));
      if (n == "strftime_now") fail_at(e.line, "strftime_now() is not supported (the output would depend on the clock)");
      fail_at(e.line, "'" + n + "' is undefined and is not a supported function");
    }
    fail_at(e.line, "calling a value of this kind is not supported");
  }

  Value method(const Value& o, const std::string& name, const std::vector<Value>& pos,
               const std::vector<std::pair<std::string, Value>>& kw, int line) const {
    need_defined(o, line, ("calling ." + name + "()").c_str());
    const std::string what = std::string(kind_name(o)) + "." + name + "()";
    if (o.kind == K::String) {
      if (name == "startswith" || name == "endswith") {
        check_arity(what, pos, kw, 1, {}, line);
        const Value* a = arg(pos, kw, 0, "");
        if (!a) fail_at(line, what + " needs an argument");
        List cands = a->kind == K::List ? *a->list : List{*a};
        for (auto& c : cands) {
          std::string x = str_arg(&c, what, line);
          bool hit = name == "startswith" ? o.s.compare(0, x.size(), x) == 0 && o.s.size() >= x.size()
                                          : o.s.size() >= x.size() && o.s.compare(o.s.size() - x.size(), x.size(), x) == 0;
          if (hit) return Value::boolean(true);
        }
        return Value::boolean(false);
      }
      if (name == "strip" || name == "lstrip" || name == "rstrip") {
        check_arity(what, pos, kw, 1, {"chars"}, line);
        const Value* a = arg(pos, kw, 0, "chars");
        std::string chars;
        const std::string* cp = nullptr;
        if (a && a->kind != K::None) {
          chars = str_arg(a, what, line);
          cp = &chars;
        }
        return Value::string(py_strip(o.s, cp, name != "rstrip", name != "lstrip"));
      }
      if (name == "split") {
        check_arity(what, pos, kw, 2, {"sep", "maxsplit"}, line);
        const Value* sep = arg(pos, kw, 0, "sep");
        const Value* mx = arg(pos, kw, 1, "maxsplit");
        std::string s;
        const std::string* sp = nullptr;
        if (sep && sep->kind != K::None) {
          s = str_arg(sep, what, line);
          if (s.empty()) fail_at(line, "str.split() with an empty separator");
          sp = &s;
        }
        if (mx && !is_intlike(*mx)) fail_at(line, what + ": maxsplit must be an int");
        List l;
        for (auto& part : py_split(o.s, sp, mx ? as_int(*mx) : -1)) l.push_back(Value::string(part));
        return Value::make_list(std::move(l));
      }
      if (name == "replace") {
        check_arity(what, pos, kw, 3, {}, line);
        if (pos.size() < 2) fail_at(line, what + " needs two arguments");
        std::string from = str_arg(&pos[0], what, line), to = str_arg(&pos[1], what, line);
        int64_t count = pos.size() > 2 ? as_int(pos[2]) : -1;
        if (from.empty()) fail_at(line, what + " with an empty pattern is not supported");
        std::string r;
        size_t at = 0;
        for (int64_t n = 0; count < 0 || n < count; ++n) {
          size_t hit = o.s.find(from, at);
          if (hit == std::string::npos) break;
          r.append(o.s, at, hit - at);
          r += to;
          at = hit + from.size();
        }
        r.append(o.s, at, std::string::npos);
        return Value::string(std::move(r));
      }
      if (name == "upper" || name == "lower") {
        check_arity(what, pos, kw, 0, {}, line);
        std::string r = o.s;
        for (char& c : r) {
          if (static_cast<unsigned char>(c) >= 0x80) fail_at(line, what + " on non-ASCII text is not supported");
          c = char(name == "upper" ? std::toupper(static_cast<unsigned char>(c)) : std::tolower(static_cast<unsigned char>(c)));
        }
        return Value::string(std::move(r));
      }
    } else if (o.kind == K::Dict) {
      if (name == "get") {
        check_arity(what, pos, kw, 2, {}, line);
        if (pos.empty()) fail_at(line, what + " needs a key");
        const Value* v = pos[0].kind == K::String ? o.dict->find(pos[0].s) : nullptr;
        return v ? *v : (pos.size() > 1 ? pos[1] : Value::none());
      }
      if (name == "items" || name == "keys" || name == "values") {
        check_arity(what, pos, kw, 0, {}, line);
        List l;
        for (auto& [k, v] : o.dict->items) {
          if (name == "items") l.push_back(Value::make_list({Value::string(k), v}));
          else l.push_back(name == "keys" ? Value::string(k) : v);
        }
        return Value::make_list(std::move(l));
      }
    }
    fail_at(line, "method " + what + " is not supported");
  }

  Value filter(const Expr& e) {
    Value v = eval(*e.args[0]);
    std::vector<Value> pos = eval_args(e, 1);
    auto kw = eval_kwargs(e);
    const std::string& n = e.name;
    const std::string what = "filter '" + n + "'";
    const int line = e.line;
    if (n == "default" || n == "d") {
      check_arity(what, pos, kw, 2, {"default_value", "boolean"}, line);
      const Value* def = arg(pos, kw, 0, "default_value");
      const Value* boolean = arg(pos, kw, 1, "boolean");
      bool use = v.kind == K::Undefined || (boolean && truthy(*boolean) && !truthy(v));
      return use ? (def ? *def : Value::string("")) : v;
    }
    if (n == "safe") return v;
    if (n == "string") return Value::string(to_str(v, line));
    if (n == "length" || n == "count") {
      check_arity(what, pos, kw, 0, {}, line);
      switch (v.kind) {
        case K::Undefined: return Value::integer(0);
        case K::String: return Value::integer(int64_t(code_points(v.s).size()));
        case K::List: return Value::integer(int64_t(v.list->size()));
        case K::Dict: return Value::integer(int64_t(v.dict->items.size()));
        default: fail_at(line, std::string("length of a ") + kind_name(v));
      }
    }
    if (n == "tojson") {
      check_arity(what, pos, kw, 1, {"indent", "ensure_ascii", "separators", "sort_keys"}, line);
      const Value* ind = arg(pos, kw, 0, "indent");
      for (auto& [k, x] : kw)
        if ((k == "ensure_ascii" || k == "sort_keys") && truthy(x)) fail_at(line, "tojson(" + k + "=true) is not supported");
        else if (k == "separators" && x.kind != K::None) fail_at(line, "tojson(separators=...) is not supported");
      if (ind && ind->kind != K::None && !is_intlike(*ind)) fail_at(line, "tojson(indent=) must be an int");
      return Value::string(py_json_dumps(v, ind && ind->kind != K::None ? std::max<int64_t>(0, as_int(*ind)) : -1));
    }
    need_defined(v, line, what.c_str());
    if (n == "trim") {
      check_arity(what, pos, kw, 1, {"chars"}, line);
      const Value* c = arg(pos, kw, 0, "chars");
      std::string chars;
      if (c && c->kind != K::None) chars = str_arg(c, what, line);
      return Value::string(py_strip(to_str(v, line), c && c->kind != K::None ? &chars : nullptr, true, true));
    }
    if (n == "first" || n == "last") {
      List l = iterate(v, line);
      if (l.empty()) return Value::undefined(n);
      return n == "first" ? l.front() : l.back();
    }
    if (n == "join") {
      check_arity(what, pos, kw, 1, {"d"}, line);
      const Value* d = arg(pos, kw, 0, "d");
      std::string sep = d ? to_str(*d, line) : "", r;
      List l = iterate(v, line);
      for (size_t k = 0; k < l.size(); ++k) r += (k ? sep : "") + to_str(l[k], line);
      return Value::string(std::move(r));
    }
    if (n == "list") return Value::make_list(iterate(v, line));
    if (n == "reverse") {
      List l = iterate(v, line);
      std::reverse(l.begin(), l.end());
      if (v.kind != K::String) return Value::make_list(std::move(l));
      std::string r;
      for (auto& c : l) r += c.s;
      return Value::string(std::move(r));
    }
    if (n == "items") {
      if (v.kind != K::Dict) fail_at(line, std::string("filter 'items' of a ") + kind_name(v));
      List l;
      for (auto& [k, x] : v.dict->items) l.push_back(Value::make_list({Value::string(k), x}));
      return Value::make_list(std::move(l));
    }
    fail_at(line, "unsupported filter '" + n + "'");
  }

  bool test(const Expr& e) {
    Value v = eval(*e.args[0]);
    std::vector<Value> pos = eval_args(e, 1);
    const std::string& n = e.name;
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
    if (!is_intlike(v)) fail_at(e.line, "test '" + n + "' needs an int, got a " + kind_name(v));
    if (n == "odd") return as_int(v) % 2 != 0;
    if (n == "even") return as_int(v) % 2 == 0;
    if (pos.size() != 1 || !is_intlike(pos[0]) || as_int(pos[0]) == 0)
      fail_at(e.line, "test 'divisibleby' needs one non-zero int argument");
    return as_int(v) % as_int(pos[0]) == 0;  // divisibleby
  }

  const std::string& origin_;
  const Dict& vars_;
  std::vector<std::unordered_map<std::string, Value>> scopes_;
  std::string out_;
};

}  // namespace

Template Template::parse(std::string_view source, const std::string& origin) {
  auto impl = std::make_shared<Impl>();
  impl->origin = origin;
  impl->body = parse_template(source, origin);
  Template t;
  t.impl_ = std::move(impl);
  return t;
}

std::string Template::render(const Dict& vars) const {
  TITAN_ASSERT(impl_ != nullptr, "render of an empty Template");
  Evaluator ev(impl_->origin, vars);
  return ev.run(impl_->body);
}

}  // namespace titan::data::jinja
