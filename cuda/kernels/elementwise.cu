// Elementwise kernels: add/mul with broadcast, scale, silu, swiglu, softmax
// over rows, permute, and the f32 row gather. They are memory- and
// launch-bound, so they are plain grid-stride loops with 16-byte accesses
// where the shapes and pointers allow it.
//
// Numerics match the CPU backend (engine/cpu/elementwise.cc): add, mul, scale
// and permute are exact. silu/swiglu/softmax evaluate exp in double and round
// it to float (correctly rounded but for ~1e-8 of inputs), where the CPU calls
// glibc's expf (< 0.51 ulp): the exponentials agree except when expf itself
// misrounds, so results are within 1-2 ulp of the CPU's, nearly always equal.
// The double exp costs nothing measurable: these kernels are bandwidth-bound.
#include <algorithm>
#include <cstdint>

#include "cuda/kernels/common.cuh"
#include "cuda/kernels/launch.cuh"
#include "cuda/kernels/ops.h"

namespace minfer::cuda {
namespace {

constexpr int kThreads = 256;

// Enough blocks to fill the GPU several times over, capped so grid-stride
// loops do the rest (also keeps the grid within 2^31).
int GridFor(int64_t work_items) {
  const int64_t blocks = (work_items + kThreads - 1) / kThreads;
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(blocks, 65536)));
}

bool Aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

struct AddOp {
  __device__ float operator()(float a, float b) const { return a + b; }
};
struct MulOp {
  __device__ float operator()(float a, float b) const { return a * b; }
};

// y[i] = op(a[i], b[i % nb]), then + r[i] when r is given (a bias add with
// the residual: LaunchAddResidual); kVec: n, nb multiples of 4 and 16-byte
// aligned pointers, so a float4 of b never wraps around the period. a, r and
// y may alias (each element is read and written by one thread), hence no
// __restrict__.
template <class Op, bool kVec>
__global__ void binary_kernel(const float* a, const float* __restrict__ b, int64_t nb, float* y,
                              int64_t n, const float* r) {
  pdl_enter();
  const Op op;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const bool bcast = nb < n;
  if constexpr (kVec) {
    const int64_t n4 = n >> 2;
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n4;
         i += stride) {
      const int64_t j = bcast ? (4 * i) % nb : 4 * i;
      const float4 va = reinterpret_cast<const float4*>(a)[i];
      const float4 vb = *reinterpret_cast<const float4*>(b + j);
      float4 v = make_float4(op(va.x, vb.x), op(va.y, vb.y), op(va.z, vb.z), op(va.w, vb.w));
      if (r != nullptr) {
        const float4 vr = reinterpret_cast<const float4*>(r)[i];
        v = make_float4(__fadd_rn(v.x, vr.x), __fadd_rn(v.y, vr.y), __fadd_rn(v.z, vr.z),
                        __fadd_rn(v.w, vr.w));
      }
      reinterpret_cast<float4*>(y)[i] = v;
    }
  } else {
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += stride) {
      const float v = op(a[i], b[bcast ? i % nb : i]);
      y[i] = r != nullptr ? __fadd_rn(v, r[i]) : v;
    }
  }
}

template <class Op>
cudaError_t LaunchBinary(const float* a, const float* b, int64_t nb, float* y, int64_t n,
                         cudaStream_t stream, const float* r = nullptr) {
  if (n <= 0) return cudaSuccess;
  if (nb <= 0) return cudaErrorInvalidValue;
  const bool vec = n % 4 == 0 && (nb >= n || nb % 4 == 0) && Aligned16(a) && Aligned16(b) &&
                   Aligned16(y) && (r == nullptr || Aligned16(r));
  if (vec) {
    LaunchGrid(binary_kernel<Op, true>, GridFor(n / 4), kThreads, 0, stream, a, b, nb, y, n, r);
  } else {
    LaunchGrid(binary_kernel<Op, false>, GridFor(n), kThreads, 0, stream, a, b, nb, y, n, r);
  }
  return cudaGetLastError();
}

// --- unary ------------------------------------------------------------------------

// exp_f, silu_f: common.cuh (shared with MMQ's fused SwiGLU producer).

enum class Unary { kScale, kSilu };

template <Unary kOp, bool kVec>
__global__ void unary_kernel(const float* a, float s, float* y, int64_t n) {
  pdl_enter();
  auto f = [s](float v) { return kOp == Unary::kScale ? v * s : silu_f(v); };
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t start = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if constexpr (kVec) {
    for (int64_t i = start; i < (n >> 2); i += stride) {
      const float4 v = reinterpret_cast<const float4*>(a)[i];
      reinterpret_cast<float4*>(y)[i] = make_float4(f(v.x), f(v.y), f(v.z), f(v.w));
    }
  } else {
    for (int64_t i = start; i < n; i += stride) y[i] = f(a[i]);
  }
}

template <Unary kOp>
cudaError_t LaunchUnary(const float* a, float s, float* y, int64_t n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  if (n % 4 == 0 && Aligned16(a) && Aligned16(y)) {
    LaunchGrid(unary_kernel<kOp, true>, GridFor(n / 4), kThreads, 0, stream, a, s, y, n);
  } else {
    LaunchGrid(unary_kernel<kOp, false>, GridFor(n), kThreads, 0, stream, a, s, y, n);
  }
  return cudaGetLastError();
}

// y = silu(g) * u, the CPU's g / (1 + exp(-g)) * u.
template <bool kVec>
__global__ void swiglu_kernel(const float* g, const float* u, float* y, int64_t n) {
  pdl_enter();
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t start = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if constexpr (kVec) {
    for (int64_t i = start; i < (n >> 2); i += stride) {
      const float4 vg = reinterpret_cast<const float4*>(g)[i];
      const float4 vu = reinterpret_cast<const float4*>(u)[i];
      reinterpret_cast<float4*>(y)[i] = make_float4(silu_f(vg.x) * vu.x, silu_f(vg.y) * vu.y,
                                                    silu_f(vg.z) * vu.z, silu_f(vg.w) * vu.w);
    }
  } else {
    for (int64_t i = start; i < n; i += stride) y[i] = silu_f(g[i]) * u[i];
  }
}

// --- softmax ------------------------------------------------------------------------

// One block per row (grid-stride over rows). The CPU's order of operations:
// e = exp(x - max) stored as float, sum the floats in double, multiply by
// float(1 / sum). Summing in double makes the order of the sum irrelevant
// (to ~1e-16), so inv matches the CPU's bit for bit but for ~1e-8 of rows.
__global__ void softmax_rows_kernel(const float* a, float* y, int64_t ne0, int64_t rows) {
  pdl_enter();
  __shared__ float smax[32];
  __shared__ double ssum[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* x = a + r * ne0;
    float* o = y + r * ne0;
    float mx = -INFINITY;
    for (int64_t i = threadIdx.x; i < ne0; i += blockDim.x) mx = fmaxf(mx, x[i]);
    mx = block_max(mx, smax);
    double sum = 0.0;
    for (int64_t i = threadIdx.x; i < ne0; i += blockDim.x) {
      const float e = exp_f(x[i] - mx);
      o[i] = e;
      sum += e;
    }
    sum = block_sum(sum, ssum);
    const float inv = static_cast<float>(1.0 / sum);
    // Each thread rescales exactly the elements it wrote: no barrier needed.
    for (int64_t i = threadIdx.x; i < ne0; i += blockDim.x) o[i] *= inv;
  }
}

// --- permute ------------------------------------------------------------------------

struct PermuteGeom {
  int64_t ne[4];       // x's extents
  int64_t ystride[4];  // y's stride (elements) for x's axis i
};

// One thread per x element (reads coalesced); y offset = sum c[i] * ystride[i].
__global__ void permute_kernel(const float* __restrict__ x, float* __restrict__ y, PermuteGeom g,
                               int64_t n) {
  pdl_enter();
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < n;
       idx += stride) {
    int64_t rest = idx;
    const int64_t c0 = rest % g.ne[0];
    rest /= g.ne[0];
    const int64_t c1 = rest % g.ne[1];
    rest /= g.ne[1];
    const int64_t c2 = rest % g.ne[2];
    const int64_t c3 = rest / g.ne[2];
    y[c0 * g.ystride[0] + c1 * g.ystride[1] + c2 * g.ystride[2] + c3 * g.ystride[3]] = x[idx];
  }
}

// --- get rows ------------------------------------------------------------------------

// grid.y strides over ids; a bad id writes a zero row and flags the error.
template <bool kVec>
__global__ void get_rows_f32_kernel(const float* __restrict__ src, int64_t ne0, int64_t rows,
                                    const int32_t* __restrict__ ids, int64_t n_ids,
                                    float* __restrict__ y, int32_t* error_flag) {
  pdl_enter();
  const int64_t n_items = kVec ? ne0 / 4 : ne0;
  for (int64_t i = blockIdx.y; i < n_ids; i += gridDim.y) {
    const int32_t id = ids[i];
    const bool ok = id >= 0 && id < rows;
    if (!ok && blockIdx.x == 0 && threadIdx.x == 0) set_device_error(error_flag, kDeviceBadTokenId);
    for (int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; c < n_items;
         c += static_cast<int64_t>(gridDim.x) * blockDim.x) {
      if constexpr (kVec) {
        reinterpret_cast<float4*>(y + i * ne0)[c] =
            ok ? reinterpret_cast<const float4*>(src + id * ne0)[c]
               : make_float4(0.f, 0.f, 0.f, 0.f);
      } else {
        y[i * ne0 + c] = ok ? src[id * ne0 + c] : 0.0f;
      }
    }
  }
}

}  // namespace

cudaError_t LaunchAdd(const float* a, const float* b, int64_t nb, float* y, int64_t n,
                      cudaStream_t stream) {
  return LaunchBinary<AddOp>(a, b, nb, y, n, stream);
}

cudaError_t LaunchAddResidual(const float* a, const float* b, int64_t nb, const float* r,
                              float* y, int64_t n, cudaStream_t stream) {
  if (r == nullptr) return cudaErrorInvalidValue;
  return LaunchBinary<AddOp>(a, b, nb, y, n, stream, r);
}

cudaError_t LaunchMul(const float* a, const float* b, int64_t nb, float* y, int64_t n,
                      cudaStream_t stream) {
  return LaunchBinary<MulOp>(a, b, nb, y, n, stream);
}

cudaError_t LaunchScale(const float* a, float s, float* y, int64_t n, cudaStream_t stream) {
  return LaunchUnary<Unary::kScale>(a, s, y, n, stream);
}

cudaError_t LaunchSilu(const float* a, float* y, int64_t n, cudaStream_t stream) {
  return LaunchUnary<Unary::kSilu>(a, 0.0f, y, n, stream);
}

cudaError_t LaunchSwiGlu(const float* g, const float* u, float* y, int64_t n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  if (n % 4 == 0 && Aligned16(g) && Aligned16(u) && Aligned16(y)) {
    LaunchGrid(swiglu_kernel<true>, GridFor(n / 4), kThreads, 0, stream, g, u, y, n);
  } else {
    LaunchGrid(swiglu_kernel<false>, GridFor(n), kThreads, 0, stream, g, u, y, n);
  }
  return cudaGetLastError();
}

cudaError_t LaunchSoftmaxRows(const float* a, float* y, int64_t ne0, int64_t rows,
                              cudaStream_t stream) {
  if (ne0 <= 0 || rows <= 0) return cudaSuccess;
  const int blocks = static_cast<int>(std::min<int64_t>(rows, 65536));
  LaunchGrid(softmax_rows_kernel, blocks, kThreads, 0, stream, a, y, ne0, rows);
  return cudaGetLastError();
}

cudaError_t LaunchPermute(const float* x, const int64_t x_ne[4], const int8_t perm[4], float* y,
                          cudaStream_t stream) {
  // y.ne[perm[i]] = x.ne[i]; perm must be a permutation of 0..3.
  int64_t y_ne[4];
  bool seen[4] = {false, false, false, false};
  for (int i = 0; i < 4; ++i) {
    if (perm[i] < 0 || perm[i] > 3 || seen[perm[i]] || x_ne[i] <= 0) return cudaErrorInvalidValue;
    seen[perm[i]] = true;
    y_ne[perm[i]] = x_ne[i];
  }
  const int64_t y_stride_by_axis[4] = {1, y_ne[0], y_ne[0] * y_ne[1], y_ne[0] * y_ne[1] * y_ne[2]};
  PermuteGeom g;
  for (int i = 0; i < 4; ++i) {
    g.ne[i] = x_ne[i];
    g.ystride[i] = y_stride_by_axis[perm[i]];
  }
  const int64_t n = x_ne[0] * x_ne[1] * x_ne[2] * x_ne[3];
  LaunchGrid(permute_kernel, GridFor(n), kThreads, 0, stream, x, y, g, n);
  return cudaGetLastError();
}

cudaError_t LaunchGetRowsF32(const float* src, int64_t ne0, int64_t rows, const int32_t* ids,
                             int64_t n_ids, float* y, int32_t* error_flag, cudaStream_t stream) {
  if (n_ids <= 0 || ne0 <= 0) return cudaSuccess;
  const bool vec = ne0 % 4 == 0 && Aligned16(src) && Aligned16(y);
  const int64_t items = vec ? ne0 / 4 : ne0;
  dim3 grid(static_cast<unsigned>(std::min<int64_t>((items + kThreads - 1) / kThreads, 1024)),
            static_cast<unsigned>(std::min<int64_t>(n_ids, 65535)));
  if (vec) {
    LaunchGrid(get_rows_f32_kernel<true>, grid, kThreads, 0, stream, src, ne0, rows, ids, n_ids, y,
               error_flag);
  } else {
    LaunchGrid(get_rows_f32_kernel<false>, grid, kThreads, 0, stream, src, ne0, rows, ids, n_ids, y,
               error_flag);
  }
  return cudaGetLastError();
}

}  // namespace minfer::cuda
