// The decode attention's integer-instruction conversions of quantized KV
// codes (cuda/kernels/kv_codes.h), on the host, against the CPU's own
// decoders: static_cast<float> of each int8 code (the q8_0 dequantizer's
// value) and E4M3ToFloat (engine/quant/fp8.h). Exhaustive over the byte
// values at every position; the host byte permutation is checked against the
// PTX definition's examples first, since every identity below rests on it.
#include "cuda/kernels/kv_codes.h"

#include <bit>
#include <cstdint>
#include <random>

#include "engine/quant/fp16.h"
#include "engine/quant/fp8.h"
#include "gtest/gtest.h"

namespace minfer::cuda {
namespace {

// Four bytes with byte `pos` set to b and the others random.
uint32_t WithByte(std::mt19937& rng, int pos, uint32_t b) {
  const uint32_t r = static_cast<uint32_t>(rng());
  return (r & ~(0xFFu << (8 * pos))) | (b << (8 * pos));
}

TEST(KvCodesTest, BytePermFollowsThePtxDefinition) {
  const uint32_t x = 0x33221100u, y = 0x77665544u;
  EXPECT_EQ(KvBytePerm(x, y, 0x3210u), x);
  EXPECT_EQ(KvBytePerm(x, y, 0x7654u), y);
  EXPECT_EQ(KvBytePerm(x, y, 0x0123u), 0x00112233u);
  EXPECT_EQ(KvBytePerm(x, y, 0x5140u), 0x55114400u);
}

TEST(KvCodesTest, S8CodesAreTheirIntegerValues) {
  std::mt19937 rng(11);
  for (int pos = 0; pos < 4; ++pos) {
    for (uint32_t b = 0; b < 256; ++b) {
      for (int rep = 0; rep < 16; ++rep) {
        const uint32_t qs = WithByte(rng, pos, b);
        const float want = static_cast<float>(static_cast<int8_t>(static_cast<uint8_t>(b)));
        const float got = S8CodeToFloat(qs ^ 0x80808080u, pos);
        // Bits, so 0 is +0 as static_cast gives, and nothing is off by an ulp.
        ASSERT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(want)) << "byte " << b << " at " << pos << " of " << qs;
      }
    }
  }
}

TEST(KvCodesTest, E4M3PairsAreTheCodesOver256) {
  for (int p = 0; p < 2; ++p) {
    for (uint32_t lo = 0; lo < 256; ++lo) {
      for (uint32_t hi = 0; hi < 256; ++hi) {
        // The pair's two codes at bytes 2p and 2p+1; the other pair's bytes
        // are the same codes swapped, to catch a selector reading them.
        const uint32_t pair = lo | (hi << 8), other = hi | (lo << 8);
        const uint32_t qs = p == 0 ? pair | (other << 16) : other | (pair << 16);
        const uint32_t h2 = E4M3PairOver256Bits(qs, p);
        const uint16_t halves[2] = {static_cast<uint16_t>(h2 & 0xFFFF),
                                    static_cast<uint16_t>(h2 >> 16)};
        const uint32_t codes[2] = {lo, hi};
        for (int i = 0; i < 2; ++i) {
          const uint8_t c = static_cast<uint8_t>(codes[i]);
          // The bit layout, NaN codes included ...
          ASSERT_EQ(halves[i], ((c & 0x80u) << 8) | ((c & 0x7Fu) << 7)) << "code " << int{c};
          if ((c & 0x7F) == 0x7F) continue;
          // ... and the value: exactly the code's / 256, with its sign.
          const float v = Fp16ToFloat(halves[i]);
          ASSERT_EQ(std::bit_cast<uint32_t>(v * 256.0f), std::bit_cast<uint32_t>(E4M3ToFloat(c))) << "code " << int{c};
        }
      }
    }
  }
}

TEST(KvCodesTest, E4M3NaNDetectionSeesEveryPosition) {
  std::mt19937 rng(5);
  auto has_nan = [](uint32_t qs) {
    for (int i = 0; i < 4; ++i) {
      if (((qs >> (8 * i)) & 0x7F) == 0x7F) return true;
    }
    return false;
  };
  // Every code at every position, the others random.
  for (int pos = 0; pos < 4; ++pos) {
    for (uint32_t b = 0; b < 256; ++b) {
      for (int rep = 0; rep < 64; ++rep) {
        const uint32_t qs = WithByte(rng, pos, b);
        ASSERT_EQ(E4M3HasNaN(qs), has_nan(qs)) << std::hex << qs;
      }
    }
  }
  // Words of non-NaN codes next to 0x7E / 0xFE (the largest finite codes,
  // one below NaN), which a carry between bytes would turn into a false hit.
  const uint32_t near[] = {0x7E, 0xFE, 0x7D, 0x00, 0x80, 0x3F};
  for (uint32_t a : near)
    for (uint32_t b : near)
      for (uint32_t c : near)
        for (uint32_t d : near) {
          const uint32_t qs = a | (b << 8) | (c << 16) | (d << 24);
          ASSERT_FALSE(E4M3HasNaN(qs)) << std::hex << qs;
        }
  EXPECT_TRUE(E4M3HasNaN(0x7F000000u));
  EXPECT_TRUE(E4M3HasNaN(0x000000FFu));
}

}  // namespace
}  // namespace minfer::cuda
