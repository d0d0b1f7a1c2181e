#include "data/jinja_value.h"

#include "core/error.h"
#include "data/jinja_text.h"

namespace titan::data::jinja {

using K = Value::Kind;

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

void Site::fail(const std::string& msg) const { titan::fail(origin, ": chat template line ", line, ": ", msg); }

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
std::vector<int64_t> slice_indices(int64_t n, const Value* start, const Value* stop, const Value* step, const Site& at) {
  int64_t st = step ? as_int(*step) : 1;
  if (st == 0) at.fail("slice step cannot be zero");
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

std::string to_str(const Value& v, const Site& at) {
  switch (v.kind) {
    case K::Undefined: return "";
    case K::None: return "None";
    case K::Bool: return v.b ? "True" : "False";
    case K::Int: return std::to_string(v.i);
    case K::Float: return py_float_repr(v.f);
    case K::String: return v.s;
    default: at.fail(std::string("printing a ") + kind_name(v) + " is not supported");
  }
}

void need_defined(const Value& v, const Site& at, const std::string& what) {
  if (v.kind == K::Undefined) at.fail("'" + v.s + "' is undefined (" + what + ")");
}

namespace {
struct Measure {
  const Site& at;
  const Dict* inside;
  int64_t units = 0;
  void walk(const Value& v, int depth) {
    if (depth > kMaxValueDepth) at.fail("a value nested deeper than " + std::to_string(kMaxValueDepth) + " levels");
    if (v.kind == K::String) {
      add(int64_t(v.s.size()));
    } else if (v.kind == K::List) {
      if (int64_t(v.list->size()) > kMaxItems) at.fail("a list of more than " + std::to_string(kMaxItems) + " items");
      for (const Value& x : *v.list) {
        add(16);
        walk(x, depth + 1);
      }
    } else if (v.kind == K::Dict || v.kind == K::Namespace) {
      if (inside && v.dict.get() == inside) at.fail("a namespace or dict cannot contain itself");
      for (auto& [k, x] : v.dict->items) {
        add(16 + int64_t(k.size()));
        walk(x, depth + 1);
      }
    }
  }
  void add(int64_t n) {
    units += n;
    if (units > int64_t(kMaxOutputBytes))
      at.fail("a value larger than " + std::to_string(kMaxOutputBytes >> 20) + " MiB (strings, list items and dict entries)");
  }
};
}  // namespace

int64_t value_size(const Value& v, const Site& at, const Dict* inside) {
  Measure m{at, inside};
  m.walk(v, 0);
  return m.units;
}

Value code_point_at(const std::string& s, int64_t k) {
  const std::vector<uint32_t> cps = code_points(s);
  const int64_t n = int64_t(cps.size()), j = k < 0 ? k + n : k;
  if (j < 0 || j >= n) return Value::undefined("[" + std::to_string(k) + "]");
  return Value::string(from_code_points(&cps[size_t(j)], 1));
}

List iterate(const Value& v, const Site& at) {
  switch (v.kind) {
    case K::Undefined: return {};
    case K::List: return *v.list;
    case K::Dict: {
      List keys;
      for (auto& kv : v.dict->items) keys.push_back(Value::string(kv.first));
      return keys;
    }
    case K::String: {
      const std::vector<uint32_t> cps = code_points(v.s);
      if (int64_t(cps.size()) > kMaxItems)
        at.fail("iterating over a string of more than " + std::to_string(kMaxItems) + " characters");
      List chars;
      for (uint32_t c : cps) chars.push_back(Value::string(from_code_points(&c, 1)));
      return chars;
    }
    default: at.fail(std::string("cannot iterate over a ") + kind_name(v));
  }
}

}  // namespace titan::data::jinja
