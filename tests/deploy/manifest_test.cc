// deploy/minferd.yaml stays consistent with minferd: its embedded config
// parses, every flag it passes exists, the probes use the gRPC health port,
// and the termination grace period covers preStop + drain.
#include <fstream>
#include <regex>
#include <sstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "daemon/config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/subprocess.h"

namespace minfer {
namespace {

std::string Manifest() {
  std::ifstream in(testing::RunfilePath("deploy/minferd.yaml"));
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

}  // namespace
}  // namespace minfer
