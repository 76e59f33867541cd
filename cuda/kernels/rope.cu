// Rotary position embedding, NeoX (pairs i, i + n_rot/2) and interleaved
// (pairs 2i, 2i+1), in place or out of place.
//
// Angles are the CPU's (engine/cpu/elementwise.cc RopeF32): the frequency
// table powf(base, -2i/n_rot) is computed on the host with the CPU's float
// expression, theta = float(pos) * freq is rounded to float, and cos/sin of
// that float are evaluated in double and rounded (common.cuh rope_cos_sin).
// The rotation avoids FMA contraction. Result: bit-identical to the CPU for
// all but ~1e-8 of angles, where cos or sin is one float ulp off, so an output
// differs by at most ~2^-24 * (|x0| + |x1|).
//
// One block per token: the block computes its token's n_rot/2 (cos, sin)
// pairs once into shared memory (the double sincos is the expensive part)
// and then rotates every head with them.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "cuda/kernels/common.cuh"
#include "cuda/kernels/launch.cuh"
#include "cuda/kernels/ops.h"

namespace minfer::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads)
    rope_kernel(const float* x, const int32_t* __restrict__ pos, float* y, int head_dim,
                int n_heads, int64_t nt, int n_rot, int style, RopeFreqs freqs,
                const YarnTable yarn) {
  pdl_enter();
  __shared__ float cs[kRopeMaxPairs], sn[kRopeMaxPairs];
  const int half = n_rot / 2;
  for (int64_t t = blockIdx.x; t < nt; t += gridDim.x) {
    const int32_t p = pos[t];
    for (int i = threadIdx.x; i < half; i += blockDim.x) rope_angle(p, i, freqs, yarn, &cs[i], &sn[i]);
    __syncthreads();
    const float* xt = x + t * n_heads * static_cast<int64_t>(head_dim);
    float* yt = y + t * n_heads * static_cast<int64_t>(head_dim);
    // Each (head, pair) is read and written by one thread, so y may alias x.
    for (int idx = threadIdx.x; idx < n_heads * half; idx += blockDim.x) {
      const int h = idx / half, i = idx - h * half;
      const int i0 = style == 0 ? i : 2 * i;
      const int i1 = style == 0 ? i + half : 2 * i + 1;
      const float* xh = xt + h * head_dim;
      float y0, y1;
      rope_rotate(xh[i0], xh[i1], cs[i], sn[i], &y0, &y1);
      yt[h * head_dim + i0] = y0;
      yt[h * head_dim + i1] = y1;
    }
    if (x != y) {  // dims past n_rot pass through
      const int rest = head_dim - n_rot;
      for (int idx = threadIdx.x; idx < n_heads * rest; idx += blockDim.x) {
        const int h = idx / rest, i = n_rot + (idx - h * rest);
        yt[h * head_dim + i] = xt[h * head_dim + i];
      }
    }
    __syncthreads();  // cs/sn are rewritten for the next token
  }
}

}  // namespace

bool MakeRopeFreqs(int n_rot, float base, const float* factors, RopeFreqs* out) {
  if (n_rot <= 0 || n_rot % 2 != 0 || n_rot / 2 > kRopeMaxPairs) return false;
  for (int i = 0; i < n_rot / 2; ++i) {
    // Exactly the CPU backend's expressions (engine/cpu/elementwise.cc).
    out->f[i] = std::pow(base, -2.0f * static_cast<float>(i) / static_cast<float>(n_rot));
    if (factors != nullptr) out->f[i] /= factors[i];
  }
  return true;
}

void MakeYarnTable(int n_rot, float base, const RopeYarnArgs* args, YarnTable* out) {
  *out = YarnTable{};
  if (args == nullptr || args->freq_scale == 1.0f) return;
  // The CPU's expressions, in the same float / double steps.
  const RopeYarnArgs& ya = *args;
  auto corr = [&](float beta) {
    return n_rot * std::log(ya.n_ctx_orig / (beta * 2.0f * static_cast<float>(M_PI))) /
           (2.0f * std::log(base));
  };
  const float lo = std::max(0.0f, std::floor(corr(ya.beta_fast)));
  const float hi = std::min(static_cast<float>(n_rot - 1), std::ceil(corr(ya.beta_slow)));
  for (int i = 0; i < n_rot / 2 && i < kRopeMaxPairs; ++i) {
    const float r = (static_cast<float>(i) - lo) / std::max(0.001f, hi - lo);
    out->mix[i] = (1.0f - std::min(1.0f, std::max(0.0f, r))) * ya.ext_factor;
    out->one_minus_mix[i] = 1.0f - out->mix[i];
  }
  out->mscale = ya.attn_factor;
  if (ya.ext_factor != 0.0f) out->mscale *= 1.0f + 0.1f * std::log(1.0f / ya.freq_scale);
  out->freq_scale = ya.freq_scale;
  out->active = 1;
}

cudaError_t LaunchRope(const float* x, const int32_t* pos, float* y, int64_t head_dim,
                       int64_t n_heads, int64_t nt, int n_rot, int style, float base,
                       cudaStream_t stream, const float* host_factors,
                       const RopeYarnArgs* yarn_args) {
  if (nt <= 0 || n_heads <= 0) return cudaSuccess;
  if (n_rot == 0) n_rot = static_cast<int>(head_dim);
  RopeFreqs freqs;
  if (style != 0 && style != 1) return cudaErrorInvalidValue;
  if (head_dim <= 0 || n_rot > head_dim || n_heads * head_dim > (int64_t{1} << 30) ||
      !MakeRopeFreqs(n_rot, base, host_factors, &freqs)) {
    return cudaErrorInvalidValue;
  }
  YarnTable yarn;
  MakeYarnTable(n_rot, base, yarn_args, &yarn);
  const unsigned blocks = static_cast<unsigned>(nt < 65536 ? nt : 65536);
  LaunchGrid(rope_kernel, blocks, kThreads, 0, stream, x, pos, y, static_cast<int>(head_dim),
             static_cast<int>(n_heads), nt, n_rot, style, freqs, yarn);
  return cudaGetLastError();
}

}  // namespace minfer::cuda
