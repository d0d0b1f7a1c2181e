// Lexer and parser of the Jinja subset (see jinja.h). The lexer applies the whitespace rules of
// the environment transformers renders chat templates in: trim_blocks (the first newline after a
// block or comment tag is removed), lstrip_blocks (spaces and tabs from the start of a line up to
// a block or comment tag are removed), the "-" controls (all whitespace before / after the tag is
// removed; whitespace as Python's str.isspace), "+" (no lstrip / trim for that tag), newlines
// normalized to "\n" and one trailing newline of the source dropped.
#include <algorithm>
#include <cstring>
#include <set>

#include "core/error.h"
#include "data/jinja_ast.h"
#include "data/jinja_text.h"
#include "data/jinja_value.h"

namespace titan::data::jinja {
namespace {

struct Tok {
  enum T { Data, VarBegin, VarEnd, BlockBegin, BlockEnd, Name, Int, Float, Str, Op, Eof };
  Tok(T type, std::string value, int at) : t(type), v(std::move(value)), line(at) {}
  T t;
  std::string v;
  int line = 0;
  int64_t i = 0;
  double f = 0;
};

class Lexer {
 public:
  Lexer(std::string_view source, const std::string& origin) : origin_(origin) {
    // Newlines (\r\n, \r, \n) become \n; one trailing newline is dropped (keep_trailing_newline off).
    src_.reserve(source.size());
    for (size_t k = 0; k < source.size(); ++k) {
      if (source[k] == '\r') {
        src_ += '\n';
        if (k + 1 < source.size() && source[k + 1] == '\n') ++k;
      } else {
        src_ += source[k];
      }
    }
    if (!src_.empty() && src_.back() == '\n') src_.pop_back();
  }

  std::vector<Tok> run() {
    while (pos_ < src_.size()) {
      size_t tag = find_tag(pos_);
      const bool line_starting = pos_ == 0 || src_[pos_ - 1] == '\n';
      std::string data = src_.substr(pos_, tag - pos_);
      if (tag == src_.size()) {
        emit_data(data);
        advance_to(tag);
        break;
      }
      const char kind = src_[tag + 1];  // '{', '%' or '#'
      const char sign = tag + 2 < src_.size() ? src_[tag + 2] : 0;
      if (sign == '-') {
        data.resize(rstrip_len(data));
      } else if (sign != '+' && kind != '{') {
        // lstrip_blocks: only whitespace between the line start and the tag.
        size_t l = data.rfind('\n');
        l = l == std::string::npos ? 0 : l + 1;
        if ((l > 0 || line_starting) && l < data.size() && rstrip_len(std::string_view(data).substr(l)) == 0)
          data.resize(l);
      }
      emit_data(data);
      advance_to(tag);
      const int tag_line = line_;
      size_t p = tag + 2 + ((sign == '-' || sign == '+') ? 1 : 0);
      if (kind == '#') {
        size_t end = src_.find("#}", p);
        if (end == std::string::npos) fail_at(tag_line, "comment is not closed with #}");
        const char esign = end > p ? src_[end - 1] : 0;
        advance_to(end + 2);
        after_tag(esign, true);
        continue;
      }
      advance_to(p);
      toks_.push_back({kind == '{' ? Tok::VarBegin : Tok::BlockBegin, "", tag_line});
      lex_tag(kind == '{' ? "}}" : "%}", kind == '%', tag_line);
    }
    toks_.push_back({Tok::Eof, "", line_});
    return std::move(toks_);
  }

 private:
  [[noreturn]] void fail_at(int line, const std::string& msg) { fail(origin_, ": chat template line ", line, ": ", msg); }

  size_t find_tag(size_t from) const {
    for (size_t k = from; k + 1 < src_.size(); ++k)
      if (src_[k] == '{' && (src_[k + 1] == '{' || src_[k + 1] == '%' || src_[k + 1] == '#')) return k;
    return src_.size();
  }
  void advance_to(size_t p) {
    for (; pos_ < p; ++pos_)
      if (src_[pos_] == '\n') ++line_;
  }
  void emit_data(const std::string& d) {
    if (!d.empty()) toks_.push_back({Tok::Data, d, line_});
  }
  // After a tag's end marker: "-" strips all following whitespace; a block or comment tag without
  // "+" drops one following newline (trim_blocks).
  void after_tag(char sign, bool block) {
    if (sign == '-') {
      advance_to(pos_ + lstrip_len(std::string_view(src_).substr(pos_)));
    } else if (block && sign != '+' && pos_ < src_.size() && src_[pos_] == '\n') {
      advance_to(pos_ + 1);
    }
  }

  void lex_tag(const char* end, bool block, int tag_line) {
    for (;;) {
      while (pos_ < src_.size() && (src_[pos_] == ' ' || src_[pos_] == '\t' || src_[pos_] == '\n')) advance_to(pos_ + 1);
      if (pos_ >= src_.size()) fail_at(tag_line, std::string("tag is not closed with ") + end);
      std::string_view rest = std::string_view(src_).substr(pos_);
      for (char sign : {'-', '+', '\0'}) {
        std::string marker = sign ? std::string(1, sign) + end : std::string(end);
        if (rest.substr(0, marker.size()) == marker) {
          advance_to(pos_ + marker.size());
          toks_.push_back({block ? Tok::BlockEnd : Tok::VarEnd, "", line_});
          after_tag(sign, block);
          return;
        }
      }
      const char c = src_[pos_];
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t e = pos_;
        while (e < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[e])) || src_[e] == '_')) ++e;
        toks_.push_back({Tok::Name, src_.substr(pos_, e - pos_), line_});
        advance_to(e);
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        lex_number();
      } else if (c == '\'' || c == '"') {
        lex_string(c);
      } else {
        static const char* ops[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "|", ".",
                                    ",", ":", "(", ")", "[", "]", "{", "}", "=", "<", ">"};
        bool hit = false;
        for (const char* op : ops) {
          size_t n = std::strlen(op);
          if (rest.substr(0, n) == op) {
            toks_.push_back({Tok::Op, op, line_});
            advance_to(pos_ + n);
            hit = true;
            break;
          }
        }
        if (!hit) fail_at(line_, std::string("unexpected character '") + c + "' in a tag");
      }
    }
  }

  void lex_number() {
    size_t e = pos_;
    auto digits = [&] {
      size_t s = e;
      while (e < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[e])) || (src_[e] == '_' && e > s))) ++e;
    };
    digits();
    bool is_float = false;
    if (e + 1 < src_.size() && src_[e] == '.' && std::isdigit(static_cast<unsigned char>(src_[e + 1]))) {
      ++e;
      digits();
      is_float = true;
    }
    if (e < src_.size() && (src_[e] == 'e' || src_[e] == 'E')) {
      size_t x = e + 1;
      if (x < src_.size() && (src_[x] == '+' || src_[x] == '-')) ++x;
      if (x < src_.size() && std::isdigit(static_cast<unsigned char>(src_[x]))) {
        e = x;
        digits();
        is_float = true;
      }
    }
    std::string text;
    for (size_t k = pos_; k < e; ++k)
      if (src_[k] != '_') text += src_[k];
    Tok t{is_float ? Tok::Float : Tok::Int, text, line_};
    try {
      if (is_float) t.f = std::stod(text);
      else t.i = std::stoll(text);
    } catch (...) {
      fail_at(line_, "number '" + text + "' is out of range");
    }
    toks_.push_back(t);
    advance_to(e);
  }

  // Python string literal escapes (what Jinja's lexer applies with unicode-escape).
  void lex_string(char quote) {
    const int start_line = line_;
    size_t k = pos_ + 1;
    std::string out;
    for (;;) {
      if (k >= src_.size()) fail_at(start_line, "string literal is not closed");
      char c = src_[k];
      if (c == quote) break;
      if (c != '\\') {
        out += c;
        ++k;
        continue;
      }
      if (k + 1 >= src_.size()) fail_at(start_line, "string literal is not closed");
      char e = src_[k + 1];
      k += 2;
      auto hex = [&](int n) {
        uint32_t v = 0;
        for (int j = 0; j < n; ++j, ++k) {
          if (k >= src_.size() || !std::isxdigit(static_cast<unsigned char>(src_[k])))
            fail_at(start_line, std::string("bad \\") + e + " escape in a string literal");
          char h = src_[k];
          v = v * 16 + uint32_t(std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : (std::tolower(h) - 'a' + 10));
        }
        return v;
      };
      switch (e) {
        case '\n': break;  // line continuation
        case '\\': out += '\\'; break;
        case '\'': out += '\''; break;
        case '"': out += '"'; break;
        case 'a': out += '\a'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'v': out += '\v'; break;
        case 'x': append_code_point(out, hex(2)); break;
        case 'u': append_code_point(out, hex(4)); break;
        case 'U': {
          uint32_t v = hex(8);
          if (v > 0x10FFFF) fail_at(start_line, "\\U escape beyond U+10FFFF in a string literal");
          append_code_point(out, v);
          break;
        }
        case 'N': fail_at(start_line, "\\N{...} escapes are not supported");
        default:
          if (e >= '0' && e <= '7') {
            uint32_t v = uint32_t(e - '0');
            for (int j = 0; j < 2 && k < src_.size() && src_[k] >= '0' && src_[k] <= '7'; ++j, ++k) v = v * 8 + uint32_t(src_[k] - '0');
            append_code_point(out, v);
          } else {  // Python keeps an unknown escape as written
            out += '\\';
            out += e;
          }
      }
    }
    toks_.push_back({Tok::Str, out, start_line});
    advance_to(k + 1);
  }

  const std::string& origin_;
  std::string src_;
  size_t pos_ = 0;
  int line_ = 1;
  std::vector<Tok> toks_;
};

const std::set<std::string> kFilters = {"length", "count", "tojson", "trim", "string", "first", "last",
                                        "join", "default", "d", "list", "reverse", "items", "safe"};
const std::set<std::string> kTests = {"defined", "undefined", "none", "string", "number", "integer", "float",
                                      "boolean", "true", "false", "mapping", "sequence", "iterable", "odd",
                                      "even", "divisibleby"};

class Parser {
 public:
  Parser(std::vector<Tok> toks, const std::string& origin) : t_(std::move(toks)), origin_(origin) {}

  Body parse_all() {
    Body b = parse_body({});
    return b;
  }

 private:
  [[noreturn]] void fail_at(int line, const std::string& msg) { fail(origin_, ": chat template line ", line, ": ", msg); }
  const Tok& cur() const { return t_[p_]; }
  const Tok& peek(size_t n = 1) const { return t_[std::min(p_ + n, t_.size() - 1)]; }
  bool is_op(const char* op) const { return cur().t == Tok::Op && cur().v == op; }
  bool is_name(const char* n) const { return cur().t == Tok::Name && cur().v == n; }
  static std::string describe(const Tok& t) {
    switch (t.t) {
      case Tok::Data: return "text";
      case Tok::VarBegin: return "'{{'";
      case Tok::VarEnd: return "'}}'";
      case Tok::BlockBegin: return "'{%'";
      case Tok::BlockEnd: return "'%}'";
      case Tok::Eof: return "the end of the template";
      case Tok::Str: return "a string";
      default: return "'" + t.v + "'";
    }
  }
  void expect_op(const char* op) {
    if (!is_op(op)) fail_at(cur().line, std::string("expected '") + op + "', found " + describe(cur()));
    ++p_;
  }
  void expect(Tok::T type, const char* what) {
    if (cur().t != type) fail_at(cur().line, std::string("expected ") + what + ", found " + describe(cur()));
    ++p_;
  }
  std::string expect_name() {
    if (cur().t != Tok::Name) fail_at(cur().line, "expected a name, found " + describe(cur()));
    return t_[p_++].v;
  }

  ExprP node(Expr::K k, int line) {
    auto e = std::make_unique<Expr>();
    e->k = k;
    e->line = line;
    return e;
  }
  // A node with all its operands: its depth (1 + its deepest operand's), an error past kMaxDepth.
  // Chains parsed by loops (a + b + c ..., x|f|g ..., x[0][0] ...) are left-deep trees: each link
  // is a level here, though the parser did not recurse for it.
  ExprP seal(ExprP e) {
    int d = 0;
    for (auto& a : e->args)
      if (a) d = std::max(d, a->depth);
    for (auto& kv : e->kwargs) d = std::max(d, kv.second->depth);
    e->depth = d + 1;
    if (e->depth > kMaxDepth) fail_at(e->line, "nesting deeper than " + std::to_string(kMaxDepth) + " levels");
    return e;
  }

  // ---- statements --------------------------------------------------------------------------
  Body parse_body(const std::set<std::string>& terminators) {
    Body out;
    for (;;) {
      const Tok& tk = cur();
      if (tk.t == Tok::Eof) {
        if (!terminators.empty()) fail_at(tk.line, "missing {% " + *terminators.rbegin() + " %} before the end of the template");
        return out;
      }
      if (tk.t == Tok::Data) {
        Stmt s{Stmt::K::Text, tk.line};
        s.text = tk.v;
        out.push_back(std::move(s));
        ++p_;
      } else if (tk.t == Tok::VarBegin) {
        Stmt s{Stmt::K::Output, tk.line};
        ++p_;
        s.expr = parse_tuple_or_expr();
        expect(Tok::VarEnd, "'}}'");
        out.push_back(std::move(s));
      } else if (tk.t == Tok::BlockBegin) {
        const Tok& name = peek();
        if (name.t != Tok::Name) fail_at(name.line, "expected a tag name after '{%', found " + describe(name));
        if (terminators.count(name.v)) return out;
        ++p_;
        out.push_back(parse_statement());
      } else {
        fail_at(tk.line, "unexpected " + describe(tk));
      }
    }
  }

  Stmt parse_statement() {
    Nest nest(*this);
    const Tok tag = t_[p_++];
    const std::string& n = tag.v;
    Stmt s{Stmt::K::Text, tag.line};
    if (n == "if") {
      s.k = Stmt::K::If;
      ExprP cond = parse_expression();
      expect(Tok::BlockEnd, "'%}'");
      Body b = parse_body({"elif", "else", "endif"});
      s.branches.emplace_back(std::move(cond), std::move(b));
      for (;;) {
        ++p_;  // '{%'
        std::string t = expect_name();
        if (t == "elif") {
          ExprP c = parse_expression();
          expect(Tok::BlockEnd, "'%}'");
          Body eb = parse_body({"elif", "else", "endif"});
          s.branches.emplace_back(std::move(c), std::move(eb));
        } else if (t == "else") {
          expect(Tok::BlockEnd, "'%}'");
          s.else_body = parse_body({"endif"});
        } else {  // endif
          expect(Tok::BlockEnd, "'%}'");
          break;
        }
      }
    } else if (n == "for") {
      s.k = Stmt::K::For;
      s.targets.push_back(expect_name());
      while (is_op(",")) {
        ++p_;
        s.targets.push_back(expect_name());
      }
      if (!is_name("in")) fail_at(cur().line, "expected 'in' in a for tag, found " + describe(cur()));
      ++p_;
      s.expr = parse_or();
      if (is_name("if")) {
        ++p_;
        s.filter = parse_expression();
      }
      if (is_name("recursive")) fail_at(cur().line, "recursive for loops are not supported");
      expect(Tok::BlockEnd, "'%}'");
      ++loops_;
      s.body = parse_body({"else", "endfor"});
      --loops_;
      ++p_;
      if (expect_name() == "else") {
        expect(Tok::BlockEnd, "'%}'");
        s.else_body = parse_body({"endfor"});
        ++p_;
        expect_name();
      }
      expect(Tok::BlockEnd, "'%}'");
    } else if (n == "set") {
      s.k = Stmt::K::Set;
      s.targets.push_back(expect_name());
      if (is_op(".")) {
        ++p_;
        s.targets.push_back(expect_name());
      }
      if (is_op(",")) fail_at(cur().line, "set with several targets is not supported");
      if (cur().t == Tok::BlockEnd) fail_at(cur().line, "block set ({% set x %}...{% endset %}) is not supported");
      expect_op("=");
      s.expr = parse_tuple_or_expr();
      expect(Tok::BlockEnd, "'%}'");
    } else if (n == "break" || n == "continue") {
      if (loops_ == 0) fail_at(tag.line, "'" + n + "' outside a for loop");
      s.k = n == "break" ? Stmt::K::Break : Stmt::K::Continue;
      expect(Tok::BlockEnd, "'%}'");
    } else if (n == "generation") {
      s.k = Stmt::K::Generation;
      expect(Tok::BlockEnd, "'%}'");
      s.body = parse_body({"endgeneration"});
      ++p_;
      expect_name();
      expect(Tok::BlockEnd, "'%}'");
    } else if (n == "elif" || n == "else" || n.rfind("end", 0) == 0) {
      fail_at(tag.line, "unexpected '{% " + n + " %}' (no open tag it closes)");
    } else {
      fail_at(tag.line, "unsupported tag '" + n + "'");
    }
    return s;
  }

  // ---- expressions -------------------------------------------------------------------------
  // expr [, expr ...] without parentheses is a tuple (as in {% set x = 1, 2 %}).
  ExprP parse_tuple_or_expr() {
    const int line = cur().line;
    ExprP first = parse_expression();
    if (!is_op(",")) return first;
    ExprP t = node(Expr::K::TupleLit, line);
    t->args.push_back(std::move(first));
    while (is_op(",")) {
      ++p_;
      if (cur().t == Tok::VarEnd || cur().t == Tok::BlockEnd) break;
      t->args.push_back(parse_expression());
    }
    return seal(std::move(t));
  }

  ExprP parse_expression() {
    ExprP e = parse_or();
    while (is_name("if")) {
      const int line = cur().line;
      ++p_;
      ExprP c = node(Expr::K::Cond, line);
      ExprP cond = parse_or();
      ExprP other;
      if (is_name("else")) {
        ++p_;
        other = parse_expression();
      }
      c->args.push_back(std::move(cond));
      c->args.push_back(std::move(e));
      c->args.push_back(std::move(other));
      e = seal(std::move(c));
    }
    return e;
  }
  ExprP binary_chain(Expr::K k, const char* word, ExprP (Parser::*next)()) {
    ExprP e = (this->*next)();
    while (is_name(word)) {
      ExprP n = node(k, cur().line);
      ++p_;
      n->args.push_back(std::move(e));
      n->args.push_back((this->*next)());
      e = seal(std::move(n));
    }
    return e;
  }
  ExprP parse_or() { return binary_chain(Expr::K::Or, "or", &Parser::parse_and); }
  ExprP parse_and() { return binary_chain(Expr::K::And, "and", &Parser::parse_not); }
  // Nesting limit: a hostile template must get an error, not exhaust the stack.
  struct Nest {
    Parser& p;
    explicit Nest(Parser& parser) : p(parser) {
      if (++p.depth_ > kMaxDepth) p.fail_at(p.cur().line, "nesting deeper than " + std::to_string(kMaxDepth) + " levels");
    }
    ~Nest() { --p.depth_; }
  };

  ExprP parse_not() {
    Nest nest(*this);
    if (is_name("not")) {
      ExprP n = node(Expr::K::Not, cur().line);
      ++p_;
      n->args.push_back(parse_not());
      return seal(std::move(n));
    }
    return parse_compare();
  }
  ExprP parse_compare() {
    const int line = cur().line;
    ExprP e = parse_math1();
    ExprP cmp;
    for (;;) {
      std::string op;
      if (cur().t == Tok::Op && (cur().v == "==" || cur().v == "!=" || cur().v == "<" || cur().v == ">" ||
                                 cur().v == "<=" || cur().v == ">=")) {
        op = cur().v;
        ++p_;
      } else if (is_name("in")) {
        op = "in";
        ++p_;
      } else if (is_name("not") && peek().t == Tok::Name && peek().v == "in") {
        op = "notin";
        p_ += 2;
      } else {
        break;
      }
      if (!cmp) {
        cmp = node(Expr::K::Compare, line);
        cmp->args.push_back(std::move(e));
      }
      cmp->ops.push_back(op);
      cmp->args.push_back(parse_math1());
    }
    return cmp ? seal(std::move(cmp)) : std::move(e);
  }
  ExprP binary_ops(std::initializer_list<const char*> ops, ExprP (Parser::*next)()) {
    ExprP e = (this->*next)();
    for (;;) {
      const char* hit = nullptr;
      for (const char* o : ops)
        if (is_op(o)) hit = o;
      if (!hit) return e;
      ExprP n = node(Expr::K::Binary, cur().line);
      n->name = hit;
      ++p_;
      n->args.push_back(std::move(e));
      n->args.push_back((this->*next)());
      e = seal(std::move(n));
    }
  }
  ExprP parse_math1() { return binary_ops({"+", "-"}, &Parser::parse_concat); }
  ExprP parse_concat() { return binary_ops({"~"}, &Parser::parse_math2); }
  ExprP parse_math2() { return binary_ops({"*", "/", "//", "%"}, &Parser::parse_pow); }
  ExprP parse_pow() { return binary_ops({"**"}, &Parser::parse_unary_filtered); }
  ExprP parse_unary_filtered() { return parse_unary(true); }

  ExprP parse_unary(bool with_filter) {
    Nest nest(*this);
    ExprP e;
    if (is_op("-") || is_op("+")) {
      e = node(is_op("-") ? Expr::K::Neg : Expr::K::Pos, cur().line);
      ++p_;
      e->args.push_back(parse_unary(false));
      e = seal(std::move(e));
    } else {
      e = parse_primary();
    }
    e = parse_postfix(std::move(e));
    if (with_filter) e = parse_filter_expr(std::move(e));
    return e;
  }

  ExprP parse_primary() {
    const Tok& tk = cur();
    const int line = tk.line;
    if (tk.t == Tok::Name) {
      ++p_;
      ExprP e = node(Expr::K::Literal, line);
      if (tk.v == "true" || tk.v == "True") e->literal = Value::boolean(true);
      else if (tk.v == "false" || tk.v == "False") e->literal = Value::boolean(false);
      else if (tk.v == "none" || tk.v == "None") e->literal = Value::none();
      else {
        e->k = Expr::K::Name;
        e->name = tk.v;
      }
      return e;
    }
    if (tk.t == Tok::Str) {
      std::string s;
      while (cur().t == Tok::Str) s += t_[p_++].v;  // adjacent literals concatenate
      ExprP e = node(Expr::K::Literal, line);
      e->literal = Value::string(std::move(s));
      return e;
    }
    if (tk.t == Tok::Int || tk.t == Tok::Float) {
      ++p_;
      ExprP e = node(Expr::K::Literal, line);
      e->literal = tk.t == Tok::Int ? Value::integer(tk.i) : Value::number(tk.f);
      return e;
    }
    if (is_op("(")) {
      ++p_;
      if (is_op(")")) {
        ++p_;
        return node(Expr::K::TupleLit, line);
      }
      ExprP first = parse_expression();
      if (is_op(")")) {
        ++p_;
        return first;
      }
      ExprP t = node(Expr::K::TupleLit, line);
      t->args.push_back(std::move(first));
      while (is_op(",")) {
        ++p_;
        if (is_op(")")) break;
        t->args.push_back(parse_expression());
      }
      expect_op(")");
      return seal(std::move(t));
    }
    if (is_op("[")) {
      ++p_;
      ExprP l = node(Expr::K::ListLit, line);
      while (!is_op("]")) {
        l->args.push_back(parse_expression());
        if (!is_op(",")) break;
        ++p_;
      }
      expect_op("]");
      return seal(std::move(l));
    }
    if (is_op("{")) {
      ++p_;
      ExprP d = node(Expr::K::DictLit, line);
      while (!is_op("}")) {
        d->args.push_back(parse_expression());
        expect_op(":");
        d->args.push_back(parse_expression());
        if (!is_op(",")) break;
        ++p_;
      }
      expect_op("}");
      return seal(std::move(d));
    }
    fail_at(line, "unexpected " + describe(tk) + " in an expression");
  }

  ExprP parse_postfix(ExprP e) {
    for (;;) {
      const int line = cur().line;
      if (is_op(".")) {
        ++p_;
        if (cur().t == Tok::Int) {  // x.0 is x[0]
          ExprP it = node(Expr::K::Item, line);
          ExprP idx = node(Expr::K::Literal, line);
          idx->literal = Value::integer(t_[p_++].i);
          it->args.push_back(std::move(e));
          it->args.push_back(std::move(idx));
          e = seal(std::move(it));
          continue;
        }
        ExprP a = node(Expr::K::Attr, line);
        a->name = expect_name();
        a->args.push_back(std::move(e));
        e = seal(std::move(a));
      } else if (is_op("[")) {
        ++p_;
        ExprP parts[3];
        int n = 0;
        bool slice = false;
        for (;;) {
          if (!is_op(":") && !is_op("]")) parts[n] = parse_expression();
          if (is_op(":") && n < 2) {
            slice = true;
            ++p_;
            ++n;
            continue;
          }
          break;
        }
        expect_op("]");
        if (!slice) {
          if (!parts[0]) fail_at(line, "empty subscript []");
          ExprP it = node(Expr::K::Item, line);
          it->args.push_back(std::move(e));
          it->args.push_back(std::move(parts[0]));
          e = seal(std::move(it));
        } else {
          ExprP sl = node(Expr::K::Slice, line);
          sl->args.push_back(std::move(e));
          for (auto& part : parts) sl->args.push_back(std::move(part));
          e = seal(std::move(sl));
        }
      } else if (is_op("(")) {
        e = parse_call(std::move(e), line);
      } else {
        return e;
      }
    }
  }

  // `callee(args...)`: a Call node whose first argument is the callee.
  ExprP parse_call(ExprP callee, int line) {
    ExprP c = node(Expr::K::Call, line);
    c->args.push_back(std::move(callee));
    parse_call_args(*c);
    return seal(std::move(c));
  }

  void parse_call_args(Expr& into) {
    expect_op("(");
    while (!is_op(")")) {
      if (is_op("*") || is_op("**")) fail_at(cur().line, "*args and **kwargs in calls are not supported");
      if (cur().t == Tok::Name && peek().t == Tok::Op && peek().v == "=") {
        std::string k = t_[p_].v;
        p_ += 2;
        into.kwargs.emplace_back(k, parse_expression());
      } else {
        if (!into.kwargs.empty()) fail_at(cur().line, "positional argument after a keyword argument");
        into.args.push_back(parse_expression());
      }
      if (!is_op(",")) break;
      ++p_;
    }
    expect_op(")");
  }

  ExprP parse_filter_expr(ExprP e) {
    for (;;) {
      const int line = cur().line;
      if (is_op("|")) {
        ++p_;
        ExprP f = node(Expr::K::Filter, line);
        f->name = expect_name();
        if (is_op(".")) fail_at(line, "dotted filter names are not supported");
        if (!kFilters.count(f->name)) fail_at(line, "unsupported filter '" + f->name + "'");
        f->args.push_back(std::move(e));
        if (is_op("(")) parse_call_args(*f);
        e = seal(std::move(f));
      } else if (is_name("is")) {
        ++p_;
        ExprP t = node(Expr::K::Test, line);
        if (is_name("not")) {
          t->negated = true;
          ++p_;
        }
        t->name = expect_name();
        if (!kTests.count(t->name)) fail_at(line, "unsupported test '" + t->name + "'");
        t->args.push_back(std::move(e));
        if (is_op("(")) {
          parse_call_args(*t);
        } else if ((cur().t == Tok::Name || cur().t == Tok::Str || cur().t == Tok::Int || cur().t == Tok::Float ||
                    is_op("(") || is_op("[") || is_op("{")) &&
                   !is_name("else") && !is_name("or") && !is_name("and")) {
          // Jinja takes one argument without parentheses: `x is divisibleby 3`.
          if (is_name("is")) fail_at(cur().line, "tests cannot be chained with 'is'");
          t->args.push_back(parse_postfix(parse_primary()));
        }
        e = seal(std::move(t));
      } else if (is_op("(")) {
        e = parse_call(std::move(e), line);
      } else {
        return e;
      }
    }
  }

  std::vector<Tok> t_;
  size_t p_ = 0;
  int loops_ = 0, depth_ = 0;
  const std::string& origin_;
};

}  // namespace

Body parse_template(std::string_view source, const std::string& origin) {
  Lexer lx(source, origin);
  Parser ps(lx.run(), origin);
  return ps.parse_all();
}

}  // namespace titan::data::jinja
