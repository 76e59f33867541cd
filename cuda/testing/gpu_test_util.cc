#include "cuda/testing/gpu_test_util.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>

namespace minfer::cuda::testing {

uint64_t TestSeed() {
  static const uint64_t seed = []() -> uint64_t {
    if (const char* s = std::getenv("MINFER_TEST_SEED")) return std::strtoull(s, nullptr, 10);
    uint64_t t = static_cast<uint64_t>(
        std::chrono::steady_clock::now().time_since_epoch().count());
    std::fprintf(stderr, "gpu tests: random seed %llu (set MINFER_TEST_SEED to repeat)\n",
                 static_cast<unsigned long long>(t));
    return t;
  }();
  return seed;
}

std::vector<float> RandomFloats(size_t n, float scale) {
  static std::mt19937_64 rng(TestSeed());
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

}  // namespace minfer::cuda::testing
