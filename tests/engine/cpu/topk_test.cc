// The CPU TopK (engine/cpu/topk.cc) with allowed-token masks against a
// straightforward reference: the row with -inf written at the disallowed
// ids (and at ids past the vocabulary limit), then a stable sort by logit
// (ties: lower id first) and a double sum for the normalizer. Rows mix
// masked and unmasked ones, base modes 0 / 1 / 2, mask columns in another
// order than the rows, dense, sparse, single-id and empty masks, ties,
// -inf and NaN at allowed and at disallowed ids, and a vocabulary that is
// not a multiple of 32 (the last mask word is partial). Mode values outside
// the contract are INTERNAL before anything is written.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "absl/strings/match.h"
#include "engine/base/thread_pool.h"
#include "engine/cpu/kernels.h"
#include "engine/graph/graph.h"
#include "gtest/gtest.h"

namespace minfer::cpu {
namespace {

using graph::TopKMaskWords;
using graph::TopKModeValue;
constexpr float kInf = std::numeric_limits<float>::infinity();

struct Want {
  bool nan = false;
  float max = -kInf;
  double sum = 0;
  std::vector<std::pair<float, int32_t>> top;  // finite candidates, best first
};

// The reference: mask -> -inf, then sort.
Want Reference(const float* l, int64_t n_vocab, int64_t limit, const uint32_t* mask, int k) {
  std::vector<float> row(l, l + n_vocab);
  for (int64_t i = 0; i < n_vocab; ++i) {
    const bool allowed = mask == nullptr || ((mask[i / 32] >> (i % 32)) & 1u) != 0;
    if (!allowed || i >= limit) row[i] = -kInf;
  }
  Want w;
  for (int64_t i = 0; i < n_vocab; ++i) w.nan = w.nan || std::isnan(row[i]);
  if (w.nan) return w;
  std::vector<int32_t> ids(n_vocab);
  std::iota(ids.begin(), ids.end(), 0);
  std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return row[a] > row[b]; });
  w.max = row[ids[0]];
  if (w.max == -kInf) return w;
  for (int64_t i = 0; i < n_vocab; ++i) w.sum += std::exp(static_cast<double>(row[i]) - w.max);
  for (int j = 0; j < k && row[ids[j]] != -kInf; ++j) w.top.push_back({row[ids[j]], ids[j]});
  return w;
}

void ExpectRow(const float* o, const Want& w, int mode, int k) {
  if (w.nan) {
    EXPECT_TRUE(std::isnan(o[0])) << o[0];
    return;
  }
  EXPECT_EQ(o[0], w.max);
  if (mode == 2 && w.max != -kInf) {
    EXPECT_NEAR(o[1], w.sum, 1e-6 * w.sum);
  }
  const int n = mode == 1 ? 1 : k;
  for (int j = 0; j < n; ++j) {
    int32_t id;
    std::memcpy(&id, o + 3 + 2 * j, 4);
    if (j < static_cast<int>(w.top.size())) {
      EXPECT_EQ(id, w.top[j].second) << "rank " << j;
      EXPECT_EQ(o[2 + 2 * j], w.top[j].first) << "rank " << j;
    } else {
      EXPECT_EQ(id, -1) << "rank " << j << " (fewer allowed finite logits than k)";
      EXPECT_EQ(o[2 + 2 * j], -kInf) << "rank " << j;
    }
  }
}

std::vector<uint32_t> RandomMask(std::mt19937& rng, int64_t n_vocab, double p_allowed) {
  std::vector<uint32_t> m(TopKMaskWords(n_vocab), 0);
  std::bernoulli_distribution b(p_allowed);
  for (int64_t i = 0; i < n_vocab; ++i) {
    if (b(rng)) m[i / 32] |= 1u << (i % 32);
  }
  return m;
}

std::vector<uint32_t> MaskOf(int64_t n_vocab, const std::vector<int32_t>& ids) {
  std::vector<uint32_t> m(TopKMaskWords(n_vocab), 0);
  for (int32_t i : ids) m[i / 32] |= 1u << (i % 32);
  return m;
}

TEST(TopKMaskTest, MatchesMaskThenSortReference) {
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  ThreadPool pool(2);
  const int64_t n_vocab = 5003, limit = 4950, words = TopKMaskWords(n_vocab);
  for (int k : {1, 7, 40}) {
    SCOPED_TRACE(::testing::Message() << "k " << k);
    struct Row {
      int mode;                    // base mode
      std::vector<uint32_t> mask;  // empty: unmasked
    };
    std::vector<Row> rows;
    rows.push_back({2, RandomMask(rng, n_vocab, 0.5)});                // dense
    rows.push_back({2, {}});                                           // unmasked
    rows.push_back({2, RandomMask(rng, n_vocab, 0.004)});              // sparse (~20 ids)
    rows.push_back({1, RandomMask(rng, n_vocab, 0.3)});                // argmax, masked
    rows.push_back({2, MaskOf(n_vocab, {4321})});                      // one allowed id
    rows.push_back({1, MaskOf(n_vocab, {17})});                        // argmax of one id
    rows.push_back({2, std::vector<uint32_t>(words, 0)});              // nothing allowed
    rows.push_back({1, std::vector<uint32_t>(words, 0)});              // nothing allowed
    rows.push_back({2, MaskOf(n_vocab, {3, 5, 4990, 5002})});          // ids past the limit
    rows.push_back({2, RandomMask(rng, n_vocab, 0.9)});                // NaN at a disallowed id
    rows.push_back({2, RandomMask(rng, n_vocab, 0.9)});                // NaN at an allowed id
    rows.push_back({0, RandomMask(rng, n_vocab, 0.5)});                // mode 0: not written
    rows.push_back({2, MaskOf(n_vocab, {10, 11, 12, 13, 14, 15, 16})});  // allowed -inf logits
    const int64_t n_out = static_cast<int64_t>(rows.size());
    std::vector<float> logits(n_vocab * n_out);
    for (auto& x : logits) x = std::round(nd(rng) * 4.0f) / 4.0f;  // many ties
    auto at = [&](int64_t r, int64_t i) -> float& { return logits[r * n_vocab + i]; };
    // NaN where row 9 disallows (ignored), and where row 10 allows (NaN max).
    int64_t off = 0, on = 0;
    while (((rows[9].mask[off / 32] >> (off % 32)) & 1u) != 0) ++off;
    while (((rows[10].mask[on / 32] >> (on % 32)) & 1u) == 0) ++on;
    at(9, off) = NAN;
    at(10, on) = NAN;
    at(8, 4990) = 1000.0f;  // allowed but past the limit: never a candidate
    at(8, 5002) = 1000.0f;
    at(0, 100) = 1000.0f;  // disallowed in row 0 unless its mask allows it
    for (int i = 10; i < 14; ++i) at(12, i) = -kInf;
    // Mask columns in reverse row order; unmasked rows take none.
    std::vector<int32_t> mode(n_out);
    std::vector<uint32_t> masks(words * n_out, 0xDEADBEEFu);  // unused columns: garbage
    int32_t n_masked = 0;
    for (const Row& r : rows) n_masked += !r.mask.empty();
    int32_t next = n_masked;
    for (int64_t r = 0; r < n_out; ++r) {
      int32_t slot = -1;
      if (!rows[r].mask.empty()) {
        slot = --next;
        std::copy(rows[r].mask.begin(), rows[r].mask.end(), masks.begin() + slot * words);
      }
      mode[r] = TopKModeValue(rows[r].mode, slot);
    }
    const int64_t stride = 2 + 2 * k;
    std::vector<float> out(stride * n_out, 123.0f);
    ASSERT_TRUE(TopKRows(pool, logits.data(), n_vocab, n_out, mode.data(), k, limit, out.data(),
                         masks.data())
                    .ok());
    for (int64_t r = 0; r < n_out; ++r) {
      SCOPED_TRACE(::testing::Message() << "row " << r);
      const float* o = out.data() + r * stride;
      if (rows[r].mode == 0) {
        for (int64_t j = 0; j < stride; ++j) ASSERT_EQ(o[j], 123.0f) << "mode 0 row written";
        continue;
      }
      const Want w = Reference(logits.data() + r * n_vocab, n_vocab, limit,
                               rows[r].mask.empty() ? nullptr : rows[r].mask.data(), k);
      ExpectRow(o, w, rows[r].mode, k);
    }
    // The cases say what they claim.
    EXPECT_EQ(out[4 * stride + 0], at(4, 4321));
    EXPECT_FLOAT_EQ(out[4 * stride + 1], 1.0f);  // one allowed id: the normalizer is exp(0)
    EXPECT_EQ(out[6 * stride], -kInf);
    EXPECT_EQ(out[7 * stride], -kInf);
    EXPECT_FALSE(std::isnan(out[9 * stride]));
    EXPECT_TRUE(std::isnan(out[10 * stride]));
    EXPECT_LT(out[8 * stride], 1000.0f);
  }
}

// Unmasked rows give the same bits with or without a mask input, and a
// masked row equals the unmasked call on the row with -inf written at the
// disallowed ids (the mask is the constrained distribution, nothing else).
TEST(TopKMaskTest, MaskEqualsInfAtDisallowedIds) {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  ThreadPool pool(2);
  const int64_t n_vocab = 4097, n_out = 4, words = TopKMaskWords(n_vocab);
  const int k = 64;
  std::vector<float> logits(n_vocab * n_out);
  for (auto& x : logits) x = nd(rng);
  std::vector<uint32_t> masks;
  for (int r = 0; r < n_out; ++r) {
    const auto m = RandomMask(rng, n_vocab, r == 0 ? 0.02 : 0.6);
    masks.insert(masks.end(), m.begin(), m.end());
  }
  std::vector<int32_t> plain_mode(n_out, 2), masked_mode(n_out);
  for (int r = 0; r < n_out; ++r) masked_mode[r] = TopKModeValue(r == 3 ? 1 : 2, r);
  plain_mode[3] = 1;
  const int64_t stride = 2 + 2 * k;
  std::vector<float> plain(stride * n_out), plain_with_input(stride * n_out),
      masked(stride * n_out), inf_written(stride * n_out);
  ASSERT_TRUE(TopKRows(pool, logits.data(), n_vocab, n_out, plain_mode.data(), k, n_vocab,
                       plain.data())
                  .ok());
  ASSERT_TRUE(TopKRows(pool, logits.data(), n_vocab, n_out, plain_mode.data(), k, n_vocab,
                       plain_with_input.data(), masks.data())
                  .ok());
  EXPECT_EQ(0, std::memcmp(plain.data(), plain_with_input.data(), plain.size() * 4));
  ASSERT_TRUE(TopKRows(pool, logits.data(), n_vocab, n_out, masked_mode.data(), k, n_vocab,
                       masked.data(), masks.data())
                  .ok());
  std::vector<float> written = logits;
  for (int64_t r = 0; r < n_out; ++r) {
    for (int64_t i = 0; i < n_vocab; ++i) {
      if (((masks[r * words + i / 32] >> (i % 32)) & 1u) == 0) written[r * n_vocab + i] = -kInf;
    }
  }
  ASSERT_TRUE(TopKRows(pool, written.data(), n_vocab, n_out, plain_mode.data(), k, n_vocab,
                       inf_written.data())
                  .ok());
  // Bit for bit, the normalizer included: both sum the same terms in the
  // same order (exp(-inf) adds an exact zero).
  EXPECT_EQ(0, std::memcmp(masked.data(), inf_written.data(), masked.size() * 4));
  EXPECT_NE(0, std::memcmp(masked.data(), plain.data(), masked.size() * 4));
}

TEST(TopKMaskTest, ModeValuesOutsideTheContractAreInternal) {
  ThreadPool pool(1);
  const int64_t n_vocab = 64, n_out = 2;
  std::vector<float> logits(n_vocab * n_out, 1.0f);
  std::vector<uint32_t> masks(TopKMaskWords(n_vocab) * n_out, ~0u);
  const int64_t stride = 2 + 2 * 4;
  struct Bad {
    std::vector<int32_t> mode;
    bool with_mask;
  };
  const std::vector<Bad> cases = {
      {{1, 3}, true},                                   // base mode 3
      {{1, TopKModeValue(2, 2)}, true},                 // column past n_out
      {{TopKModeValue(1, 0), 2}, false},                // a column, no mask input
      {{1, static_cast<int32_t>(0x80000002u)}, true},   // negative column
  };
  for (const Bad& b : cases) {
    std::vector<float> out(stride * n_out, 123.0f);
    const absl::Status st = TopKRows(pool, logits.data(), n_vocab, n_out, b.mode.data(), 4,
                                     n_vocab, out.data(), b.with_mask ? masks.data() : nullptr);
    EXPECT_TRUE(absl::IsInternal(st)) << st;
    EXPECT_TRUE(absl::StrContains(st.message(), "mode value")) << st;
    EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](float x) { return x == 123.0f; }));
  }
}

}  // namespace
}  // namespace minfer::cpu
