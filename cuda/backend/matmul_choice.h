// Which kernel runs a matmul on the CUDA backend (docs/design.md, which
// kernel runs a matmul), as one pure function of the weight's type, the
// token count, the shape, the device, the knobs and two facts of the model;
// and, derived from it, the layout a producer writes its output in when
// every reader is such a matmul (mode 2). Host logic only: it builds and is
// tested without the CUDA toolkit (tests/cuda/backend/matmul_choice_test.cc).
//
// The backend plans every matmul with ChooseMatmulKernel and sets up
// activations with ActivationLayoutFor, so the kernel a matmul runs and the
// layout its producer wrote cannot disagree. Two fallbacks stay at run time,
// in the backend (ops_matmul.cc), because only the launcher knows: the DQ
// GEMM may decline a weight (cudaErrorNotSupported), and the weight then
// runs what this function chooses with `dq_declined` set; the few-token
// GEMM may decline, and the tiled MMQ (kMmq) runs on the same activations.
#ifndef MINFER_CUDA_BACKEND_MATMUL_CHOICE_H_
#define MINFER_CUDA_BACKEND_MATMUL_CHOICE_H_

#include <cstdint>

#include "absl/types/span.h"
#include "cuda/kernels/types.h"

namespace minfer::cuda {

enum class MatmulKernel : int32_t {
  kMmvq = 0,       // matmul.h LaunchMmvq: int8 dp4a, 1..kMmvqMaxTokens tokens
  kMatvecF32 = 1,  // matmul.h LaunchMatvecF32: f32 activations, any type
  kDqGemm = 2,     // dq_gemm.h LaunchDqGemm: decode batches of Q4_K / Q6_K
  kMmqSmall = 3,   // mmq.h LaunchMmqSmall: the few-token int8 GEMM
  kMmq = 4,        // mmq.h LaunchMmqSegments: the tiled int8 GEMM
  kGemmF16 = 5,    // matmul.h LaunchGemmF16: f16 tensor cores, any type
  kDqWgmma = 6,    // dq_wgmma.h LaunchDqWgmma: Hopper wgmma, batches of Q4_K / Q6_K
  kFp8Gemm = 7,    // fp8_gemm.h LaunchFp8Gemm: e4m3 tensor cores on a weight's fp8 copy
  kDqpWgmma = 8,   // dq_wgmma.h LaunchDqpWgmma: Hopper wgmma, prompts of Q4_K / Q6_K
};
// "mmvq", "matvec_f32", "dq_gemm", "mmq_small", "mmq", "gemm_f16", "dq_wgmma",
// "fp8_gemm", "dqp_wgmma".
const char* MatmulKernelName(MatmulKernel k);
// kMmvq and kMatvecF32: one weight at a time, f32 (or q8-plane) activations.
bool IsVectorKernel(MatmulKernel k);

// The knobs the choice reads, as the backend holds them after clamping
// (CudaBackend::RefreshKnobs; engine/base/builtin_knobs.cc documents each):
// every token threshold is at least 2, so one token always gets a vector
// kernel. The defaults are the registry's.
struct MatmulKnobs {
  bool kq_mmvq = true;             // !MINFER_NO_KQ_MMVQ: K-quants may run MMVQ
  int64_t mmvq_min_elems = 0;      // MINFER_MMVQ_MIN_ELEMS (the shape gate)
  bool prefill_gemm = true;        // !MINFER_NO_PREFILL_GEMM: the GEMM arms at all
  bool mmq = true;                 // MINFER_MMQ
  int64_t mmq_min_tokens = 9;      // MINFER_MMQ_MIN_TOKENS, 2..9
  int64_t mmq_small_min_tokens = 6;  // MINFER_MMQ_SMALL_MIN_TOKENS, 2..64
  int64_t mmq_small_tokens = 32;   // MINFER_MMQ_SMALL_TOKENS, 0..64
  bool dq = true;                  // MINFER_DQ_GEMM
  int64_t dq_min_tokens = 4;       // MINFER_DQ_MIN_TOKENS, 2..64
  int64_t dq_max_tokens = 64;      // MINFER_DQ_MAX_TOKENS, 0..64
  bool skip_write = true;          // !MINFER_NO_SKIP_WRITE: mode 2 (layout only)
  bool dqw = true;                 // MINFER_DQW: the Hopper DQ GEMM where it runs
  int64_t dqw_min_tokens = 17;     // MINFER_DQW_MIN_TOKENS, 2..256
  int64_t dqw_max_tokens = 256;    // MINFER_DQW_MAX_TOKENS, 0..8192 (launches of 256)
  int64_t dqp_min_tokens = 257;    // MINFER_DQP_MIN_TOKENS: 0 off, else 2..8192
  bool dqp_more_types = true;      // MINFER_DQP_MORE_TYPES: Q8_0 / Q5_K prompts there too
  int64_t fp8_min_tokens = 0;      // MINFER_FP8_PREFILL: 0 off, else 2..: the fp8 GEMM's batches
  bool operator==(const MatmulKnobs&) const = default;
};

// What the choice needs to know of the GPU.
struct MatmulDevice {
  int cc = 0;  // compute capability, major * 100 + minor * 10 (CudaState::cc)
  // sm_80+: mma.m16n8k32.s8 and cp.async, so MMQ, the few-token GEMM and
  // the DQ GEMM can run (and with them mode 2); older GPUs run the vector
  // kernels and the f16 GEMM.
  bool MmqRuns() const { return cc >= 800; }
  // The build carries the sm_90a kernels and this is a compute capability
  // 9.0 GPU (dq_wgmma.h DqwAvailable): the Hopper DQ GEMM can run. (Not
  // derived from cc: a build without the sm_90a code cannot run it there.)
  bool wgmma = false;
  // mma.m16n8k32 with e4m3 inputs (sm_89+): the fp8 GEMM can run.
  bool Fp8Runs() const { return Fp8GemmRuns(cc); }
};

// Everything the choice reads beyond one matmul: the device, the knobs and
// what the model's weights are.
struct MatmulContext {
  MatmulDevice device;
  MatmulKnobs knobs;
  // Whether some 2-D weight of the model is one the DQ GEMM takes
  // (CudaBackend::dq_max_k_ > 0): without one there is no DQ scratch and no
  // decode batch takes the DQ arm.
  bool model_has_dq_weights = false;
};

// One weight applied to nt tokens of k inputs.
struct MatmulChoiceInput {
  GgmlType type = GgmlType::kF32;
  bool q6k_padded = false;  // Q6_K in the registry's 224-byte blocks (always, on the device)
  int64_t rows = 0;
  int64_t nt = 1;
  int64_t k = 0;
  // MINFER_MMVQ_MIN_ELEMS applies (one token, rows * k below it, no q8
  // plane of the input yet: the f32 matvec saves the quantize launch). The
  // single MatMul applies it; the fused one-token launches (FusedQKV,
  // FusedFFN) do not.
  bool apply_mmvq_gate = true;
  bool input_has_q8 = false;  // a producer (or an earlier MMVQ) wrote x's q8 plane
  // The DQ launcher declined this weight at run time: the kernel it runs
  // instead (the next arm of the tree).
  bool dq_declined = false;
  // The backend holds an e4m3 copy of this weight (made at load for Q8_0 /
  // F16 / BF16 weights while MINFER_FP8_PREFILL was on; engine/quant/
  // fp8_matmul.h's contract).
  bool has_fp8 = false;
  MatmulContext ctx;
};

// An f32 weight of at most this many rows runs the f32 matvec at every
// batch size (rule 0 below): such a matrix is a mixture-of-experts router,
// whose logits choose experts, and the f16 GEMM's rounding would choose
// differently from the CPU; it is too small for the GEMM to matter.
inline constexpr int64_t kExactF32MaxRows = 512;

// The kernel planned for one weight (docs/design.md, which kernel runs a
// matmul). In order:
//  0. An f32 weight of at most kExactF32MaxRows rows: the f32 matvec.
//  0b. FP8 (opt-in): a weight with an e4m3 copy, a batch of at least
//     fp8_min_tokens (>= 2) tokens, the GEMM arms on and an sm_89+ GPU:
//     the fp8 GEMM. It outranks every arm below, the DQ GEMMs included
//     (their weights, Q4_K / Q6_K, never have an fp8 copy).
//  1. The GEMM arms apply when MINFER_NO_PREFILL_GEMM is off and the batch
//     is prefill-shaped (nt >= mmq_min_tokens), a few-token batch
//     (mmq_small_min_tokens <= nt <= mmq_small_tokens, MMQ on and runnable)
//     or a DQ batch (dq_min_tokens <= nt <= dq_max_tokens, DQ on, sm_80+,
//     the model has DQ weights) or a Hopper DQ batch (dqw_min_tokens <= nt
//     <= dqw_max_tokens, DQW on, the wgmma kernels run, the model has DQ
//     weights). Otherwise, 4.
//  2. A weight the DQ GEMMs take (unless declined: then all three are
//     skipped), in a prompt for the Hopper prefill GEMM (dqp_min_tokens >=
//     2, nt >= dqp_min_tokens, DQW on, the wgmma kernels run; no upper
//     bound) runs that one; else in a Hopper DQ batch the Hopper DQ GEMM;
//     else in a DQ batch the DQ GEMM. With dqp_more_types, a Q8_0 or Q5_K
//     weight in such a prompt runs the prefill GEMM too (k a multiple of
//     256: it walks k in super-blocks; a Q8_0 weight of another k keeps MMQ). (The DQ batches
//     need the model to have DQ weights, for their scratch; a prompt on the
//     prefill GEMM needs it, or dqp_more_types and such a weight.)
//  3. Else: below mmq_min_tokens a weight that is not on the few-token GEMM
//     (not an MMQ type, or the batch is not a few-token one) keeps its
//     vector kernel (4); an MMQ weight with MMQ on and runnable runs the
//     few-token GEMM up to mmq_small_tokens tokens, the tiled MMQ above;
//     every other weight the f16 GEMM.
//  4. The vector kernels: MMVQ for the integer-dot types up to
//     kMmvqMaxTokens tokens (K-quants only with kq_mmvq), unless the shape
//     gate sends the matmul to the f32 matvec; everything else the f32
//     matvec (at any nt).
MatmulKernel ChooseMatmulKernel(const MatmulChoiceInput& in);

// The layout in which a producer (RmsNorm, SwiGLU) writes its output.
enum class ActivationLayout : int32_t {
  kF32 = 0,      // the f32 values (a decode RmsNorm adds the q8 plane MMVQ reads)
  kMmqInt8 = 1,  // only MMQ's padded int8 layout (mmq.h), the f32 range dead
  kDqF16 = 2,    // only the DQ GEMM's f16 layout (dq_gemm.h), the f32 range dead
  kDqwF16 = 3,   // only the Hopper DQ GEMM's f16 layout (dq_wgmma.h), the f32 range dead
};
const char* ActivationLayoutName(ActivationLayout l);
// What kernel k reads its input from: kMmqInt8 for MMQ and the few-token
// GEMM, kDqF16 for the DQ GEMM, kDqwF16 for the two Hopper ones, kF32 for the others (MMVQ's q8 plane is
// quantized from the f32 values when no producer wrote it).
ActivationLayout InputLayoutOf(MatmulKernel k);

// A weight type as the choice sees it.
struct WeightClass {
  GgmlType type = GgmlType::kF32;
  bool q6k_padded = false;
  bool has_fp8 = false;  // MatmulChoiceInput::has_fp8
  bool operator==(const WeightClass&) const = default;
};

// A producer's output of nt rows of k, about to be written.
struct ProducerChoiceInput {
  int64_t nt = 0;
  int64_t k = 0;
  // OpParams::int8_consumers: every reader is a MatMul / FusedQKV /
  // FusedFFN whose weights are all of integer-dot types.
  bool int8_consumers = false;
  // The classes of the model's 2-D integer-dot weights (the readers'
  // weights are among them; which ones, the producer does not know).
  absl::Span<const WeightClass> int8_weights;
  MatmulContext ctx;
};

// Mode 2 (docs/design.md, prefill matmuls): a layout other than kF32 only
// when MINFER_NO_SKIP_WRITE is off, k % 32 == 0, every reader is an
// integer-dot matmul, and ChooseMatmulKernel sends every integer-dot weight
// class of the model to a kernel reading that one layout — so whichever
// weights read it, they read what was written. The MMQ layout is used for
// prefill-shaped batches only (nt >= mmq_min_tokens): the few-token GEMM's
// batches below that read it too, but their producers write f32 (mode 2's
// rule as it stands; widening it would be a change of behaviour).
ActivationLayout ActivationLayoutFor(const ProducerChoiceInput& in);

}  // namespace minfer::cuda

#endif  // MINFER_CUDA_BACKEND_MATMUL_CHOICE_H_
