#include "engine/tools/bench_ops.h"

#include "engine/runtime/model.h"
#include "gtest/gtest.h"
#include "tests/support/test_models.h"

namespace minfer::tools {
namespace {

// Against a count written from the Qwen2 layer shapes alone.
TEST(BenchOpsTest, PrefillOpsFromTheShapes) {
  for (const char* shape : {"tiny", "tiny-untied"}) {
    SCOPED_TRACE(shape);
    auto path = testing::TestModelPath(shape, "q8_0");
    ASSERT_TRUE(path.ok()) << path.status();
    auto model = runtime::Model::Load(*path, {.backend = "cpu"});
    ASSERT_TRUE(model.ok()) << model.status();
    const models::DecoderHparams& hp = (*model)->arch().hparams();
    const double e = hp.n_embd, kv = hp.n_embd_kv(), ff = hp.n_ff, q = hp.n_head * hp.head_dim;
    // q, k, v, o, gate, up, down per layer; the head is [n_vocab, n_embd].
    const double layer = q * e + 2 * kv * e + e * q + 3 * ff * e;
    const double head = static_cast<double>(hp.n_vocab) * e;
    const int64_t n = 10, d = 5;
    // Token t attends d + t + 1 rows: 5*10 + (1 + ... + 10) = 105.
    const double expect = 2 * layer * hp.n_layer * n + 2 * head + 4.0 * hp.n_layer * q * 105;
    EXPECT_DOUBLE_EQ(PrefillOps((*model)->arch(), n, d), expect);
    // Without depth, one token: its matmuls, the head, one attended row.
    EXPECT_DOUBLE_EQ(PrefillOps((*model)->arch(), 1, 0),
                     2 * layer * hp.n_layer + 2 * head + 4.0 * hp.n_layer * q);
  }
}

}  // namespace
}  // namespace minfer::tools
