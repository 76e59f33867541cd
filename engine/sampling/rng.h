// The sampler's random number generator: xoshiro256** seeded by SplitMix64.
//
// Both algorithms are fixed bit-exact recipes (Blackman & Vigna), so the same
// seed yields the same stream on every compiler and standard library. That is
// why minfer does not use <random>'s distributions here: their outputs are
// implementation-defined and differ between libstdc++ and libc++.
//
// Not thread-safe; one generator per sequence being sampled. Copyable (a copy
// continues the same stream independently).
#ifndef MINFER_ENGINE_SAMPLING_RNG_H_
#define MINFER_ENGINE_SAMPLING_RNG_H_

#include <cstdint>

namespace minfer {

// SplitMix64: expands a 64-bit seed into well-mixed 64-bit words. Used only to
// derive xoshiro's 256-bit state, so that nearby seeds (0, 1, 2, ...) give
// unrelated streams and the all-zero state (a fixed point of xoshiro) cannot
// occur in practice.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}

  uint64_t Next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }

 private:
  uint64_t state_;
};

class Xoshiro256StarStar {
 public:
  // Seeds the 256-bit state with four SplitMix64 outputs of `seed`.
  explicit Xoshiro256StarStar(uint64_t seed) { Seed(seed); }

  // Sets the state directly (for reference test vectors). Must not be all 0.
  Xoshiro256StarStar(uint64_t s0, uint64_t s1, uint64_t s2, uint64_t s3)
      : s_{s0, s1, s2, s3} {}

  void Seed(uint64_t seed) {
    SplitMix64 sm(seed);
    for (uint64_t& word : s_) word = sm.Next();
  }

  uint64_t Next() {
    const uint64_t result = Rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = Rotl(s_[3], 45);
    return result;
  }

  // Uniform double in [0, 1) with 53 random bits: the top 53 bits of one
  // output scaled by 2^-53 (exact; never returns 1.0).
  double NextDouble() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }

 private:
  static uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

  uint64_t s_[4];
};

}  // namespace minfer

#endif  // MINFER_ENGINE_SAMPLING_RNG_H_
