#include "engine/sampling/logit_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace minfer {
namespace sampling_internal {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

std::vector<float> RandomLogits(int64_t n, uint32_t seed, float scale) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> l(n);
  for (float& x : l) x = dist(gen);
  return l;
}

TEST(LogitKernelsTest, KernelExpIsAccurate) {
  EXPECT_EQ(KernelExp(0.0f), 1.0f);
  EXPECT_EQ(KernelExp(-kInf), 0.0f);
  EXPECT_EQ(KernelExp(-100.0f), 0.0f);
  double worst = 0.0;
  for (float x = -86.9f; x <= 0.0f; x += 0.00731f) {
    const double ref = std::exp(static_cast<double>(x));
    worst = std::max(worst, std::fabs(KernelExp(x) - ref) / ref);
  }
  EXPECT_LT(worst, 2e-7);
  // Monotone (non-decreasing) on a fine grid near 0, where p values of
  // close logits are compared by the truncation steps.
  float prev = 0.0f;
  for (float x = -1.0f; x <= 0.0f; x = std::nextafter(x, 1.0f) + 1e-6f) {
    const float e = KernelExp(x);
    ASSERT_GE(e, prev) << x;
    prev = e;
  }
}

void CheckAgainstReference(const LogitKernels& k, const std::vector<float>& l) {
  const int64_t n = static_cast<int64_t>(l.size());
  const MaxResult mr = k.max(l.data(), n);
  float ref_max = -kInf;
  for (float x : l) ref_max = std::max(ref_max, x);
  EXPECT_EQ(mr.max, ref_max);
  EXPECT_FALSE(mr.has_nan);

  for (float inv_temp : {1.0f, 1.0f / 0.7f, 0.5f}) {
    std::vector<float> p(n, -1.0f);
    double p_sum = -1.0;
    const double sum =
        k.exp_sum(l.data(), n, mr.max, inv_temp, p.data(), &p_sum);
    double ref_sum = 0.0;
    double ref_p_sum = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      const double d = static_cast<double>(l[i]) - mr.max;
      ref_sum += std::exp(d);
      const double ref_p = std::exp(
          static_cast<double>(static_cast<float>(l[i] - mr.max) * inv_temp));
      ref_p_sum += ref_p;
      ASSERT_NEAR(p[i], ref_p, 2e-7 * ref_p + 1e-38) << i;
    }
    EXPECT_NEAR(sum, ref_sum, 1e-6 * ref_sum);
    EXPECT_NEAR(p_sum, ref_p_sum, 1e-6 * ref_p_sum);
    // Without an output array the normalizer is the same.
    EXPECT_EQ(k.exp_sum(l.data(), n, mr.max, inv_temp, nullptr, nullptr), sum);

    // Kept mass against a scalar reference, with a cut in the middle.
    const float cut_p = p[n / 2];
    const int32_t cut_id = static_cast<int32_t>(n / 2);
    std::vector<double> blocks((n + kMassBlock - 1) / kMassBlock, -1.0);
    k.kept_block_mass(p.data(), n, cut_p, cut_id, blocks.data());
    for (size_t b = 0; b < blocks.size(); ++b) {
      double ref = 0.0;
      for (int64_t i = b * kMassBlock;
           i < std::min<int64_t>(n, (b + 1) * kMassBlock); ++i) {
        if (p[i] > cut_p || (p[i] == cut_p && i <= cut_id)) ref += p[i];
      }
      EXPECT_NEAR(blocks[b], ref, 1e-6 * ref + 1e-30) << b;
    }
  }
}

struct Build {
  const char* name;
  const LogitKernels* kernels;  // null: not supported by this CPU
};

std::vector<Build> Builds() {
  return {{"portable", &PortableLogitKernels()},
          {"avx2", Avx2LogitKernels()},
          {"avx512", Avx512LogitKernels()}};
}

TEST(LogitKernelsTest, EachBuildMatchesReference) {
  for (const Build& build : Builds()) {
    if (build.kernels == nullptr) {
      std::printf("%s: not supported here, skipped\n", build.name);
      continue;
    }
    for (int64_t n : {1, 7, 8, 15, 16, 17, 1023, 1024, 1025, 5000, 152064}) {
      SCOPED_TRACE(testing::Message() << build.name << " n=" << n);
      CheckAgainstReference(*build.kernels, RandomLogits(n, n, 3.0f));
    }
  }
}

// The determinism promise: every build gives the same bits.
TEST(LogitKernelsTest, BuildsAreBitIdentical) {
  const LogitKernels& port = PortableLogitKernels();
  int compared = 0;
  for (const Build& build : Builds()) {
    if (build.kernels == nullptr || build.kernels == &port) continue;
    ++compared;
    const LogitKernels& simd = *build.kernels;
    for (int64_t n : {3, 8, 13, 16, 31, 4099, 152064}) {
      SCOPED_TRACE(testing::Message() << build.name << " n=" << n);
      std::vector<float> l = RandomLogits(n, 1000 + n, 4.0f);
      l[n / 3] = -kInf;  // masked tokens take part too
      const MaxResult a = port.max(l.data(), n);
      const MaxResult b = simd.max(l.data(), n);
      EXPECT_EQ(a.max, b.max);
      for (float inv_temp : {1.0f, 1.25f, 10.0f}) {
        std::vector<float> pa(n), pb(n);
        double psa = 0.0, psb = 0.0;
        const double sa =
            port.exp_sum(l.data(), n, a.max, inv_temp, pa.data(), &psa);
        const double sb =
            simd.exp_sum(l.data(), n, a.max, inv_temp, pb.data(), &psb);
        EXPECT_EQ(sa, sb);
        EXPECT_EQ(psa, psb);
        ASSERT_EQ(std::memcmp(pa.data(), pb.data(), n * sizeof(float)), 0);
        std::vector<double> ma((n + kMassBlock - 1) / kMassBlock);
        std::vector<double> mb(ma.size());
        port.kept_block_mass(pa.data(), n, pa[n / 4], n / 4, ma.data());
        simd.kept_block_mass(pa.data(), n, pa[n / 4], n / 4, mb.data());
        EXPECT_EQ(ma, mb);
        std::vector<uint16_t> ia(n), ib(n);
        const int64_t na = port.bucket_ids(pa.data(), n, 1e-3f, ia.data());
        const int64_t nb = simd.bucket_ids(pa.data(), n, 1e-3f, ib.data());
        EXPECT_EQ(ia, ib);
        EXPECT_EQ(na, nb);
        EXPECT_EQ(na, n - std::count(ia.begin(), ia.end(), 0));
      }
    }
  }
  std::printf("compared %d SIMD build(s) with the portable one\n", compared);
}

TEST(LogitKernelsTest, BucketIdsAreMonotoneLogScaleBuckets) {
  // Hand-checked points: p = 1 is the top bucket, halving p moves down 256.
  const std::vector<float> p = {1.0f,
                                0.5f,
                                0.25f,
                                0.999f,
                                1e-4f,
                                0.0f,
                                std::ldexp(1.0f, -64),
                                std::ldexp(1.0f, -70),
                                0.75f};
  for (const Build& build : Builds()) {
    if (build.kernels == nullptr) continue;
    SCOPED_TRACE(build.name);
    std::vector<uint16_t> ids(p.size(), 0xFFFF);
    EXPECT_EQ(build.kernels->bucket_ids(p.data(), p.size(), 0.0f, ids.data()),
              static_cast<int64_t>(p.size()));
    EXPECT_EQ(ids[0], kNumBuckets - 1);
    EXPECT_EQ(ids[1], kNumBuckets - 1 - 256);
    EXPECT_EQ(ids[2], kNumBuckets - 1 - 512);
    EXPECT_EQ(ids[3], kNumBuckets - 2);        // 0.999 is just below 1
    EXPECT_EQ(ids[5], 1);                      // 0 is clamped into bucket 1
    EXPECT_EQ(ids[6], 1);                      // 2^-64 starts bucket 1
    EXPECT_EQ(ids[7], 1);                      // below 2^-64: clamped
    EXPECT_EQ(ids[8], kNumBuckets - 1 - 128);  // 0.75 = 1.5 * 2^-1
    // A floor sends smaller values to 0.
    EXPECT_EQ(build.kernels->bucket_ids(p.data(), p.size(), 0.3f, ids.data()),
              4);  // 1, 0.5, 0.999, 0.75
    EXPECT_EQ(ids[0], kNumBuckets - 1);
    EXPECT_EQ(ids[2], 0);
    EXPECT_EQ(ids[4], 0);
    EXPECT_EQ(ids[5], 0);
    // Monotone on random data.
    const int64_t n = 10000;
    std::vector<float> q(n);
    std::mt19937 gen(4);
    std::uniform_real_distribution<float> u(-30.0f, 0.0f);
    for (float& x : q) x = std::exp(u(gen));
    std::vector<uint16_t> qi(n);
    build.kernels->bucket_ids(q.data(), n, 0.0f, qi.data());
    for (int64_t i = 1; i < n; ++i) {
      if (q[i] < q[i - 1]) {
        ASSERT_LE(qi[i], qi[i - 1]);
      } else {
        ASSERT_GE(qi[i], qi[i - 1]);
      }
    }
  }
}

TEST(LogitKernelsTest, FindIdListsMatchesInOrder) {
  for (const Build& build : Builds()) {
    if (build.kernels == nullptr) continue;
    for (int64_t n : {1, 5, 16, 33, 1000}) {
      SCOPED_TRACE(testing::Message() << build.name << " n=" << n);
      std::vector<uint16_t> ids(n);
      std::mt19937 gen(n);
      for (uint16_t& id : ids) id = static_cast<uint16_t>(gen() % 7);
      std::vector<int32_t> want;
      for (int64_t i = 0; i < n; ++i) {
        if (ids[i] == 3) want.push_back(static_cast<int32_t>(i));
      }
      std::vector<int32_t> got(n, -1);
      const int64_t count =
          build.kernels->find_id(ids.data(), n, 3, n, got.data());
      got.resize(count);
      EXPECT_EQ(got, want);
      if (want.size() >= 2) {
        std::vector<int32_t> two(2);
        EXPECT_EQ(build.kernels->find_id(ids.data(), n, 3, 2, two.data()), 2);
        EXPECT_EQ(two[0], want[0]);
        EXPECT_EQ(two[1], want[1]);
      }
    }
  }
}

TEST(LogitKernelsTest, FirstAboveFindsTheFirstElementAboveThreshold) {
  for (const Build& build : Builds()) {
    if (build.kernels == nullptr) continue;
    for (int64_t n : {1, 15, 16, 17, 64, 65, 1000}) {
      SCOPED_TRACE(testing::Message() << build.name << " n=" << n);
      const std::vector<float> l = RandomLogits(n, 7 * n, 1.0f);
      for (float threshold : {-kInf, -1.0f, 0.5f, 2.0f, kInf}) {
        for (int64_t begin : {int64_t{0}, n / 3, n - 1, n}) {
          int64_t want = n;
          for (int64_t i = begin; i < n; ++i) {
            if (l[i] > threshold) {
              want = i;
              break;
            }
          }
          EXPECT_EQ(build.kernels->first_above(l.data(), begin, n, threshold),
                    want)
              << threshold << " " << begin;
        }
      }
    }
    // Equal is not above; NaN never is.
    const std::vector<float> eq = {
        1.0f, std::numeric_limits<float>::quiet_NaN(), 1.0f, 2.0f};
    EXPECT_EQ(build.kernels->first_above(eq.data(), 0, 4, 1.0f), 3);
  }
}

TEST(LogitKernelsTest, MaxReportsNaNAndHandlesInfinities) {
  for (const Build& build : Builds()) {
    const LogitKernels* k = build.kernels;
    if (k == nullptr) continue;
    for (int64_t n : {5, 8, 20}) {
      for (int64_t at : {int64_t{0}, n / 2, n - 1}) {
        std::vector<float> l(n, 1.0f);
        l[at] = std::numeric_limits<float>::quiet_NaN();
        const MaxResult r = k->max(l.data(), n);
        EXPECT_TRUE(r.has_nan) << n << " " << at;
        EXPECT_EQ(r.max, 1.0f);
      }
    }
    std::vector<float> all_masked(11, -kInf);
    EXPECT_EQ(k->max(all_masked.data(), 11).max, -kInf);
    std::vector<float> has_inf(11, 0.0f);
    has_inf[9] = kInf;
    EXPECT_EQ(k->max(has_inf.data(), 11).max, kInf);
  }
}

}  // namespace
}  // namespace sampling_internal
}  // namespace minfer
