// MMVQ launchers (matmul.h) and the single-token instantiations: plain,
// FusedQKV segments, FusedFFN (SwiGLU). Multi-token instantiations live in
// mmvq_multi.cu. Kernel design: mmvq_impl.cuh.
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <mutex>

#include "cuda/kernels/matmul.h"
#include "cuda/kernels/mmvq_impl.cuh"
#include "cuda/kernels/types.h"

namespace minfer::cuda {
namespace mmvq {
namespace {

struct DeviceInfo {
  int sms = 0;
  int smem_per_sm = 0;
  int regs_per_sm = 0;
  int threads_per_sm = 0;
};

// Device properties, read once per device (host calls that are legal inside
// a stream-capture window, but not free).
const DeviceInfo& GetDeviceInfo() {
  static PerDevice<DeviceInfo> cache;
  return cache.Get([](int dev) {
    DeviceInfo d;
    cudaDeviceGetAttribute(&d.smem_per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev);
    cudaDeviceGetAttribute(&d.regs_per_sm, cudaDevAttrMaxRegistersPerMultiprocessor, dev);
    cudaDeviceGetAttribute(&d.threads_per_sm, cudaDevAttrMaxThreadsPerMultiProcessor, dev);
    int sms = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    d.sms = sms > 0 ? sms : 1;
    return d;
  });
}

}  // namespace

int DeviceSmCount() { return GetDeviceInfo().sms; }

int ResidentCtas(int regs_per_thread, size_t smem_bytes) {
  const DeviceInfo& d = GetDeviceInfo();
  int per_sm = d.threads_per_sm > 0 ? d.threads_per_sm / kThreads : 8;
  const int regs = ((regs_per_thread > 0 ? regs_per_thread : 64) + 7) / 8 * 8;
  if (d.regs_per_sm > 0) per_sm = std::min(per_sm, d.regs_per_sm / (regs * kThreads));
  // ~1 KB per CTA is reserved by the runtime.
  if (smem_bytes > 0 && d.smem_per_sm > 0) {
    per_sm = std::min(per_sm, static_cast<int>(d.smem_per_sm / (smem_bytes + 1024)));
  }
  return std::max(per_sm, 1) * d.sms;
}

namespace {

template <GgmlType T>
cudaError_t LaunchSingleT(const Plan& plan, cudaStream_t stream) {
  const bool sm = plan.smem_act;
  switch (plan.mode) {
    case kPlain:
      switch (plan.rows_per_warp) {
        case 1:
          return sm ? LaunchInstance<T, 1, 1, true, kPlain>(plan, stream)
                    : LaunchInstance<T, 1, 1, false, kPlain>(plan, stream);
        case 2:
          return sm ? LaunchInstance<T, 1, 2, true, kPlain>(plan, stream)
                    : LaunchInstance<T, 1, 2, false, kPlain>(plan, stream);
        case 4:
          return sm ? LaunchInstance<T, 1, 4, true, kPlain>(plan, stream)
                    : LaunchInstance<T, 1, 4, false, kPlain>(plan, stream);
        default:
          return cudaErrorInvalidValue;
      }
    case kSwiGlu:
      return sm ? LaunchInstance<T, 1, 2, true, kSwiGlu>(plan, stream)
                : LaunchInstance<T, 1, 2, false, kSwiGlu>(plan, stream);
    case kSiluMulPrev:
      return sm ? LaunchInstance<T, 1, 2, true, kSiluMulPrev>(plan, stream)
                : LaunchInstance<T, 1, 2, false, kSiluMulPrev>(plan, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace

cudaError_t LaunchPlanSingle(GgmlType type, const Plan& plan, cudaStream_t stream) {
  switch (type) {
    case GgmlType::kQ4_0: return LaunchSingleT<GgmlType::kQ4_0>(plan, stream);
    case GgmlType::kQ4_1: return LaunchSingleT<GgmlType::kQ4_1>(plan, stream);
    case GgmlType::kQ5_0: return LaunchSingleT<GgmlType::kQ5_0>(plan, stream);
    case GgmlType::kQ5_1: return LaunchSingleT<GgmlType::kQ5_1>(plan, stream);
    case GgmlType::kQ8_0: return LaunchSingleT<GgmlType::kQ8_0>(plan, stream);
    case GgmlType::kQ4_K: return LaunchSingleT<GgmlType::kQ4_K>(plan, stream);
    case GgmlType::kQ5_K: return LaunchSingleT<GgmlType::kQ5_K>(plan, stream);
    case GgmlType::kQ6_K: return LaunchSingleT<GgmlType::kQ6_K>(plan, stream);
    default: return cudaErrorInvalidValue;
  }
}

namespace {

int64_t BlockElems(GgmlType t) { return TraitsOf(t).block_size; }

// Checks one weight for the MMVQ kernels; fills its segment. `rows_begin` and
// `y_offset` are the caller's.
bool CheckWeight(const WeightView& w, int64_t* block_bytes) {
  if (!MmvqSupports(w.type) || w.data == nullptr || w.k <= 0 || w.rows < 0) return false;
  if (w.k % BlockElems(w.type) != 0) return false;
  if (w.q6k_padded && w.type != GgmlType::kQ6_K) return false;
  *block_bytes = DeviceBlockBytes(w.type, w.q6k_padded);
  const int64_t need = w.k / BlockElems(w.type) * *block_bytes;
  // The legacy-block window loads need 2-byte alignment (every GGUF block
  // field is 2-byte aligned).
  if (w.row_bytes < need || w.row_bytes % 2 != 0) return false;
  if (reinterpret_cast<uintptr_t>(w.data) % 2 != 0) return false;
  return true;
}

// The activation blocks are read as 8-byte units.
bool QOk(const BlockQ8A* q) { return q != nullptr && reinterpret_cast<uintptr_t>(q) % 8 == 0; }

bool Aligned16(const WeightView& w, int64_t block_bytes) {
  return reinterpret_cast<uintptr_t>(w.data) % 16 == 0 && w.row_bytes % 16 == 0 &&
         block_bytes % 16 == 0;
}

// Units (what one lane decodes at a time) per row: K-quant units hold two
// activation blocks.
int64_t UnitsPerRow(GgmlType type, int64_t nb) {
  return TraitsOf(type).block_size == 256 ? nb / 2 : nb;
}

// Rows per warp group of the plain kernel, from the shape (measured on the
// H200 with matmul_bench --sweep): big matrices amortize the activation
// loads over 2 or 4 rows; below ~8K rows one row per warp gives more warps,
// each with a shorter dependency chain. The 64-weight K-quant units are
// register-heavy: Q5_K/Q6_K spill beyond one row, Q4_K beyond two.
int DefaultRowsPerWarp(GgmlType type, int64_t rows) {
  if (type == GgmlType::kQ5_K) return 1;
  if (type == GgmlType::kQ6_K) return rows >= 65536 ? 2 : 1;
  if (type == GgmlType::kQ4_K) return rows >= 8192 ? 2 : 1;
  return rows >= 65536 ? 4 : rows >= 8192 ? 2 : 1;
}

// Fills the geometry of `plan` (params.rows, nb, the segments and
// rows_per_warp already set). `rows_per_group` = output rows per warp group.
void ChooseGeometry(GgmlType type, const MmvqTuning& tuning, int rows_per_group, Plan* plan) {
  Params& p = plan->params;
  const int64_t groups = (p.rows + rows_per_group - 1) / rows_per_group;
  const int64_t units = UnitsPerRow(type, p.nb);
  int ks = tuning.ksplit;
  if (ks != 1 && ks != 2 && ks != 4 && ks != 8) {
    // Split k across warps only as far as needed for ~2K warps (about half
    // of what the device holds; the cross-warp reduction is not free), and
    // never beyond giving every warp some work.
    ks = 1;
    while (ks < 8 && groups * ks < 2048 && ks * 32 < units) ks *= 2;
  }
  p.ks = ks;
  p.ks_log2 = ks == 1 ? 0 : ks == 2 ? 1 : ks == 4 ? 2 : 3;
  const int groups_per_cta = kWarps / ks;
  p.n_cta_blocks = (groups + groups_per_cta - 1) / groups_per_cta;
  plan->grid = static_cast<int>(std::min<int64_t>(p.n_cta_blocks, 0x7FFFFFFF));

  // Shared-memory activations pay off when many rows re-read them (one
  // warp group per row below ~8K rows reads them once per row anyway).
  const int64_t act_bytes = plan->nt * p.nb * static_cast<int64_t>(sizeof(BlockQ8A));
  const int64_t red_bytes = static_cast<int64_t>(kWarps) * plan->rows_per_warp * plan->nt * 4;
  const bool want = tuning.act_smem == 1 ||
                    (tuning.act_smem < 0 && (plan->nt > 1 || plan->rows_per_warp > 1));
  plan->smem_act = want && act_bytes + red_bytes <= kMaxSmem;
  plan->smem_bytes = static_cast<size_t>((plan->smem_act ? act_bytes : 0) + red_bytes);
}

cudaError_t LaunchPlan(GgmlType type, const Plan& plan, cudaStream_t stream) {
  if (plan.params.rows == 0 || plan.nt == 0) return cudaSuccess;
  return plan.nt == 1 ? LaunchPlanSingle(type, plan, stream)
                      : LaunchPlanMulti(type, plan, stream);
}

}  // namespace
}  // namespace mmvq

namespace {

cudaError_t LaunchMmvqPlain(const WeightView& w, const BlockQ8A* q, const float* residual,
                            float* y, int64_t y_stride, int64_t nt, const MmvqTuning& tuning,
                            cudaStream_t stream) {
  using namespace mmvq;
  int64_t block_bytes = 0;
  if (!CheckWeight(w, &block_bytes) || !QOk(q) || y == nullptr || nt < 0 || nt > 8) {
    return cudaErrorInvalidValue;
  }
  if (nt > 1 && y_stride < w.rows) return cudaErrorInvalidValue;
  Plan plan{};
  Params& p = plan.params;
  p.seg[0] = Seg{static_cast<const uint8_t*>(w.data), w.row_bytes, 0, 0};
  p.nseg = 1;
  p.rows = w.rows;
  p.nb = w.k / 32;
  p.q = q;
  p.y = y;
  p.y_stride = y_stride;
  p.res = residual;
  p.block_bytes = static_cast<int>(block_bytes);
  p.aligned = Aligned16(w, block_bytes);
  plan.nt = static_cast<int>(nt);
  plan.mode = kPlain;
  int r = tuning.rows_per_warp;
  if (!p.aligned && NeedsUnaligned(w.type)) {
    r = 2;  // the only unaligned-K-quant instantiation
  } else if (nt > 1) {
    // Multi-token: two rows share each activation load (K-quants also take
    // one on request).
    r = NeedsUnaligned(w.type) && r == 1 ? 1 : 2;
  } else if (r != 1 && r != 2 && r != 4) {
    r = DefaultRowsPerWarp(w.type, w.rows);
  }
  plan.rows_per_warp = r;
  ChooseGeometry(w.type, tuning, r, &plan);
  return LaunchPlan(w.type, plan, stream);
}

}  // namespace

cudaError_t LaunchMmvqTuned(const WeightView& w, const BlockQ8A* q, float* y, int64_t y_stride,
                            int64_t nt, const MmvqTuning& tuning, cudaStream_t stream) {
  return LaunchMmvqPlain(w, q, nullptr, y, y_stride, nt, tuning, stream);
}

cudaError_t LaunchMmvq(const WeightView& w, const BlockQ8A* q, float* y, int64_t y_stride,
                       int64_t nt, cudaStream_t stream) {
  return LaunchMmvqPlain(w, q, nullptr, y, y_stride, nt, MmvqTuning{}, stream);
}

cudaError_t LaunchMmvqResidual(const WeightView& w, const BlockQ8A* q, const float* residual,
                               float* y, int64_t y_stride, int64_t nt, cudaStream_t stream) {
  if (residual == nullptr) return cudaErrorInvalidValue;
  return LaunchMmvqPlain(w, q, residual, y, y_stride, nt, MmvqTuning{}, stream);
}

cudaError_t LaunchMmvqSegments(const MmvqSegments& segs, const BlockQ8A* q, float* y,
                               cudaStream_t stream) {
  using namespace mmvq;
  if (segs.n < 1 || segs.n > 3 || !QOk(q) || y == nullptr) return cudaErrorInvalidValue;
  int64_t bbytes[3];
  for (int i = 0; i < segs.n; ++i) {
    if (!CheckWeight(segs.w[i], &bbytes[i]) || segs.w[i].k != segs.w[0].k) {
      return cudaErrorInvalidValue;
    }
  }
  // One launch per distinct (type, block stride): a kernel is specialized on
  // the block format. Segments keep their place in y.
  bool done[3] = {false, false, false};
  int64_t y_offset[3];
  int64_t off = 0;
  for (int i = 0; i < segs.n; ++i) y_offset[i] = off, off += segs.w[i].rows;
  for (int i = 0; i < segs.n; ++i) {
    if (done[i]) continue;
    Plan plan{};
    Params& p = plan.params;
    p.nseg = 0;
    p.rows = 0;
    bool aligned = true;
    for (int j = i; j < segs.n; ++j) {
      if (done[j] || segs.w[j].type != segs.w[i].type || bbytes[j] != bbytes[i]) continue;
      done[j] = true;
      const WeightView& w = segs.w[j];
      p.seg[p.nseg++] = Seg{static_cast<const uint8_t*>(w.data), w.row_bytes, p.rows, y_offset[j]};
      p.rows += w.rows;
      aligned = aligned && Aligned16(w, bbytes[j]);
    }
    for (int j = p.nseg; j < 3; ++j) p.seg[j] = p.seg[0];
    p.nb = segs.w[i].k / 32;
    p.q = q;
    p.y = y;
    p.y_stride = 0;
    p.block_bytes = static_cast<int>(bbytes[i]);
    p.aligned = aligned;
    plan.nt = 1;
    plan.mode = kPlain;
    plan.rows_per_warp =
        aligned || !NeedsUnaligned(segs.w[i].type) ? DefaultRowsPerWarp(segs.w[i].type, p.rows) : 2;
    ChooseGeometry(segs.w[i].type, MmvqTuning{}, plan.rows_per_warp, &plan);
    const cudaError_t err = LaunchPlan(segs.w[i].type, plan, stream);
    if (err != cudaSuccess) return err;
  }
  return cudaSuccess;
}

cudaError_t LaunchMmvqSwiGlu(const WeightView& gate, const WeightView& up, const BlockQ8A* q,
                             float* y, cudaStream_t stream) {
  using namespace mmvq;
  int64_t gb = 0, ub = 0;
  if (!CheckWeight(gate, &gb) || !CheckWeight(up, &ub) || !QOk(q) || y == nullptr ||
      gate.k != up.k || gate.rows != up.rows) {
    return cudaErrorInvalidValue;
  }
  Plan plan{};
  Params& p = plan.params;
  p.nseg = 1;
  p.rows = gate.rows;
  p.nb = gate.k / 32;
  p.q = q;
  p.y = y;
  p.y_stride = 0;
  plan.nt = 1;
  plan.rows_per_warp = 2;
  if (gate.type == up.type && gb == ub) {
    // One launch: each warp group owns the pair (gate row r, up row r).
    p.seg[0] = Seg{static_cast<const uint8_t*>(gate.data), gate.row_bytes, 0, 0};
    p.seg[1] = p.seg[2] = p.seg[0];
    p.up = static_cast<const uint8_t*>(up.data);
    p.up_row_bytes = up.row_bytes;
    p.block_bytes = static_cast<int>(gb);
    p.aligned = Aligned16(gate, gb) && Aligned16(up, ub);
    plan.mode = kSwiGlu;
    ChooseGeometry(gate.type, MmvqTuning{}, 1, &plan);
    return LaunchPlan(gate.type, plan, stream);
  }
  // Different formats: gate into y, then y = silu(y) * (up . q).
  const cudaError_t err = LaunchMmvq(gate, q, y, 0, 1, stream);
  if (err != cudaSuccess) return err;
  p.seg[0] = Seg{static_cast<const uint8_t*>(up.data), up.row_bytes, 0, 0};
  p.seg[1] = p.seg[2] = p.seg[0];
  p.block_bytes = static_cast<int>(ub);
  p.aligned = Aligned16(up, ub);
  plan.mode = kSiluMulPrev;
  ChooseGeometry(up.type, MmvqTuning{}, 2, &plan);
  return LaunchPlan(up.type, plan, stream);
}

}  // namespace minfer::cuda
