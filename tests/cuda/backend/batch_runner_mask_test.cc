// BatchItem::mask through the CUDA backend: the batch runner's masked rows
// (the mask uploaded into the graph's mask input, applied in the device's
// TopK) against the CPU runner's full rows masked on the host, over a
// prefill step and decode steps whose bucket graph is recorded and then
// replayed while every step draws new masks (a replayed graph must read
// the step's masks, not the recorded ones), every other step with its masks
// filled late (while the forward runs: the forward and the sampling are then
// two recorded ranges with the masks' copy between them). The GPU's logits differ from
// the CPU's by float rounding, so the checks allow `tol` on logits; ids
// are checked exactly wherever the CPU's margin exceeds it. The kernel
// itself is compared bit for bit with the CPU's in
// tests/cuda/kernels/topk_test. Tag `gpu`: skipped when no device answers.
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "cuda/backend/cuda_backend.h"
#include "cuda/testing/gpu_test_util.h"
#include "engine/graph/graph.h"
#include "engine/runtime/batch_runner.h"
#include "engine/runtime/model.h"
#include "gtest/gtest.h"
#include "tests/support/test_models.h"

namespace minfer::runtime {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

std::shared_ptr<Model> Load(const std::string& shape, const std::string& type,
                            const std::string& backend) {
  auto path = minfer::testing::TestModelPath(shape, type);
  EXPECT_TRUE(path.ok()) << path.status();
  if (!path.ok()) return nullptr;
  auto m = Model::Load(*path, {.backend = backend});
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? *m : nullptr;
}

bool Allowed(const std::vector<uint32_t>& m, int64_t id) { return (m[id / 32] >> (id % 32)) & 1u; }

enum class MaskKind { kNone, kDense, kSparse, kOne, kEmpty };
struct Case {
  RowMode mode;
  MaskKind mask;
};

TEST(BatchRunnerMaskGpuTest, MaskedRowsMatchCpuRowsMaskedOnTheHost) {
  MINFER_REQUIRE_GPU();
  auto cpu = Load("tiny-untied", "q8_0", "cpu");
  auto gpu = Load("tiny-untied", "q8_0", "cuda");
  ASSERT_TRUE(cpu && gpu);
  BatchRunnerOptions ro;
  ro.max_tokens = 64;
  ro.max_seqs = 10;
  ro.n_ctx = 256;
  ro.top_k = 16;
  auto rg = BatchRunner::Create(gpu, ro);
  auto rc = BatchRunner::Create(cpu, ro);
  ASSERT_TRUE(rg.ok() && rc.ok());
  const int64_t V = gpu->hparams().n_vocab;
  const int64_t limit = std::min<int64_t>(gpu->tokenizer().vocab_size(), V);
  const int64_t words = graph::TopKMaskWords(V);
  const std::vector<Case> cases = {
      {RowMode::kArgmax, MaskKind::kDense}, {RowMode::kTop, MaskKind::kDense},
      {RowMode::kTop, MaskKind::kSparse},   {RowMode::kArgmax, MaskKind::kOne},
      {RowMode::kTop, MaskKind::kOne},      {RowMode::kTop, MaskKind::kEmpty},
      {RowMode::kFull, MaskKind::kDense},   {RowMode::kTop, MaskKind::kNone},
      {RowMode::kArgmax, MaskKind::kNone},  {RowMode::kArgmax, MaskKind::kEmpty},
  };
  const int n = static_cast<int>(cases.size());
  std::mt19937 rng(3);
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(limit - 1));
  std::vector<std::vector<int32_t>> toks(n), blocks(n);
  for (int i = 0; i < n; ++i) {
    toks[i] = {tok(rng), tok(rng), tok(rng), tok(rng)};
    ASSERT_TRUE((*rg)->pool().blocks().Allocate(4, &blocks[i]));  // 64 rows each
  }
  auto* cb = dynamic_cast<cuda::CudaBackend*>(gpu->kv_backend());
  ASSERT_NE(cb, nullptr);
  int64_t checked = 0;
  // One prefill step, then 12 decode steps of the same 10-row bucket: its
  // graph is recorded on the third run and replayed after.
  for (int step = 0; step < 13; ++step) {
    SCOPED_TRACE(::testing::Message() << "step " << step);
    std::vector<BatchItem> items(n);
    for (int i = 0; i < n; ++i) {
      const int64_t len = step == 0 ? 4 : 1;
      items[i].tokens = absl::MakeConstSpan(toks[i]).subspan(toks[i].size() - len, len);
      items[i].pos0 = static_cast<int64_t>(toks[i].size()) - len;
      items[i].blocks = blocks[i];
      items[i].mode = RowMode::kFull;
    }
    std::vector<RowResult> c, g;
    ASSERT_TRUE((*rc)->Run(items, &c).ok());
    // New masks every step; on odd steps filled late, while the forward
    // runs (BatchRunner::Run's fill_masks): the buffers exist before Run,
    // their words only once the callback runs.
    const bool late = step % 2 == 1;
    std::vector<std::vector<uint32_t>> masks(n);
    for (int i = 0; i < n; ++i) {
      items[i].mode = cases[i].mode;
      masks[i].assign(words, 0);
      if (cases[i].mask != MaskKind::kNone) items[i].mask = masks[i].data();
    }
    auto fill = [&](int i) {
      std::vector<uint32_t>& m = masks[i];
      switch (cases[i].mask) {
        case MaskKind::kNone:
          return;
        case MaskKind::kDense:
          for (int64_t id = 0; id < V; ++id) {
            if (rng() % 2) m[id / 32] |= 1u << (id % 32);
          }
          break;
        case MaskKind::kSparse:
          for (int j = 0; j < 8; ++j) {
            const int32_t id = tok(rng);
            m[id / 32] |= 1u << (id % 32);
          }
          break;
        case MaskKind::kOne: {
          const int32_t id = tok(rng);
          m[id / 32] |= 1u << (id % 32);
          break;
        }
        case MaskKind::kEmpty:
          break;
      }
    };
    int fills = 0;
    if (late) {
      const std::function<absl::Status()> fill_all = [&]() -> absl::Status {
        ++fills;
        for (int i = 0; i < n; ++i) fill(i);
        return absl::OkStatus();
      };
      ASSERT_TRUE((*rg)->Run(items, &g, nullptr, fill_all).ok());
      EXPECT_EQ(fills, 1);
    } else {
      for (int i = 0; i < n; ++i) fill(i);
      ASSERT_TRUE((*rg)->Run(items, &g).ok());
    }
    for (int i = 0; i < n; ++i) {
      SCOPED_TRACE(::testing::Message() << "item " << i);
      const Case& cs = cases[i];
      const bool masked = items[i].mask != nullptr;
      // The CPU's row as the GPU should see it.
      std::vector<float> ref(c[i].logits, c[i].logits + V);
      float absmax = 0;
      for (int64_t id = 0; id < V; ++id) {
        absmax = std::max(absmax, std::fabs(ref[id]));
        if (masked && !Allowed(masks[i], id)) ref[id] = -kInf;
      }
      const float tol = 2e-3f * std::max(1.0f, absmax);
      const RowResult& r = g[i];
      if (cs.mode == RowMode::kFull) {
        ASSERT_NE(r.logits, nullptr);
        for (int64_t id = 0; id < V; ++id) {
          if (ref[id] == -kInf) {
            ASSERT_EQ(r.logits[id], -kInf) << "id " << id << " is not allowed";
          } else {
            ASSERT_NEAR(r.logits[id], ref[id], tol) << "id " << id;
          }
        }
        ++checked;
        continue;
      }
      if (cs.mask == MaskKind::kEmpty) {
        EXPECT_EQ(r.max, -kInf);
        ASSERT_NE(r.logits, nullptr);
        EXPECT_TRUE(std::all_of(r.logits, r.logits + V, [](float x) { return x == -kInf; }));
        ++checked;
        continue;
      }
      EXPECT_EQ(r.logits, nullptr);
      std::vector<int32_t> ids(limit);
      std::iota(ids.begin(), ids.end(), 0);
      std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return ref[a] > ref[b]; });
      int64_t finite = 0;
      for (int64_t id = 0; id < limit; ++id) finite += ref[id] != -kInf;
      const int64_t want_n = std::min<int64_t>(cs.mode == RowMode::kArgmax ? 1 : ro.top_k, finite);
      ASSERT_EQ(static_cast<int64_t>(r.top.size()), want_n);
      EXPECT_NEAR(r.max, ref[ids[0]], tol);
      for (size_t j = 0; j < r.top.size(); ++j) {
        const int32_t id = r.top[j].token;
        ASSERT_TRUE(id >= 0 && id < limit && ref[id] != -kInf) << "rank " << j << " id " << id;
        EXPECT_NEAR(r.top[j].logprob, ref[id], tol) << "rank " << j;
        // Rank j holds a logit within tol of the CPU's j-th.
        EXPECT_NEAR(ref[id], ref[ids[j]], 2 * tol) << "rank " << j;
        if (j > 0) {
          EXPECT_LE(r.top[j].logprob, r.top[j - 1].logprob);
        }
      }
      if (cs.mask == MaskKind::kOne) {
        EXPECT_TRUE(Allowed(masks[i], r.top[0].token));
      }
      if (cs.mode == RowMode::kTop) {
        double sum = 0;
        for (int64_t id = 0; id < limit; ++id) sum += std::exp(static_cast<double>(ref[id]) - ref[ids[0]]);
        EXPECT_NEAR(r.log_norm, std::log(sum), 1e-2);
        if (cs.mask == MaskKind::kOne) {
          EXPECT_EQ(r.log_norm, 0.0);
        }
      }
      ++checked;
    }
    // Both runners see the same next tokens: the CPU's unmasked argmax.
    for (int i = 0; i < n; ++i) {
      toks[i].push_back(static_cast<int32_t>(
          std::max_element(c[i].logits, c[i].logits + limit) - c[i].logits));
    }
  }
  EXPECT_EQ(checked, 13 * n);
  EXPECT_EQ((*rg)->stats().masked_rows, 13 * 7);  // kArgmax / kTop rows with a mask
  EXPECT_EQ((*rg)->stats().late_mask_steps, 6);
  // Early steps record the whole graph; late ones record the forward and
  // the sampling as two ranges (the masks are copied between them): three
  // recordings, each replayed from its fourth run on.
  EXPECT_GE(cb->stats().captures, 3);
  EXPECT_GE(cb->stats().replays, 3 + 2 * 3) << "masked steps must replay their recorded graphs";
}

}  // namespace
}  // namespace minfer::runtime
