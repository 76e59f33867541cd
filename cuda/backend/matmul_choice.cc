#include "cuda/backend/matmul_choice.h"

namespace minfer::cuda {

namespace {

// The types MINFER_NO_KQ_MMVQ takes off MMVQ.
bool IsKQuant(GgmlType t) {
  return t == GgmlType::kQ4_K || t == GgmlType::kQ5_K || t == GgmlType::kQ6_K;
}

MatmulKernel VectorKernel(const MatmulChoiceInput& in) {
  const MatmulKnobs& kn = in.ctx.knobs;
  bool mmvq = MmvqSupports(in.type) && in.nt <= kMmvqMaxTokens && !(IsKQuant(in.type) && !kn.kq_mmvq);
  // The shape gate: a small one-token matmul whose input no producer
  // quantized would pay a quantize launch before MMVQ; below the gate the
  // f32 matvec (one launch) is the faster choice (matmul_bench --gates).
  if (mmvq && in.apply_mmvq_gate && in.nt == 1 && in.rows * in.k < kn.mmvq_min_elems &&
      !in.input_has_q8) {
    mmvq = false;
  }
  return mmvq ? MatmulKernel::kMmvq : MatmulKernel::kMatvecF32;
}

}  // namespace

const char* MatmulKernelName(MatmulKernel k) {
  switch (k) {
    case MatmulKernel::kMmvq: return "mmvq";
    case MatmulKernel::kMatvecF32: return "matvec_f32";
    case MatmulKernel::kDqGemm: return "dq_gemm";
    case MatmulKernel::kMmqSmall: return "mmq_small";
    case MatmulKernel::kMmq: return "mmq";
    case MatmulKernel::kGemmF16: return "gemm_f16";
    case MatmulKernel::kDqWgmma: return "dq_wgmma";
    case MatmulKernel::kFp8Gemm: return "fp8_gemm";
    case MatmulKernel::kDqpWgmma: return "dqp_wgmma";
  }
  return "?";
}

bool IsVectorKernel(MatmulKernel k) {
  return k == MatmulKernel::kMmvq || k == MatmulKernel::kMatvecF32;
}

MatmulKernel ChooseMatmulKernel(const MatmulChoiceInput& in) {
  if (in.type == GgmlType::kF32 && in.rows <= kExactF32MaxRows) return MatmulKernel::kMatvecF32;
  const MatmulKnobs& kn = in.ctx.knobs;
  const int64_t nt = in.nt;
  if (in.has_fp8 && kn.prefill_gemm && kn.fp8_min_tokens >= 2 && nt >= kn.fp8_min_tokens &&
      in.ctx.device.Fp8Runs()) {
    return MatmulKernel::kFp8Gemm;
  }
  const bool mmq = kn.mmq && in.ctx.device.MmqRuns();
  // A decode batch for the few-token GEMM.
  const bool small_batch = nt >= kn.mmq_small_min_tokens && nt <= kn.mmq_small_tokens && mmq;
  // A decode batch for the DQ GEMM (its weights; the others keep theirs).
  const bool dq_batch = kn.dq && in.ctx.device.MmqRuns() && in.ctx.model_has_dq_weights &&
                        nt >= kn.dq_min_tokens && nt <= kn.dq_max_tokens;
  // A batch for the Hopper DQ GEMM (its weights; it outranks the DQ GEMM
  // and MMQ over its token range).
  const bool hopper = kn.dqw && in.ctx.device.wgmma;
  const bool dqw_batch = hopper && in.ctx.model_has_dq_weights && nt >= kn.dqw_min_tokens &&
                         nt <= kn.dqw_max_tokens;
  // The types only the Hopper prefill GEMM decodes (Q8_0, Q5_K), when
  // MINFER_DQP_MORE_TYPES lets them. It walks k in 256-element super-blocks
  // (a Q8_0 one is 8 blocks), so a Q8_0 weight whose k is not a multiple of
  // 256 (Qwen2.5-0.5B's 896) stays on MMQ; the K-quants' k always is.
  const bool dq_type = DqSupports(in.type, in.q6k_padded);
  const bool more_type = kn.dqp_more_types && !dq_type && DqpSupports(in.type, in.q6k_padded) &&
                         in.k % 256 == 0;
  // A prompt for the Hopper prefill GEMM (no upper bound: it tiles tokens;
  // its f16 layout needs no DQ scratch, so a weight of those types may take
  // it in a model without DQ weights).
  const bool dqp_batch = hopper && (in.ctx.model_has_dq_weights || more_type) &&
                         kn.dqp_min_tokens >= 2 && nt >= kn.dqp_min_tokens;
  if (!kn.prefill_gemm ||
      !(nt >= kn.mmq_min_tokens || small_batch || dq_batch || dqw_batch || dqp_batch)) {
    return VectorKernel(in);
  }
  if (!in.dq_declined && (dq_type || more_type) && dqp_batch) return MatmulKernel::kDqpWgmma;
  if (!in.dq_declined && dq_type) {
    if (dqw_batch) return MatmulKernel::kDqWgmma;
    if (dq_batch) return MatmulKernel::kDqGemm;
  }
  const bool gemm_ok = mmq && MmqSupports(in.type);
  // A decode batch that only the few-token GEMM or the DQ GEMM brought
  // here: the other weights keep the vector kernels.
  if (nt < kn.mmq_min_tokens && !(gemm_ok && small_batch)) return VectorKernel(in);
  if (!gemm_ok) return MatmulKernel::kGemmF16;
  // Up to mmq_small_tokens the few-token kernel streams the weights (also
  // from mmq_min_tokens on when that is below mmq_small_min_tokens).
  return nt <= kn.mmq_small_tokens ? MatmulKernel::kMmqSmall : MatmulKernel::kMmq;
}

const char* ActivationLayoutName(ActivationLayout l) {
  switch (l) {
    case ActivationLayout::kF32: return "f32";
    case ActivationLayout::kMmqInt8: return "mmq_int8";
    case ActivationLayout::kDqF16: return "dq_f16";
    case ActivationLayout::kDqwF16: return "dqw_f16";
  }
  return "?";
}

ActivationLayout InputLayoutOf(MatmulKernel k) {
  switch (k) {
    case MatmulKernel::kMmqSmall:
    case MatmulKernel::kMmq:
      return ActivationLayout::kMmqInt8;
    case MatmulKernel::kDqGemm:
      return ActivationLayout::kDqF16;
    case MatmulKernel::kDqWgmma:
    case MatmulKernel::kDqpWgmma:
      return ActivationLayout::kDqwF16;
    case MatmulKernel::kMmvq:
    case MatmulKernel::kMatvecF32:
    case MatmulKernel::kGemmF16:
    case MatmulKernel::kFp8Gemm:
      return ActivationLayout::kF32;
  }
  return ActivationLayout::kF32;
}

ActivationLayout ActivationLayoutFor(const ProducerChoiceInput& in) {
  if (!in.int8_consumers || !in.ctx.knobs.skip_write || in.k % 32 != 0 ||
      in.int8_weights.empty()) {
    return ActivationLayout::kF32;
  }
  // The layout every integer-dot weight class of the model would read at
  // this shape. The rows and the q8 memo only pick between the two vector
  // kernels, which both read f32.
  ActivationLayout layout = ActivationLayout::kF32;
  for (size_t i = 0; i < in.int8_weights.size(); ++i) {
    MatmulChoiceInput m;
    m.type = in.int8_weights[i].type;
    m.q6k_padded = in.int8_weights[i].q6k_padded;
    m.has_fp8 = in.int8_weights[i].has_fp8;
    m.nt = in.nt;
    m.k = in.k;
    m.ctx = in.ctx;
    const ActivationLayout l = InputLayoutOf(ChooseMatmulKernel(m));
    if (l == ActivationLayout::kF32 || (i > 0 && l != layout)) return ActivationLayout::kF32;
    layout = l;
  }
  if (layout == ActivationLayout::kMmqInt8 && in.nt < in.ctx.knobs.mmq_min_tokens) {
    return ActivationLayout::kF32;  // (prefill shapes only: the header says why)
  }
  return layout;
}

}  // namespace minfer::cuda
