#include "cuda/backend/cuda_backend.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cuda/kernels/dq_gemm.h"
#include "cuda/kernels/dq_wgmma.h"
#include "cuda/kernels/launch.h"
#include "cuda/kernels/matmul.h"
#include "cuda/kernels/mmq.h"
#include "cuda/kernels/moe.h"
#include "cuda/kernels/ops.h"
#include "cuda/kernels/sample.h"
#include "engine/base/logging.h"
#include "engine/base/status.h"

namespace minfer::cuda {

using graph::BufferRef;
using graph::DType;
using graph::ExecArgs;
using graph::Node;
using graph::OpKind;

namespace {

// Types with device kernels for every role a weight can have here: matmul
// (MMVQ / f32 matvec / f16 GEMM) and the embedding gather.
bool WeightTypeSupported(GgmlType t) {
  return t == GgmlType::kF32 || t == GgmlType::kF16 || t == GgmlType::kBF16 ||
         IsIntegerDotType(t) || t == GgmlType::kMXFP4;
}

constexpr int64_t kMinPinned = 1 << 20;

}  // namespace

CudaBackend::CudaBackend(CudaState* state, const KnobOverrides* knobs,
                         const uint64_t* knob_generation)
    : state_(state),
      knob_overrides_(knobs),
      model_knob_gen_(knob_generation),
      owner_(CudaState::NewOwnerId()),
      device_{state->cc(), DqwAvailable()} {
  RefreshKnobs();
}

absl::StatusOr<std::unique_ptr<CudaBackend>> CudaBackend::Create(
    CudaState* state, const models::DecoderModel& model, const KnobOverrides* knobs,
    const std::function<void(uint64_t, uint64_t)>& progress, const uint64_t* knob_generation,
    TensorParallel tp) {
  if (tp.group != nullptr &&
      (tp.rank < 0 || tp.rank >= tp.group->size() || tp.group->device(tp.rank) != state->device())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor-parallel rank ", tp.rank, " of ", tp.group->size(), " is not on cuda:",
        state->device()));
  }
  // The op gate, before anything is uploaded: a family whose graph needs an
  // op without a CUDA kernel (the mixture-of-experts ops, until their
  // kernels exist) is refused naming the op, so Model::Load keeps it on the
  // CPU under --backend auto and says why under --backend cuda. One decode
  // graph has every op kind of the family's graphs.
  {
    models::BatchGraphParams probe;
    probe.cache_rows = probe.kv_block;
    probe.gpu = true;
    probe.kv_type = graph::DType::kF16;
    ASSIGN_OR_RETURN(graph::Graph g, models::BuildDecoderBatchGraph(model, probe));
    CudaBackend checker(state, knobs, nullptr);
    checker.tp_ = tp;
    for (const Node& n : g.nodes()) {
      if (!checker.SupportsOp(n)) {
        return absl::UnimplementedError(absl::StrCat(
            "op ", graph::OpName(n.op), " (node '", n.name, "') of architecture '",
            model.hparams().arch, "' has no CUDA kernel"));
      }
    }
  }
  std::vector<const graph::Weight*> weights;
  for (const auto& w : model.weights()) weights.push_back(w.get());
  ASSIGN_OR_RETURN(auto b, Create(state, weights, knobs, progress));
  b->model_knob_gen_ = knob_generation;
  b->tp_ = std::move(tp);
  return b;
}

absl::StatusOr<std::unique_ptr<CudaBackend>> CudaBackend::Create(
    CudaState* state, const std::vector<const graph::Weight*>& weights,
    const KnobOverrides* knobs, const std::function<void(uint64_t, uint64_t)>& progress) {
  // The participation gate: every weight in a type with a kernel, checked
  // before anything is uploaded.
  for (const graph::Weight* w : weights) {
    if (!WeightTypeSupported(w->type)) {
      return absl::UnimplementedError(absl::StrCat("weight '", w->name, "' has type ",
                                                   GgmlTypeName(w->type),
                                                   ", which has no CUDA kernel"));
    }
    if (w->type == GgmlType::kMXFP4 && w->dims.size() != 3) {
      // Only the expert kernels read MXFP4 (gpt-oss's experts are its only
      // MXFP4 tensors).
      return absl::UnimplementedError(absl::StrCat(
          "weight '", w->name, "' is a ", w->dims.size(),
          "-D MXFP4 tensor; MXFP4 has CUDA kernels only for 3-D expert tensors"));
    }
    if (w->dims.size() == 1 && w->type != GgmlType::kF32) {
      return absl::UnimplementedError(
          absl::StrCat("weight '", w->name, "' is a 1-D ", GgmlTypeName(w->type), " tensor (f32 expected)"));
    }
  }
  std::unique_ptr<CudaBackend> b(new CudaBackend(state, knobs, nullptr));
  uint64_t total = 0, done = 0;
  for (const graph::Weight* w : weights) total += w->nbytes;
  for (const graph::Weight* w : weights) {
    auto v = state->RegisterWeight(b->owner_, *w);
    if (!v.ok()) return v.status();  // ~CudaBackend releases what was uploaded
    if (w->dims.size() == 2 && DqSupports(v->type, v->q6k_padded)) {
      b->dq_max_k_ = std::max(b->dq_max_k_, v->k);
    }
    if (w->dims.size() == 2 && IsIntegerDotType(v->type)) {
      const WeightClass c{v->type, v->q6k_padded};
      if (std::find(b->int8_weights_.begin(), b->int8_weights_.end(), c) ==
          b->int8_weights_.end()) {
        b->int8_weights_.push_back(c);
      }
    }
    done += w->nbytes;
    if (progress) progress(done, total);
  }
  Logger("cuda")->info("uploaded {} weights, {:.1f} MiB", weights.size(),
                       state->WeightBytes(b->owner_) / 1048576.0);
  RETURN_IF_ERROR(b->BuildScalePlanes(weights, knobs));
  RETURN_IF_ERROR(b->BuildFp8Copies(weights, knobs));
  return b;
}

absl::Status CudaBackend::BuildFp8Copies(const std::vector<const graph::Weight*>& weights,
                                         const KnobOverrides* knobs) {
  const int64_t min_tokens = KnobRegistry::Global().GetInt("MINFER_FP8_PREFILL", knobs);
  if (min_tokens < 2 || !device_.Fp8Runs()) return absl::OkStatus();
  // The weights that get a copy, and their rows per conversion chunk
  // (about 16M values: each chunk dequantized to f32 by the embedding
  // gather, bit-exact with the CPU's DequantizeRow, then quantized per row).
  constexpr int64_t kChunkValues = int64_t{1} << 24;
  struct Job {
    const graph::Weight* gw;
    const WeightView* w;
    int64_t chunk;
  };
  std::vector<Job> jobs;
  int64_t max_values = 0, max_chunk = 0;  // one scratch serves every job
  for (const graph::Weight* gw : weights) {
    if (gw->dims.size() != 2 || !(gw->type == GgmlType::kQ8_0 || gw->type == GgmlType::kF16 ||
                                  gw->type == GgmlType::kBF16)) {
      continue;
    }
    const WeightView* w = state_->FindWeight(owner_, gw->name);
    if (w == nullptr || w->k % 32 != 0) continue;
    const int64_t chunk = std::max<int64_t>(1, std::min(w->rows, kChunkValues / w->k));
    jobs.push_back({gw, w, chunk});
    max_values = std::max(max_values, chunk * w->k);
    max_chunk = std::max(max_chunk, chunk);
  }
  if (jobs.empty()) return absl::OkStatus();
  const int64_t ids_at = (max_values * 4 + 255) / 256 * 256;
  ASSIGN_OR_RETURN(void* tmp, state_->Malloc(static_cast<size_t>(ids_at + max_chunk * 4),
                                             "fp8 conversion"));
  float* f32 = static_cast<float*>(tmp);
  const int32_t* ids = reinterpret_cast<const int32_t*>(static_cast<uint8_t*>(tmp) + ids_at);
  std::vector<int32_t> iota(max_chunk);
  for (int64_t i = 0; i < max_chunk; ++i) iota[i] = static_cast<int32_t>(i);
  cudaStream_t st = state_->stream();
  absl::Status status;
  if (const cudaError_t e = cudaMemcpy(const_cast<int32_t*>(ids), iota.data(), max_chunk * 4,
                                       cudaMemcpyHostToDevice);
      e != cudaSuccess) {
    status = CudaStatus(e, "fp8 conversion ids", __FILE__, __LINE__);
  }
  for (const Job& j : jobs) {
    if (!status.ok()) break;
    const WeightView* w = j.w;
    const int64_t rb = Fp8RowBytes(w->k);
    const int64_t bytes = Fp8RowsBytes(w->rows, w->k);
    auto alloc = state_->Malloc(static_cast<size_t>(bytes),
                                absl::StrCat("fp8 copy of '", j.gw->name, "'"));
    if (!alloc.ok()) {
      status = alloc.status();
      break;
    }
    uint8_t* base = static_cast<uint8_t*>(*alloc);
    float* scales = reinterpret_cast<float*>(base + Fp8ScalesOffset(w->rows, w->k));
    fp8_copies_[w->data] = Fp8Copy{base, bytes, Fp8RowsView{base, scales, w->rows, w->k, rb}};
    fp8_bytes_ += bytes;
    std::unique_lock<std::recursive_mutex> lock = state_->Lock();
    cudaError_t err = cudaSuccess;
    for (int64_t r0 = 0; r0 < w->rows && err == cudaSuccess; r0 += j.chunk) {
      const int64_t n = std::min(j.chunk, w->rows - r0);
      WeightView part = *w;
      part.data = static_cast<const uint8_t*>(w->data) + r0 * w->row_bytes;
      part.rows = n;
      part.scale_plane = nullptr;
      err = LaunchGetRowsWeight(part, ids, n, f32, nullptr, st);
      if (err == cudaSuccess) {
        err = LaunchQuantizeRowsFp8(f32, w->k, w->k, n, base + r0 * rb, rb, scales + r0, st);
      }
    }
    if (err == cudaSuccess) err = cudaStreamSynchronize(st);
    if (err != cudaSuccess) {
      const absl::Status e = CudaStatus(err, "fp8 copy", __FILE__, __LINE__);
      status = absl::Status(e.code(), absl::StrCat("weight '", j.gw->name, "': ", e.message()));
    }
  }
  cudaStreamSynchronize(st);
  state_->Free(tmp);
  if (!status.ok()) return status;  // ~CudaBackend frees the copies made so far
  // Read once, at load (kReload), as the CPU backend reads it: the copies
  // exist only for the value the model was loaded with.
  fp8_min_tokens_ = min_tokens;
  knobs_.matmul.fp8_min_tokens = min_tokens;
  // The integer-dot classes whose weights now have copies (mode 2 asks).
  for (WeightClass& c : int8_weights_) c.has_fp8 = c.type == GgmlType::kQ8_0;
  Logger("cuda")->info("fp8 copies of {} weights for prefill matmuls: {:.1f} MiB",
                       fp8_copies_.size(), fp8_bytes_ / 1048576.0);
  return absl::OkStatus();
}

absl::Status CudaBackend::BuildScalePlanes(const std::vector<const graph::Weight*>& weights,
                                           const KnobOverrides* knobs) {
  if (!device_.MmqRuns()) return absl::OkStatus();  // no MMQ on this GPU: planes would be unused
  KnobRegistry& r = KnobRegistry::Global();
  const bool q4k = r.GetBool("MINFER_MMQ_Q4K_DSC", knobs);
  const bool q6k = r.GetBool("MINFER_MMQ_Q6K_EXP", knobs);
  for (const graph::Weight* gw : weights) {
    if (!(gw->type == GgmlType::kQ4_K ? q4k : gw->type == GgmlType::kQ6_K ? q6k : false)) continue;
    if (gw->dims.size() != 2) continue;  // expert tensors run on the MoE kernels, without planes
    const WeightView* w = state_->FindWeight(owner_, gw->name);
    if (w == nullptr || w->scale_plane != nullptr) continue;
    const int64_t bytes = MmqScalePlaneBytes(w->type, w->k, w->rows);
    if (bytes == 0) continue;
    ASSIGN_OR_RETURN(void* plane, state_->Malloc(static_cast<size_t>(bytes),
                                                 absl::StrCat("scale plane of '", gw->name, "'")));
    std::unique_lock<std::recursive_mutex> lock = state_->Lock();
    cudaError_t err = LaunchMmqScalePlane(*w, plane, state_->stream());
    if (err == cudaSuccess) err = cudaStreamSynchronize(state_->stream());
    absl::Status st = err == cudaSuccess
                          ? state_->AttachScalePlane(owner_, gw->name, plane, bytes)
                          : CudaStatus(err, "LaunchMmqScalePlane", __FILE__, __LINE__);
    if (!st.ok()) {
      state_->Free(plane);
      return st;
    }
  }
  const auto planes = state_->ScalePlaneBytes(owner_);
  for (const auto& [type, bytes] : planes) {
    Logger("cuda")->info("MMQ scale plane {} for {}: {:.1f} MiB", type == GgmlType::kQ4_K ? "W_dsc" : "W_exp",
                         GgmlTypeName(type), bytes / 1048576.0);
  }
  return absl::OkStatus();
}

uint64_t CudaBackend::scale_plane_bytes() const {
  uint64_t total = 0;
  for (const auto& [type, bytes] : state_->ScalePlaneBytes(owner_)) total += bytes;
  return total;
}

CudaBackend::~CudaBackend() {
  {
    std::unique_lock<std::recursive_mutex> lock = state_->Lock();
    recorder_.DiscardOpenCapture();
    cudaStreamSynchronize(state_->stream());
    recorder_.Drop();
    pool_.ReleaseAll([this](void* p) { state_->Free(p); });
    for (auto& [tag, s] : scratch_) state_->Free(s.first);
    for (auto& [data, c] : fp8_copies_) state_->Free(c.alloc);
    if (pinned_in_) cudaFreeHost(pinned_in_);
    if (pinned_out_) cudaFreeHost(pinned_out_);
  }
  if (window_.owns_lock()) window_.unlock();
  state_->ReleaseWeights(owner_);
  // What ran, once per backend lifetime (a model unload, the end of a CLI
  // run): a benchmark that replays less than expected, or an MMQ that fell
  // to its generic rung, shows here.
  Logger("cuda")->debug(
      "backend stats: graphs {} captured, {} replayed, {} re-captured, {} direct splits; "
      "quantize {} launched, {} skipped; prefill matmuls {} MMQ fast ({} with a scale plane, "
      "{} stream-k), {} MMQ generic, {} f16 GEMM; decode batches {} few-token MMQ, {} DQ "
      "GEMM; {} int8-only and {} DQ-only (mode 2) producer writes",
      stats_.captures, stats_.replays, stats_.recaptures, stats_.direct_splits,
      stats_.quantize_launches, stats_.quantize_skipped, stats_.mmq_fast, stats_.mmq_plane,
      stats_.mmq_stream_k, stats_.mmq_generic,
      stats_.gemm_f16, stats_.mmq_small, stats_.dq_gemm, stats_.int8_only_writes,
      stats_.dq_only_writes);
  if (knobs_.op_timing && !op_timing_.empty()) {
    for (const auto& [op, t] : op_timing_) {
      Logger("cuda")->info("op timing: {:<18} {:>8} calls {:>10.3f} ms total {:>8.2f} us/call", op,
                           t.second, t.first * 1e3, t.first * 1e6 / t.second);
    }
  }
}

uint64_t CudaBackend::weight_bytes() const { return state_->WeightBytes(owner_); }

int64_t CudaBackend::MemoryBytes() const {
  int64_t scratch = 0;
  for (const auto& [tag, s] : scratch_) scratch += s.second;
  return static_cast<int64_t>(weight_bytes() + scale_plane_bytes()) + fp8_bytes_ + pool_.bytes() +
         scratch;
}

void CudaBackend::RefreshKnobs() {
  KnobRegistry& r = KnobRegistry::Global();
  const uint64_t gen = r.generation() + (model_knob_gen_ ? *model_knob_gen_ : 0);
  if (gen == knob_gen_) return;
  knob_gen_ = gen;
  Knobs k;
  k.graphs = !r.GetBool("MINFER_NO_CUDA_GRAPH", knob_overrides_);
  k.prefill_capture = !r.GetBool("MINFER_NO_PREFILL_CAPTURE", knob_overrides_);
  k.matmul.kq_mmvq = !r.GetBool("MINFER_NO_KQ_MMVQ", knob_overrides_);
  k.decode_a_fuse = !r.GetBool("MINFER_NO_DECODE_A_FUSE", knob_overrides_);
  k.pinned_readback = !r.GetBool("MINFER_NO_PINNED_READBACK", knob_overrides_);
  k.matmul.prefill_gemm = !r.GetBool("MINFER_NO_PREFILL_GEMM", knob_overrides_);
  k.matmul.mmq = r.GetBool("MINFER_MMQ", knob_overrides_);
  k.matmul.mmvq_min_elems = r.GetInt("MINFER_MMVQ_MIN_ELEMS", knob_overrides_);
  k.attn_prefill_tc = r.GetBool("MINFER_ATTN_PREFILL_TC", knob_overrides_);
  k.attn_fused_combine = r.GetBool("MINFER_ATTN_FUSED_COMBINE", knob_overrides_);
  k.attn_paged_long_min = static_cast<int32_t>(
      std::clamp<int64_t>(r.GetInt("MINFER_ATTN_PAGED_LONG_MIN", knob_overrides_), -1, INT32_MAX));
  k.attn_q8 = r.GetBool("MINFER_ATTN_Q8", knob_overrides_);
  k.pdl = r.GetBool("MINFER_PDL", knob_overrides_);
  k.moe_mma = r.GetBool("MINFER_MOE_MMA", knob_overrides_);
  k.moe_route_group = r.GetBool("MINFER_MOE_ROUTE_GROUP", knob_overrides_);
  k.moe_down_combine = r.GetBool("MINFER_MOE_DOWN_COMBINE", knob_overrides_);
  k.moe_gate_quant = r.GetBool("MINFER_MOE_GATE_QUANT", knob_overrides_);
  k.moe_fused_act = r.GetBool("MINFER_MOE_FUSED_ACT", knob_overrides_);
  k.moe_mma_min_tokens =
      std::clamp<int64_t>(r.GetInt("MINFER_MOE_MMA_MIN_TOKENS", knob_overrides_), 1, 8192);
  k.matmul.skip_write = !r.GetBool("MINFER_NO_SKIP_WRITE", knob_overrides_);
  k.mmq_debug = r.GetBool("MINFER_MMQ_RAW_NB_DEBUG", knob_overrides_);
  k.mmq_stream_k = r.GetBool("MINFER_MMQ_STREAM_K", knob_overrides_);
  k.mmq_split_k = r.GetBool("MINFER_MMQ_SPLIT_K", knob_overrides_);
  // MMVQ covers 1..8 tokens: the GEMM takes over at 9 at the latest.
  k.matmul.mmq_min_tokens = std::clamp<int64_t>(r.GetInt("MINFER_MMQ_MIN_TOKENS", knob_overrides_), 2, 9);
  k.matmul.mmq_small_tokens =
      std::clamp<int64_t>(r.GetInt("MINFER_MMQ_SMALL_TOKENS", knob_overrides_), 0, kMmqSmallMaxTokens);
  k.matmul.mmq_small_min_tokens =
      std::clamp<int64_t>(r.GetInt("MINFER_MMQ_SMALL_MIN_TOKENS", knob_overrides_), 2, kMmqSmallMaxTokens);
  k.mmq_small_chunks =
      static_cast<int>(std::clamp<int64_t>(r.GetInt("MINFER_MMQ_SMALL_CHUNKS", knob_overrides_), 1, 64));
  k.mmq_small_form =
      static_cast<int>(std::clamp<int64_t>(r.GetInt("MINFER_MMQ_SMALL_FORM", knob_overrides_), 0, 2));
  k.mmq_small_mt =
      static_cast<int>(std::clamp<int64_t>(r.GetInt("MINFER_MMQ_SMALL_MT", knob_overrides_), 0, 2));
  k.mmq_small_stages = static_cast<int>(
      std::clamp<int64_t>(r.GetInt("MINFER_MMQ_SMALL_STAGES", knob_overrides_), 0, 4));
  k.matmul.dq = r.GetBool("MINFER_DQ_GEMM", knob_overrides_);
  k.matmul.dq_min_tokens =
      std::clamp<int64_t>(r.GetInt("MINFER_DQ_MIN_TOKENS", knob_overrides_), 2, kDqMaxTokens);
  k.matmul.dq_max_tokens =
      std::clamp<int64_t>(r.GetInt("MINFER_DQ_MAX_TOKENS", knob_overrides_), 0, kDqMaxTokens);
  k.dq_mt = static_cast<int>(std::clamp<int64_t>(r.GetInt("MINFER_DQ_MT", knob_overrides_), 0, 2));
  k.matmul.dqw = r.GetBool("MINFER_DQW", knob_overrides_);
  k.matmul.dqw_min_tokens =
      std::clamp<int64_t>(r.GetInt("MINFER_DQW_MIN_TOKENS", knob_overrides_), 2, kDqwMaxTokens);
  // (Above kDqwMaxTokens the backend splits a matmul into launches of 256.)
  k.matmul.dqw_max_tokens =
      std::clamp<int64_t>(r.GetInt("MINFER_DQW_MAX_TOKENS", knob_overrides_), 0, 8192);
  k.dqw_warpgroups =
      static_cast<int>(std::clamp<int64_t>(r.GetInt("MINFER_DQW_WARPGROUPS", knob_overrides_), 0, 2));
  k.dqw_tma = static_cast<int>(std::clamp<int64_t>(r.GetInt("MINFER_DQW_TMA", knob_overrides_), 0, 2));
  k.gemm_fuse = r.GetBool("MINFER_GEMM_FUSE", knob_overrides_);
  k.dqw_split_k =
      static_cast<int>(std::clamp<int64_t>(r.GetInt("MINFER_DQW_SPLIT_K", knob_overrides_), 0, 16));
  {
    const int64_t m = r.GetInt("MINFER_DQP_MIN_TOKENS", knob_overrides_);
    k.matmul.dqp_min_tokens = m <= 0 ? 0 : std::clamp<int64_t>(m, 2, 8192);
  }
  k.matmul.dqp_more_types = r.GetBool("MINFER_DQP_MORE_TYPES", knob_overrides_);
  {
    const int64_t w = r.GetInt("MINFER_DQP_WARPGROUPS", knob_overrides_);
    k.dqp_warpgroups = w <= 0 ? 0 : w >= 4 ? 4 : 2;
  }
  // MINFER_FP8_PREFILL is read once, at load (BuildFp8Copies).
  k.matmul.fp8_min_tokens = fp8_min_tokens_;
  k.op_timing = r.GetBool("MINFER_OP_TIMING", knob_overrides_);
  const bool changed = !(k == knobs_);
  knobs_ = k;
  // Recorded graphs embed the previous choices; re-record them.
  if (changed && !recorder_.capturing()) recorder_.Drop();
}

void CudaBackend::BeginWindow() {
  if (!window_.owns_lock()) {
    window_ = state_->Lock();
    RefreshKnobs();
  }
  // Per call, not per window: the flag is the thread's, and another
  // backend on this thread may have set its own since.
  SetProgrammaticLaunch(knobs_.pdl && device_.cc >= 900);
}

absl::Status CudaBackend::Failed() const {
  return absl::FailedPreconditionError(
      absl::StrCat("cuda backend unusable after an earlier device error: ", sticky_.message()));
}

absl::Status CudaBackend::Check(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return absl::OkStatus();
  absl::Status s = CudaStatus(err, what, __FILE__, __LINE__);
  // Launch-configuration errors are not sticky; everything that poisons the
  // context is.
  if (err != cudaErrorInvalidValue && err != cudaErrorInvalidConfiguration &&
      err != cudaErrorMemoryAllocation) {
    sticky_ = s;
    state_->RecordFault(std::string(s.message()));  // the whole device's context
    Logger("cuda")->error("{}", s.message());
  }
  return s;
}

absl::StatusOr<int32_t> CudaBackend::AllocBuffer(int64_t bytes) {
  if (!sticky_.ok()) return Failed();
  std::unique_lock<std::recursive_mutex> lock = state_->Lock();  // cudaMalloc may sync
  // On OOM the error carries the sizes; nothing is half-allocated.
  return pool_.Acquire(bytes, [this](int64_t n) { return state_->Malloc(n, "a graph buffer"); });
}

void CudaBackend::FreeBuffer(int32_t buffer) {
  // Recycled, never cudaFree'd: a live recording may hold the address.
  pool_.Release(buffer);
}

absl::StatusOr<const WeightView*> CudaBackend::Weight(const graph::Weight* w) const {
  if (w == nullptr) return nullptr;
  const WeightView* v = state_->FindWeight(owner_, w->name);
  if (v == nullptr) {
    // The participation gate makes this unreachable through normal wiring:
    // reaching it means an invariant is already broken.
    return absl::FailedPreconditionError(absl::StrCat("cuda: weight '", w->name, "' not registered"));
  }
  return v;
}

absl::StatusOr<void*> CudaBackend::Scratch(const std::string& tag, int64_t bytes) {
  auto it = scratch_.find(tag);
  if (it != scratch_.end() && it->second.second >= bytes) return it->second.first;
  if (recorder_.capturing()) {
    return absl::FailedPreconditionError(
        absl::StrCat("cuda: scratch '", tag, "' would grow inside a capture window"));
  }
  if (it != scratch_.end()) {
    // The old address may be baked into recordings: they are invalidated.
    cudaStreamSynchronize(state_->stream());
    state_->Free(it->second.first);
    scratch_.erase(it);
  }
  ASSIGN_OR_RETURN(void* p, state_->Malloc(bytes, absl::StrCat("scratch ", tag)));
  scratch_[tag] = {p, bytes};
  ++scratch_gen_;
  return p;
}

absl::StatusOr<void*> CudaBackend::ZeroedScratch(const std::string& tag, int64_t bytes) {
  ASSIGN_OR_RETURN(void* p, Scratch(tag, bytes));
  // (The allocation, not only the address: a regrown scratch may come back
  // at the same address.)
  const std::pair<void*, int64_t> now = scratch_[tag];
  std::pair<void*, int64_t>& zeroed = zeroed_scratch_[tag];
  if (zeroed != now) {
    // A fresh allocation (Scratch refuses to grow inside a capture).
    RETURN_IF_ERROR(Check(cudaMemsetAsync(p, 0, now.second, state_->stream()), "zero scratch"));
    zeroed = now;
  }
  return p;
}

bool CudaBackend::SupportsKvType(DType t) const {
  return t == DType::kF32 || t == DType::kF16 || t == DType::kQ8_0 || t == DType::kFp8;
}

bool CudaBackend::SupportsOp(const Node& n) const {
  if (n.op != OpKind::kInput && n.op != OpKind::kKvcacheLoad && n.dtype != DType::kF32) return false;
  switch (n.op) {
    case OpKind::kInput:
    case OpKind::kAdd:
    case OpKind::kMul:
    case OpKind::kScale:
    case OpKind::kSilu:
    case OpKind::kSwiGLU:
    case OpKind::kSoftmax:
    case OpKind::kQkvBiasRopeStore:
      return true;
    case OpKind::kAttn:
      // Sinks: one f32 weight (gpt-oss); sliding windows any.
      return n.weights.size() <= 1 && n.p.attn_window >= 0;
    case OpKind::kTopK:
      return n.p.top_k <= kTopKMaxK;
    case OpKind::kRmsNorm:
    case OpKind::kQkNorm:
    case OpKind::kMatMul:
    case OpKind::kKvcacheStore:
    case OpKind::kView:
    case OpKind::kReshape:
    case OpKind::kPermute:
    case OpKind::kGetRows:
    case OpKind::kFusedQKV:
    case OpKind::kFusedFFN:
      // Weight types are gated at the model level (all-or-nothing).
      return true;
    case OpKind::kRoPE:
      return true;
    case OpKind::kKvcacheLoad:
      return SupportsKvType(n.dtype);
    case OpKind::kMoeRoute:
      return n.p.n_expert >= 1 && n.p.n_expert <= kMoeMaxExperts && n.p.n_expert_used >= 1 &&
             n.p.n_expert_used <= std::min(n.p.n_expert, kMoeMaxUsed);
    case OpKind::kMoeFFN:
      return MoeFfnSupported(n);
    case OpKind::kAllReduce:
      // A tensor-parallel rank's: NCCL on this device's stream, captured
      // with the rest of the step.
      return tp_.group != nullptr;
  }
  return false;
}

absl::Status CudaBackend::WriteHost(const BufferRef& dst, const void* src, int64_t bytes) {
  if (!sticky_.ok()) return Failed();
  std::unique_lock<std::recursive_mutex> lock = state_->Lock();
  RETURN_IF_ERROR(ResolvePending());  // (before anything may overwrite their range)
  memos_.Invalidate(dst, bytes);
  ASSIGN_OR_RETURN(uint8_t * d, Ptr(dst, bytes));
  if (pinned_in_used_ + bytes > pinned_in_cap_) {
    if (recorder_.capturing()) {
      return absl::FailedPreconditionError("cuda: input fill inside a capture window");
    }
    // Grow: wait until no queued copy reads the old staging.
    RETURN_IF_ERROR(Check(cudaStreamSynchronize(state_->stream()), "sync before staging growth"));
    if (pinned_in_) cudaFreeHost(pinned_in_);
    pinned_in_cap_ = std::max<int64_t>(kMinPinned, 2 * (pinned_in_used_ + bytes));
    pinned_in_used_ = 0;
    RETURN_IF_ERROR(Check(cudaMallocHost(&pinned_in_, pinned_in_cap_), "pinned staging"));
  }
  uint8_t* stage = pinned_in_ + pinned_in_used_;
  pinned_in_used_ += (bytes + 255) / 256 * 256;
  std::memcpy(stage, src, bytes);
  // Asynchronous: everything that reads it runs later on the same stream.
  return Check(cudaMemcpyAsync(d, stage, bytes, cudaMemcpyHostToDevice, state_->stream()),
               "input fill");
}

absl::Status CudaBackend::ReadHost(const BufferRef& src, void* dst, int64_t bytes) {
  if (!sticky_.ok()) return Failed();
  std::unique_lock<std::recursive_mutex> lock = state_->Lock();
  RETURN_IF_ERROR(ResolvePending());
  ASSIGN_OR_RETURN(uint8_t * s, Ptr(src, bytes));
  if (!knobs_.pinned_readback) {
    RETURN_IF_ERROR(Check(cudaMemcpyAsync(dst, s, bytes, cudaMemcpyDeviceToHost, state_->stream()),
                          "readback"));
    return Check(cudaStreamSynchronize(state_->stream()), "readback sync");
  }
  if (bytes > pinned_out_cap_) {
    if (pinned_out_) cudaFreeHost(pinned_out_);
    pinned_out_cap_ = std::max<int64_t>(kMinPinned, bytes);
    RETURN_IF_ERROR(Check(cudaMallocHost(&pinned_out_, pinned_out_cap_), "pinned readback"));
  }
  RETURN_IF_ERROR(Check(cudaMemcpyAsync(pinned_out_, s, bytes, cudaMemcpyDeviceToHost, state_->stream()),
                        "readback"));
  RETURN_IF_ERROR(Check(cudaStreamSynchronize(state_->stream()), "readback sync"));
  std::memcpy(dst, pinned_out_, bytes);
  return absl::OkStatus();
}

absl::Status CudaBackend::Fill(const BufferRef& dst, uint8_t value) {
  if (!sticky_.ok()) return Failed();
  std::unique_lock<std::recursive_mutex> lock = state_->Lock();
  ASSIGN_OR_RETURN(uint8_t * d, Ptr(dst, dst.bytes));
  memos_.Invalidate(dst, dst.bytes);
  RETURN_IF_ERROR(Check(cudaMemsetAsync(d, value, dst.bytes, state_->stream()), "fill"));
  if (window_.owns_lock()) return absl::OkStatus();
  return Check(cudaStreamSynchronize(state_->stream()), "fill sync");
}

absl::Status CudaBackend::StreamGraphs::BeginCapture() {
  const cudaError_t err =
      cudaStreamBeginCapture(state_->stream(), cudaStreamCaptureModeThreadLocal);
  if (err == cudaSuccess) return absl::OkStatus();
  cudaGetLastError();
  return absl::InternalError(cudaGetErrorString(err));
}

absl::StatusOr<GraphDevice::Exec> CudaBackend::StreamGraphs::EndCaptureAndLaunch() {
  cudaGraph_t g = nullptr;
  cudaGraphExec_t exec = nullptr;
  cudaError_t err = cudaStreamEndCapture(state_->stream(), &g);
  if (err == cudaSuccess) err = cudaGraphInstantiate(&exec, g, 0);
  if (g) cudaGraphDestroy(g);
  // Launch once so this step still produces its outputs.
  if (err == cudaSuccess) err = cudaGraphLaunch(exec, state_->stream());
  if (err == cudaSuccess) return static_cast<Exec>(exec);
  if (exec) cudaGraphExecDestroy(exec);
  cudaGetLastError();
  return absl::InternalError(cudaGetErrorString(err));
}

void CudaBackend::StreamGraphs::DiscardCapture() {
  cudaGraph_t g = nullptr;
  cudaStreamEndCapture(state_->stream(), &g);
  if (g) cudaGraphDestroy(g);
  cudaGetLastError();
}

absl::Status CudaBackend::StreamGraphs::Launch(Exec exec) {
  const cudaError_t err = cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec), state_->stream());
  if (err == cudaSuccess) return absl::OkStatus();
  cudaGetLastError();
  return absl::InternalError(cudaGetErrorString(err));
}

void CudaBackend::StreamGraphs::Destroy(Exec exec) {
  cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec));
}

absl::StatusOr<bool> CudaBackend::GraphReplay(uint64_t uid, int begin, int end, int64_t nt_hint) {
  if (!sticky_.ok()) return Failed();
  // A recorded step holds the aborted communicators' kernels.
  RETURN_IF_ERROR(CheckCollective());
  BeginWindow();
  // (A range never leaves sums pending for the next: see pending_.)
  RETURN_IF_ERROR(ResolvePending());
  // Prefill-shaped splits record only with prefill capture on.
  const GraphRecorder::Outcome outcome =
      recorder_.Run(SplitKey{uid, begin, end}, pool_gen(), knobs_.graphs && !knobs_.op_timing,
                    nt_hint <= 1 || knobs_.prefill_capture);
  return outcome == GraphRecorder::Outcome::kReplayed;
}

absl::Status CudaBackend::Synchronize() {
  if (!window_.owns_lock()) {
    std::unique_lock<std::recursive_mutex> lock = state_->Lock();
    if (!sticky_.ok()) return Failed();
    return Check(cudaStreamSynchronize(state_->stream()), "synchronize");
  }
  absl::Status result = ResolvePending();
  if (result.ok()) {
    result = recorder_.EndWindow(pool_gen());
  } else {
    recorder_.AbortCapture(result);
  }
  if (result.ok()) result = Check(cudaGetLastError(), "kernel launch");
  if (result.ok()) result = Check(cudaStreamSynchronize(state_->stream()), "stream synchronize");
  if (result.ok()) {
    int32_t dev_err = state_->TakeDeviceError();
    if (dev_err == kDeviceBadPosition) {
      result = absl::OutOfRangeError("cuda: a KV position outside [0, n_ctx) reached a kernel");
    } else if (dev_err == kDeviceBadTokenId) {
      result = absl::InvalidArgumentError("cuda: a token id outside the embedding reached GetRows");
    } else if (dev_err == kDeviceBadTopKMode) {
      result = absl::InternalError(
          "cuda: a TopK mode value outside its contract (base mode > 2 or a mask column past the "
          "mask input) reached the kernel");
    } else if (dev_err == kDeviceBadExpertId) {
      result = absl::InvalidArgumentError(
          "cuda: a MoeFFN route named an expert outside [0, n_expert)");
    } else if (dev_err != 0) {
      result = absl::InternalError(absl::StrCat("cuda: device error flag ", dev_err));
    }
  }
  // Execution-window memos end here: buffer contents change meaning.
  memos_.EndWindow();
  pending_.reset();
  moe_grouped_ = {};
  pinned_in_used_ = 0;
  window_.unlock();
  return result;
}

absl::Status CudaBackend::Flush() {
  if (!window_.owns_lock()) return absl::OkStatus();
  if (!sticky_.ok()) return Failed();
  if (absl::Status s = ResolvePending(); !s.ok()) {
    recorder_.AbortCapture(s);
    return s;
  }
  return recorder_.EndWindow(pool_gen());
}

absl::Status CudaBackend::ResolvePending() {
  if (!pending_) return absl::OkStatus();
  const PendingSums p = *pending_;
  pending_.reset();
  for (int i = 0; i < p.n; ++i) {
    if (p.sum[i].splits <= 1) continue;  // the GEMM wrote it (with the residual)
    RETURN_IF_ERROR(Check(LaunchSplitSum(p.sum[i].part, p.sum[i].splits, p.sum[i].stride,
                                         i == 0 ? p.residual : nullptr, p.y[i], p.count[i],
                                         state_->stream()),
                          "split-k sum"));
  }
  stats_.pending_written++;
  return absl::OkStatus();
}

const CudaBackend::PendingSums* CudaBackend::PendingAt(const BufferRef& x) const {
  if (!pending_ || pending_->out.buffer != x.buffer || pending_->out.offset != x.offset) {
    return nullptr;
  }
  return &*pending_;
}

void CudaBackend::KeepPending(const BufferRef& out, absl::Span<const OutputSum> sums,
                              absl::Span<float* const> ys, absl::Span<const int64_t> counts,
                              const float* residual) {
  bool split = false;
  for (const OutputSum& s : sums) split = split || s.splits > 1;
  if (!split) return;
  PendingSums p;
  p.out = out;
  p.n = static_cast<int>(sums.size());
  for (int i = 0; i < p.n; ++i) {
    p.sum[i] = sums[i];
    p.y[i] = ys[i];
    p.count[i] = counts[i];
  }
  p.residual = residual;
  pending_ = p;
}

absl::Status CudaBackend::CheckCollective() const {
  if (tp_.group != nullptr && tp_.group->aborted()) {
    return absl::FailedPreconditionError(
        "cuda: this tensor-parallel rank's NCCL communicators were aborted after a rank failed; "
        "load the model again");
  }
  return absl::OkStatus();
}

absl::Status CudaBackend::ExecuteNode(const Node& node, const ExecArgs& args) {
  if (!sticky_.ok()) return Failed();
  RETURN_IF_ERROR(CheckCollective());
  BeginWindow();
  auto t0 = std::chrono::steady_clock::now();
  // What this node writes invalidates the memos of its previous contents
  // (the liveness allocator reuses buffers within one window). Views and
  // cache loads write nothing.
  if (node.op != OpKind::kView && node.op != OpKind::kReshape &&
      node.op != OpKind::kKvcacheLoad) {
    memos_.Invalidate(args.output, std::max<int64_t>(args.output.bytes, node.bytes()));
  }
  absl::Status s;
  // The dead-write guard for every reader but the matmuls (which check when
  // they would quantize or read the f32 values themselves) and the ops that
  // read nothing.
  if (memos_.HasDead() && node.op != OpKind::kMatMul && node.op != OpKind::kFusedQKV &&
      node.op != OpKind::kFusedFFN && node.op != OpKind::kView &&
      node.op != OpKind::kReshape && node.op != OpKind::kKvcacheLoad) {
    for (const BufferRef& in : args.inputs) {
      s = memos_.CheckNotDead(node, in, in.bytes);
      if (!s.ok()) break;
    }
  }
  // Pending split-k sums (pending_) go to the next node only if it can sum
  // them (its handler checks that they are its input); every other node
  // that reads or writes anything finds them written.
  if (s.ok() && pending_ && node.op != OpKind::kRmsNorm && node.op != OpKind::kQkvBiasRopeStore &&
      node.op != OpKind::kView && node.op != OpKind::kReshape && node.op != OpKind::kInput) {
    s = ResolvePending();
  }
  if (s.ok()) s = Dispatch(node, args);
  if (s.ok() && knobs_.op_timing) {
    s = Check(cudaStreamSynchronize(state_->stream()), "op timing sync");
    auto& t = op_timing_[graph::OpName(node.op)];
    t.first += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    t.second++;
  }
  if (!s.ok()) recorder_.AbortCapture(s);
  return s;
}

absl::Status CudaBackend::RunAllReduce(const OpArgs& o) {
  if (tp_.group == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("cuda AllReduce ", o.n.name, ": this backend is not a tensor-parallel rank"));
  }
  // Out of place: the input stays the node's producer's (the memos may
  // still describe it).
  return tp_.group->AllReduceSum(tp_.rank, o.f(0), o.out, static_cast<size_t>(o.n_el),
                                 NcclType::kF32, o.st);
}

CudaBackend::Handler CudaBackend::HandlerFor(OpKind op) {
  switch (op) {
    case OpKind::kInput: return &CudaBackend::RunNothing;
    case OpKind::kView: return &CudaBackend::RunNothing;
    case OpKind::kReshape: return &CudaBackend::RunNothing;
    case OpKind::kKvcacheLoad: return &CudaBackend::RunNothing;
    case OpKind::kAdd: return &CudaBackend::RunBinary;
    case OpKind::kMul: return &CudaBackend::RunBinary;
    case OpKind::kScale: return &CudaBackend::RunScale;
    case OpKind::kSilu: return &CudaBackend::RunSilu;
    case OpKind::kSwiGLU: return &CudaBackend::RunSwiGlu;
    case OpKind::kSoftmax: return &CudaBackend::RunSoftmax;
    case OpKind::kPermute: return &CudaBackend::RunPermute;
    case OpKind::kRmsNorm: return &CudaBackend::RunNorm;
    case OpKind::kQkNorm: return &CudaBackend::RunNorm;
    case OpKind::kMatMul: return &CudaBackend::RunMatMul;
    case OpKind::kFusedQKV: return &CudaBackend::RunFusedQkv;
    case OpKind::kFusedFFN: return &CudaBackend::RunFusedFfn;
    case OpKind::kRoPE: return &CudaBackend::RunRope;
    case OpKind::kQkvBiasRopeStore: return &CudaBackend::RunQkvBiasRopeStore;
    case OpKind::kKvcacheStore: return &CudaBackend::RunKvStore;
    case OpKind::kAttn: return &CudaBackend::RunAttention;
    case OpKind::kGetRows: return &CudaBackend::RunGetRows;
    case OpKind::kTopK: return &CudaBackend::RunTopK;
    case OpKind::kMoeRoute: return &CudaBackend::RunMoeRoute;
    case OpKind::kMoeFFN: return &CudaBackend::RunMoeFfn;
    case OpKind::kAllReduce: return &CudaBackend::RunAllReduce;
  }
  return nullptr;
}

absl::Status CudaBackend::Dispatch(const Node& n, const ExecArgs& a) {
  // Every node's pointers resolve (and are bounds-checked) before any
  // handler runs, the no-op kinds included.
  OpArgs o{n, a, std::vector<uint8_t*>(a.inputs.size()), nullptr, n.shape.elements(),
           state_->device_error_flag(), state_->stream()};
  for (size_t i = 0; i < a.inputs.size(); ++i) {
    ASSIGN_OR_RETURN(o.in[i], Ptr(a.inputs[i], a.inputs[i].bytes));
  }
  ASSIGN_OR_RETURN(uint8_t * out_bytes, Ptr(a.output, n.bytes()));
  o.out = reinterpret_cast<float*>(out_bytes);
  const Handler handler = HandlerFor(n.op);
  if (handler == nullptr) {
    return absl::UnimplementedError(absl::StrCat("cuda: op ", graph::OpName(n.op),
                                                 " has no kernel (stays on the CPU backend per "
                                                 "supports_op)"));
  }
  return (this->*handler)(o);
}

absl::Status CudaBackend::RunNothing(const OpArgs&) { return absl::OkStatus(); }

}  // namespace minfer::cuda
