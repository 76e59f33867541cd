#include "engine/chat/tool_calls.h"

#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "engine/chat/text_stream.h"
#include "nlohmann/json.hpp"

namespace minfer::chat {
namespace {

// ordered_json keeps the model's key order in the arguments it re-serializes.
using Json = nlohmann::ordered_json;

// Deeper arguments are refused (returned as content) before nlohmann sees
// them: its serializer recurses, and a model can write "[[[[..." forever.
constexpr int kMaxJsonDepth = 64;

// Calls `f(i, c)` for each byte of `text` outside JSON strings (escapes
// inside strings skipped), stopping early when `f` returns false.
template <typename F>
void ForEachOutsideStrings(absl::string_view text, F f) {
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (!f(i, c)) {
      return;
    }
  }
}

bool WithinDepth(absl::string_view text) {
  int depth = 0;
  bool ok = true;
  ForEachOutsideStrings(text, [&](size_t, char c) {
    if (c == '{' || c == '[') {
      ok = ++depth <= kMaxJsonDepth;
    } else if (c == '}' || c == ']') {
      --depth;
    }
    return ok;
  });
  return ok;
}

struct CallText {
  std::string name;
  std::string arguments;
};

// `text` as one call object: {"name": <non-empty string>, <args key>: {...}}.
// The first of `arg_keys` present is the arguments; when none is, the call
// has "{}" if `arguments_optional`, else it is not a call.
std::optional<CallText> ParseCallObject(absl::string_view text,
                                        std::initializer_list<const char*> arg_keys,
                                        bool arguments_optional) {
  if (!WithinDepth(text)) return std::nullopt;
  const Json j = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return std::nullopt;
  const auto name = j.find("name");
  if (name == j.end() || !name->is_string() || name->get_ref<const std::string&>().empty()) {
    return std::nullopt;
  }
  CallText call;
  call.name = name->get<std::string>();
  for (const char* key : arg_keys) {
    const auto args = j.find(key);
    if (args == j.end()) continue;
    if (!args->is_object()) return std::nullopt;
    // `replace`: the parser already refused invalid UTF-8, but dump must
    // never be able to throw.
    call.arguments = args->dump(-1, ' ', /*ensure_ascii=*/false, Json::error_handler_t::replace);
    return call;
  }
  if (!arguments_optional) return std::nullopt;
  call.arguments = "{}";
  return call;
}

// Shared by the streams: ids, event construction and the Feed/Finish frame
// around a family's Process(at_end).
class StreamBase : public ToolCallStream {
 public:
  explicit StreamBase(ToolCallIdFn ids) : ids_(std::move(ids)) {}

  std::vector<ToolCallEvent> Feed(absl::string_view delta) final {
    if (finished_) return {};
    buf_.append(delta.data(), delta.size());
    Process(/*at_end=*/false);
    return std::move(out_);
  }

  std::vector<ToolCallEvent> Finish() final {
    if (finished_) return {};
    finished_ = true;
    Process(/*at_end=*/true);
    return std::move(out_);
  }

 protected:
  // Consumes what can be decided from buf_; with `at_end`, all of it.
  virtual void Process(bool at_end) = 0;

  void EmitContent(absl::string_view text) {
    if (text.empty()) return;
    if (!out_.empty() && out_.back().type == ToolCallEvent::Type::kContent) {
      out_.back().text.append(text.data(), text.size());
      return;
    }
    ToolCallEvent e;
    e.type = ToolCallEvent::Type::kContent;
    e.text = std::string(text);
    out_.push_back(std::move(e));
  }

  void EmitCall(CallText call) {
    const int index = next_index_++;
    ToolCallEvent start;
    start.type = ToolCallEvent::Type::kCallStart;
    start.index = index;
    start.id = ids_ ? ids_(index) : absl::StrCat("call_", index);
    start.name = std::move(call.name);
    out_.push_back(std::move(start));
    ToolCallEvent args;
    args.type = ToolCallEvent::Type::kArguments;
    args.index = index;
    args.text = std::move(call.arguments);
    out_.push_back(std::move(args));
  }

  std::string buf_;  // fed text not yet decided

 private:
  ToolCallIdFn ids_;
  int next_index_ = 0;
  bool finished_ = false;
  std::vector<ToolCallEvent> out_;
};

// ---- hermes -----------------------------------------------------------------

constexpr absl::string_view kHermesOpen = "<tool_call>";
constexpr absl::string_view kHermesClose = "</tool_call>";

class HermesStream final : public StreamBase {
 public:
  using StreamBase::StreamBase;

 private:
  void Process(bool at_end) override {
    while (true) {
      if (!in_call_) {
        const size_t open = absl::string_view(buf_).find(kHermesOpen);
        if (open == absl::string_view::npos) {
          const size_t keep = at_end ? 0 : PartialTagSuffix(buf_, kHermesOpen);
          EmitContent(text_.Push(absl::string_view(buf_).substr(0, buf_.size() - keep)));
          buf_.erase(0, buf_.size() - keep);
          if (at_end) EmitContent(text_.TakeHeld());
          return;
        }
        // Whitespace before the tag stays held: it is dropped if the block
        // is a call and kept if the block turns out to be content.
        EmitContent(text_.Push(absl::string_view(buf_).substr(0, open)));
        buf_.erase(0, open + kHermesOpen.size());
        in_call_ = true;
        scan_ = 0;
        in_string_ = escaped_ = false;
        continue;
      }
      size_t close = FindCloseOutsideStrings();
      if (close == absl::string_view::npos) {
        if (!at_end) return;
        // No close tag outside the body's JSON strings: the body is not
        // well-formed JSON (an unterminated string). The first close tag
        // anywhere ends the block then, and it is content.
        close = absl::string_view(buf_).find(kHermesClose);
      }
      if (close == absl::string_view::npos) {
        // The reply ended inside a block (max_tokens, a stop string): the
        // block is not a call.
        EmitContent(text_.Push(absl::StrCat(kHermesOpen, buf_)));
        buf_.clear();
        in_call_ = false;
        EmitContent(text_.TakeHeld());
        return;
      }
      const absl::string_view body = absl::string_view(buf_).substr(0, close);
      std::optional<CallText> call = ParseCallObject(body, {"arguments"}, /*arguments_optional=*/true);
      if (call.has_value()) {
        text_.DropHeld(/*trim_leading=*/true);
        EmitCall(*std::move(call));
      } else {
        EmitContent(text_.Push(absl::StrCat(kHermesOpen, body, kHermesClose)));
      }
      buf_.erase(0, close + kHermesClose.size());
      in_call_ = false;
    }
  }

  // The offset in buf_ (a block's body so far) of the first </tool_call>
  // outside the body's JSON strings — an argument may hold the tag's text
  // ("print('</tool_call>')"), and a forced call's grammar allows it there
  // — or npos. Scans each byte once over the deltas; a '<' that may still
  // become the tag stops the scan until more text comes.
  size_t FindCloseOutsideStrings() {
    while (scan_ < buf_.size()) {
      const char c = buf_[scan_];
      if (in_string_) {
        if (escaped_) {
          escaped_ = false;
        } else if (c == '\\') {
          escaped_ = true;
        } else if (c == '"') {
          in_string_ = false;
        }
      } else if (c == '"') {
        in_string_ = true;
      } else if (c == '<') {
        const absl::string_view rest = absl::string_view(buf_).substr(scan_);
        if (absl::StartsWith(rest, kHermesClose)) return scan_;
        if (absl::StartsWith(kHermesClose, rest)) return absl::string_view::npos;
      }
      ++scan_;
    }
    return absl::string_view::npos;
  }

  bool in_call_ = false;  // inside <tool_call>, buf_ holds the block's body so far
  // FindCloseOutsideStrings' state: buf_[0, scan_) scanned, and whether
  // that ends inside a string (after a backslash).
  size_t scan_ = 0;
  bool in_string_ = false, escaped_ = false;
  TrimmedSpan text_{/*trim_leading=*/false};
};

// ---- llama3_json ------------------------------------------------------------

constexpr absl::string_view kPythonTag = "<|python_tag|>";

// `text` split at the ';' outside JSON strings.
std::vector<absl::string_view> SplitCalls(absl::string_view text) {
  std::vector<absl::string_view> parts;
  size_t begin = 0;
  ForEachOutsideStrings(text, [&](size_t i, char c) {
    if (c == ';') {
      parts.push_back(text.substr(begin, i - begin));
      begin = i + 1;
    }
    return true;
  });
  parts.push_back(text.substr(std::min(begin, text.size())));
  return parts;
}

absl::string_view StripSpace(absl::string_view s) {
  while (!s.empty() && IsSpace(s.front())) s.remove_prefix(1);
  while (!s.empty() && IsSpace(s.back())) s.remove_suffix(1);
  return s;
}

bool IsIdentStart(char c) { return absl::ascii_isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool IsIdentChar(char c) { return IsIdentStart(c) || absl::ascii_isdigit(static_cast<unsigned char>(c)); }

// A Python identifier at the front of *s, consumed; "" if none.
absl::string_view TakeIdent(absl::string_view* s) {
  if (s->empty() || !IsIdentStart(s->front())) return {};
  size_t n = 1;
  while (n < s->size() && IsIdentChar((*s)[n])) ++n;
  absl::string_view id = s->substr(0, n);
  s->remove_prefix(n);
  return id;
}

void SkipSpace(absl::string_view* s) {
  while (!s->empty() && IsSpace(s->front())) s->remove_prefix(1);
}

// A Python literal at the front of *s as JSON, consumed: a string in single
// or double quotes (escapes \\ \' \" \n \t \r; others keep the
// backslash), a number, True, False or None. nullopt if none.
std::optional<Json> TakePythonLiteral(absl::string_view* s) {
  if (s->empty()) return std::nullopt;
  const char q = s->front();
  if (q == '"' || q == '\'') {
    std::string out;
    for (size_t i = 1; i < s->size(); ++i) {
      const char c = (*s)[i];
      if (c == q) {
        s->remove_prefix(i + 1);
        return Json(std::move(out));
      }
      if (c == '\\' && i + 1 < s->size()) {
        const char e = (*s)[++i];
        switch (e) {
          case 'n': out.push_back('\n'); break;
          case 't': out.push_back('\t'); break;
          case 'r': out.push_back('\r'); break;
          case '\\': case '\'': case '"': out.push_back(e); break;
          default: out.push_back('\\'); out.push_back(e); break;
        }
        continue;
      }
      out.push_back(c);
    }
    return std::nullopt;  // unterminated
  }
  for (const auto& [word, value] : {std::pair<absl::string_view, Json>{"True", Json(true)},
                                    {"False", Json(false)}, {"None", Json(nullptr)}}) {
    if (absl::StartsWith(*s, word) && (s->size() == word.size() || !IsIdentChar((*s)[word.size()]))) {
      s->remove_prefix(word.size());
      return value;
    }
  }
  size_t n = 0;
  while (n < s->size() && (absl::ascii_isdigit(static_cast<unsigned char>((*s)[n])) ||
                           absl::StrContains("+-.eE", (*s)[n]))) {
    ++n;
  }
  if (n == 0) return std::nullopt;
  const absl::string_view num = s->substr(0, n);
  Json j = Json::parse(num.begin(), num.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_number()) return std::nullopt;
  s->remove_prefix(n);
  return j;
}

// Llama 3.1's built-in tools after <|python_tag|> (brave_search,
// wolfram_alpha): NAME.call(KEY=LITERAL, ...), the whole text (around
// whitespace). The call is NAME with the keyword arguments as a JSON
// object, in their order; nullopt for anything else (a code_interpreter
// reply is Python code: content).
std::optional<CallText> ParseBuiltinCall(absl::string_view text) {
  absl::string_view s = StripSpace(text);
  const absl::string_view name = TakeIdent(&s);
  if (name.empty() || !absl::ConsumePrefix(&s, ".call(")) return std::nullopt;
  Json args = Json::object();
  SkipSpace(&s);
  while (!absl::ConsumePrefix(&s, ")")) {
    const absl::string_view key = TakeIdent(&s);
    SkipSpace(&s);
    if (key.empty() || !absl::ConsumePrefix(&s, "=")) return std::nullopt;
    SkipSpace(&s);
    std::optional<Json> value = TakePythonLiteral(&s);
    if (!value.has_value() || args.contains(std::string(key))) return std::nullopt;
    args[std::string(key)] = *std::move(value);
    SkipSpace(&s);
    if (absl::ConsumePrefix(&s, ",")) {
      SkipSpace(&s);
    } else if (s.empty() || s.front() != ')') {
      return std::nullopt;
    }
  }
  if (!s.empty()) return std::nullopt;  // text after the call
  CallText call;
  call.name = std::string(name);
  call.arguments = args.dump(-1, ' ', /*ensure_ascii=*/false, Json::error_handler_t::replace);
  return call;
}

// The calls of a whole reply that starts like one, or nullopt if it is not
// entirely calls.
std::optional<std::vector<CallText>> ParseLlamaCalls(absl::string_view reply) {
  absl::string_view s = StripSpace(reply);
  if (absl::StartsWith(s, kPythonTag)) {
    s.remove_prefix(kPythonTag.size());
    // A built-in tool's call is one Python expression, never JSON.
    if (std::optional<CallText> builtin = ParseBuiltinCall(s); builtin.has_value()) {
      return std::vector<CallText>{*std::move(builtin)};
    }
  }
  std::vector<absl::string_view> parts = SplitCalls(s);
  // "a; b;" is two calls: one trailing separator is tolerated.
  if (parts.size() > 1 && StripSpace(parts.back()).empty()) parts.pop_back();
  std::vector<CallText> calls;
  for (absl::string_view part : parts) {
    std::optional<CallText> call =
        ParseCallObject(part, {"parameters", "arguments"}, /*arguments_optional=*/false);
    if (!call.has_value()) return std::nullopt;
    calls.push_back(*std::move(call));
  }
  return calls;
}

class Llama3JsonStream final : public StreamBase {
 public:
  using StreamBase::StreamBase;

 private:
  enum class State {
    kStart,    // only whitespace (and maybe part of <|python_tag|>) so far
    kCalls,    // the reply starts like a call: decided at the end
    kContent,  // the reply is content: everything passes through
  };

  void Process(bool at_end) override {
    if (state_ == State::kStart) {
      size_t first = 0;
      while (first < buf_.size() && IsSpace(buf_[first])) ++first;
      const absl::string_view rest = absl::string_view(buf_).substr(first);
      if (!rest.empty() && (rest.front() == '{' || absl::StartsWith(rest, kPythonTag))) {
        state_ = State::kCalls;
      } else if (!at_end && absl::StartsWith(kPythonTag, rest)) {
        return;  // whitespace, or a tag that may still complete
      } else {
        state_ = State::kContent;
      }
    }
    if (state_ == State::kContent) {
      EmitContent(buf_);
      buf_.clear();
      return;
    }
    // kCalls: a reply that starts with "{" may still be a JSON answer, not a
    // call, so nothing is decided before the end.
    if (!at_end) return;
    std::optional<std::vector<CallText>> calls = ParseLlamaCalls(buf_);
    if (calls.has_value()) {
      for (CallText& call : *calls) EmitCall(std::move(call));
    } else {
      EmitContent(buf_);
    }
    buf_.clear();
  }

  State state_ = State::kStart;
};

// ---- registry ---------------------------------------------------------------

template <typename Stream>
class StreamParser final : public ToolCallParser {
 public:
  explicit StreamParser(absl::string_view family) : family_(family) {}
  absl::string_view family() const override { return family_; }
  std::unique_ptr<ToolCallStream> NewStream(ToolCallIdFn ids) const override {
    return std::make_unique<Stream>(std::move(ids));
  }

 private:
  absl::string_view family_;
};

struct Family {
  absl::string_view name;
  std::unique_ptr<ToolCallParser> (*make)(absl::string_view name);
};

// A new family is one row here and one Stream class above.
constexpr Family kFamilies[] = {
    {"hermes",
     [](absl::string_view name) -> std::unique_ptr<ToolCallParser> {
       return std::make_unique<StreamParser<HermesStream>>(name);
     }},
    {"llama3_json",
     [](absl::string_view name) -> std::unique_ptr<ToolCallParser> {
       return std::make_unique<StreamParser<Llama3JsonStream>>(name);
     }},
};

}  // namespace

ParsedToolCalls ToolCallParser::Parse(absl::string_view text, ToolCallIdFn ids) const {
  std::unique_ptr<ToolCallStream> stream = NewStream(std::move(ids));
  std::vector<ToolCallEvent> events = stream->Feed(text);
  std::vector<ToolCallEvent> tail = stream->Finish();
  events.insert(events.end(), std::make_move_iterator(tail.begin()),
                std::make_move_iterator(tail.end()));
  return CollectToolCallEvents(events);
}

absl::StatusOr<std::unique_ptr<ToolCallParser>> MakeToolCallParser(absl::string_view family) {
  for (const Family& f : kFamilies) {
    if (f.name == family) return f.make(f.name);
  }
  return absl::NotFoundError(absl::StrCat("unknown tool-call parser family \"",
                                          absl::CEscape(family.substr(0, 64)),
                                          "\"; known: ", absl::StrJoin(ToolCallFamilies(), ", ")));
}

std::vector<std::string> ToolCallFamilies() {
  std::vector<std::string> names;
  for (const Family& f : kFamilies) names.emplace_back(f.name);
  return names;
}

absl::string_view ToolCallFamilyForTemplate(absl::string_view chat_template) {
  if (absl::StrContains(chat_template, kHermesOpen)) return "hermes";
  if (absl::StrContains(chat_template, kPythonTag) || absl::StrContains(chat_template, "ipython")) {
    return "llama3_json";
  }
  return "";
}

ParsedToolCalls CollectToolCallEvents(const std::vector<ToolCallEvent>& events) {
  ParsedToolCalls out;
  for (const ToolCallEvent& e : events) {
    switch (e.type) {
      case ToolCallEvent::Type::kContent:
        out.content += e.text;
        break;
      case ToolCallEvent::Type::kCallStart:
        out.calls.push_back(ToolCall{e.id, e.name, ""});
        break;
      case ToolCallEvent::Type::kArguments:
        // Events come from one stream, so index names the last call started.
        if (e.index >= 0 && e.index < static_cast<int>(out.calls.size())) {
          out.calls[e.index].arguments += e.text;
        }
        break;
    }
  }
  return out;
}

}  // namespace minfer::chat
