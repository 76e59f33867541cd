// BatchItem::mask on the CPU: a masked row's argmax, top-k candidates, max
// and log_norm equal what the host computes from the same sequence's full
// logits (an unmasked runner over the same items: on the CPU a sequence's
// logits do not depend on its batch) with -inf written at the disallowed
// ids; a kFull masked row is that masked copy; a row with one allowed id
// gives that id, a row with none a full row of -inf that the sampler
// refuses with "no token has a finite logit". Prefill and decode-only
// steps, masked rows mixed with unmasked ones, and a step without masks
// after masked ones (no stale mask applies).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "engine/graph/graph.h"
#include "engine/runtime/batch_runner.h"
#include "engine/runtime/model.h"
#include "engine/sampling/sampler.h"
#include "gtest/gtest.h"
#include "tests/support/cpu_model.h"
#include "tests/support/test_models.h"

namespace minfer::runtime {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

std::shared_ptr<Model> LoadModel(const std::string& shape, const std::string& type) {
  return testing::LoadCpuTestModel(shape, type);
}

bool Allowed(const std::vector<uint32_t>& m, int64_t id) { return (m[id / 32] >> (id % 32)) & 1u; }

// What the row should be: the full row with -inf at disallowed ids.
std::vector<float> MaskedRow(const float* full, int64_t n_vocab, const std::vector<uint32_t>& m) {
  std::vector<float> row(full, full + n_vocab);
  for (int64_t i = 0; i < n_vocab; ++i) {
    if (!Allowed(m, i)) row[i] = -kInf;
  }
  return row;
}

// The host reference of a kArgmax / kTop row over ids below `limit`.
void ExpectTopRow(const RowResult& rr, const std::vector<float>& row, int64_t limit, RowMode mode,
                  int k) {
  std::vector<int32_t> ids(limit);
  std::iota(ids.begin(), ids.end(), 0);
  std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return row[a] > row[b]; });
  const float max = row[ids[0]];
  ASSERT_TRUE(std::isfinite(max)) << "the case needs an allowed finite logit";
  EXPECT_EQ(rr.logits, nullptr) << "a masked row with candidates was read in full";
  EXPECT_EQ(rr.max, max);
  const int n = mode == RowMode::kArgmax ? 1 : k;
  int64_t finite = 0;
  for (int64_t i = 0; i < limit; ++i) finite += std::isfinite(row[i]);
  ASSERT_EQ(static_cast<int64_t>(rr.top.size()), std::min<int64_t>(n, finite));
  for (size_t j = 0; j < rr.top.size(); ++j) {
    EXPECT_EQ(rr.top[j].token, ids[j]) << "rank " << j;
    EXPECT_EQ(rr.top[j].logprob, row[ids[j]]) << "rank " << j;
  }
  if (mode == RowMode::kTop) {
    double sum = 0;
    for (int64_t i = 0; i < limit; ++i) sum += std::exp(static_cast<double>(row[i]) - max);
    EXPECT_NEAR(rr.log_norm, std::log(sum), 1e-6);
  } else {
    EXPECT_TRUE(std::isnan(rr.log_norm));
  }
}

struct Case {
  RowMode mode;
  enum Mask { kNone, kDense, kSparse, kOne, kEmpty } mask;
};

TEST(BatchRunnerMaskTest, MaskedRowsEqualHostMaskedFullLogits) {
  auto model = LoadModel("tiny", "q8_0");
  ASSERT_NE(model, nullptr);
  const int64_t V = model->hparams().n_vocab;
  const int64_t limit = std::min<int64_t>(model->tokenizer().vocab_size(), V);
  const int64_t words = graph::TopKMaskWords(V);
  BatchRunnerOptions ro;
  ro.max_tokens = 128;
  ro.max_seqs = 12;
  ro.n_ctx = 256;
  ro.top_k = 40;
  auto plain = BatchRunner::Create(model, ro);
  auto masked = BatchRunner::Create(model, ro);
  ASSERT_TRUE(plain.ok() && masked.ok());

  const std::vector<Case> cases = {
      {RowMode::kArgmax, Case::kDense}, {RowMode::kTop, Case::kDense},
      {RowMode::kTop, Case::kSparse},   {RowMode::kArgmax, Case::kSparse},
      {RowMode::kArgmax, Case::kOne},   {RowMode::kTop, Case::kOne},
      {RowMode::kTop, Case::kEmpty},    {RowMode::kArgmax, Case::kEmpty},
      {RowMode::kFull, Case::kDense},   {RowMode::kFull, Case::kEmpty},
      {RowMode::kTop, Case::kNone},     {RowMode::kArgmax, Case::kNone},
  };
  const int64_t n = static_cast<int64_t>(cases.size());
  std::mt19937 rng(7);
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(limit - 1));
  std::vector<std::vector<int32_t>> toks(n), blocks(n);
  for (int64_t i = 0; i < n; ++i) {
    toks[i].resize(3 + i);
    for (auto& t : toks[i]) t = tok(rng);
  }
  auto make_mask = [&](Case::Mask kind, const float* full) {
    std::vector<uint32_t> m(words, 0);
    if (kind == Case::kDense) {
      std::bernoulli_distribution b(0.5);
      for (int64_t i = 0; i < V; ++i) {
        if (b(rng)) m[i / 32] |= 1u << (i % 32);
      }
    } else if (kind == Case::kSparse) {
      for (int j = 0; j < 12; ++j) {  // 12 draws: fewer allowed ids than top_k
        const int32_t id = tok(rng);
        m[id / 32] |= 1u << (id % 32);
      }
    }
    if (kind == Case::kDense || kind == Case::kSparse) {
      // The row's unmasked best is disallowed, so the mask must matter.
      const int64_t best = std::max_element(full, full + limit) - full;
      m[best / 32] &= ~(1u << (best % 32));
    } else if (kind == Case::kOne) {
      const int32_t id = tok(rng);
      m[id / 32] |= 1u << (id % 32);
    }
    return m;
  };

  // Step 1 prefills every sequence, steps 2 and 3 decode one token each
  // (decode-only graphs), step 4 decodes without any mask.
  for (int step = 0; step < 4; ++step) {
    SCOPED_TRACE(::testing::Message() << "step " << step);
    std::vector<BatchItem> items(n);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t p0 = step == 0 ? 0 : static_cast<int64_t>(toks[i].size()) - 1;
      const int64_t len = static_cast<int64_t>(toks[i].size()) - p0;
      auto& bt = blocks[i];
      const int64_t need = (p0 + len + ro.kv_block - 1) / ro.kv_block;
      while (static_cast<int64_t>(bt.size()) < need) {
        // Both runners' pools hand out the same ids in the same order.
        std::vector<int32_t> a, b;
        ASSERT_TRUE((*plain)->pool().blocks().Allocate(1, &a));
        ASSERT_TRUE((*masked)->pool().blocks().Allocate(1, &b));
        ASSERT_EQ(a, b);
        bt.push_back(a[0]);
      }
      items[i].tokens = absl::MakeConstSpan(toks[i]).subspan(p0, len);
      items[i].pos0 = p0;
      items[i].blocks = bt;
      items[i].mode = RowMode::kFull;
    }
    std::vector<RowResult> full;
    ASSERT_TRUE((*plain)->Run(items, &full).ok());
    std::vector<std::vector<uint32_t>> masks(n);
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_NE(full[i].logits, nullptr);
      items[i].mode = cases[i].mode;
      if (step < 3 && cases[i].mask != Case::kNone) {
        masks[i] = make_mask(cases[i].mask, full[i].logits);
        items[i].mask = masks[i].data();
      }
    }
    // full[i].logits stay valid: the plain runner does not run again
    // before the next step.
    const int64_t masked_before = (*masked)->stats().masked_rows;
    std::vector<RowResult> res;
    ASSERT_TRUE((*masked)->Run(items, &res).ok());
    int64_t expect_masked_rows = 0;
    for (int64_t i = 0; i < n; ++i) {
      SCOPED_TRACE(::testing::Message() << "item " << i);
      const Case& c = cases[i];
      const RowResult& rr = res[i];
      const bool has_mask = items[i].mask != nullptr;
      const std::vector<float> row =
          has_mask ? MaskedRow(full[i].logits, V, masks[i])
                   : std::vector<float>(full[i].logits, full[i].logits + V);
      if (has_mask && c.mode != RowMode::kFull) ++expect_masked_rows;
      if (c.mode == RowMode::kFull) {
        ASSERT_NE(rr.logits, nullptr);
        EXPECT_EQ(0, std::memcmp(rr.logits, row.data(), V * sizeof(float)));
      } else if (has_mask && c.mask == Case::kEmpty) {
        // Nothing allowed: reported as a row without a finite logit.
        EXPECT_EQ(rr.max, -kInf);
        ASSERT_NE(rr.logits, nullptr);
        EXPECT_TRUE(std::all_of(rr.logits, rr.logits + V, [](float x) { return x == -kInf; }));
        SamplingParams sp;
        if (c.mode == RowMode::kArgmax) sp.temperature = 0.0f;
        auto sampler = Sampler::Create(sp, V);
        ASSERT_TRUE(sampler.ok()) << sampler.status();
        auto tok = (*sampler)->Sample(rr.logits, V);
        EXPECT_FALSE(tok.ok());
        EXPECT_TRUE(absl::StrContains(tok.status().message(), "finite")) << tok.status();
      } else {
        ExpectTopRow(rr, row, limit, c.mode, ro.top_k);
        if (has_mask && c.mask == Case::kOne) {
          ASSERT_EQ(rr.top.size(), 1u);
          EXPECT_TRUE(Allowed(masks[i], rr.top[0].token));
          if (c.mode == RowMode::kTop) {
            EXPECT_NEAR(rr.log_norm, 0.0, 1e-7);
          }
        }
        if (has_mask && c.mask != Case::kOne) {
          // The unmasked best was disallowed: the answer moved.
          EXPECT_NE(rr.top[0].token, std::max_element(full[i].logits, full[i].logits + limit) -
                                         full[i].logits);
        }
      }
    }
    EXPECT_EQ((*masked)->stats().masked_rows - masked_before, expect_masked_rows);
    // Next step: each sequence appends its unmasked greedy token.
    for (int64_t i = 0; i < n; ++i) {
      toks[i].push_back(static_cast<int32_t>(
          std::max_element(full[i].logits, full[i].logits + limit) - full[i].logits));
    }
  }
  EXPECT_GT((*masked)->stats().decode_only_steps, 0);
}

// Speculative rows of a constrained sequence (BatchItem::extra_masks): each
// drafted row is reduced under its own mask, and a row read whole (kFull,
// or one whose mask allows nothing) gets its own mask on the host copy —
// against the same rows unmasked, masked on the host. More rows than
// sequences (max_rows).
TEST(BatchRunnerMaskTest, DraftedRowsTakeTheirOwnMasks) {
  auto model = LoadModel("tiny", "q8_0");
  ASSERT_NE(model, nullptr);
  const int64_t V = model->hparams().n_vocab;
  const int64_t limit = std::min<int64_t>(model->tokenizer().vocab_size(), V);
  const int64_t words = graph::TopKMaskWords(V);
  BatchRunnerOptions ro;
  ro.max_tokens = 64;
  ro.max_seqs = 3;
  ro.max_rows = 16;
  ro.n_ctx = 128;
  ro.top_k = 16;
  auto plain = BatchRunner::Create(model, ro);
  auto masked = BatchRunner::Create(model, ro);
  ASSERT_TRUE(plain.ok() && masked.ok());
  EXPECT_EQ((*masked)->options().max_rows, 16);
  const RowMode modes[] = {RowMode::kArgmax, RowMode::kTop, RowMode::kFull};
  constexpr int kDrafts = 4;
  std::mt19937 rng(11);
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(limit - 1));
  std::vector<std::vector<int32_t>> toks(3), blocks(3);
  std::vector<BatchItem> items(3);
  for (int i = 0; i < 3; ++i) {
    toks[i].resize(5 + kDrafts);
    for (auto& t : toks[i]) t = tok(rng);
    ASSERT_TRUE((*plain)->pool().blocks().Allocate(1, &blocks[i]));
    std::vector<int32_t> b;
    ASSERT_TRUE((*masked)->pool().blocks().Allocate(1, &b));
    ASSERT_EQ(b, blocks[i]);
    items[i].tokens = toks[i];
    items[i].blocks = blocks[i];
    items[i].mode = RowMode::kFull;
    items[i].extra_rows = kDrafts;
  }
  std::vector<RowResult> full, full_extra;
  ASSERT_TRUE((*plain)->Run(items, &full, &full_extra).ok());
  ASSERT_EQ(full_extra.size(), 3u * kDrafts);
  // Row r of item i: extra rows 0..kDrafts-1, then the main row.
  auto full_row = [&](int i, int r) {
    return r < kDrafts ? full_extra[i * kDrafts + r].logits : full[i].logits;
  };
  // Masks: [item][row] — half the ids, the row's unmasked best removed;
  // item 1's third row allows nothing.
  std::vector<std::vector<uint32_t>> masks(3);
  for (int i = 0; i < 3; ++i) {
    masks[i].assign(words * (kDrafts + 1), 0);
    for (int r = 0; r <= kDrafts; ++r) {
      uint32_t* m = masks[i].data() + words * r;
      if (i == 1 && r == 2) continue;
      for (int64_t id = 0; id < V; ++id) {
        if (rng() & 1) m[id / 32] |= 1u << (id % 32);
      }
      const float* f = full_row(i, r);
      const int64_t best = std::max_element(f, f + limit) - f;
      m[best / 32] &= ~(1u << (best % 32));
    }
    items[i].mode = modes[i];
    items[i].extra_masks = masks[i].data();
    items[i].mask = masks[i].data() + words * kDrafts;
  }
  std::vector<RowResult> res, res_extra;
  ASSERT_TRUE((*masked)->Run(items, &res, &res_extra).ok());
  for (int i = 0; i < 3; ++i) {
    for (int r = 0; r <= kDrafts; ++r) {
      SCOPED_TRACE(::testing::Message() << "item " << i << " row " << r);
      std::vector<uint32_t> m(masks[i].begin() + words * r, masks[i].begin() + words * (r + 1));
      const std::vector<float> want = MaskedRow(full_row(i, r), V, m);
      const RowResult& rr = r < kDrafts ? res_extra[i * kDrafts + r] : res[i];
      if (modes[i] == RowMode::kFull || (i == 1 && r == 2)) {
        ASSERT_NE(rr.logits, nullptr);
        EXPECT_EQ(0, std::memcmp(rr.logits, want.data(), V * sizeof(float)));
      } else {
        ExpectTopRow(rr, want, limit, modes[i], ro.top_k);
      }
    }
  }
  // An item with a mask but no masks for its drafted rows is a caller bug.
  items[0].extra_masks = nullptr;
  absl::Status st = (*masked)->Run(items, &res, &res_extra);
  EXPECT_EQ(st.code(), absl::StatusCode::kInternal) << st;
}

}  // namespace
}  // namespace minfer::runtime
