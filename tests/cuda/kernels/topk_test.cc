// GPU TopK with allowed-token masks (cuda/kernels/sample.h) against the CPU
// backend's TopKRows (engine/cpu, itself tested against mask-then-sort):
// Qwen2's vocabulary (151,936 logits, limit 151,665), several rows mixing
// unmasked and masked ones with base modes 0 / 1 / 2, masks dense, sparse,
// nearly full, of one id and of none, NaN and +-0 at allowed and disallowed
// ids, mask columns in another order than the rows and unused columns full
// of ones (they must not be read). Equal bit for bit but for the normalizer
// (float vs double sums: 1e-5 relative). A mode value naming a column past
// the mask sets the device error flag and writes nothing. Fresh random
// inputs each run (MINFER_TEST_SEED repeats one).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "cuda/kernels/sample.h"
#include "cuda/kernels/types.h"
#include "cuda/testing/gpu_test_util.h"
#include "engine/base/thread_pool.h"
#include "engine/cpu/kernels.h"
#include "engine/graph/graph.h"
#include "gtest/gtest.h"

namespace minfer::cuda {
namespace {

using ::minfer::cuda::testing::DeviceBuffer;
using ::minfer::cuda::testing::TestSeed;
using graph::TopKMaskWords;
using graph::TopKModeValue;

std::vector<uint32_t> RandomMask(std::mt19937_64& rng, int64_t n_vocab, double p) {
  std::vector<uint32_t> m(TopKMaskWords(n_vocab), 0);
  std::bernoulli_distribution b(p);
  for (int64_t i = 0; i < n_vocab; ++i) {
    if (b(rng)) m[i / 32] |= 1u << (i % 32);
  }
  return m;
}

bool Allowed(const std::vector<uint32_t>& m, int64_t i) { return (m[i / 32] >> (i % 32)) & 1u; }

TEST(TopKMaskGpuTest, EqualsCpuTopKRowsWithMasks) {
  MINFER_REQUIRE_GPU();
  std::mt19937_64 rng(TestSeed());
  std::normal_distribution<float> nd(0.0f, 3.0f);
  const int64_t n_vocab = 151936, limit = 151665, words = TopKMaskWords(n_vocab);
  ThreadPool pool(2);
  for (int k : {1, 40, 64, 256}) {
    SCOPED_TRACE(::testing::Message() << "k " << k);
    struct Row {
      int mode;
      std::vector<uint32_t> mask;  // empty: unmasked
    };
    std::vector<Row> rows = {
        {2, RandomMask(rng, n_vocab, 0.5)},                   // 0 dense
        {2, {}},                                              // 1 unmasked
        {2, RandomMask(rng, n_vocab, 0.0002)},                // 2 sparse (~30 ids)
        {1, RandomMask(rng, n_vocab, 0.3)},                   // 3 argmax, masked
        {1, {}},                                              // 4 argmax, unmasked
        {2, RandomMask(rng, n_vocab, 0.999)},                 // 5 nearly everything
        {2, std::vector<uint32_t>(words, 0)},                 // 6 nothing allowed
        {1, std::vector<uint32_t>(words, 0)},                 // 7 nothing allowed
        {2, RandomMask(rng, n_vocab, 0.5)},                   // 8 NaN at a disallowed id
        {2, RandomMask(rng, n_vocab, 0.5)},                   // 9 NaN at an allowed id
        {2, RandomMask(rng, n_vocab, 0.5)},                   // 10 ties (rounded logits)
        {0, RandomMask(rng, n_vocab, 0.5)},                   // 11 mode 0
        {2, std::vector<uint32_t>(words, 0)},                 // 12 one id, past the limit too
        {1, std::vector<uint32_t>(words, 0)},                 // 13 one id
        {2, RandomMask(rng, n_vocab, 0.01)},                  // 14 +0 / -0 allowed, rest far below
    };
    rows[12].mask[4321 / 32] |= 1u << (4321 % 32);
    rows[12].mask[151900 / 32] |= 1u << (151900 % 32);
    rows[13].mask[151664 / 32] |= 1u << (151664 % 32);  // the last id below the limit
    rows[14].mask[0] |= (1u << 3) | (1u << 5);
    const int64_t n_out = static_cast<int64_t>(rows.size());
    std::vector<float> l(n_vocab * n_out);
    for (auto& x : l) x = nd(rng);
    auto at = [&](int64_t r, int64_t i) -> float& { return l[r * n_vocab + i]; };
    int64_t off = 0, on = 0;
    while (Allowed(rows[8].mask, off)) ++off;
    while (!Allowed(rows[9].mask, on)) ++on;
    at(8, off) = NAN;
    at(9, on) = NAN;
    for (int64_t i = 0; i < n_vocab; ++i) at(10, i) = std::round(at(10, i));
    at(12, 151900) = 1e6f;  // allowed, past the limit: never a candidate
    for (int64_t i = 0; i < n_vocab; ++i) at(14, i) = -std::fabs(at(14, i)) - 100.0f;
    at(14, 3) = 0.0f;
    at(14, 5) = -0.0f;
    // Columns: masked rows in reverse order; the rest stay all ones.
    std::vector<uint32_t> masks(words * n_out, ~0u);
    std::vector<int32_t> mode(n_out);
    int32_t next = 0;
    for (const Row& r : rows) next += !r.mask.empty();
    for (int64_t r = 0; r < n_out; ++r) {
      int32_t slot = -1;
      if (!rows[r].mask.empty()) {
        slot = --next;
        std::copy(rows[r].mask.begin(), rows[r].mask.end(), masks.begin() + slot * words);
      }
      mode[r] = TopKModeValue(rows[r].mode, slot);
    }
    const int64_t stride = 2 + 2 * k;
    DeviceBuffer<float> dl(l), dout(stride * n_out);
    DeviceBuffer<int32_t> dm(mode), derr(std::vector<int32_t>{0});
    DeviceBuffer<uint32_t> dmask(masks);
    dout.Poison();
    ASSERT_CUDA(LaunchTopK(dl.get(), n_vocab, n_out, dm.get(), dmask.get(), k, limit, dout.get(),
                           derr.get(), nullptr));
    SYNC();
    EXPECT_EQ(derr.ToHost()[0], kDeviceOk);
    const auto got = dout.ToHost();
    std::vector<float> want(stride * n_out, 0.0f);
    ASSERT_TRUE(cpu::TopKRows(pool, l.data(), n_vocab, n_out, mode.data(), k, limit, want.data(),
                              masks.data())
                    .ok());
    for (int64_t r = 0; r < n_out; ++r) {
      SCOPED_TRACE(::testing::Message() << "row " << r);
      const float* g = got.data() + r * stride;
      const float* w = want.data() + r * stride;
      if (rows[r].mode == 0) {
        uint32_t bits;
        std::memcpy(&bits, g, 4);
        EXPECT_EQ(bits, 0xFFFFFFFFu) << "a mode 0 row was written";
        continue;
      }
      if (std::isnan(w[0])) {
        EXPECT_TRUE(std::isnan(g[0]));
        continue;
      }
      EXPECT_EQ(g[0], w[0]);
      if (rows[r].mode == 2 && std::isfinite(w[0])) {
        EXPECT_NEAR(g[1], w[1], 1e-5 * std::fabs(w[1]) + 1e-30);
      }
      const int n = rows[r].mode == 1 ? 1 : k;
      for (int j = 0; j < n; ++j) {
        ASSERT_EQ(0, std::memcmp(g + 2 + 2 * j, w + 2 + 2 * j, 8))
            << "rank " << j << ": gpu (" << g[2 + 2 * j] << ", " << g[3 + 2 * j] << ") cpu ("
            << w[2 + 2 * j] << ")";
      }
    }
    // The cases are what they claim (on the CPU's answer, which equals).
    EXPECT_TRUE(std::isnan(want[9 * stride]));
    EXPECT_FALSE(std::isnan(want[8 * stride]));
    EXPECT_EQ(want[6 * stride], -INFINITY);
    EXPECT_EQ(want[7 * stride], -INFINITY);
    EXPECT_EQ(want[12 * stride], at(12, 4321));
    EXPECT_EQ(want[13 * stride], at(13, 151664));
  }
}

// Many rows, masks redrawn per run, against the CPU (the shape a decode
// step of constrained and free sequences has).
TEST(TopKMaskGpuTest, RandomMixedRowsEqualCpu) {
  MINFER_REQUIRE_GPU();
  std::mt19937_64 rng(TestSeed() + 1);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  std::uniform_real_distribution<double> density(0.0, 1.0);
  const int64_t n_vocab = 151936, limit = 151665, words = TopKMaskWords(n_vocab), n_out = 32;
  const int k = 64;
  ThreadPool pool(2);
  for (int run = 0; run < 4; ++run) {
    SCOPED_TRACE(::testing::Message() << "run " << run);
    std::vector<float> l(n_vocab * n_out);
    for (auto& x : l) x = nd(rng);
    std::vector<uint32_t> masks;
    std::vector<int32_t> mode(n_out);
    int32_t slots = 0;
    for (int64_t r = 0; r < n_out; ++r) {
      const int base = r % 5 == 0 ? 1 : 2;
      if (rng() % 3 == 0) {
        mode[r] = TopKModeValue(base);
        continue;
      }
      // Densities from a few ids to nearly all (log-uniform).
      const double p = std::pow(10.0, -4.5 * density(rng));
      const auto m = RandomMask(rng, n_vocab, p);
      masks.insert(masks.end(), m.begin(), m.end());
      mode[r] = TopKModeValue(base, slots++);
    }
    masks.resize(words * n_out, ~0u);
    const int64_t stride = 2 + 2 * k;
    DeviceBuffer<float> dl(l), dout(stride * n_out);
    DeviceBuffer<int32_t> dm(mode), derr(std::vector<int32_t>{0});
    DeviceBuffer<uint32_t> dmask(masks);
    ASSERT_CUDA(LaunchTopK(dl.get(), n_vocab, n_out, dm.get(), dmask.get(), k, limit, dout.get(),
                           derr.get(), nullptr));
    SYNC();
    EXPECT_EQ(derr.ToHost()[0], kDeviceOk);
    const auto got = dout.ToHost();
    std::vector<float> want(stride * n_out);
    ASSERT_TRUE(cpu::TopKRows(pool, l.data(), n_vocab, n_out, mode.data(), k, limit, want.data(),
                              masks.data())
                    .ok());
    for (int64_t r = 0; r < n_out; ++r) {
      SCOPED_TRACE(::testing::Message() << "row " << r << " mode " << mode[r]);
      const float* g = got.data() + r * stride;
      const float* w = want.data() + r * stride;
      EXPECT_EQ(g[0], w[0]);
      if (graph::TopKBaseMode(mode[r]) == 2 && std::isfinite(w[0])) {
        EXPECT_NEAR(g[1], w[1], 1e-5 * std::fabs(w[1]) + 1e-30);
      }
      const int n = graph::TopKBaseMode(mode[r]) == 1 ? 1 : k;
      ASSERT_EQ(0, std::memcmp(g + 2, w + 2, 8 * n));
    }
  }
}

TEST(TopKMaskGpuTest, ModeNamingAMissingColumnSetsTheErrorFlag) {
  MINFER_REQUIRE_GPU();
  const int64_t n_vocab = 1000, n_out = 2, k = 4, stride = 2 + 2 * k;
  std::vector<float> l(n_vocab * n_out, 1.0f);
  std::vector<uint32_t> masks(TopKMaskWords(n_vocab) * n_out, ~0u);
  for (const std::vector<int32_t>& mode :
       {std::vector<int32_t>{1, TopKModeValue(2, 2)}, std::vector<int32_t>{1, 3}}) {
    DeviceBuffer<float> dl(l), dout(stride * n_out);
    DeviceBuffer<int32_t> dm(mode), derr(std::vector<int32_t>{0});
    DeviceBuffer<uint32_t> dmask(masks);
    dout.Poison();
    ASSERT_CUDA(LaunchTopK(dl.get(), n_vocab, n_out, dm.get(), dmask.get(), k, n_vocab,
                           dout.get(), derr.get(), nullptr));
    SYNC();
    EXPECT_EQ(derr.ToHost()[0], kDeviceBadTopKMode);
    const auto got = dout.ToHost();
    EXPECT_EQ(got[0], 1.0f);  // row 0 is fine
    uint32_t bits;
    std::memcpy(&bits, got.data() + stride, 4);
    EXPECT_EQ(bits, 0xFFFFFFFFu) << "the bad row was written";
  }
  // A column with no mask input at all.
  const std::vector<int32_t> mode = {TopKModeValue(1, 0), 1};
  DeviceBuffer<float> dl(l), dout(stride * n_out);
  DeviceBuffer<int32_t> dm(mode), derr(std::vector<int32_t>{0});
  ASSERT_CUDA(LaunchTopK(dl.get(), n_vocab, n_out, dm.get(), nullptr, k, n_vocab, dout.get(),
                         derr.get(), nullptr));
  SYNC();
  EXPECT_EQ(derr.ToHost()[0], kDeviceBadTopKMode);
}

}  // namespace
}  // namespace minfer::cuda
