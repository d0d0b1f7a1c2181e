// Syntax tree of a parsed Jinja template (internal to jinja_parse.cpp and jinja_eval.cpp).
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "data/jinja.h"

namespace titan::data::jinja {

struct Expr;
using ExprP = std::unique_ptr<Expr>;

struct Expr {
  enum class K {
    Literal,   // literal
    Name,      // name
    Attr,      // args[0].name
    Item,      // args[0][args[1]]
    Slice,     // args[0][args[1]:args[2]:args[3]] (null parts allowed)
    Call,      // args[0](args[1..], kwargs)
    Filter,    // args[0] | name(args[1..], kwargs)
    Test,      // args[0] is [not] name(args[1..])
    Neg,       // -args[0]
    Pos,       // +args[0]
    Not,       // not args[0]
    Binary,    // args[0] name args[1]: + - * / // % ** ~
    Compare,   // args[0] ops[0] args[1] ops[1] args[2] ... (chained: ==, !=, <, >, <=, >=, in, notin)
    And,       // args[0] and args[1]
    Or,        // args[0] or args[1]
    Cond,      // args[1] if args[0] else args[2] (args[2] null: undefined)
    ListLit,   // [args...]
    TupleLit,  // (args...)
    DictLit,   // {args[0]: args[1], args[2]: args[3], ...}
  };
  K k;
  int line = 0;
  int depth = 1;  // levels of the subtree (the evaluator recurses once per level); <= kMaxDepth
  Value literal;
  std::string name;
  std::vector<ExprP> args;
  std::vector<std::pair<std::string, ExprP>> kwargs;
  std::vector<std::string> ops;
  bool negated = false;
};

struct Stmt;
using Body = std::vector<Stmt>;

struct Stmt {
  enum class K { Text, Output, If, For, Set, Break, Continue, Generation };
  Stmt(K kind, int at) : k(kind), line(at) {}
  K k;
  int line = 0;
  std::string text;                       // Text
  ExprP expr;                             // Output, Set value, For iterable
  std::vector<std::pair<ExprP, Body>> branches;  // If: (condition, body) for if and each elif
  Body body, else_body;                   // For body / else, If else, Generation body
  std::vector<std::string> targets;       // For loop names; Set: {name} or {namespace, attr}
  ExprP filter;                           // For ... if filter
};

struct Template::Impl {
  std::string origin;
  Body body;
};

// Parses the whole template (jinja_parse.cpp).
Body parse_template(std::string_view source, const std::string& origin);

}  // namespace titan::data::jinja
