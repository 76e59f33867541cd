// deploy/minferd.yaml stays consistent with minferd: its embedded config
// parses, every flag it passes exists, the probes use the gRPC health port,
// and the termination grace period covers preStop + drain.
#include <fstream>
#include <set>
#include <vector>
#include <regex>
#include <sstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "daemon/config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "absl/strings/str_cat.h"
#include "tests/daemon/minferd_process.h"
#include "tests/daemon/test_util.h"
#include "tests/support/subprocess.h"
#include "tests/support/test_models.h"

namespace minfer {
namespace {

std::string Manifest(const std::string& name = "minferd.yaml") {
  std::ifstream in(testing::RunfilePath("deploy/" + name));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The block scalar under "minferd.json: |".
std::string EmbeddedConfig(const std::string& yaml) {
  std::string out;
  bool in_block = false;
  for (absl::string_view line : absl::StrSplit(yaml, '\n')) {
    if (absl::StrContains(line, "minferd.json: |")) {
      in_block = true;
      continue;
    }
    if (in_block) {
      if (!absl::StartsWith(line, "    ")) break;
      out += std::string(line.substr(4)) + "\n";
    }
  }
  return out;
}

int IntAfter(const std::string& text, const std::string& pattern) {
  std::smatch m;
  EXPECT_TRUE(std::regex_search(text, m, std::regex(pattern))) << pattern;
  return m.empty() ? -1 : std::stoi(m[1]);
}

TEST(ManifestTest, ConfigParsesAndFlagsExist) {
  const std::string yaml = Manifest();
  ASSERT_FALSE(yaml.empty());
  daemon::DaemonConfig c;
  ASSERT_TRUE(daemon::ApplyConfigJson(EmbeddedConfig(yaml), "minferd.yaml", &c).ok());
  EXPECT_EQ(c.listen, "0.0.0.0:50051");
  EXPECT_EQ(c.metrics_listen, "0.0.0.0:9464");
  ASSERT_EQ(c.aliases.size(), 1u);
  EXPECT_EQ(c.aliases[0].first, "default");
  c.admin_token_file.clear();  // a mounted secret in the pod
  EXPECT_TRUE(daemon::FinalizeConfig(&c).ok());

  // The probes ask the gRPC port for the alias the config defines.
  EXPECT_THAT(yaml, ::testing::HasSubstr("grpc: {port: 50051, service: default}"));
  // Grace period > preStop sleep + drain timeout.
  const int grace = IntAfter(yaml, R"re(terminationGracePeriodSeconds: (\d+))re");
  const int pre_stop = IntAfter(yaml, R"re(command: \["sleep", "(\d+)"\])re");
  EXPECT_GT(grace, pre_stop + static_cast<int>(c.drain_timeout_seconds));

  // Every flag in the container's args is one minferd knows.
  auto help = testing::RunCommand({testing::RunfilePath("daemon/minferd"), "--help"});
  ASSERT_TRUE(help.ok());
  std::smatch args;
  ASSERT_TRUE(std::regex_search(yaml, args, std::regex(R"re(args: \[(.*)\])re")));
  for (absl::string_view a : absl::StrSplit(args[1].str(), ',')) {
    std::string arg(absl::StripAsciiWhitespace(a));
    arg = std::string(absl::StripSuffix(absl::StripPrefix(arg, "\""), "\""));
    if (absl::StartsWith(arg, "--")) {
      EXPECT_THAT(help->out, ::testing::HasSubstr(arg)) << arg;
    }
  }
}

// The flags of the first one-line `args: [...]` (the minferd container's).
std::vector<std::string> MinferdFlags(const std::string& yaml) {
  std::vector<std::string> flags;
  std::smatch args;
  EXPECT_TRUE(std::regex_search(yaml, args, std::regex(R"re(args: \[(.*)\])re")));
  if (args.empty()) return flags;
  for (absl::string_view a : absl::StrSplit(args[1].str(), ',')) {
    std::string arg(absl::StripAsciiWhitespace(a));
    arg = std::string(absl::StripSuffix(absl::StripPrefix(arg, "\""), "\""));
    if (absl::StartsWith(arg, "--")) flags.push_back(arg);
  }
  return flags;
}

TEST(ManifestTest, ManifestsAreValidYaml) {
  for (const char* name : {"minferd.yaml", "inference-pool.yaml"}) {
    // PyYAML (Debian's python3-yaml), every document of the file.
    auto r = testing::RunCommand(
        {"/usr/bin/python3", "-c",
         "import sys, yaml; docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]; "
         "print(len(docs)); assert all('kind' in d and 'apiVersion' in d for d in docs)",
         testing::RunfilePath(std::string("deploy/") + name)});
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->exit_code, 0) << name << ": " << r->err;
  }
}

// The InferencePool example: its embedded config parses, its minferd flags
// exist, and every minfer_* metric it names (the endpoint picker's queue,
// running and KV-cache gauges) is on a running minferd's metrics page.
TEST(ManifestTest, InferencePoolNamesOnlyMinferdsFlagsAndMetrics) {
  const std::string yaml = Manifest("inference-pool.yaml");
  ASSERT_FALSE(yaml.empty());
  daemon::DaemonConfig c;
  ASSERT_TRUE(daemon::ApplyConfigJson(EmbeddedConfig(yaml), "inference-pool.yaml", &c).ok());
  EXPECT_EQ(c.http_listen, "0.0.0.0:8000");
  c.admin_token_file.clear();
  EXPECT_TRUE(daemon::FinalizeConfig(&c).ok());
  EXPECT_THAT(yaml, ::testing::HasSubstr("number: 8000"));  // the pool's target port

  auto help = testing::RunCommand({testing::RunfilePath("daemon/minferd"), "--help"});
  ASSERT_TRUE(help.ok());
  const std::vector<std::string> flags = MinferdFlags(yaml);
  EXPECT_THAT(flags, ::testing::Contains("--kv-events"));
  for (const std::string& f : flags) EXPECT_THAT(help->out, ::testing::HasSubstr(f)) << f;

  // A minferd with a model, its metrics page.
  auto model = testing::TestModelPath("tiny", "q8_0", 1);
  ASSERT_TRUE(model.ok()) << model.status();
  auto d = daemon::testing::StartMinferd({"--model", "m=" + *model}, /*metrics=*/true);
  ASSERT_TRUE(d.ok()) << d.status();
  ASSERT_TRUE(daemon::testing::WaitFor([&] {
    auto st = d->client->GetModelStatus("m");
    return st.ok() && st->state() == v1::MODEL_STATE_READY;
  }));
  auto page = testing::RunCommand(
      {"/usr/bin/curl", "-s", absl::StrCat("http://", d->metrics_address, "/metrics")});
  ASSERT_TRUE(page.ok());
  std::set<std::string> named;
  const std::regex metric(R"re(minfer_[a-z_]+)re");
  for (auto it = std::sregex_iterator(yaml.begin(), yaml.end(), metric);
       it != std::sregex_iterator(); ++it) {
    named.insert(it->str());
  }
  EXPECT_THAT(named, ::testing::IsSupersetOf({"minfer_queue_depth", "minfer_active_sequences",
                                              "minfer_kv_cache_usage_ratio"}));
  for (const std::string& m : named) {
    EXPECT_THAT(page->out, ::testing::HasSubstr(absl::StrCat("# TYPE ", m, " "))) << m;
    EXPECT_THAT(page->out, ::testing::HasSubstr(absl::StrCat(m, "{model=\"m\"}"))) << m;
  }
}

}  // namespace
}  // namespace minfer
