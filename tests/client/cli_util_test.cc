// minferctl's shared pieces without a server: table layout, the enum names,
// MiB, and the command table choosing the parsed subcommand's action.
#include "client/cli_util.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace minfer::ctl {
namespace {

TEST(FormatTableTest, ColumnsAsWideAsTheirWidestCellTwoSpacesApart) {
  // Column widths: 9 ("long-name"), 5 ("STATE", "ready"), 5 ("extra").
  const Table rows = {{"NAME", "STATE"}, {"a", "ready"}, {"long-name", "x", "extra"}};
  EXPECT_EQ(FormatTable(rows),
            "NAME" + std::string(9 - 4 + 2, ' ') + "STATE\n" +  // last cell unpadded
                "a" + std::string(9 - 1 + 2, ' ') + "ready\n" +
                "long-name" + std::string(2, ' ') + "x" + std::string(5 - 1 + 2, ' ') +
                "extra\n");
}

TEST(FormatTableTest, EmptyTableAndEmptyRow) {
  EXPECT_EQ(FormatTable({}), "");
  EXPECT_EQ(FormatTable({{}, {"x"}}), "\nx\n");
}

TEST(CliUtilTest, Names) {
  EXPECT_EQ(Mib(0), "0.0 MiB");
  EXPECT_EQ(Mib(3 * 1048576 / 2), "1.5 MiB");
  EXPECT_EQ(Mib(1048576ull * 1024), "1024.0 MiB");
  EXPECT_EQ(StateName(v1::MODEL_STATE_READY), "ready");
  EXPECT_EQ(StateName(v1::MODEL_STATE_FAILED), "failed");
  EXPECT_EQ(FinishName(v1::FINISH_REASON_EOS), "eos");
  EXPECT_EQ(FinishName(v1::FINISH_REASON_UNSPECIFIED), "unspecified");
}

TEST(CommandTableTest, RunsTheActionOfTheParsedSubcommand) {
  CLI::App app{"test", "test"};
  app.require_subcommand(1);
  CommandTable table;
  std::vector<std::string> ran;
  for (const char* name : {"first", "second", "third"}) {
    table.Add(app.add_subcommand(name, ""), [&ran, name](client::MinferClient&) {
      ran.push_back(name);
      return static_cast<int>(ran.size()) + 10;
    });
  }
  EXPECT_EQ(table.Chosen(), nullptr);  // nothing parsed yet
  const char* argv[] = {"test", "second"};
  app.parse(2, argv);
  const Action* chosen = table.Chosen();
  ASSERT_NE(chosen, nullptr);
  // The action only runs when called; the client has not connected (there
  // is no server at this address, and nothing asks it anything).
  client::ClientOptions options;
  options.address = "127.0.0.1:1";
  auto client = client::MinferClient::Create(options);
  ASSERT_TRUE(client.ok()) << client.status();
  EXPECT_EQ((*chosen)(**client), 11);
  EXPECT_EQ(ran, std::vector<std::string>{"second"});
}

}  // namespace
}  // namespace minfer::ctl
