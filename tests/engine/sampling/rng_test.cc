#include "engine/sampling/rng.h"

#include <cstdint>
#include <set>

#include "gtest/gtest.h"

namespace minfer {
namespace {

// Reference outputs of the published algorithms (the same vectors the
// reference C code and the Rust rand_xoshiro crate are tested with).
TEST(RngTest, SplitMix64MatchesReference) {
  SplitMix64 sm(0);
  EXPECT_EQ(sm.Next(), 0xE220A8397B1DCDAFull);
  EXPECT_EQ(sm.Next(), 0x6E789E6AA1B965F4ull);
  EXPECT_EQ(sm.Next(), 0x06C45D188009454Full);
}

TEST(RngTest, Xoshiro256StarStarMatchesReference) {
  Xoshiro256StarStar rng(1, 2, 3, 4);
  EXPECT_EQ(rng.Next(), 11520u);
  EXPECT_EQ(rng.Next(), 0u);
  EXPECT_EQ(rng.Next(), 1509978240u);
  EXPECT_EQ(rng.Next(), 1215971899390074240ull);
}

TEST(RngTest, SeedingIsDeterministicAndSeedsDiffer) {
  Xoshiro256StarStar a(42), b(42), c(43);
  std::set<uint64_t> seen;
  int equal_to_c = 0;
  for (int i = 0; i < 100; ++i) {
    const uint64_t x = a.Next();
    EXPECT_EQ(x, b.Next());
    equal_to_c += x == c.Next();
    seen.insert(x);
  }
  EXPECT_EQ(equal_to_c, 0);
  EXPECT_EQ(seen.size(), 100u);
  // Re-seeding restarts the stream.
  Xoshiro256StarStar d(7);
  const uint64_t first = d.Next();
  d.Next();
  d.Seed(7);
  EXPECT_EQ(d.Next(), first);
}

TEST(RngTest, NextDoubleIsUniformInUnitInterval) {
  Xoshiro256StarStar rng(123);
  constexpr int kN = 1 << 20;
  constexpr int kBins = 16;
  int bins[kBins] = {};
  double sum = 0.0;
  for (int i = 0; i < kN; ++i) {
    const double u = rng.NextDouble();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    sum += u;
    ++bins[static_cast<int>(u * kBins)];
  }
  EXPECT_NEAR(sum / kN, 0.5, 0.002);
  // Chi-square, 15 degrees of freedom: 37.7 is the 0.1% critical value.
  double chi2 = 0.0;
  const double expected = static_cast<double>(kN) / kBins;
  for (int b : bins) chi2 += (b - expected) * (b - expected) / expected;
  EXPECT_LT(chi2, 37.7);
  // The top 53 bits map exactly: all-ones gives the largest double below 1.
  EXPECT_EQ(static_cast<double>(~0ull >> 11) * 0x1.0p-53, 1.0 - 0x1.0p-53);
}

}  // namespace
}  // namespace minfer
