// TopK rows (graph.h): the candidates a sampler needs from each row of
// logits, so a device backend's host reads a few values per sequence
// instead of the whole row, over a row's allowed ids when it has a mask
// (constrained decoding). This is the reference the CUDA kernel is tested
// against.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/cpu/kernels.h"
#include "engine/graph/graph.h"

namespace minfer::cpu {
namespace {

// "a before b": larger logit first, then the lower id.
bool Before(float av, int32_t ai, float bv, int32_t bi) { return av > bv || (av == bv && ai < bi); }

void StorePair(float* dst, float value, int32_t id) {
  dst[0] = value;
  std::memcpy(dst + 1, &id, sizeof(id));
}

// Calls f(id, logit) for the row's candidate ids below `limit` in
// increasing id order: all of them, or (a mask) only the allowed ones,
// visited word by word so that a sparse mask (a grammar that allows a few
// tokens) costs its set bits, not the vocabulary.
struct AllIds {
  const float* l;
  int64_t limit;
  template <typename F>
  void operator()(F&& f) const {
    for (int64_t i = 0; i < limit; ++i) f(i, l[i]);
  }
};
struct AllowedIds {
  const float* l;
  int64_t limit;
  const uint32_t* mask;
  template <typename F>
  void operator()(F&& f) const {
    const int64_t words = (limit + 31) / 32;
    for (int64_t w = 0; w < words; ++w) {
      for (uint32_t bits = mask[w]; bits != 0; bits &= bits - 1) {
        const int64_t i = 32 * w + __builtin_ctz(bits);
        if (i >= limit) return;
        f(i, l[i]);
      }
    }
  }
};

template <typename Ids>
void TopKRow(const Ids& ids, int mode, int k, float* out) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  float mx = kNegInf;
  int32_t arg = -1;
  bool nan = false;
  ids([&](int64_t i, float x) {
    if (std::isnan(x)) nan = true;
    if (x > mx) {
      mx = x;
      arg = static_cast<int32_t>(i);
    }
  });
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
  ids([&](int64_t i, float x) {
    sum += std::exp(static_cast<double>(x) - mx);
    if (x == kNegInf) return;
    const C c{x, static_cast<int32_t>(i)};
    if (static_cast<int>(heap.size()) < k) {
      heap.push_back(c);
      std::push_heap(heap.begin(), heap.end(), better);
    } else if (better(c, heap.front())) {
      std::pop_heap(heap.begin(), heap.end(), better);
      heap.back() = c;
      std::push_heap(heap.begin(), heap.end(), better);
    }
  });
  std::sort_heap(heap.begin(), heap.end(), better);
  out[1] = static_cast<float>(sum);
  for (size_t j = 0; j < heap.size(); ++j) StorePair(out + 2 + 2 * j, heap[j].v, heap[j].id);
}

}  // namespace

absl::Status TopKRows(ThreadPool& pool, const float* logits, int64_t n_vocab, int64_t n_out,
                      const int32_t* mode, int top_k, int64_t vocab_limit, float* out,
                      const uint32_t* mask) {
  // Mode values are data the caller computed; one naming a mask column that
  // does not exist would read outside the mask input.
  for (int64_t r = 0; r < n_out; ++r) {
    const int32_t base = graph::TopKBaseMode(mode[r]), slot = graph::TopKMaskSlot(mode[r]);
    if (base < 0 || base > 2 || slot < -1 || (slot >= 0 && (mask == nullptr || slot >= n_out))) {
      return absl::InternalError(absl::StrCat(
          "TopK: row ", r, " has mode value ", mode[r], " (base mode ", base, ", mask column ",
          slot, "); base modes are 0..2 and mask columns -1..", mask == nullptr ? -1 : n_out - 1));
    }
  }
  const int64_t stride = 2 + 2 * static_cast<int64_t>(top_k);
  const int64_t limit = std::min(vocab_limit, n_vocab);
  const int64_t words = graph::TopKMaskWords(n_vocab);
  pool.ParallelFor(n_out, [&](int64_t r, int) {
    const int32_t base = graph::TopKBaseMode(mode[r]), slot = graph::TopKMaskSlot(mode[r]);
    if (base == 0) return;
    const float* l = logits + r * n_vocab;
    if (slot >= 0) {
      TopKRow(AllowedIds{l, limit, mask + slot * words}, base, top_k, out + r * stride);
    } else {
      TopKRow(AllIds{l, limit}, base, top_k, out + r * stride);
    }
  });
  return absl::OkStatus();
}

}  // namespace minfer::cpu
