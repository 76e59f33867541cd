// gpt-oss's Harmony replies (engine/chat/harmony.h): reasoning on the
// analysis channel, content on final (and commentary preambles), calls to
// functions.NAME with their JSON arguments; replies without framing are
// content; and the stream's collected output is the whole parse in every
// split of the text into deltas.
#include "engine/chat/harmony.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/engine/chat/splits.h"

namespace minfer::chat {
namespace {

HarmonyOutput Collect(const Split& pieces, bool calls) {
  HarmonyStream s(calls);
  std::vector<HarmonyEvent> events;
  for (const std::string& p : pieces) {
    for (HarmonyEvent& e : s.Feed(p)) events.push_back(std::move(e));
  }
  for (HarmonyEvent& e : s.Finish()) events.push_back(std::move(e));
  HarmonyOutput out;
  for (const HarmonyEvent& e : events) {
    switch (e.type) {
      case HarmonyEvent::Type::kReasoning: out.reasoning += e.text; break;
      case HarmonyEvent::Type::kContent: out.content += e.text; break;
      case HarmonyEvent::Type::kCallStart: out.calls.push_back({e.id, e.name, ""}); break;
      case HarmonyEvent::Type::kArguments:
        EXPECT_LT(e.index, static_cast<int>(out.calls.size()));
        if (e.index < static_cast<int>(out.calls.size())) out.calls[e.index].arguments += e.text;
        break;
    }
  }
  return out;
}

struct Case {
  std::string text;
  bool calls;
  HarmonyOutput want;
};

std::vector<Case> Cases() {
  return {
      // Reasoning, then the answer.
      {"<|channel|>analysis<|message|>Let me add.<|end|><|start|>assistant<|channel|>final"
       "<|message|>It is 4.",
       true,
       {"Let me add.", "It is 4.", {}}},
      // The answer alone.
      {"<|channel|>final<|message|>Hi there", true, {"", "Hi there", {}}},
      // No framing at all: content, verbatim (including marker-like text).
      {"Plain <|end|> text", true, {"", "Plain <|end|> text", {}}},
      // A call after reasoning, the recipient after the channel, constrained.
      {"<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>"
       "commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Paris\"}",
       true,
       {"Need weather.", "", {{"call_0", "get_weather", "{\"city\":\"Paris\"}"}}}},
      // The recipient in the role part of the header; two calls in a reply.
      {"<|start|>assistant to=functions.now<|channel|>commentary json<|message|>{}<|call|>"
       "<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>"
       "{\"city\":\"Rome\"}",
       true,
       {"", "", {{"call_0", "now", "{}"}, {"call_1", "get_weather", "{\"city\":\"Rome\"}"}}}},
      // Calls not parsed (the request had no tools): their bodies are content.
      {"<|channel|>commentary to=functions.now<|message|>{}", false, {"", "{}", {}}},
      // A commentary preamble without a recipient is content.
      {"<|channel|>commentary<|message|>Checking.<|end|><|start|>assistant<|channel|>final"
       "<|message|>Done.",
       true,
       {"", "Checking.Done.", {}}},
      // Marker-like bytes inside a body that are no marker stay text.
      {"<|channel|>final<|message|>a <|en b <|endx c", true, {"", "a <|en b <|endx c", {}}},
      // Cut off inside the reasoning (the token limit): all reasoning so far.
      {"<|channel|>analysis<|message|>Still thinking", true, {"Still thinking", "", {}}},
      // Cut off inside a header: nothing of it.
      {"<|channel|>analysis<|message|>R<|end|><|start|>assist", true, {"R", "", {}}},
  };
}

TEST(HarmonyTest, ChannelsAndCallsInEverySplit) {
  for (const Case& c : Cases()) {
    SCOPED_TRACE(c.text);
    EXPECT_EQ(ParseHarmony(c.text, c.calls), c.want);
    for (const Split& s : Splits(c.text, 50, 120)) {
      ASSERT_EQ(Collect(s, c.calls), c.want) << "split into " << s.size() << " pieces";
    }
  }
}

TEST(HarmonyTest, AHeaderWithoutMessageTurnsIntoContent) {
  const std::string header = "<|channel|>" + std::string(kMaxHeaderBytes + 10, 'x');
  const HarmonyOutput out = ParseHarmony(header + " and more", true);
  EXPECT_EQ(out.content, header + " and more");
  EXPECT_TRUE(out.reasoning.empty());
}

TEST(HarmonyTest, CallIdsComeFromTheCaller) {
  const HarmonyOutput out =
      ParseHarmony("<|channel|>commentary to=functions.now<|message|>{}", true,
                   [](int i) { return "id-" + std::to_string(i); });
  ASSERT_EQ(out.calls.size(), 1u);
  EXPECT_EQ(out.calls[0].id, "id-0");
}

}  // namespace
}  // namespace minfer::chat
