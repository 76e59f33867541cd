#include "daemon/config.h"

#include <cstdlib>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "daemon/serving/slot.h"
#include "engine/base/field_error.h"
#include "engine/base/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace minfer::daemon {
namespace {

using ::testing::HasSubstr;

absl::Status Apply(const std::string& json, DaemonConfig* c) {
  return ApplyConfigJson(json, "test.json", c);
}

TEST(ConfigTest, ReadsEveryKey) {
  DaemonConfig c;
  ASSERT_TRUE(Apply(R"({
    "listen": "0.0.0.0:7000",
    "metrics_listen": "",
    "http_listen": "127.0.0.1:8080",
    "http_threads": 64,
    "memory_limit": "8G",
    "drain_timeout_seconds": 12.5,
    "tls": {"cert": "c.pem", "key": "k.pem"},
    "admin_token": "tok",
    "limits": {"max_prompt_tokens": 100, "max_tokens": 50, "default_max_tokens": 20},
    "defaults": {"n_ctx": 1024, "parallel": 3, "queue_size": 0},
    "models": [{"name": "m", "path": "/m.gguf", "n_ctx": 256, "parallel": 2,
                "kv_type": "f16", "backend": "cpu", "queue_size": 5,
                "spec": "draft", "draft": "/small.gguf", "spec_k": 6,
                "knobs": {"MINFER_PREFILL_CHUNK": "64"}}],
    "aliases": {"prod": "m"},
    "log_level": "debug"
  })", &c).ok());
  EXPECT_EQ(c.listen, "0.0.0.0:7000");
  EXPECT_EQ(c.metrics_listen, "");
  EXPECT_EQ(c.http_listen, "127.0.0.1:8080");
  EXPECT_EQ(c.http.loop_threads, 64);
  EXPECT_EQ(c.memory_limit, 8ull << 30);
  EXPECT_EQ(c.drain_timeout_seconds, 12.5);
  EXPECT_EQ(c.tls_cert_file, "c.pem");
  EXPECT_EQ(c.tls_key_file, "k.pem");
  EXPECT_EQ(c.admin_token, "tok");
  EXPECT_EQ(c.limits.max_prompt_tokens, 100);
  EXPECT_EQ(c.limits.max_tokens, 50);
  EXPECT_EQ(c.limits.default_max_tokens, 20);
  EXPECT_EQ(c.default_n_ctx, 1024);
  EXPECT_EQ(c.default_parallel, 3);
  EXPECT_EQ(c.default_queue_size, 0);
  ASSERT_EQ(c.models.size(), 1u);
  EXPECT_EQ(c.models[0].name, "m");
  EXPECT_EQ(c.models[0].path, "/m.gguf");
  EXPECT_EQ(c.models[0].n_ctx, 256);
  EXPECT_EQ(c.models[0].parallel, 2);
  EXPECT_EQ(c.models[0].kv_type, "f16");
  EXPECT_EQ(c.models[0].backend, "cpu");
  EXPECT_EQ(c.models[0].queue_size, 5);
  EXPECT_EQ(c.models[0].knobs.at("MINFER_PREFILL_CHUNK"), "64");
  EXPECT_EQ(c.models[0].spec, "draft");
  EXPECT_EQ(c.models[0].draft, "/small.gguf");
  EXPECT_EQ(c.models[0].spec_k, 6);
  ASSERT_EQ(c.aliases.size(), 1u);
  EXPECT_EQ(c.aliases[0], std::make_pair(std::string("prod"), std::string("m")));
  EXPECT_EQ(c.log_level, "debug");
  EXPECT_TRUE(FinalizeConfig(&c).ok());
}

TEST(ConfigTest, DefaultsListenOnLoopback) {
  DaemonConfig c;
  EXPECT_EQ(c.listen, "127.0.0.1:50051");
  EXPECT_EQ(c.metrics_listen.rfind("127.0.0.1:", 0), 0u);
  ASSERT_TRUE(Apply("{}", &c).ok());
  EXPECT_TRUE(FinalizeConfig(&c).ok());
}

TEST(ConfigTest, ErrorsNameTheKey) {
  struct Case {
    std::string json, want;
  };
  for (const Case& k : std::vector<Case>{
           {R"({"listne": "x"})", "unknown key 'listne'"},
           {R"({"limits": {"max_tokenz": 3}})", "unknown key 'limits.max_tokenz'"},
           {R"({"listen": 5})", "listen must be a string"},
           {R"({"limits": {"max_tokens": -1}})", "limits.max_tokens must be an integer >= 1"},
           {R"({"memory_limit": "lots"})", "memory_limit"},
           {R"({"drain_timeout_seconds": "soon"})", "drain_timeout_seconds must be a number"},
           {R"({"models": [{"name": "m"}]})", "models[0] needs a name and a path"},
           {R"({"models": [{"name": "m", "path": "p", "ctx": 3}]})", "unknown key 'models[0].ctx'"},
           {R"({"models": [{"name": "m", "path": "p", "spec_k": -1}]})",
            "models[0].spec_k must be an integer >= 0"},
           {R"({"models": [{"name": "m", "path": "p", "draft": 3}]})",
            "models[0].draft must be a string"},
           {R"({"aliases": {"a": 1}})", "aliases.a must be a string"},
           {R"({"tenants": {"a": 1}})", "tenants must be an array"},
           {R"({"tenants": [{"name": "a", "wieght": 2}]})", "unknown key 'tenants[0].wieght'"},
           {R"({"tenants": [{"name": "a", "api_keys": "k"}]})",
            "tenants[0].api_keys must be an array of strings"},
           {R"({"tenants": [{"name": "a", "quota": {"tokens": -5}}]})",
            "tenants[0].quota.tokens must be an integer >= 0"},
           {R"({not json)", "not valid JSON"},
           {R"([1])", "must be an object"},
       }) {
    DaemonConfig c;
    absl::Status s = Apply(k.json, &c);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << k.json;
    EXPECT_THAT(std::string(s.message()), HasSubstr(k.want)) << k.json;
    EXPECT_THAT(std::string(s.message()), HasSubstr("test.json")) << k.json;
  }
}

TEST(ConfigTest, FinalizeChecksCrossFieldRules) {
  DaemonConfig c;
  c.limits.max_tokens = 0;
  EXPECT_THAT(std::string(FinalizeConfig(&c).message()), HasSubstr("limits must be positive"));
  c = DaemonConfig();
  c.tls_cert_file = "x";
  EXPECT_THAT(std::string(FinalizeConfig(&c).message()), HasSubstr("TLS"));
  c = DaemonConfig();
  c.models.resize(2);
  c.models[0].name = c.models[1].name = "m";
  EXPECT_THAT(std::string(FinalizeConfig(&c).message()), HasSubstr("listed twice"));
  c = DaemonConfig();
  c.aliases.push_back({"prod", "ghost"});
  EXPECT_THAT(std::string(FinalizeConfig(&c).message()), HasSubstr("'ghost'"));
  c = DaemonConfig();
  std::string token_file = std::string(std::getenv("TEST_TMPDIR")) + "/token";
  std::ofstream(token_file) << "abc123\n";
  c.admin_token_file = token_file;
  ASSERT_TRUE(FinalizeConfig(&c).ok());
  EXPECT_EQ(c.admin_token, "abc123");
  c.admin_token_file = token_file + ".missing";
  EXPECT_EQ(FinalizeConfig(&c).code(), absl::StatusCode::kNotFound);

  // API keys: one per line, blanks and comments skipped; a file with no
  // key is an error (it would leave the API open by accident).
  c = DaemonConfig();
  const std::string keys = std::string(std::getenv("TEST_TMPDIR")) + "/keys";
  std::ofstream(keys) << "# team a\nsk-one\n\n  sk-two  \n";
  c.api_key_file = keys;
  ASSERT_TRUE(FinalizeConfig(&c).ok());
  EXPECT_EQ(c.api_keys, (std::vector<std::string>{"sk-one", "sk-two"}));
  std::ofstream(keys) << "# nothing\n\n";
  c.api_keys.clear();
  absl::Status empty = FinalizeConfig(&c);
  EXPECT_EQ(empty.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(empty.message()), ::testing::HasSubstr("holds no key"));
  c.api_key_file = keys + ".missing";
  EXPECT_EQ(FinalizeConfig(&c).code(), absl::StatusCode::kNotFound);
}

TEST(ConfigTest, ReadsTenants) {
  DaemonConfig c;
  const std::string keys = std::string(std::getenv("TEST_TMPDIR")) + "/tenant-keys";
  std::ofstream(keys) << "# search team\nsk-s1\n\nsk-s2\n";
  ASSERT_TRUE(Apply(absl::StrCat(R"({"tenants": [
      {"name": "search", "api_key_file": ")", keys, R"(", "weight": 2.5, "max_streams": 32,
       "quota": {"tokens": 1000000, "window_seconds": 3600}, "models": ["prod", "m7"]},
      {"name": "batch", "api_keys": ["sk-b"], "cache_group": "shared"}]})"),
                    &c)
                  .ok());
  ASSERT_TRUE(FinalizeConfig(&c).ok());
  ASSERT_EQ(c.tenants.size(), 2u);
  const TenantConfig& s = c.tenants[0];
  EXPECT_EQ(s.name, "search");
  EXPECT_EQ(s.api_keys, (std::vector<std::string>{"sk-s1", "sk-s2"}));
  EXPECT_EQ(s.weight, 2.5);
  EXPECT_EQ(s.max_streams, 32);
  EXPECT_EQ(s.quota_tokens, 1000000);
  EXPECT_EQ(s.quota_window_seconds, 3600);
  EXPECT_EQ(s.models, (std::vector<std::string>{"prod", "m7"}));
  EXPECT_EQ(c.tenants[1].api_keys, (std::vector<std::string>{"sk-b"}));
  EXPECT_EQ(c.tenants[1].weight, 1.0);
  EXPECT_EQ(s.cache_group, "");
  EXPECT_EQ(c.tenants[1].cache_group, "shared");
  // The HTTP API's flat key file and tenants exclude each other.
  c.api_key_file = keys;
  absl::Status both = FinalizeConfig(&c);
  EXPECT_EQ(both.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(both.message()), HasSubstr("exclude each other"));
}

TEST(ConfigTest, TenantFlag) {
  auto t = ParseTenantFlag(
      "name=search,key_file=/k,weight=2.5,max_streams=32,max_streams_per_model=8,"
      "quota=1000/60,models=prod+m7,cache_group=docs");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->name, "search");
  EXPECT_EQ(t->api_key_file, "/k");
  EXPECT_EQ(t->weight, 2.5);
  EXPECT_EQ(t->max_streams, 32);
  EXPECT_EQ(t->max_streams_per_model, 8);
  EXPECT_EQ(t->quota_tokens, 1000);
  EXPECT_EQ(t->quota_window_seconds, 60);
  EXPECT_EQ(t->models, (std::vector<std::string>{"prod", "m7"}));
  EXPECT_EQ(t->cache_group, "docs");
  struct Case {
    std::string spec, want;
  };
  for (const Case& k : std::vector<Case>{
           {"key_file=/k", "needs name=NAME"},
           {"name=a,weight=0", "'weight=0' wants a number > 0"},
           {"name=a,quota=100", "'quota=100' wants TOKENS/SECONDS"},
           {"name=a,keys=sk-1", "'keys=sk-1' is not accepted: give the keys in a file"},
           {"name=a,colour=red", "'colour=red' has an unknown key"},
           {"name=a,oops", "'oops' is not KEY=VALUE"},
       }) {
    auto r = ParseTenantFlag(k.spec);
    ASSERT_FALSE(r.ok()) << k.spec;
    EXPECT_THAT(std::string(r.status().message()), HasSubstr(k.want)) << k.spec;
  }
}

TEST(ConfigTest, ModelFlagTakesPerModelParsers) {
  auto plain = ParseModelFlag("m=/models/a.gguf");
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->name, "m");
  EXPECT_EQ(plain->path, "/models/a.gguf");
  EXPECT_EQ(plain->n_ctx, 0);
  EXPECT_EQ(plain->parallel, 0);
  EXPECT_EQ(plain->tool_parser, "");
  auto both = ParseModelFlag("m=/a.gguf,tool_parser=llama3_json,reasoning_parser=none");
  ASSERT_TRUE(both.ok()) << both.status();
  EXPECT_EQ(both->tool_parser, "llama3_json");
  EXPECT_EQ(both->reasoning_parser, "none");
  for (const char* bad : {"m", "=/a.gguf", "m=", "m=/a.gguf,ctx=5", "m=/a.gguf,tool_parser"}) {
    EXPECT_FALSE(ParseModelFlag(bad).ok()) << bad;
  }
  // Parser names are checked at load, against the registries.
  SlotConfig c = *both;
  EXPECT_TRUE(CheckChatParsers(c).ok());
  c.tool_parser = "mistral";
  absl::Status s = CheckChatParsers(c);
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("tool_parser 'mistral' is not known"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("hermes"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("llama3_json"));
  c.tool_parser = "none";
  c.reasoning_parser = "deepseek";
  EXPECT_THAT(std::string(CheckChatParsers(c).message()),
              HasSubstr("reasoning_parser 'deepseek' is not known: qwen3"));
}

TEST(ConfigTest, ModelFlagTakesSpeculativeOptions) {
  auto draft = ParseModelFlag("m=/a.gguf,draft=/small.gguf,spec_k=6");
  ASSERT_TRUE(draft.ok()) << draft.status();
  EXPECT_EQ(draft->spec, "");  // CheckSpeculative makes it "draft"
  EXPECT_EQ(draft->draft, "/small.gguf");
  EXPECT_EQ(draft->spec_k, 6);
  auto ngram = ParseModelFlag("m=/a.gguf,spec=ngram,tool_parser=hermes");
  ASSERT_TRUE(ngram.ok()) << ngram.status();
  EXPECT_EQ(ngram->spec, "ngram");
  EXPECT_EQ(ngram->tool_parser, "hermes");
  for (const char* bad : {"m=/a.gguf,spec_k=four", "m=/a.gguf,spec_k=", "m=/a.gguf,draft",
                          "m=/a.gguf,speculative=1"}) {
    absl::StatusOr<SlotConfig> s = ParseModelFlag(bad);
    EXPECT_FALSE(s.ok()) << bad;
  }
  EXPECT_THAT(std::string(ParseModelFlag("m=/a.gguf,spec_k=four").status().message()),
              HasSubstr("spec_k wants an integer, got 'four'"));
  EXPECT_THAT(std::string(ParseModelFlag("m=/a.gguf,speculative=1").status().message()),
              HasSubstr("spec=off|ngram|draft, draft=PATH, spec_k=K"));
}

// CheckSpeculative resolves the defaults and refuses what does not go
// together, naming the field (as data too).
TEST(ConfigTest, SpeculativeOptionsAreResolvedAndChecked) {
  auto check = [](const std::string& spec, const std::string& draft,
                  int32_t k) -> absl::StatusOr<SlotConfig> {
    SlotConfig c;
    c.spec = spec;
    c.draft = draft;
    c.spec_k = k;
    RETURN_IF_ERROR(CheckSpeculative(&c));
    return c;
  };
  // A draft alone means spec "draft"; k defaults to 4 where drafts are made.
  auto d = check("", "/small.gguf", 0);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->spec, "draft");
  EXPECT_EQ(d->spec_k, kDefaultSpecK);
  auto n = check("ngram", "", 8);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(n->spec_k, 8);
  EXPECT_EQ(check("ngram", "", 0)->spec_k, 4);
  EXPECT_EQ(check("draft", "/d.gguf", 16)->spec_k, 16);
  EXPECT_EQ(check("off", "", 0)->spec_k, 0);
  EXPECT_EQ(check("", "", 0)->spec, "");  // the knob decides
  struct Bad {
    std::string spec, draft;
    int32_t k;
    std::string field, says;
  };
  for (const Bad& b : std::vector<Bad>{
           {"eagle", "", 0, "spec", "spec: 'eagle' is not known: off, ngram or draft"},
           {"draft", "", 0, "draft", "draft: spec 'draft' needs a draft model"},
           {"ngram", "/d.gguf", 0, "draft", "not with spec 'ngram'"},
           {"off", "/d.gguf", 0, "draft", "not with spec 'off'"},
           {"ngram", "", 17, "spec_k", "spec_k must be in [0, 16] (0: 4), got 17"},
           {"draft", "/d.gguf", -1, "spec_k", "spec_k must be in [0, 16]"},
           {"off", "", 2, "spec_k", "spec_k: set with spec 'off'"},
           {"", "", 2, "spec_k", "spec_k applies to spec ngram or draft"},
       }) {
    absl::StatusOr<SlotConfig> s = check(b.spec, b.draft, b.k);
    ASSERT_FALSE(s.ok()) << b.says;
    EXPECT_TRUE(absl::IsInvalidArgument(s.status())) << s.status();
    EXPECT_THAT(std::string(s.status().message()), HasSubstr(b.says));
    EXPECT_EQ(FieldPath(s.status()), b.field) << s.status();
  }
}

// The admin token is not an API key: a tenant key (inline or from its key
// file) or an api_key_file key equal to it is refused at start, naming the
// tenant and never echoing the key.
TEST(ConfigTest, AnApiKeyEqualToTheAdminTokenIsRefused) {
  const std::string dir = std::getenv("TEST_TMPDIR");
  std::ofstream(dir + "/admin-token") << "sk-admin-7\n";
  std::ofstream(dir + "/b-keys") << "sk-b\nsk-admin-7\n";
  DaemonConfig c;
  ASSERT_TRUE(Apply(absl::StrCat(R"({"admin_token_file": ")", dir, R"(/admin-token",
      "tenants": [{"name": "a", "api_keys": ["sk-a"]},
                  {"name": "b", "api_key_file": ")", dir, R"(/b-keys"}]})"),
                    &c)
                  .ok());
  absl::Status s = FinalizeConfig(&c);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "tenant 'b': an API key equals the admin token; they must differ");
  EXPECT_THAT(std::string(s.message()), ::testing::Not(HasSubstr("sk-admin")));

  DaemonConfig inline_key;
  inline_key.admin_token = "tok";
  TenantConfig t;
  t.name = "a";
  t.api_keys = {"sk-a", "tok"};
  inline_key.tenants.push_back(t);
  s = FinalizeConfig(&inline_key);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "tenant 'a': an API key equals the admin token; they must differ");
  inline_key.tenants[0].api_keys = {"sk-a"};
  EXPECT_TRUE(FinalizeConfig(&inline_key).ok());

  std::ofstream(dir + "/flat-keys") << "sk-1\ntok\n";
  DaemonConfig flat;
  flat.admin_token = "tok";
  flat.api_key_file = dir + "/flat-keys";
  s = FinalizeConfig(&flat);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "api_key_file: a key equals the admin token; they must differ");
}

TEST(ConfigTest, ByteSizes) {
  EXPECT_EQ(*ParseByteSize("1073741824"), 1073741824u);
  EXPECT_EQ(*ParseByteSize("512M"), 512u << 20);
  EXPECT_EQ(*ParseByteSize("8G"), 8ull << 30);
  EXPECT_EQ(*ParseByteSize("1.5GiB"), 3ull << 29);
  EXPECT_EQ(*ParseByteSize("64kb"), 64u << 10);
  EXPECT_EQ(*ParseByteSize(" 2T "), 2ull << 40);
  EXPECT_FALSE(ParseByteSize("").ok());
  EXPECT_FALSE(ParseByteSize("G").ok());
  EXPECT_FALSE(ParseByteSize("-1G").ok());
  EXPECT_FALSE(ParseByteSize("8X").ok());
}

}  // namespace
}  // namespace minfer::daemon
