// Evaluation of a parsed Jinja template (see jinja.h): statements, expressions and scoping.
// Values follow Python (jinja_value.h); a for loop body runs in its own scope per iteration (a
// `set` inside it is gone afterwards, which is why templates use namespace()), an if body does
// not. Integer arithmetic that would leave int64 is an error (Python would grow the integer).
#include <cmath>
#include <unordered_map>

#include "core/error.h"
#include "data/jinja_ast.h"
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

  void emit(const std::string& s, int line) {
    out_ += s;
    if (out_.size() > kMaxOutputBytes) at(line).fail("rendered text exceeds " + std::to_string(kMaxOutputBytes >> 20) + " MiB");
  }

  // ---- statements --------------------------------------------------------------------------
  Flow exec(const Body& body) {
    for (const Stmt& s : body) {
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
          Value v = eval(*s.expr);
          if (s.targets.size() == 1) {
            scopes_.back()[s.targets[0]] = std::move(v);
          } else {
            Value ns = lookup(s.targets[0]);
            if (ns.kind != K::Namespace)
              at(s.line).fail("cannot set attribute '" + s.targets[1] + "' of a " + kind_name(ns) + " (only of a namespace())");
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
    List all = iterate(eval(*s.expr), at(s.line)), items;
    if (s.filter) {
      for (const Value& it : all) {
        scopes_.emplace_back();
        bind_targets(scopes_.back(), s.targets, it, s.line);
        const bool keep = truthy(eval(*s.filter));
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
      case Expr::K::Slice: return slice(e, here);
      case Expr::K::Call: return call(e, here);
      case Expr::K::Filter: return apply_filter(e.name, eval(*e.args[0]), eval_args(e), eval_kwargs(e), here);
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
        return binary(e.name, a, eval(*e.args[1]), here);
      }
      case Expr::K::Compare: {
        Value left = eval(*e.args[0]);
        for (size_t k = 0; k < e.ops.size(); ++k) {
          Value right = eval(*e.args[k + 1]);
          if (!compare(e.ops[k], left, right, here)) return Value::boolean(false);
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
          if (key.kind != K::String) here.fail("dict keys must be strings");
          d.set(key.s, eval(*e.args[k + 1]));
        }
        return Value::make_dict(std::move(d));
      }
    }
    here.fail("unknown expression");
  }

  List eval_args(const Expr& e) {
    List out;
    for (size_t k = 1; k < e.args.size(); ++k) out.push_back(eval(*e.args[k]));
    return out;
  }
  Kwargs eval_kwargs(const Expr& e) {
    Kwargs kw;
    for (auto& [n, x] : e.kwargs) kw.emplace_back(n, eval(*x));
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
      List chars = iterate(o, here);
      const int64_t n = int64_t(chars.size());
      const int64_t k = k0 < 0 ? k0 + n : k0;
      return (k < 0 || k >= n) ? Value::undefined("[" + std::to_string(k0) + "]") : chars[size_t(k)];
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
    List src = o.kind == K::List ? *o.list : iterate(o, here), sel;
    for (int64_t k : slice_indices(int64_t(src.size()), p[0], p[1], p[2], here)) sel.push_back(src[size_t(k)]);
    if (o.kind == K::List) return Value::make_list(std::move(sel));
    std::string s;
    for (auto& c : sel) s += c.s;
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
        const double size = double(n) * double(seq.kind == K::String ? seq.s.size() : seq.list->size());
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
