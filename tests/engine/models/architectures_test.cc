// The architecture registry: one row per supported general.architecture,
// each family implementing the interface (its keys, tensors, graph, bound).
#include "engine/models/architectures.h"

#include "gtest/gtest.h"

namespace minfer::models {
namespace {

TEST(ArchitecturesTest, RowsAndTheirSwitches) {
  EXPECT_EQ(SupportedArchitectures(), "qwen2, qwen3, llama, qwen3moe, gpt-oss");
  ASSERT_EQ(Architectures().size(), 5u);
  for (const ArchitectureSpec* a : Architectures()) {
    SCOPED_TRACE(a->name);
    // Every family implements the interface.
    EXPECT_NE(a->resolve_layer, nullptr);
    EXPECT_NE(a->build_graph, nullptr);
    EXPECT_NE(a->activation_bound, nullptr);
  }
  const ArchitectureSpec* qwen3moe = FindArchitecture("qwen3moe");
  ASSERT_NE(qwen3moe, nullptr);
  EXPECT_TRUE(qwen3moe->qk_norm);
  EXPECT_NE(qwen3moe->read_hparams, nullptr);  // the expert keys
  const ArchitectureSpec* gpt_oss = FindArchitecture("gpt-oss");
  ASSERT_NE(gpt_oss, nullptr);
  EXPECT_TRUE(gpt_oss->yarn);
  EXPECT_FALSE(qwen3moe->yarn);
  const ArchitectureSpec* qwen2 = FindArchitecture("qwen2");
  const ArchitectureSpec* qwen3 = FindArchitecture("qwen3");
  const ArchitectureSpec* llama = FindArchitecture("llama");
  ASSERT_TRUE(qwen2 && qwen3 && llama);
  EXPECT_EQ(qwen2->rope_style, graph::RopeStyle::kNeoX);
  EXPECT_EQ(qwen3->rope_style, graph::RopeStyle::kNeoX);
  EXPECT_EQ(llama->rope_style, graph::RopeStyle::kInterleaved);
  EXPECT_FALSE(qwen2->qk_norm);
  EXPECT_TRUE(qwen3->qk_norm);
  EXPECT_FALSE(llama->qk_norm);
  EXPECT_EQ(llama->default_rope_base, 10000.0f);
  EXPECT_EQ(llama->default_rms_eps, 1e-5f);
  EXPECT_EQ(qwen2->default_rope_base, 1e6f);
  EXPECT_EQ(FindArchitecture("gemma2"), nullptr);
  EXPECT_EQ(FindArchitecture(""), nullptr);
  EXPECT_EQ(FindArchitecture("Llama"), nullptr);  // names are exact, as in GGUF keys
}

}  // namespace
}  // namespace minfer::models
