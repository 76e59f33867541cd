#include "engine/chat/reasoning.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/engine/chat/splits.h"

namespace minfer::chat {
namespace {

using Type = ReasoningEvent::Type;

ReasoningOptions Open() {
  ReasoningOptions o;
  o.starts_open = true;
  return o;
}

ReasoningOptions Disabled() {
  ReasoningOptions o;
  o.enabled = false;
  return o;
}

// SplitReasoning(text) is `want`, and so is every split of `text`, streamed.
void ExpectSplit(absl::string_view text, const ReasoningOptions& options, const ReasoningSplit& want) {
  ASSERT_EQ(SplitReasoning(text, options), want) << text;
  for (const Split& split : Splits(text)) {
    ReasoningStream stream(options);
    std::vector<ReasoningEvent> events;
    for (const std::string& delta : split) {
      for (ReasoningEvent& e : stream.Feed(delta)) events.push_back(std::move(e));
    }
    for (ReasoningEvent& e : stream.Finish()) events.push_back(std::move(e));
    for (const ReasoningEvent& e : events) ASSERT_FALSE(e.text.empty());
    ASSERT_EQ(CollectReasoningEvents(events), want)
        << "text: " << text << "\nsplit into " << split.size() << " deltas, first \""
        << (split.empty() ? "" : split[0]) << "\"";
  }
}

TEST(ReasoningTest, Qwen3ThinkBlock) {
  ExpectSplit("<think>\nThe user wants 2+2. That is 4.\n</think>\n\nIt is 4.", {},
              {"The user wants 2+2. That is 4.", "It is 4."});
}

TEST(ReasoningTest, AnswerKeepsItsInnerAndTrailingText) {
  ExpectSplit("\n<think>a\n\nb </think>  x\n\ny\n", {}, {"a\n\nb", "x\n\ny\n"});
}

TEST(ReasoningTest, NoThinkBlockIsContentVerbatim) {
  for (const char* text : {"It is 4.", "  It is 4.\n", "", "\n\n", "<thinking>no</thinking>",
                           "<thin", "4 <think>late</think> tags are content"}) {
    ExpectSplit(text, {}, {"", text});
  }
}

TEST(ReasoningTest, EmptyThinkBlock) {
  ExpectSplit("<think>\n\n</think>\n\nHello.", {}, {"", "Hello."});
}

TEST(ReasoningTest, EndedWhileThinking) {
  ExpectSplit("<think>\nStill thinking about </th", {}, {"Still thinking about </th", ""});
  ExpectSplit("<think>\nStill thinking\n\n", {}, {"Still thinking", ""});
  ExpectSplit("<think>", {}, {"", ""});
}

TEST(ReasoningTest, StartsOpen) {
  ExpectSplit("The user wants 2+2.\n</think>\n\nIt is 4.", Open(), {"The user wants 2+2.", "It is 4."});
  // A model that writes the start tag anyway.
  ExpectSplit("<think>\nThe user wants 2+2.\n</think>\n\nIt is 4.", Open(),
              {"The user wants 2+2.", "It is 4."});
  // Never closed: all reasoning.
  ExpectSplit("\nhmm <think> hmm", Open(), {"hmm <think> hmm", ""});
  ExpectSplit("</think>Answer", Open(), {"", "Answer"});
  ExpectSplit("", Open(), {"", ""});
}

TEST(ReasoningTest, DisabledIsAllContent) {
  for (const char* text : {"<think>\nx\n</think>\n\ny", "y</think>", " a "}) {
    ExpectSplit(text, Disabled(), {"", text});
  }
}

TEST(ReasoningTest, OtherTags) {
  ReasoningOptions o;
  o.start_tag = "<seed:think>";
  o.end_tag = "</seed:think>";
  ExpectSplit("<seed:think>plan</seed:think>done <think>", o, {"plan", "done <think>"});
}

TEST(ReasoningTest, StreamsAndHoldsTagPrefixes) {
  ReasoningStream s({});
  EXPECT_EQ(s.Feed("\n<thi"), std::vector<ReasoningEvent>{});
  EXPECT_EQ(s.Feed("nk>\nStep one"), (std::vector<ReasoningEvent>{{Type::kReasoning, "Step one"}}));
  // Trailing whitespace and a possible end tag are held.
  EXPECT_EQ(s.Feed(".\n</th"), (std::vector<ReasoningEvent>{{Type::kReasoning, "."}}));
  EXPECT_EQ(s.Feed("ink>\n\n"), std::vector<ReasoningEvent>{});
  EXPECT_EQ(s.Feed("Four"), (std::vector<ReasoningEvent>{{Type::kContent, "Four"}}));
  EXPECT_EQ(s.Feed(" \n"), (std::vector<ReasoningEvent>{{Type::kContent, " \n"}}));
  EXPECT_EQ(s.Finish(), std::vector<ReasoningEvent>{});
  EXPECT_EQ(s.Feed("late"), std::vector<ReasoningEvent>{});
}

TEST(ReasoningTest, LongerReplyRandomSplits) {
  const std::string thought =
      "Okay, the user asks for the capital of France. <b>Paris</b> is the capital; "
      "I should not confuse </thin k> with a tag.\n\n  Also 3 < 4.";
  const std::string answer = "The capital of France is Paris.\n\n<think>quoted</think> stays.";
  ExpectSplit(absl::StrCat("<think>\n", thought, "\n</think>\n\n", answer), {}, {thought, answer});
  ExpectSplit(absl::StrCat(thought, "\n</think>\n\n", answer), Open(), {thought, answer});
}

}  // namespace
}  // namespace minfer::chat
