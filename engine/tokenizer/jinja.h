// A Jinja2 interpreter for chat templates (GGUF tokenizer.chat_template,
// Hugging Face's tokenizer_config.json "chat_template").
//
// The language is the subset of Jinja2 that chat templates use, with the
// semantics of Python Jinja2 as Hugging Face transformers configures it for
// apply_chat_template (an ImmutableSandboxedEnvironment with trim_blocks and
// lstrip_blocks on, the loopcontrols extension, tojson = json.dumps without
// HTML escaping, raise_exception and strftime_now as globals). The real
// templates of Qwen2.5, Qwen3 and Llama 3.x render byte for byte as
// @huggingface/jinja (transformers' JavaScript port) renders them
// (tests/engine/tokenizer/jinja_reference_test.cc).
//
// Supported:
//  - {{ expr }}, {% stmt %}, {# comment #}; whitespace control with "-"
//    ({%- -%} {{- -}} {#- -#}) and "+" ({%+ disables lstrip_blocks);
//    trim_blocks (the first newline after a block tag or comment is dropped),
//    lstrip_blocks (spaces and tabs before a block tag or comment at the start
//    of a line are dropped); one trailing newline of the template is dropped;
//    \r\n and \r become \n. {% raw %}...{% endraw %}.
//  - Statements: if/elif/else, for (tuple targets, "if" filter, else,
//    loop.index/index0/revindex/revindex0/first/last/length/previtem/
//    nextitem/depth/depth0/cycle()), break, continue, set (names, tuples,
//    namespace attributes, {% set x %}...{% endset %} blocks), macro (defaults,
//    keyword arguments), filter blocks, with, and transformers' generation
//    block (rendered as its body).
//  - Expressions: literals (strings with Python escapes, ints incl. 0x/0o/0b
//    and "_", floats, true/false/none in either case, lists, tuples, dicts),
//    names, attributes, subscripts and slices ([::-1]), calls with keyword
//    arguments, filters, tests (is / is not, with arguments), unary - + not,
//    + - * / // % ** ~, comparisons (chained), in / not in, and / or,
//    conditional expressions (a if b else c).
//  - Filters: abs capitalize count d default dictsort first float indent int
//    items join last length list lower map max min reject rejectattr replace
//    reverse round safe select selectattr sort string sum title tojson trim
//    unique upper wordcount.
//  - Tests: boolean callable defined divisibleby eq equalto even false float
//    ge gt in integer iterable le lower lt mapping ne none number odd sameas
//    sequence string true undefined upper (and == != < <= > >=).
//  - Methods: str capitalize count endswith find join lower lstrip replace
//    rfind rsplit rstrip split splitlines startswith strip title upper;
//    dict get items keys values.
//  - Globals: namespace, range (at most 100000 items, as the sandbox), dict,
//    raise_exception(msg) (INVALID_ARGUMENT whose message is msg),
//    strftime_now(format) (RenderOptions::now in RenderOptions::time_zone).
// Not supported (a clear error): template inheritance and includes
// (extends, block, include, import), call blocks, recursive loops, macros'
// varargs/kwargs/caller, *args/**kwargs in calls, the "%" string formatting
// operator, autoescaping and Markup.
//
// Python semantics where @huggingface/jinja deviates (the templates above do
// not depend on these): str.strip/lstrip/rstrip honour their characters
// argument; {{ true }} prints True and {{ none }} None; lists and dicts print
// as Python's repr; floats print as Python's repr; "==" never converts
// between strings and numbers; an attribute or item of an undefined value is
// an error; a variable set inside a loop body is gone in the next iteration.
//
// Strings are sequences of code points (len, indexing, slicing); invalid
// UTF-8 in a value counts one code point per bad byte and is never altered.
//
// Marked text. A string made with Value::MarkedString is "marked": wherever
// its bytes reach the output — whole, or as a part cut out by slicing,
// strip, split, trim and the like, or concatenated with other text — Render
// reports those output bytes in RenderResult::marked. Text computed from a
// marked string in any other way (upper, replace, tojson, repr of a list
// holding it, ...) is marked as a whole. Template literals are never marked.
// A chat template marks message contents so that the encoder can keep
// control tokens written inside them from being parsed (chat_template.h).
//
// Resources are bounded (Limits): nesting depth at parse and render time,
// evaluation steps, the size of every string and list built and of the
// output; exceeding a bound is RESOURCE_EXHAUSTED, never a crash.
//
// A Template is immutable after Parse; Render may run concurrently on many
// threads. Values are immutable and cheap to copy (shared storage); Render
// never modifies the values it is given (a template can assign only to the
// namespaces it makes itself), so they may be shared by concurrent renders.
#ifndef MINFER_ENGINE_TOKENIZER_JINJA_H_
#define MINFER_ENGINE_TOKENIZER_JINJA_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace minfer::tokenizer::jinja {

namespace internal {
struct StrData;
struct ListData;
struct DictData;
struct CallableData;
struct Program;
class ValueAccess;
}  // namespace internal

class Value {
 public:
  enum class Kind : uint8_t {
    kUndefined,  // a missing variable, attribute or item
    kNone,
    kBool,
    kInt,  // 64-bit; overflow is an error
    kFloat,
    kString,     // UTF-8 bytes
    kList,       // also tuples
    kDict,       // string keys, insertion-ordered
    kNamespace,  // namespace(): a dict templates may assign attributes of
    kCallable,   // macros, globals, bound methods
  };

  Value() = default;  // undefined
  static Value None();
  static Value Bool(bool b);
  static Value Int(int64_t i);
  static Value Float(double f);
  static Value String(std::string text);
  // A string whose bytes Render reports when they reach the output (see the
  // header comment).
  static Value MarkedString(std::string text);
  static Value List(std::vector<Value> items);
  // Keys in order; a repeated key keeps its first position and last value.
  static Value Dict(std::vector<std::pair<std::string, Value>> items);
  // The value of a JSON document: objects keep their key order; a number
  // without fraction or exponent that fits int64 is an int. With `marked`,
  // every string in it (keys included) is marked. INVALID_ARGUMENT when
  // `json` does not parse.
  static absl::StatusOr<Value> FromJson(absl::string_view json, bool marked = false);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }

  // Accessors; each requires the matching kind.
  bool bool_value() const { return u_.b; }
  int64_t int_value() const { return u_.i; }
  double float_value() const { return u_.f; }
  absl::string_view string_value() const;
  const std::vector<Value>& list_items() const;
  // kDict or kNamespace: the entries in order.
  const std::vector<std::pair<std::string, Value>>& dict_items() const;
  // kDict or kNamespace: the value of `key`, or null when absent.
  const Value* Find(absl::string_view key) const;

 private:
  friend class internal::ValueAccess;

  Kind kind_ = Kind::kUndefined;
  union {
    bool b;
    int64_t i;
    double f;
  } u_{.i = 0};
  // StrData, ListData, DictData or CallableData, by kind.
  std::shared_ptr<void> p_;
};

// The variables a template renders with (names to values).
using Variables = std::map<std::string, Value, std::less<>>;

struct Limits {
  // Statement and expression nesting when parsing; rendering allows four
  // times as much (macro calls nest), which bounds macro recursion.
  int max_depth = 96;
  // Evaluation steps: expression nodes and statements one each, a loop
  // iteration 10, building strings one per 64 bytes, appending to the
  // output one per 16 bytes, repeating a string one per repetition (weights
  // that make a step cost about the same CPU whatever the template does).
  // The budget bounds one rendering to ~100 ms of CPU: hostile loops of
  // every kind measured 35-90 ns per step with these weights (2-core build
  // machine, tests/engine/tokenizer/jinja_step_bench.cc; an empty loop
  // iteration was charged one step before and cost 530 ns, which made the
  // old budget of 20,000,000 ~10 s), so 1,000,000 steps: 35-90 ms. The
  // real templates take 40-74 steps per message (Qwen3 the most), so a
  // conversation of ~13,000 messages still renders.
  int64_t max_steps = 1'000'000;
  // Bytes of any one string (the output included) and items of any one list.
  size_t max_string_bytes = size_t{64} << 20;
  size_t max_list_items = 1'000'000;
  // Bytes of all strings and lists built while rendering, together (a
  // real prompt builds a few times its own size). Filling 1 GiB with lists
  // took 100 ms; 256 MiB keeps that well inside the step budget's time.
  size_t max_total_bytes = size_t{256} << 20;
};

struct RenderOptions {
  // What strftime_now() formats; absl::Now() at render time when left at
  // InfinitePast.
  absl::Time now = absl::InfinitePast();
  absl::TimeZone time_zone = absl::LocalTimeZone();
  Limits limits;
};

struct RenderResult {
  std::string text;
  // Byte ranges [first, second) of `text` holding marked text: sorted,
  // disjoint, non-empty, touching ranges merged.
  std::vector<std::pair<size_t, size_t>> marked;
  // Evaluation steps the render took (what Limits::max_steps bounds).
  int64_t steps = 0;
};

class Template {
 public:
  // Parses `source` (valid UTF-8). INVALID_ARGUMENT "line L, column C: ..."
  // for a syntax error (column in code points, both 1-based), an unknown
  // statement, filter or test, or invalid UTF-8; RESOURCE_EXHAUSTED when it
  // nests deeper than `limits.max_depth`.
  static absl::StatusOr<Template> Parse(absl::string_view source, const Limits& limits = {});

  // Renders with `variables` (raise_exception, range, namespace, dict and
  // strftime_now are predefined; a variable of the same name replaces them).
  // INVALID_ARGUMENT for a failure of the template at render time, naming
  // its line and column and what failed ("line 3, column 12: 'list' object
  // has no element 0"), or the message of raise_exception(msg) exactly;
  // RESOURCE_EXHAUSTED when a Limit is exceeded.
  absl::StatusOr<RenderResult> Render(const Variables& variables,
                                      const RenderOptions& options = {}) const;

 private:
  std::shared_ptr<const internal::Program> program_;
};

}  // namespace minfer::tokenizer::jinja

#endif  // MINFER_ENGINE_TOKENIZER_JINJA_H_
