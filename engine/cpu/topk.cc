// TopK rows (graph.h): the candidates a sampler needs from each row of
// logits, so a device backend's host reads a few values per sequence
// instead of the whole row. This is the reference the CUDA kernel is
// tested against.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "engine/cpu/kernels.h"

namespace minfer::cpu {
namespace {

// "a before b": larger logit first, then the lower id.
bool Before(float av, int32_t ai, float bv, int32_t bi) { return av > bv || (av == bv && ai < bi); }

void StorePair(float* dst, float value, int32_t id) {
  dst[0] = value;
  std::memcpy(dst + 1, &id, sizeof(id));
}

void TopKRow(const float* l, int64_t limit, int mode, int k, float* out) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  float mx = kNegInf;
  int32_t arg = -1;
  bool nan = false;
  for (int64_t i = 0; i < limit; ++i) {
    if (std::isnan(l[i])) nan = true;
    if (l[i] > mx) {
      mx = l[i];
      arg = static_cast<int32_t>(i);
    }
  }
  for (int j = 0; j < k; ++j) StorePair(out + 2 + 2 * j, kNegInf, -1);
  out[1] = 0.0f;
  if (nan) {
    out[0] = std::numeric_limits<float>::quiet_NaN();
    return;
  }
  out[0] = mx;
  if (mode == 1 || mx == kNegInf) {
    if (arg >= 0) StorePair(out + 2, mx, arg);
    return;
  }
  // Bounded heap of the k best; its front is the worst kept.
  struct C {
    float v;
    int32_t id;
  };
  auto better = [](const C& a, const C& b) { return Before(a.v, a.id, b.v, b.id); };
  std::vector<C> heap;
  heap.reserve(k);
  double sum = 0.0;
  for (int64_t i = 0; i < limit; ++i) {
    sum += std::exp(static_cast<double>(l[i]) - mx);
    if (l[i] == kNegInf) continue;
    const C c{l[i], static_cast<int32_t>(i)};
    if (static_cast<int>(heap.size()) < k) {
      heap.push_back(c);
      std::push_heap(heap.begin(), heap.end(), better);
    } else if (better(c, heap.front())) {
      std::pop_heap(heap.begin(), heap.end(), better);
      heap.back() = c;
      std::push_heap(heap.begin(), heap.end(), better);
    }
  }
  std::sort_heap(heap.begin(), heap.end(), better);
  out[1] = static_cast<float>(sum);
  for (size_t j = 0; j < heap.size(); ++j) StorePair(out + 2 + 2 * j, heap[j].v, heap[j].id);
}

}  // namespace

void TopKRows(ThreadPool& pool, const float* logits, int64_t n_vocab, int64_t n_out,
              const int32_t* mode, int top_k, int64_t vocab_limit, float* out) {
  const int64_t stride = 2 + 2 * static_cast<int64_t>(top_k);
  pool.ParallelFor(n_out, [&](int64_t r, int) {
    if (mode[r] == 0) return;
    TopKRow(logits + r * n_vocab, std::min(vocab_limit, n_vocab), mode[r], top_k,
            out + r * stride);
  });
}

}  // namespace minfer::cpu
