// Evaluation of a parsed Jinja template (see jinja.h): statements, expressions and scoping.
// Values follow Python (jinja_value.h); a for loop body runs in its own scope per iteration (a
// `set` inside it is gone afterwards, which is why templates use namespace()), an if body does
// not. Integer arithmetic that would leave int64 is an error (Python would grow the integer).
// Every rendering is bounded (jinja_value.h): steps, the size and nesting of each value made,
// the rendered text; a breach, or running out of memory all the same, is an error naming the
// template's origin.
#include <cmath>
#include <new>
#include <unordered_map>

#include "core/error.h"
#include "data/jinja_ast.h"
#include "data/jinja_text.h"
#include "data/jinja_value.h"

namespace titan::data::jinja {
namespace {

using K = Value::Kind;

enum class Flow { Normal, Break, Continue };

class Evaluator {
 public:
  Evaluator(const std::string& origin, const Dict& vars) : origin_(origin), vars_(vars) { scopes_.emplace_back(); }

  std::string run(const Body& body) {
    exec(body);
    return std::move(out_);
  }

 private:
  Site at(int line) const { return Site{origin_, line}; }

  void charge(int64_t steps, int line) {
    steps_ += steps;
    if (steps_ > kMaxSteps)
      at(line).fail("rendering takes more than " + std::to_string(kMaxSteps) + " steps (a loop that does not end in time)");
  }
  // A value just made: within the size and nesting limits; its size is charged as work.
  Value made(Value v, const Site& here) {
    if (v.kind == K::String) {
      if (v.s.size() > kMaxOutputBytes) here.fail("a string longer than " + std::to_string(kMaxOutputBytes >> 20) + " MiB");
      charge(int64_t(v.s.size() >> 6), here.line);
    } else if (v.kind == K::List || v.kind == K::Dict || v.kind == K::Namespace) {
      charge(value_size(v, here) >> 6, here.line);
    }
    return v;
  }
  // One more value gathered into a list (a literal, a call's arguments): the total stays bounded
  // while it grows (copies of one 60 MB string must not pile up before the list is measured).
  void gather(int64_t& total, const Value& v, const Site& here) {
    const int64_t n = value_size(v, here);
    total += n + 16;
    if (total > int64_t(kMaxOutputBytes)) here.fail("a value larger than " + std::to_string(kMaxOutputBytes >> 20) + " MiB (strings, list items and dict entries)");
    charge(n >> 6, here.line);
  }
  // Recursion guard for statements and expressions (the parser bounds both; this is a backstop).
  struct Deeper {
    Evaluator& ev;
    Deeper(Evaluator& e, int line) : ev(e) {
      if (++ev.depth_ > 2 * kMaxDepth + 8) ev.at(line).fail("nesting deeper than " + std::to_string(kMaxDepth) + " levels");
    }
    ~Deeper() { --ev.depth_; }
  };

  void emit(const std::string& s, int line) {
    out_ += s;
    if (out_.size() > kMaxOutputBytes) at(line).fail("rendered text exceeds " + std::to_string(kMaxOutputBytes >> 20) + " MiB");
  }

  // ---- statements --------------------------------------------------------------------------
  Flow exec(const Body& body) {
    for (const Stmt& s : body) {
      charge(1, s.line);
      Deeper deeper(*this, s.line);
      switch (s.k) {
        case Stmt::K::Text: emit(s.text, s.line); break;
        case Stmt::K::Output: emit(to_str(eval(*s.expr), at(s.line)), s.line); break;
        case Stmt::K::If: {
          const Body* chosen = &s.else_body;
          for (auto& [cond, b] : s.branches) {
            if (truthy(eval(*cond))) {
              chosen = &b;
              break;
            }
          }
          if (Flow f = exec(*chosen); f != Flow::Normal) return f;
          break;
        }
        case Stmt::K::For: exec_for(s); break;
        case Stmt::K::Set: {
          Value v = made(eval(*s.expr), at(s.line));
          if (s.targets.size() == 1) {
            scopes_.back()[s.targets[0]] = std::move(v);
          } else {
            Value ns = lookup(s.targets[0]);
            if (ns.kind != K::Namespace)
              at(s.line).fail("cannot set attribute '" + s.targets[1] + "' of a " + kind_name(ns) + " (only of a namespace())");
            value_size(v, at(s.line), ns.dict.get());  // no cycles: a namespace inside itself
            ns.dict->set(s.targets[1], std::move(v));
          }
          break;
        }
        case Stmt::K::Break: return Flow::Break;
        case Stmt::K::Continue: return Flow::Continue;
        case Stmt::K::Generation:
          if (Flow f = exec(s.body); f != Flow::Normal) return f;
          break;
      }
    }
    return Flow::Normal;
  }

  void bind_targets(std::unordered_map<std::string, Value>& scope, const std::vector<std::string>& targets,
                    const Value& item, int line) {
    if (targets.size() == 1) {
      scope[targets[0]] = item;
      return;
    }
    if (item.kind != K::List || item.list->size() != targets.size())
      at(line).fail("cannot unpack a " + std::string(kind_name(item)) + " into " + std::to_string(targets.size()) + " names");
    for (size_t k = 0; k < targets.size(); ++k) scope[targets[k]] = (*item.list)[k];
  }

  void exec_for(const Stmt& s) {
    // A list is iterated in place (held by its shared_ptr: the body cannot free it), not copied.
    const Value seq = eval(*s.expr);
    std::shared_ptr<const List> all =
        seq.kind == K::List ? std::shared_ptr<const List>(seq.list) : std::make_shared<const List>(iterate(seq, at(s.line)));
    charge(int64_t(all->size()), s.line);
    List filtered;
    if (s.filter) {
      for (const Value& it : *all) {
        scopes_.emplace_back();
        bind_targets(scopes_.back(), s.targets, it, s.line);
        const bool keep = truthy(eval(*s.filter));
        scopes_.pop_back();
        if (keep) filtered.push_back(it);
      }
    }
    const List& items = s.filter ? filtered : *all;
    if (items.empty()) {
      exec(s.else_body);
      return;
    }
    const int64_t n = int64_t(items.size());
    for (int64_t k = 0; k < n; ++k) {
      const Value& it = items[size_t(k)];
      charge(kLoopIterationSteps + (it.kind == K::String ? int64_t(3 * it.s.size()) >> 6 : 0), s.line);
      Dict loop;  // distinct keys: appended without Dict::set's lookup
      loop.items.reserve(11);
      loop.items.emplace_back("index0", Value::integer(k));
      loop.items.emplace_back("index", Value::integer(k + 1));
      loop.items.emplace_back("revindex0", Value::integer(n - 1 - k));
      loop.items.emplace_back("revindex", Value::integer(n - k));
      loop.items.emplace_back("first", Value::boolean(k == 0));
      loop.items.emplace_back("last", Value::boolean(k == n - 1));
      loop.items.emplace_back("length", Value::integer(n));
      loop.items.emplace_back("depth", Value::integer(1));
      loop.items.emplace_back("depth0", Value::integer(0));
      loop.items.emplace_back("previtem", k > 0 ? items[size_t(k - 1)] : Value::undefined("loop.previtem"));
      loop.items.emplace_back("nextitem", k + 1 < n ? items[size_t(k + 1)] : Value::undefined("loop.nextitem"));
      scopes_.emplace_back();
      bind_targets(scopes_.back(), s.targets, items[size_t(k)], s.line);
      scopes_.back()["loop"] = Value::make_dict(std::move(loop));
      const Flow f = exec(s.body);
      scopes_.pop_back();
      if (f == Flow::Break) break;
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
    const Site here = at(e.line);
    charge(1, e.line);
    Deeper deeper(*this, e.line);
    switch (e.k) {
      case Expr::K::Literal: return e.literal;
      case Expr::K::Name: return lookup(e.name);
      case Expr::K::Attr: {
        Value o = eval(*e.args[0]);
        need_defined(o, here, "reading attribute '" + e.name + "'");
        if (o.kind == K::Dict || o.kind == K::Namespace) {
          const Value* v = o.dict->find(e.name);
          return v ? *v : Value::undefined(e.name);
        }
        return Value::undefined(e.name);  // Jinja: a missing attribute is undefined
      }
      case Expr::K::Item: return item(eval(*e.args[0]), eval(*e.args[1]), here);
      case Expr::K::Slice: return made(slice(e, here), here);
      case Expr::K::Call: return made(call(e, here), here);
      case Expr::K::Filter: {
        Value v = eval(*e.args[0]);
        if (v.kind == K::String || v.kind == K::List) charge(int64_t((v.kind == K::String ? v.s.size() : v.list->size()) >> 6), e.line);
        return made(apply_filter(e.name, v, eval_args(e), eval_kwargs(e), here), here);
      }
      case Expr::K::Test: {
        Value v = eval(*e.args[0]);
        const bool r = apply_test(e.name, v, eval_args(e), here);
        return Value::boolean(e.negated ? !r : r);
      }
      case Expr::K::Neg:
      case Expr::K::Pos: {
        Value v = eval(*e.args[0]);
        need_defined(v, here, "unary sign");
        if (!is_num(v)) here.fail(std::string("bad operand type for unary sign: ") + kind_name(v));
        if (!is_intlike(v)) return e.k == Expr::K::Pos ? v : Value::number(-v.f);
        if (e.k == Expr::K::Pos) return Value::integer(as_int(v));
        if (as_int(v) == INT64_MIN) here.fail("integer overflow");
        return Value::integer(-as_int(v));
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
      case Expr::K::Binary: {
        Value a = eval(*e.args[0]);
        return made(binary(e.name, a, eval(*e.args[1]), here), here);
      }
      case Expr::K::Compare: {
        Value left = eval(*e.args[0]);
        for (size_t k = 0; k < e.ops.size(); ++k) {
          Value right = eval(*e.args[k + 1]);
          if (right.kind == K::List) charge(int64_t(right.list->size()), e.line);
          if (right.kind == K::String) charge(int64_t(right.s.size() >> 6), e.line);
          if (!compare(e.ops[k], left, right, here)) return Value::boolean(false);
          left = std::move(right);
        }
        return Value::boolean(true);
      }
      case Expr::K::ListLit:
      case Expr::K::TupleLit: {
        List l;
        int64_t total = 0;
        for (auto& a : e.args) {
          l.push_back(eval(*a));
          gather(total, l.back(), here);
        }
        return made(Value::make_list(std::move(l)), here);
      }
      case Expr::K::DictLit: {
        Dict d;
        int64_t total = 0;
        for (size_t k = 0; k + 1 < e.args.size(); k += 2) {
          Value key = eval(*e.args[k]);
          if (key.kind != K::String) here.fail("dict keys must be strings");
          Value v = eval(*e.args[k + 1]);
          gather(total, key, here);
          gather(total, v, here);
          d.set(key.s, std::move(v));
        }
        return made(Value::make_dict(std::move(d)), here);
      }
    }
    here.fail("unknown expression");
  }

  List eval_args(const Expr& e) {
    List out;
    int64_t total = 0;
    for (size_t k = 1; k < e.args.size(); ++k) {
      out.push_back(eval(*e.args[k]));
      gather(total, out.back(), at(e.line));
    }
    return out;
  }
  Kwargs eval_kwargs(const Expr& e) {
    Kwargs kw;
    int64_t total = 0;
    for (auto& [n, x] : e.kwargs) {
      kw.emplace_back(n, eval(*x));
      gather(total, kw.back().second, at(e.line));
    }
    return kw;
  }

  Value call(const Expr& e, const Site& here) {
    const Expr& callee = *e.args[0];
    if (callee.k == Expr::K::Attr) {
      Value o = eval(*callee.args[0]);
      return call_method(o, callee.name, eval_args(e), eval_kwargs(e), here);
    }
    if (callee.k == Expr::K::Name && lookup(callee.name).kind == K::Undefined)
      return call_global(callee.name, eval_args(e), eval_kwargs(e), here);
    here.fail("calling a value of this kind is not supported");
  }

  Value item(const Value& o, const Value& key, const Site& here) const {
    need_defined(o, here, "subscript");
    if (o.kind == K::Dict || o.kind == K::Namespace) {
      if (key.kind != K::String) return Value::undefined("[key]");
      const Value* v = o.dict->find(key.s);
      return v ? *v : Value::undefined(key.s);
    }
    if ((o.kind == K::List || o.kind == K::String) && is_intlike(key)) {
      const int64_t k0 = as_int(key);
      if (o.kind == K::List) {
        const int64_t n = int64_t(o.list->size());
        const int64_t k = k0 < 0 ? k0 + n : k0;
        return (k < 0 || k >= n) ? Value::undefined("[" + std::to_string(k0) + "]") : (*o.list)[size_t(k)];
      }
      return code_point_at(o.s, k0);
    }
    return Value::undefined("[]");
  }

  Value slice(const Expr& e, const Site& here) {
    Value o = eval(*e.args[0]);
    need_defined(o, here, "slicing");
    Value parts[3];
    const Value* p[3] = {nullptr, nullptr, nullptr};
    for (size_t k = 0; k < 3; ++k) {
      if (!e.args[k + 1]) continue;
      parts[k] = eval(*e.args[k + 1]);
      if (parts[k].kind == K::None) continue;
      if (!is_intlike(parts[k])) here.fail(std::string("slice index must be an int, got a ") + kind_name(parts[k]));
      p[k] = &parts[k];
    }
    if (o.kind != K::List && o.kind != K::String) here.fail(std::string("cannot slice a ") + kind_name(o));
    if (o.kind == K::List) {
      List sel;
      for (int64_t k : slice_indices(int64_t(o.list->size()), p[0], p[1], p[2], here)) sel.push_back((*o.list)[size_t(k)]);
      return Value::make_list(std::move(sel));
    }
    const std::vector<uint32_t> cps = code_points(o.s);
    std::string s;
    for (int64_t k : slice_indices(int64_t(cps.size()), p[0], p[1], p[2], here)) append_code_point(s, cps[size_t(k)]);
    return Value::string(std::move(s));
  }

  bool compare(const std::string& op, const Value& a, const Value& b, const Site& here) const {
    if (op == "==") return equals(a, b);
    if (op == "!=") return !equals(a, b);
    if (op == "in" || op == "notin") {
      bool r = false;
      switch (b.kind) {
        case K::Undefined: break;
        case K::String:
          if (a.kind != K::String) here.fail(std::string("'in <string>' requires a string, not a ") + kind_name(a));
          r = b.s.find(a.s) != std::string::npos;
          break;
        case K::List:
          for (auto& x : *b.list) r = r || equals(a, x);
          break;
        case K::Dict: r = a.kind == K::String && b.dict->find(a.s) != nullptr; break;
        default: here.fail(std::string("'in' needs a string, list or dict, not a ") + kind_name(b));
      }
      return op == "in" ? r : !r;
    }
    need_defined(a, here, "comparison");
    need_defined(b, here, "comparison");
    int c;
    if (is_intlike(a) && is_intlike(b)) {
      c = as_int(a) < as_int(b) ? -1 : (as_int(a) > as_int(b) ? 1 : 0);
    } else if (is_num(a) && is_num(b)) {
      const double x = as_double(a), y = as_double(b);
      if (std::isnan(x) || std::isnan(y)) return false;
      c = x < y ? -1 : (x > y ? 1 : 0);
    } else if (a.kind == K::String && b.kind == K::String) {
      c = a.s.compare(b.s);  // UTF-8 byte order is code point order
    } else {
      here.fail("cannot compare a " + std::string(kind_name(a)) + " with a " + kind_name(b) + " using " + op);
    }
    if (op == "<") return c < 0;
    if (op == ">") return c > 0;
    if (op == "<=") return c <= 0;
    return c >= 0;
  }

  Value binary(const std::string& op, const Value& a, const Value& b, const Site& here) const {
    if (op == "~") return Value::string(to_str(a, here) + to_str(b, here));
    need_defined(a, here, "operator " + op);
    need_defined(b, here, "operator " + op);
    auto bad = [&]() -> Value {
      here.fail("unsupported operand types for " + op + ": " + kind_name(a) + " and " + kind_name(b));
    };
    if (op == "+" && a.kind == b.kind && (a.kind == K::String || a.kind == K::List)) {
      if (a.kind == K::String) return Value::string(a.s + b.s);
      List l = *a.list;
      l.insert(l.end(), b.list->begin(), b.list->end());
      return Value::make_list(std::move(l));
    }
    if (op == "*") {  // sequence repetition
      const bool a_seq = a.kind == K::String || a.kind == K::List, b_seq = b.kind == K::String || b.kind == K::List;
      if ((a_seq && is_intlike(b)) || (b_seq && is_intlike(a))) {
        const Value& seq = a_seq ? a : b;
        const int64_t n = std::max<int64_t>(0, as_int(a_seq ? b : a));
        const double size = double(n) * double(value_size(seq, here));
        if (size > double(kMaxOutputBytes)) here.fail("sequence repetition too large");
        if (seq.kind == K::String) {
          std::string r;
          for (int64_t k = 0; k < n; ++k) r += seq.s;
          return Value::string(std::move(r));
        }
        List l;
        for (int64_t k = 0; k < n; ++k) l.insert(l.end(), seq.list->begin(), seq.list->end());
        return Value::make_list(std::move(l));
      }
    }
    if (!is_num(a) || !is_num(b)) return bad();
    const bool ints = is_intlike(a) && is_intlike(b);
    const int64_t x = as_int(a), y = as_int(b);
    const double u = as_double(a), w = as_double(b);
    int64_t r = 0;
    auto checked = [&](bool overflow) {
      if (overflow) here.fail("integer overflow in " + op);
      return Value::integer(r);
    };
    if (op == "+") return ints ? checked(__builtin_add_overflow(x, y, &r)) : Value::number(u + w);
    if (op == "-") return ints ? checked(__builtin_sub_overflow(x, y, &r)) : Value::number(u - w);
    if (op == "*") return ints ? checked(__builtin_mul_overflow(x, y, &r)) : Value::number(u * w);
    if (op == "/" || op == "//" || op == "%") {
      if (w == 0) here.fail("division by zero");
      if (op == "/") return Value::number(u / w);
      if (ints) {
        if (x == INT64_MIN && y == -1) here.fail("integer overflow in " + op);
        int64_t q = x / y, m = x % y;
        if (m != 0 && ((m < 0) != (y < 0))) {  // Python floors
          --q;
          m += y;
        }
        return Value::integer(op == "//" ? q : m);
      }
      const double q = std::floor(u / w);
      return Value::number(op == "//" ? q : u - q * w);
    }
    if (op == "**") {
      if (!ints || y < 0) return Value::number(std::pow(u, w));
      r = 1;
      for (int64_t k = 0; k < y; ++k) {
        if (__builtin_mul_overflow(r, x, &r)) here.fail("integer overflow in **");
        if (r == 0 || r == 1) break;  // 0 ** y, 1 ** y
        if (r == -1 && ((y - k - 1) % 2 == 0)) break;
      }
      return Value::integer(r);
    }
    return bad();
  }

  const std::string& origin_;
  const Dict& vars_;
  std::vector<std::unordered_map<std::string, Value>> scopes_;
  std::string out_;
  int64_t steps_ = 0;
  int depth_ = 0;
};

}  // namespace

Template Template::parse(std::string_view source, const std::string& origin) {
  auto impl = std::make_shared<Impl>();
  impl->origin = origin;
  try {
    impl->body = parse_template(source, origin);
  } catch (const std::bad_alloc&) {
    titan::fail(origin, ": chat template: out of memory while parsing");
  }
  Template t;
  t.impl_ = std::move(impl);
  return t;
}

std::string Template::render(const Dict& vars) const {
  TITAN_ASSERT(impl_ != nullptr, "render of an empty Template");
  Evaluator ev(impl_->origin, vars);
  try {
    return ev.run(impl_->body);
  } catch (const std::bad_alloc&) {
    titan::fail(impl_->origin, ": chat template: out of memory while rendering");
  }
}

}  // namespace titan::data::jinja
