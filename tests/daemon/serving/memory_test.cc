// The admission estimate against what the engine really allocates.
#include "daemon/serving/memory.h"

#include <cstdio>

#include "engine/gguf/gguf.h"
#include "engine/runtime/engine.h"
#include "engine/runtime/model.h"
#include "engine/runtime/session.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/test_models.h"

namespace minfer::daemon {
namespace {

using ::testing::HasSubstr;

std::shared_ptr<runtime::Model> LoadModel(const std::string& shape) {
  auto path = minfer::testing::TestModelPath(shape, "q8_0");
  EXPECT_TRUE(path.ok()) << path.status();
  runtime::ModelOptions mo;
  mo.backend = "cpu";
  auto m = runtime::Model::Load(*path, mo);
  EXPECT_TRUE(m.ok()) << m.status();
  return *m;
}

// The KV estimate is the pool the engine allocates, byte for byte; q8_0 and
// fp8 pools take 34 bytes per 32 values (17/32 of f16's).
TEST(MemoryTest, KvEstimateIsExact) {
  auto model = LoadModel("tiny");
  uint64_t f16_bytes = 0;
  for (graph::DType t :
       {graph::DType::kF32, graph::DType::kF16, graph::DType::kQ8_0, graph::DType::kFp8}) {
    for (int64_t kv_tokens : {int64_t{0}, int64_t{500}}) {
      EstimateParams p;
      p.n_ctx = 300;
      p.parallel = 3;
      p.kv_type = t;
      p.kv_tokens = kv_tokens;
      p.kv_block = 32;
      MemoryEstimate e = EstimateMemory(model->file(), model->hparams(), p);
      runtime::EngineOptions eo;
      eo.max_seqs = 3;
      eo.token_budget = 512;
      eo.n_ctx = 300;
      eo.kv_block = 32;
      eo.kv_blocks = PoolBlocks(model->hparams(), p);
      eo.kv_type = t;
      auto engine = runtime::Engine::Create(model, eo);
      ASSERT_TRUE(engine.ok()) << engine.status();
      EXPECT_EQ(e.kv, static_cast<uint64_t>((*engine)->pool().bytes())) << graph::DTypeName(t);
      if (t == graph::DType::kF16 && kv_tokens == 0) f16_bytes = e.kv;
      if ((t == graph::DType::kQ8_0 || t == graph::DType::kFp8) && kv_tokens == 0) {
        EXPECT_EQ(e.kv * 32, f16_bytes * 17) << graph::DTypeName(t);
      }
      // parallel x n_ctx (3 x 10 blocks of 32) or kv_tokens (16 blocks),
      // and the reserved block.
      EXPECT_EQ((*engine)->pool().n_blocks(), kv_tokens == 0 ? 31 : 17);
    }
  }
  // "auto" counts as f32, the largest; n_ctx is clamped like the engine does.
  EstimateParams p;
  p.n_ctx = 1 << 30;
  MemoryEstimate e = EstimateMemory(model->file(), model->hparams(), p);
  EXPECT_EQ(e.kv, static_cast<uint64_t>(model->hparams().context_length / 16 + 1) * 16 * 2 *
                      model->hparams().n_layer * model->hparams().n_embd_kv() * 4);
}

TEST(MemoryTest, WeightsAreTheFilesTensorBytes) {
  auto model = LoadModel("tiny");
  MemoryEstimate e = EstimateMemory(model->file(), model->hparams(), {});
  uint64_t sum = 0;
  for (const auto& t : model->file().tensors()) sum += t.nbytes;
  EXPECT_EQ(e.weights, sum);
  EXPECT_EQ(e.weights, model->weight_bytes());
}

// A session (a one-sequence batch runner) after a step of T tokens holds no
// more than BatchScratchBound for T's token bucket, one row of logits (the
// graph's rows for all_logits are at most kSessionLogitRows) and its block
// table; and the batched engine stays within the slot's estimate, draft
// rows included.
TEST(MemoryTest, ScratchBoundHoldsForRealGraphs) {
  for (const std::string shape : {"tiny", "tiny-untied"}) {
    auto model = LoadModel(shape);
    const auto& hp = model->hparams();
    for (int64_t t : {1, 7, 64, 300, 512}) {
      runtime::SessionOptions so;
      so.n_ctx = 1024;
      auto s = runtime::Session::Create(model, so);
      ASSERT_TRUE(s.ok());
      std::vector<int32_t> ids(t);
      for (int64_t i = 0; i < t; ++i) ids[i] = static_cast<int32_t>(i % 1000);
      ASSERT_TRUE((*s)->Eval(ids).ok());
      const uint64_t used = static_cast<uint64_t>((*s)->graph_bytes());
      // The runner's token buckets: powers of two to 256, then multiples.
      int64_t bucket = 1;
      while (bucket < t && bucket < 256) bucket <<= 1;
      if (t > 256) bucket = (t + 255) / 256 * 256;
      const uint64_t bound =
          models::BatchScratchBound(hp, bucket, runtime::kSessionLogitRows, 1024 / 16);
      EXPECT_LE(used, bound) << shape << " T=" << t;
      std::printf("%s T=%ld: graph %lu B, bound %lu B (%.2fx)\n", shape.c_str(), t, used, bound,
                  static_cast<double>(bound) / used);
    }
    // The batched engine's arena after its largest graphs (Prepare) and a
    // mixed workload stays within the slot's estimate.
    for (int32_t parallel : {1, 4, 16, -4}) {
      // Negative: that many sequences, speculating (draft rows).
      const bool spec = parallel < 0;
      parallel = std::abs(parallel);
      EstimateParams p;
      p.n_ctx = 2048;
      p.parallel = parallel;
      p.token_budget = 512;
      p.spec_rows = spec ? runtime::SpecRows(parallel) : 0;
      runtime::EngineOptions eo;
      eo.max_seqs = parallel;
      eo.token_budget = 512;
      eo.n_ctx = 2048;
      eo.kv_blocks = PoolBlocks(hp, p);
      if (spec) eo.spec_k = 4;
      auto engine = runtime::Engine::Create(model, eo);
      ASSERT_TRUE(engine.ok()) << engine.status();
      ASSERT_TRUE((*engine)->runner().Prepare().ok());
      for (int i = 0; i < parallel; ++i) {
        runtime::GenerateRequest r;
        r.prompt = std::vector<int32_t>(5 + 97 * i, 9);
        r.max_tokens = 3;
        r.ignore_eos = true;
        r.sampling.temperature = 0;
        ASSERT_TRUE((*engine)->Add(r).ok());
      }
      std::vector<runtime::EngineEvent> ev;
      while ((*engine)->HasWork()) ASSERT_TRUE((*engine)->Step(&ev).ok());
      MemoryEstimate e = EstimateMemory(model->file(), hp, p);
      const uint64_t used = static_cast<uint64_t>((*engine)->runner().activation_bytes());
      EXPECT_LE(used, e.scratch) << shape << " parallel " << parallel;
      std::printf("%s parallel %d: arena %lu B, estimate %lu B (%.2fx)\n", shape.c_str(), parallel,
                  used, e.scratch, static_cast<double>(e.scratch) / used);
    }
  }
}

TEST(MemoryTest, BudgetRefusesWithFiguresAndReleases) {
  MemoryBudget budget(10000);
  MemoryEstimate a{4000, 2000, 1000};
  ASSERT_TRUE(budget.Reserve("a", a).ok());
  EXPECT_EQ(budget.reserved(), 7000u);
  MemoryEstimate b{2000, 1000, 500};
  absl::Status s = budget.Reserve("b", b);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(s.message()), HasSubstr("model 'b' does not fit"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("(2000 B) + KV"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("= 0.0 MiB (3500 B)"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("limit is 0.0 MiB (10000 B)"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("(7000 B) reserved by other models"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("leaving 0.0 MiB (3000 B)"));
  budget.Release("a");
  EXPECT_EQ(budget.reserved(), 0u);
  EXPECT_TRUE(budget.Reserve("b", b).ok());
  // Without a limit: the host's available memory.
  MemoryBudget host(0);
  auto mem = ReadHostMemory();
  ASSERT_TRUE(mem.ok());
  EXPECT_GT(mem->total, 0u);
  EXPECT_LE(mem->available, mem->total);
  MemoryEstimate huge{mem->total * 4, 0, 0};
  absl::Status h = host.Reserve("huge", huge);
  EXPECT_EQ(h.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(h.message()), HasSubstr("available of"));
}

TEST(MemoryTest, DeviceBudgetCountsLoadsInProgressAndHeadroom) {
  DeviceBudget budget;
  const uint64_t mib = 1 << 20;
  const uint64_t free_bytes = 2048 * mib, total = 4096 * mib;
  // 2048 free - 512 headroom = 1536 usable.
  MemoryEstimate a{1000 * mib, 200 * mib, 100 * mib};  // 1300
  ASSERT_TRUE(budget.Reserve("a", 0, "gpu0", a, free_bytes, total).ok());
  EXPECT_EQ(budget.pending(), 1300 * mib);
  // While "a" uploads, the device still reports 2048 free: "b" must not
  // count a's bytes as free.
  MemoryEstimate b{300 * mib, 0, 0};
  absl::Status s = budget.Reserve("b", 0, "gpu0", b, free_bytes, total);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(s.message()), HasSubstr("model 'b' does not fit in the memory of gpu0"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("2048.0 MiB"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("1300.0 MiB"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("reserved by loads in progress"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("leaving 236.0 MiB"));
  // A smaller one fits beside it.
  EXPECT_TRUE(budget.Reserve("c", 0, "gpu0", MemoryEstimate{200 * mib, 0, 0}, free_bytes, total).ok());
  budget.Release("a");
  budget.Release("c");
  EXPECT_EQ(budget.pending(), 0u);
  EXPECT_TRUE(budget.Reserve("b", 0, "gpu0", b, free_bytes, total).ok());
  // Less free than the headroom: nothing fits.
  EXPECT_FALSE(budget.Reserve("d", 0, "gpu0", MemoryEstimate{1, 0, 0}, 100 * mib, total).ok());
}

TEST(MemoryTest, DeviceBudgetKeepsEachDevicesLoadsApart) {
  DeviceBudget budget;
  const uint64_t mib = 1 << 20;
  const uint64_t free_bytes = 2048 * mib, total = 4096 * mib;
  ASSERT_TRUE(budget.Reserve("a", 0, "gpu0", MemoryEstimate{1300 * mib, 0, 0}, free_bytes, total).ok());
  // Device 1's free bytes are its own: a's upload to device 0 takes none.
  EXPECT_TRUE(budget.Reserve("b", 1, "gpu1", MemoryEstimate{1500 * mib, 0, 0}, free_bytes, total).ok());
  EXPECT_EQ(budget.pending(0), 1300 * mib);
  EXPECT_EQ(budget.pending(1), 1500 * mib);
  EXPECT_EQ(budget.pending(), 2800 * mib);
  // 2048 - 1300 - 512 on device 0; 2048 - 1500 - 512 on device 1.
  EXPECT_EQ(budget.Usable(0, free_bytes), 236 * mib);
  EXPECT_EQ(budget.Usable(1, free_bytes), 36 * mib);
  EXPECT_EQ(budget.Usable(2, free_bytes), 1536 * mib);
  EXPECT_EQ(budget.Usable(2, 100 * mib), 0u);
  // A model's new reservation (a retry on another device) replaces its old.
  ASSERT_TRUE(budget.Reserve("a", 2, "gpu2", MemoryEstimate{1000 * mib, 0, 0}, free_bytes, total).ok());
  EXPECT_EQ(budget.pending(0), 0u);
  EXPECT_EQ(budget.pending(2), 1000 * mib);
  budget.Release("a");
  budget.Release("b");
  EXPECT_EQ(budget.pending(), 0u);
}

}  // namespace
}  // namespace minfer::daemon
