#include "data/tokenizer_json.h"

#include "core/error.h"

namespace titan::data {

namespace {

using json = nlohmann::json;

// Forwards events to nlohmann's DOM builder except inside model.vocab and model.merges, which it
// collects itself. Returning false from an event stops the parse; `error` then says why.
class TokenizerSax {
 public:
  TokenizerSax(json& root, BpeTablesText& t) : dom_(root, true), t_(t) {}
  std::string error;

  bool null() { return in_table() ? shape_error() : dom_.null(); }
  bool boolean(bool v) { return in_table() ? shape_error() : dom_.boolean(v); }
  bool number_float(double v, const std::string& s) { return in_table() ? shape_error() : dom_.number_float(v, s); }
  bool binary(json::binary_t& v) { return in_table() ? shape_error() : dom_.binary(v); }
  bool number_integer(int64_t v) {
    if (mode_ == Mode::Vocab && v >= 0) return number_unsigned(uint64_t(v));
    return in_table() ? shape_error() : dom_.number_integer(v);
  }
  bool number_unsigned(uint64_t v) {
    if (mode_ == Mode::Vocab) {
      t_.vocab.emplace_back(std::move(key_), v);
      return true;
    }
    return in_table() ? shape_error() : dom_.number_unsigned(v);
  }
  bool string(std::string& s) {
    if (mode_ == Mode::Merges) {
      if (in_pair_) {
        if (pair_n_ >= 2) return merge_error();
        pair_[pair_n_++] = std::move(s);
        return true;
      }
      size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos) {
        error = "merge " + std::to_string(t_.merges.size()) + " '" + s + "' is not two tokens separated by one space";
        return false;
      }
      t_.merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
      return true;
    }
    return in_table() ? shape_error() : dom_.string(s);
  }
  bool key(std::string& k) {
    if (mode_ == Mode::Vocab) {
      key_ = std::move(k);
      return true;
    }
    if (depth_ == 2 && top_key_ == "model" && (k == "vocab" || k == "merges")) {
      armed_ = k == "vocab" ? Mode::Vocab : Mode::Merges;
      return true;
    }
    if (depth_ == 1) top_key_ = k;
    return dom_.key(k);
  }
  bool start_object(std::size_t n) {
    if (armed_ == Mode::Vocab) {
      armed_ = Mode::None;
      mode_ = Mode::Vocab;
      t_.has_vocab = true;
      ++depth_;
      return true;
    }
    if (armed_ != Mode::None || in_table()) return shape_error();
    ++depth_;
    return dom_.start_object(n);
  }
  bool end_object() {
    --depth_;
    if (mode_ == Mode::Vocab) {
      mode_ = Mode::None;
      return true;
    }
    return dom_.end_object();
  }
  bool start_array(std::size_t n) {
    if (armed_ == Mode::Merges) {
      armed_ = Mode::None;
      mode_ = Mode::Merges;
      t_.has_merges = true;
      ++depth_;
      return true;
    }
    if (mode_ == Mode::Merges && !in_pair_) {
      in_pair_ = true;
      pair_n_ = 0;
      ++depth_;
      return true;
    }
    if (armed_ != Mode::None || in_table()) return shape_error();
    ++depth_;
    return dom_.start_array(n);
  }
  bool end_array() {
    --depth_;
    if (mode_ == Mode::Merges) {
      if (in_pair_) {
        in_pair_ = false;
        if (pair_n_ != 2) return merge_error();
        t_.merges.emplace_back(std::move(pair_[0]), std::move(pair_[1]));
      } else {
        mode_ = Mode::None;
      }
      return true;
    }
    return dom_.end_array();
  }
  template <class Exception>
  bool parse_error(std::size_t pos, const std::string& tok, const Exception& ex) {
    return dom_.parse_error(pos, tok, ex);  // throws
  }

 private:
  enum class Mode { None, Vocab, Merges };
  bool in_table() const { return mode_ != Mode::None || armed_ != Mode::None; }
  bool shape_error() {
    if (mode_ == Mode::Merges || armed_ == Mode::Merges) return armed_ == Mode::Merges ? fail_with("model.merges must be an array") : merge_error();
    if (armed_ == Mode::Vocab) return fail_with("model.vocab must be an object");
    return fail_with("vocab entry '" + key_ + "' has no non-negative id");
  }
  bool merge_error() { return fail_with("merge " + std::to_string(t_.merges.size()) + " is neither \"a b\" nor [\"a\", \"b\"]"); }
  bool fail_with(std::string why) {
    error = std::move(why);
    return false;
  }

  nlohmann::detail::json_sax_dom_parser<json> dom_;
  BpeTablesText& t_;
  int depth_ = 0;
  std::string top_key_, key_;
  Mode mode_ = Mode::None, armed_ = Mode::None;
  bool in_pair_ = false;
  int pair_n_ = 0;
  std::string pair_[2];
};

}  // namespace

json parse_tokenizer_json(std::string_view bytes, const std::string& origin, BpeTablesText* tables) {
  json root;
  TokenizerSax sax(root, *tables);
  bool ok;
  try {
    ok = json::sax_parse(bytes.begin(), bytes.end(), &sax);
  } catch (const json::exception& e) {
    fail(origin, ": not valid JSON: ", e.what());
  }
  TITAN_CHECK(ok, origin, ": ", sax.error.empty() ? std::string("not valid JSON") : sax.error);
  return root;
}

}  // namespace titan::data
