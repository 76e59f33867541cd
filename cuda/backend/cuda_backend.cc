#include "cuda/backend/cuda_backend.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <iterator>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cuda/kernels/matmul.h"
#include "cuda/kernels/mmq.h"
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
         IsIntegerDotType(t);
}

bool IsKQuant(GgmlType t) {
  return t == GgmlType::kQ4_K || t == GgmlType::kQ5_K || t == GgmlType::kQ6_K;
}

KvType ToKvType(DType t) {
  switch (t) {
    case DType::kF16: return KvType::kF16;
    case DType::kQ8_0: return KvType::kQ8_0;
    default: return KvType::kF32;
  }
}

constexpr int64_t kMinPinned = 1 << 20;

}  // namespace

CudaBackend::CudaBackend(CudaState* state, const KnobOverrides* knobs,
                         const uint64_t* knob_generation)
    : state_(state),
      knob_overrides_(knobs),
      model_knob_gen_(knob_generation),
      owner_(CudaState::NewOwnerId()),
      mmq_device_(state->cc() >= 800) {
  RefreshKnobs();
}

absl::StatusOr<std::unique_ptr<CudaBackend>> CudaBackend::Create(
    CudaState* state, const models::DecoderModel& model, const KnobOverrides* knobs,
    const std::function<void(uint64_t, uint64_t)>& progress, const uint64_t* knob_generation) {
  std::vector<const graph::Weight*> weights;
  for (const auto& w : model.weights()) weights.push_back(w.get());
  ASSIGN_OR_RETURN(auto b, Create(state, weights, knobs, progress));
  b->model_knob_gen_ = knob_generation;
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
    done += w->nbytes;
    if (progress) progress(done, total);
  }
  Logger("cuda")->info("uploaded {} weights, {:.1f} MiB", weights.size(),
                       state->WeightBytes(b->owner_) / 1048576.0);
  RETURN_IF_ERROR(b->BuildScalePlanes(weights, knobs));
  return b;
}

absl::Status CudaBackend::BuildScalePlanes(const std::vector<const graph::Weight*>& weights,
                                           const KnobOverrides* knobs) {
  if (!mmq_device_) return absl::OkStatus();  // no MMQ on this GPU: planes would be unused
  KnobRegistry& r = KnobRegistry::Global();
  const bool q4k = r.GetBool("MINFER_MMQ_Q4K_DSC", knobs);
  const bool q6k = r.GetBool("MINFER_MMQ_Q6K_EXP", knobs);
  for (const graph::Weight* gw : weights) {
    if (!(gw->type == GgmlType::kQ4_K ? q4k : gw->type == GgmlType::kQ6_K ? q6k : false)) continue;
    const WeightView* w = state_->FindWeight(owner_, gw->name);
    if (w == nullptr || w->scale_plane != nullptr) continue;
    const int64_t bytes = MmqScalePlaneBytes(w->type, w->k, w->rows);
    if (bytes == 0) continue;
    ASSIGN_OR_RETURN(void* plane, state_->Malloc(static_cast<size_t>(bytes),
                                                 absl::StrCat("scale plane of '", gw->name, "'")));
    std::lock_guard<std::recursive_mutex> lock(state_->stream_lock());
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
    std::lock_guard<std::recursive_mutex> lock(state_->stream_lock());
    if (capturing_) {
      cudaGraph_t g = nullptr;
      cudaStreamEndCapture(state_->stream(), &g);
      if (g) cudaGraphDestroy(g);
    }
    cudaStreamSynchronize(state_->stream());
    DropGraphs();
    pool_.ReleaseAll([this](void* p) { state_->Free(p); });
    for (auto& [tag, s] : scratch_) state_->Free(s.first);
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
      "{} stream-k), {} MMQ generic, {} f16 GEMM; "
      "{} int8-only (mode 2) producer writes",
      stats_.captures, stats_.replays, stats_.recaptures, stats_.direct_splits,
      stats_.quantize_launches, stats_.quantize_skipped, stats_.mmq_fast, stats_.mmq_plane,
      stats_.mmq_stream_k, stats_.mmq_generic,
      stats_.gemm_f16, stats_.int8_only_writes);
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
  return static_cast<int64_t>(weight_bytes() + scale_plane_bytes()) + pool_.bytes() + scratch;
}

void CudaBackend::RefreshKnobs() {
  KnobRegistry& r = KnobRegistry::Global();
  const uint64_t gen = r.generation() + (model_knob_gen_ ? *model_knob_gen_ : 0);
  if (gen == knob_gen_) return;
  knob_gen_ = gen;
  Knobs k;
  k.graphs = !r.GetBool("MINFER_NO_CUDA_GRAPH", knob_overrides_);
  k.prefill_capture = !r.GetBool("MINFER_NO_PREFILL_CAPTURE", knob_overrides_);
  k.kq_mmvq = !r.GetBool("MINFER_NO_KQ_MMVQ", knob_overrides_);
  k.decode_a_fuse = !r.GetBool("MINFER_NO_DECODE_A_FUSE", knob_overrides_);
  k.pinned_readback = !r.GetBool("MINFER_NO_PINNED_READBACK", knob_overrides_);
  k.prefill_gemm = !r.GetBool("MINFER_NO_PREFILL_GEMM", knob_overrides_);
  k.mmq = r.GetBool("MINFER_MMQ", knob_overrides_);
  k.mmvq_min_elems = r.GetInt("MINFER_MMVQ_MIN_ELEMS", knob_overrides_);
  k.attn_prefill_tc = r.GetBool("MINFER_ATTN_PREFILL_TC", knob_overrides_);
  k.skip_write = !r.GetBool("MINFER_NO_SKIP_WRITE", knob_overrides_);
  k.mmq_debug = r.GetBool("MINFER_MMQ_RAW_NB_DEBUG", knob_overrides_);
  k.mmq_stream_k = r.GetBool("MINFER_MMQ_STREAM_K", knob_overrides_);
  k.mmq_split_k = r.GetBool("MINFER_MMQ_SPLIT_K", knob_overrides_);
  // MMVQ covers 1..8 tokens: the GEMM takes over at 9 at the latest.
  k.mmq_min_tokens = std::clamp<int64_t>(r.GetInt("MINFER_MMQ_MIN_TOKENS", knob_overrides_), 2, 9);
  k.mmq_small_tokens =
      std::clamp<int64_t>(r.GetInt("MINFER_MMQ_SMALL_TOKENS", knob_overrides_), 0, kMmqSmallMaxTokens);
  k.mmq_small_min_tokens =
      std::clamp<int64_t>(r.GetInt("MINFER_MMQ_SMALL_MIN_TOKENS", knob_overrides_), 2, kMmqSmallMaxTokens);
  k.mmq_small_chunks =
      static_cast<int>(std::clamp<int64_t>(r.GetInt("MINFER_MMQ_SMALL_CHUNKS", knob_overrides_), 1, 64));
  k.mmq_small_form =
      static_cast<int>(std::clamp<int64_t>(r.GetInt("MINFER_MMQ_SMALL_FORM", knob_overrides_), 0, 2));
  k.mmq_small_mt =
      static_cast<int>(std::clamp<int64_t>(r.GetInt("MINFER_MMQ_SMALL_MT", knob_overrides_), 0, 2));
  k.mmq_small_stages = static_cast<int>(
      std::clamp<int64_t>(r.GetInt("MINFER_MMQ_SMALL_STAGES", knob_overrides_), 0, 4));
  k.op_timing = r.GetBool("MINFER_OP_TIMING", knob_overrides_);
  const bool changed = !(k == knobs_);
  knobs_ = k;
  // Recorded graphs embed the previous choices; re-record them.
  if (changed && !capturing_) DropGraphs();
}

void CudaBackend::BeginWindow() {
  if (window_.owns_lock()) return;
  window_ = std::unique_lock<std::recursive_mutex>(state_->stream_lock());
  RefreshKnobs();
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
    Logger("cuda")->error("{}", s.message());
  }
  return s;
}

absl::StatusOr<int32_t> CudaBackend::AllocBuffer(int64_t bytes) {
  if (!sticky_.ok()) return Failed();
  std::lock_guard<std::recursive_mutex> lock(state_->stream_lock());  // cudaMalloc may sync
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
  if (capturing_) {
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

absl::StatusOr<BlockQ8A*> CudaBackend::Q8Plane(const BufferRef& x, int64_t k, int64_t nt) {
  // One persistent plane per activation range, so its address is stable
  // across steps (and in recordings).
  ASSIGN_OR_RETURN(void* p, Scratch(absl::StrCat("q8:", x.buffer, ":", x.offset),
                                    nt * (k / 32) * static_cast<int64_t>(sizeof(BlockQ8A))));
  return static_cast<BlockQ8A*>(p);
}

absl::StatusOr<const BlockQ8A*> CudaBackend::Quantized(const BufferRef& x, int64_t k, int64_t nt) {
  ASSIGN_OR_RETURN(BlockQ8A * q, Q8Plane(x, k, nt));
  Key key{x.buffer, x.offset};
  auto it = q8_valid_.find(key);
  if (it != q8_valid_.end() && it->second >= k * nt * 4) {
    stats_.quantize_skipped++;
    return q;
  }
  ASSIGN_OR_RETURN(uint8_t * xp, Ptr(x, k * nt * 4));
  RETURN_IF_ERROR(Check(LaunchQuantizeQ8A(reinterpret_cast<const float*>(xp), q, k, nt,
                                          state_->stream()),
                        "quantize activations"));
  stats_.quantize_launches++;
  q8_valid_[key] = k * nt * 4;
  return q;
}

namespace {
// Whether the memo range (key, len) shares a byte with `bytes` at `r`.
bool Overlaps(const std::tuple<int32_t, int64_t>& key, int64_t len, const BufferRef& r,
              int64_t bytes) {
  return std::get<0>(key) == r.buffer && std::get<1>(key) < r.offset + bytes &&
         r.offset < std::get<1>(key) + len;
}
}  // namespace

void CudaBackend::InvalidateMemos(const BufferRef& written, int64_t bytes) {
  auto overlaps = [&](const Key& key, int64_t len) { return Overlaps(key, len, written, bytes); };
  for (auto it = q8_valid_.begin(); it != q8_valid_.end();) {
    it = overlaps(it->first, it->second) ? q8_valid_.erase(it) : std::next(it);
  }
  if (mmq_act_.valid && overlaps(mmq_act_.key, mmq_act_.bytes)) mmq_act_.valid = false;
  // Written now: no longer a dead range.
  for (auto it = int8_only_.begin(); it != int8_only_.end();) {
    it = overlaps(it->first, it->second) ? int8_only_.erase(it) : std::next(it);
  }
}

bool CudaBackend::Int8OnlyApplies(const Node& n, int64_t k, int64_t nt) const {
  // The consumers are MMQ GEMMs exactly when the matmul decision tree sends
  // them there: nt >= 9, the GEMM arm on, MMQ on and runnable.
  return n.p.int8_consumers && knobs_.skip_write && knobs_.mmq && knobs_.prefill_gemm &&
         mmq_device_ && nt >= knobs_.mmq_min_tokens && k % 32 == 0;
}

void CudaBackend::MarkInt8Only(const BufferRef& out, int64_t k, int64_t nt, void* act) {
  const Key key{out.buffer, out.offset};
  mmq_act_ = {true, key, k * nt * 4, k, nt, act};
  int8_only_[key] = k * nt * 4;
  stats_.int8_only_writes++;
}

absl::Status CudaBackend::CheckNotDead(const Node& n, const BufferRef& in, int64_t bytes) const {
  for (const auto& [key, len] : int8_only_) {
    if (Overlaps(key, len, in, bytes)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "cuda ", graph::OpName(n.op), " ", n.name,
          ": dead-write guard: its input is the output of a mode-2 producer, which wrote only the "
          "int8 activation plane of the GEMMs the graph said read it, not the f32 values "
          "(refusing to read the unwritten buffer; MINFER_NO_SKIP_WRITE=1 disables mode 2)"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<void*> CudaBackend::MmqActivations(const Node& n, const BufferRef& x,
                                                  const float* xf, int64_t k, int64_t nt) {
  // One activation scratch shared by every prefill matmul (they run in
  // stream order); consecutive matmuls of the same input (Q/K/V, gate/up)
  // quantize it once.
  ASSIGN_OR_RETURN(void* act, Scratch("mmq_act", MmqActivationBytes(k, nt)));
  const Key key{x.buffer, x.offset};
  if (mmq_act_.valid && mmq_act_.key == key && mmq_act_.k == k && mmq_act_.nt == nt &&
      mmq_act_.scratch == act) {
    stats_.quantize_skipped++;
    return act;
  }
  // Re-quantizing a mode-2 output would read f32 values that were never
  // written: a loud error, never garbage.
  RETURN_IF_ERROR(CheckNotDead(n, x, k * nt * 4));
  mmq_act_.valid = false;
  RETURN_IF_ERROR(Check(LaunchQuantizeMmq(xf, act, k, nt, state_->stream()), "MMQ quantize"));
  stats_.quantize_launches++;
  mmq_act_ = {true, key, k * nt * 4, k, nt, act};
  return act;
}

absl::Status CudaBackend::MatMulWeights(const Node& n, absl::Span<const WeightView* const> ws,
                                        const BufferRef& x, absl::Span<float* const> ys) {
  const int64_t nt = n.shape.ne[1], k = ws[0]->k;
  for (size_t i = 0; i < ws.size(); ++i) {
    if (ws[i]->k != k || k % 32 != 0) {
      return absl::InvalidArgumentError(absl::StrCat("cuda ", graph::OpName(n.op), " ", n.name,
                                                     ": weight '", n.weights[i]->name, "' has k = ",
                                                     ws[i]->k, " (input rows ", k,
                                                     "; must match and be a multiple of 32)"));
    }
  }
  if (x.bytes < k * nt * 4) {
    return absl::InvalidArgumentError(absl::StrCat("cuda ", graph::OpName(n.op), " ", n.name,
                                                   ": buffer size mismatch: input holds ",
                                                   x.bytes / 4, " floats, needs ", k * nt));
  }
  ASSIGN_OR_RETURN(uint8_t * xp, Ptr(x, k * nt * 4));
  const float* xf = reinterpret_cast<const float*>(xp);
  cudaStream_t st = state_->stream();
  // One weight on the vector kernels: MMVQ for the quantized types up to 8
  // tokens, else the f32-activation matvec.
  auto vector_path = [&](const WeightView* w, float* y) -> absl::Status {
    bool mmvq = MmvqSupports(w->type) && nt <= 8 && !(IsKQuant(w->type) && !knobs_.kq_mmvq);
    // The shape gate (MINFER_MMVQ_MIN_ELEMS): a small decode matmul whose
    // input no fused producer quantized pays a quantize launch before MMVQ;
    // below the gate the f32-activation matvec (one launch) is the faster
    // choice (matmul_bench --gates measures it).
    if (mmvq && nt == 1 && w->rows * k < knobs_.mmvq_min_elems &&
        q8_valid_.count(Key{x.buffer, x.offset}) == 0) {
      mmvq = false;
    }
    if (mmvq) {
      ASSIGN_OR_RETURN(const BlockQ8A* q, Quantized(x, k, nt));
      return Check(LaunchMmvq(*w, q, y, w->rows, nt, st), "MMVQ");
    }
    return Check(LaunchMatvecF32(*w, xf, y, w->rows, nt, st), "matvec f32");
  };
  // The decision tree (docs/design.md, which kernel runs a matmul):
  // prefill-shaped batches go to the
  // tiled GEMM, decode batches of MINFER_MMQ_SMALL_MIN_TOKENS..
  // MINFER_MMQ_SMALL_TOKENS tokens to the few-token GEMM, smaller decode
  // shapes to MMVQ, float weights to the f32 kernels.
  const bool small_batch = nt >= knobs_.mmq_small_min_tokens && nt <= knobs_.mmq_small_tokens &&
                           knobs_.mmq && mmq_device_;
  if ((nt >= knobs_.mmq_min_tokens || small_batch) && knobs_.prefill_gemm) {
    // Each weight as its own MatMul would run it: MMQ for the quantized
    // types (runs of consecutive weights of one type share a launch:
    // FusedQKV's q and k, often v too), the f16 GEMM for the rest and on
    // GPUs without MMQ.
    const bool mmq = knobs_.mmq && mmq_device_;
    if (knobs_.mmq && !mmq_device_ && knobs_.mmq_debug && mmq_logged_.insert({-1, -1, -1, 0}).second) {
      Logger("cuda")->info("MMQ: not supported on this device (sm_80+ needed); f16 GEMM");
    }
    // Stream-k's workspace: allocated and zeroed at the first prefill
    // matmul (never inside a capture window: the first prefill runs
    // directly), then reused by every launch on this stream. Its size never
    // changes, so the scratch entry (and the address) is stable.
    MmqTuning tuning;
    if (mmq && knobs_.mmq_stream_k) {
      if (mmq_sk_ws_ == nullptr) {
        const int64_t bytes = MmqStreamKBytes();
        if (bytes > 0) {
          ASSIGN_OR_RETURN(void* sk, Scratch("mmq_stream_k", bytes));
          RETURN_IF_ERROR(Check(cudaMemsetAsync(sk, 0, bytes, st), "MMQ stream-k workspace"));
          mmq_sk_ws_ = sk;
          mmq_sk_bytes_ = bytes;
        }
      }
      tuning.stream_k_workspace = mmq_sk_ws_;
      tuning.stream_k_bytes = mmq_sk_bytes_;
    }
    // Split-k's partials (decode batches), allocated at the first GEMM of
    // few tokens: the first one runs outside a capture window (direct runs
    // come first), and the size never changes.
    if (mmq && knobs_.mmq_split_k && nt <= 256) {
      // (also the few-token kernel's)
      ASSIGN_OR_RETURN(void* ws, Scratch("mmq_split", MmqSplitKBytes()));
      tuning.split_k = kMmqSplitAuto;
      tuning.split_workspace = ws;
      tuning.split_bytes = MmqSplitKBytes();
    }
    tuning.small_form = knobs_.mmq_small_form;
    tuning.small_mtiles = knobs_.mmq_small_mt;
    tuning.small_min_chunks = knobs_.mmq_small_chunks;
    tuning.small_stages = knobs_.mmq_small_stages;
    for (size_t i = 0; i < ws.size();) {
      if (!(mmq && MmqSupports(ws[i]->type)) && nt < knobs_.mmq_min_tokens) {
        // A decode batch that only the few-token GEMM took here: the other
        // weights keep the vector kernels.
        RETURN_IF_ERROR(CheckNotDead(n, x, k * nt * 4));
        RETURN_IF_ERROR(vector_path(ws[i], ys[i]));
        ++i;
        continue;
      }
      if (!(mmq && MmqSupports(ws[i]->type))) {
        RETURN_IF_ERROR(CheckNotDead(n, x, k * nt * 4));
        stats_.gemm_f16++;
        RETURN_IF_ERROR(Check(LaunchGemmF16(*ws[i], xf, ys[i], nt, st), "GEMM f16"));
        ++i;
        continue;
      }
      ASSIGN_OR_RETURN(void* act, MmqActivations(n, x, xf, k, nt));
      MmqSegments seg;
      while (i < ws.size() && seg.n < kMmqMaxSegments &&
             (seg.n == 0 || ws[i]->type == seg.w[0].type)) {
        seg.w[seg.n] = *ws[i];
        seg.y[seg.n++] = ys[i++];
      }
      if (nt <= knobs_.mmq_small_tokens) {
        // A decode batch: the few-token kernel streams the weights.
        const char* why = nullptr;
        const cudaError_t err = LaunchMmqSmall(seg, act, nt, st, &tuning, &why);
        if (err != cudaErrorNotSupported) {
          RETURN_IF_ERROR(Check(err, "MMQ few-token"));
          stats_.mmq_small++;
          if (seg.n > 1) stats_.mmq_segmented++;
          continue;
        }
        cudaGetLastError();
        if (knobs_.mmq_debug && mmq_logged_.insert({static_cast<int>(seg.w[0].type), -2, k, 0}).second) {
          Logger("cuda")->info("MMQ few-token kernel skipped for {}: {}", GgmlTypeName(seg.w[0].type), why);
        }
      }
      MmqReport report;
      RETURN_IF_ERROR(Check(LaunchMmqSegments(seg, act, nt, st, &report, &tuning), "MMQ"));
      (report.variant == MmqVariant::kFast ? stats_.mmq_fast : stats_.mmq_generic)++;
      if (report.scale_plane) stats_.mmq_plane++;
      if (report.stream_k) stats_.mmq_stream_k++;
      if (seg.n > 1) stats_.mmq_segmented++;
      if (knobs_.mmq_debug &&
          mmq_logged_.insert({static_cast<int>(seg.w[0].type), seg.w[0].rows, k,
                              static_cast<int>(report.variant) + 8 * seg.n})
              .second) {
        std::string rows = absl::StrCat(seg.w[0].rows);
        for (int j = 1; j < seg.n; ++j) absl::StrAppend(&rows, "+", seg.w[j].rows);
        Logger("cuda")->info("MMQ {} {}x{} nt {}: {} variant, {} tokens per CTA, {} CTAs{}{}{}{}",
                             GgmlTypeName(seg.w[0].type), rows, k, nt,
                             MmqVariantName(report.variant), report.tokens_per_cta, report.grid,
                             report.stream_k ? ", stream-k" : "",
                             report.scale_plane ? ", scale plane" : "",
                             report.fast_skipped ? "; fast variant skipped: " : "",
                             report.fast_skipped ? report.fast_skipped : "");
      }
    }
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(CheckNotDead(n, x, k * nt * 4));
  for (size_t i = 0; i < ws.size(); ++i) RETURN_IF_ERROR(vector_path(ws[i], ys[i]));
  return absl::OkStatus();
}

bool CudaBackend::SupportsKvType(DType t) const {
  return t == DType::kF32 || t == DType::kF16 || t == DType::kQ8_0;
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
    case OpKind::kAttn:
    case OpKind::kQkvBiasRopeStore:
      return true;
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
    case OpKind::kRoPE:
      // Weight types are gated at the model level (all-or-nothing).
      return true;
    case OpKind::kKvcacheLoad:
      return SupportsKvType(n.dtype);
  }
  return false;
}

absl::Status CudaBackend::WriteHost(const BufferRef& dst, const void* src, int64_t bytes) {
  if (!sticky_.ok()) return Failed();
  std::lock_guard<std::recursive_mutex> lock(state_->stream_lock());
  InvalidateMemos(dst, bytes);
  ASSIGN_OR_RETURN(uint8_t * d, Ptr(dst, bytes));
  if (pinned_in_used_ + bytes > pinned_in_cap_) {
    if (capturing_) return absl::FailedPreconditionError("cuda: input fill inside a capture window");
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
  std::lock_guard<std::recursive_mutex> lock(state_->stream_lock());
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
  std::lock_guard<std::recursive_mutex> lock(state_->stream_lock());
  ASSIGN_OR_RETURN(uint8_t * d, Ptr(dst, dst.bytes));
  InvalidateMemos(dst, dst.bytes);
  RETURN_IF_ERROR(Check(cudaMemsetAsync(d, value, dst.bytes, state_->stream()), "fill"));
  if (window_.owns_lock()) return absl::OkStatus();
  return Check(cudaStreamSynchronize(state_->stream()), "fill sync");
}

void CudaBackend::DropGraphs() {
  for (Recorded& r : graph_execs_) cudaGraphExecDestroy(r.exec);
  graph_execs_.clear();
  graph_runs_.clear();
}

absl::StatusOr<bool> CudaBackend::GraphReplay(uint64_t uid, int begin, int end, int64_t nt_hint) {
  if (!sticky_.ok()) return Failed();
  BeginWindow();
  if (!knobs_.graphs || !graphs_enabled_ || knobs_.op_timing) {
    stats_.direct_splits++;
    return false;
  }
  auto key = std::make_tuple(uid, begin, end);
  for (size_t i = 0; i < graph_execs_.size(); ++i) {
    Recorded& r = graph_execs_[i];
    if (r.uid != uid || r.begin != begin || r.end != end) continue;
    if (r.pool_gen != pool_gen()) {
      // Pointers may have moved since the recording: drop it, re-warm and
      // re-capture.
      cudaGraphExecDestroy(r.exec);
      graph_execs_.erase(graph_execs_.begin() + i);
      graph_runs_.erase(key);
      stats_.recaptures++;
      break;
    }
    cudaError_t err = cudaGraphLaunch(r.exec, state_->stream());
    if (err == cudaSuccess) {
      stats_.replays++;
      return true;
    }
    cudaGetLastError();
    Logger("cuda")->error("CUDA: graph replay launch failed ({}); graphs disabled for this backend",
                          cudaGetErrorString(err));
    graphs_enabled_ = false;
    DropGraphs();
    stats_.direct_splits++;
    return false;
  }
  int& runs = graph_runs_[key];
  ++runs;
  stats_.direct_splits++;
  // Runs 1-2 launch directly (warming per-kernel state such as shared-memory
  // opt-ins and scratch), the third records. Prefill-shaped splits record
  // only with prefill capture on.
  if (runs >= 3 && !capturing_ && (nt_hint <= 1 || knobs_.prefill_capture)) {
    cudaError_t err = cudaStreamBeginCapture(state_->stream(), cudaStreamCaptureModeThreadLocal);
    if (err != cudaSuccess) {
      cudaGetLastError();
      Logger("cuda")->error("CUDA: stream capture unavailable ({}); graphs disabled for this backend",
                            cudaGetErrorString(err));
      graphs_enabled_ = false;
    } else {
      capturing_ = key;
      capture_aborted_ = false;
    }
  }
  return false;
}

void CudaBackend::AbortCapture(const absl::Status& why) {
  // A node error dooms the window: close it without launching anything, and
  // say so (the step fails; later steps re-warm and may record again).
  cudaGraph_t g = nullptr;
  cudaStreamEndCapture(state_->stream(), &g);
  if (g) cudaGraphDestroy(g);
  cudaGetLastError();
  Logger("cuda")->error("CUDA: capture of split {}..{} aborted by a node error: {}",
                        std::get<1>(*capturing_), std::get<2>(*capturing_), why.message());
  graph_runs_.erase(*capturing_);
  capturing_.reset();
  capture_aborted_ = true;
}

absl::Status CudaBackend::Synchronize() {
  if (!window_.owns_lock()) {
    std::lock_guard<std::recursive_mutex> lock(state_->stream_lock());
    if (!sticky_.ok()) return Failed();
    return Check(cudaStreamSynchronize(state_->stream()), "synchronize");
  }
  absl::Status result;
  if (capturing_) {
    auto key = *capturing_;
    capturing_.reset();
    cudaGraph_t g = nullptr;
    cudaGraphExec_t exec = nullptr;
    cudaError_t err = cudaStreamEndCapture(state_->stream(), &g);
    if (err == cudaSuccess) err = cudaGraphInstantiate(&exec, g, 0);
    if (g) cudaGraphDestroy(g);
    // Launch once so this step still produces its outputs.
    if (err == cudaSuccess) err = cudaGraphLaunch(exec, state_->stream());
    if (err == cudaSuccess) {
      graph_execs_.push_back({std::get<0>(key), std::get<1>(key), std::get<2>(key), exec, pool_gen()});
      stats_.captures++;
    } else {
      if (exec) cudaGraphExecDestroy(exec);
      cudaGetLastError();
      graphs_enabled_ = false;
      DropGraphs();
      // The recorded launches never ran: this step's outputs are undefined.
      result = absl::InternalError(absl::StrCat(
          "CUDA: graph capture failed (", cudaGetErrorString(err),
          "); graphs disabled for this backend; this step's outputs are undefined "
          "(rerun with MINFER_NO_CUDA_GRAPH=1)"));
      Logger("cuda")->error("{}", result.message());
    }
  }
  if (result.ok()) result = Check(cudaGetLastError(), "kernel launch");
  if (result.ok()) result = Check(cudaStreamSynchronize(state_->stream()), "stream synchronize");
  if (result.ok()) {
    int32_t dev_err = state_->TakeDeviceError();
    if (dev_err == kDeviceBadPosition) {
      result = absl::OutOfRangeError("cuda: a KV position outside [0, n_ctx) reached a kernel");
    } else if (dev_err == kDeviceBadTokenId) {
      result = absl::InvalidArgumentError("cuda: a token id outside the embedding reached GetRows");
    } else if (dev_err != 0) {
      result = absl::InternalError(absl::StrCat("cuda: device error flag ", dev_err));
    }
  }
  // Execution-window memos end here: buffer contents change meaning.
  q8_valid_.clear();
  mmq_act_.valid = false;
  int8_only_.clear();
  pinned_in_used_ = 0;
  capture_aborted_ = false;
  window_.unlock();
  return result;
}

absl::Status CudaBackend::ExecuteNode(const Node& node, const ExecArgs& args) {
  if (!sticky_.ok()) return Failed();
  BeginWindow();
  auto t0 = std::chrono::steady_clock::now();
  // What this node writes invalidates the memos of its previous contents
  // (the liveness allocator reuses buffers within one window). Views and
  // cache loads write nothing.
  if (node.op != OpKind::kView && node.op != OpKind::kReshape &&
      node.op != OpKind::kKvcacheLoad) {
    InvalidateMemos(args.output, std::max<int64_t>(args.output.bytes, node.bytes()));
  }
  absl::Status s;
  // The dead-write guard for every reader but MatMul (which checks when it
  // would quantize or read the f32 values itself) and the ops that read
  // nothing.
  if (!int8_only_.empty() && node.op != OpKind::kMatMul && node.op != OpKind::kFusedQKV &&
      node.op != OpKind::kView &&
      node.op != OpKind::kReshape && node.op != OpKind::kKvcacheLoad) {
    for (const BufferRef& in : args.inputs) {
      s = CheckNotDead(node, in, in.bytes);
      if (!s.ok()) break;
    }
  }
  if (s.ok()) s = Dispatch(node, args);
  if (s.ok() && knobs_.op_timing) {
    s = Check(cudaStreamSynchronize(state_->stream()), "op timing sync");
    auto& t = op_timing_[graph::OpName(node.op)];
    t.first += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    t.second++;
  }
  if (!s.ok() && capturing_) AbortCapture(s);
  return s;
}

absl::Status CudaBackend::Dispatch(const Node& n, const ExecArgs& a) {
  cudaStream_t st = state_->stream();
  std::vector<uint8_t*> in(a.inputs.size());
  for (size_t i = 0; i < a.inputs.size(); ++i) {
    ASSIGN_OR_RETURN(in[i], Ptr(a.inputs[i], a.inputs[i].bytes));
  }
  ASSIGN_OR_RETURN(uint8_t * out_bytes, Ptr(a.output, n.bytes()));
  float* out = reinterpret_cast<float*>(out_bytes);
  auto f = [&](size_t i) { return reinterpret_cast<const float*>(in[i]); };
  auto i32 = [&](size_t i) { return reinterpret_cast<const int32_t*>(in[i]); };
  const int64_t n_el = n.shape.elements();
  int32_t* err_flag = state_->device_error_flag();

  switch (n.op) {
    case OpKind::kInput:
    case OpKind::kView:
    case OpKind::kReshape:
    case OpKind::kKvcacheLoad:
      return absl::OkStatus();
    case OpKind::kAdd:
    case OpKind::kMul: {
      const float* b;
      int64_t nb;
      if (!n.weights.empty()) {
        ASSIGN_OR_RETURN(const WeightView* w, Weight(n.weights[0]));
        b = static_cast<const float*>(w->data);
        nb = w->k * w->rows;
      } else {
        b = f(1);
        nb = a.inputs[1].bytes / 4;
      }
      return Check(n.op == OpKind::kAdd ? LaunchAdd(f(0), b, nb, out, n_el, st)
                                        : LaunchMul(f(0), b, nb, out, n_el, st),
                   graph::OpName(n.op));
    }
    case OpKind::kScale:
      return Check(LaunchScale(f(0), n.p.scale, out, n_el, st), "Scale");
    case OpKind::kSilu:
      return Check(LaunchSilu(f(0), out, n_el, st), "Silu");
    case OpKind::kSwiGLU: {
      const int64_t k = n.shape.ne[0], rows = n.shape.rows();
      if (Int8OnlyApplies(n, k, rows)) {
        ASSIGN_OR_RETURN(void* act, Scratch("mmq_act", MmqActivationBytes(k, rows)));
        RETURN_IF_ERROR(Check(LaunchSwiGluMmq(f(0), f(1), act, k, rows, st), "SwiGLU (int8 only)"));
        MarkInt8Only(a.output, k, rows, act);
        return absl::OkStatus();
      }
      return Check(LaunchSwiGlu(f(0), f(1), out, n_el, st), "SwiGLU");
    }
    case OpKind::kSoftmax:
      return Check(LaunchSoftmaxRows(f(0), out, n.shape.ne[0], n.shape.rows(), st), "Softmax");
    case OpKind::kRmsNorm:
    case OpKind::kQkNorm: {
      const float* w = nullptr;
      if (!n.weights.empty()) {
        ASSIGN_OR_RETURN(const WeightView* wv, Weight(n.weights[0]));
        w = static_cast<const float*>(wv->data);
      }
      const int64_t ne0 = n.shape.ne[0], rows = n.shape.rows();
      if (ne0 % 4 != 0) {
        return absl::InvalidArgumentError(absl::StrCat("cuda RmsNorm ", n.name, ": row length ",
                                                       ne0, " is not a multiple of 4"));
      }
      if (n.op == OpKind::kRmsNorm && Int8OnlyApplies(n, ne0, rows)) {
        // Mode 2: the GEMMs that read this norm get their activation layout
        // from it; the f32 output is never written.
        ASSIGN_OR_RETURN(void* act, Scratch("mmq_act", MmqActivationBytes(ne0, rows)));
        RETURN_IF_ERROR(
            Check(LaunchRmsNormMmq(f(0), w, n.p.eps, act, ne0, rows, st), "RmsNorm (int8 only)"));
        MarkInt8Only(a.output, ne0, rows, act);
        return absl::OkStatus();
      }
      BlockQ8A* q8 = nullptr;
      // Decode producers fuse the int8 quantize epilogue so the MMVQ group
      // that follows skips its own quantize launch.
      if (n.op == OpKind::kRmsNorm && rows == 1 && ne0 % 32 == 0 && knobs_.decode_a_fuse) {
        ASSIGN_OR_RETURN(q8, Q8Plane(a.output, ne0, 1));
      }
      RETURN_IF_ERROR(Check(LaunchRmsNorm(f(0), w, n.p.eps, out, q8, ne0, rows, st), "RmsNorm"));
      if (q8 != nullptr) q8_valid_[Key{a.output.buffer, a.output.offset}] = ne0 * 4;
      return absl::OkStatus();
    }
    case OpKind::kMatMul: {
      ASSIGN_OR_RETURN(const WeightView* w, Weight(n.weights[0]));
      return MatMulWeights(n, {w}, a.inputs[0], {out});
    }
    case OpKind::kRoPE: {
      if (n.p.rope_style != graph::RopeStyle::kNeoX &&
          n.p.rope_style != graph::RopeStyle::kInterleaved) {
        return absl::InvalidArgumentError(absl::StrCat("cuda RoPE ", n.name, ": unsupported style ",
                                                       static_cast<int>(n.p.rope_style)));
      }
      const auto& s = n.shape;
      // The factors are read on the host (the weight's mapped bytes) into
      // the launch's frequency table.
      const graph::Weight* factors = graph::RopeFactors(n);
      return Check(LaunchRope(f(0), i32(1), out, s.ne[0], s.ne[1], s.ne[2], n.p.n_rot,
                              n.p.rope_style == graph::RopeStyle::kNeoX ? 0 : 1, n.p.rope_base, st,
                              factors ? reinterpret_cast<const float*>(factors->data) : nullptr),
                   "RoPE");
    }
    case OpKind::kKvcacheStore: {
      if (a.kv == nullptr) return absl::InternalError("KvcacheStore without a KV binding");
      const int64_t nt = a.inputs[2].bytes / 4;
      const int64_t nkv = a.kv_layout.n_kv_embd;
      if (a.inputs[0].bytes / 4 != nt * nkv || a.inputs[1].bytes / 4 != nt * nkv) {
        return absl::InvalidArgumentError(absl::StrCat(
            "cuda KvcacheStore ", n.name, ": buffer size mismatch: k has ", a.inputs[0].bytes / 4,
            ", v ", a.inputs[1].bytes / 4, " values for ", nt, " tokens x n_kv_embd ", nkv));
      }
      ASSIGN_OR_RETURN(uint8_t * kc, Ptr(a.kv->k, a.kv->k.bytes));
      ASSIGN_OR_RETURN(uint8_t * vc, Ptr(a.kv->v, a.kv->v.bytes));
      return Check(LaunchKvStore(f(0), f(1), i32(2), nt, kc, vc, ToKvType(a.kv_layout.dtype), nkv,
                                 a.kv_layout.n_ctx, err_flag, st),
                   "KvcacheStore");
    }
    case OpKind::kAttn: {
      const auto& p = n.p;
      const int64_t nkt = a.kv_layout.n_kv_embd;
      if (nkt != static_cast<int64_t>(p.n_head_kv) * p.head_dim) {
        return absl::InvalidArgumentError(absl::StrCat("cuda Attn ", n.name, ": cache row ", nkt,
                                                       " != n_head_kv ", p.n_head_kv, " x head_dim ",
                                                       p.head_dim));
      }
      if (p.head_dim > 128 || p.head_dim % 4 != 0) {
        return absl::InvalidArgumentError(absl::StrCat("cuda Attn ", n.name, ": head_dim ",
                                                       p.head_dim, " (needs <= 128 and % 4 == 0)"));
      }
      if (p.n_head_kv <= 0 || p.n_head % p.n_head_kv != 0) {
        return absl::InvalidArgumentError(absl::StrCat("cuda Attn ", n.name, ": GQA ratio n_head ",
                                                       p.n_head, " / n_head_kv ", p.n_head_kv,
                                                       " is not an integer"));
      }
      AttnParams ap;
      ap.n_head = p.n_head;
      ap.n_head_kv = p.n_head_kv;
      ap.head_dim = p.head_dim;
      ap.scale = p.scale;
      ap.n_ctx = a.kv_layout.n_ctx;
      ap.kv_type = ToKvType(a.kv_layout.dtype);
      const int64_t nt = n.shape.ne[1];
      if (p.kv_block > 0) {
        // Paged (many sequences): decode tiles on the split-KV kernel,
        // prefill tiles on the prefill kernel; both grids are static over
        // the graph's tile count and read the tiles on the device.
        AttnPaged pg;
        pg.tiles = i32(4);
        pg.n_tiles = a.inputs[4].bytes / 16;
        pg.tables = i32(5);
        pg.max_blocks = p.max_blocks;
        pg.kv_block = p.kv_block;
        ASSIGN_OR_RETURN(void* partial, Scratch("attn_partial",
                                                AttnPagedPartialFloats(ap, pg.n_tiles) * 4));
        RETURN_IF_ERROR(Check(LaunchAttnDecodePaged(f(0), i32(3), in[1], in[2],
                                                    static_cast<float*>(partial), out, ap, pg, st),
                              "attention decode (paged)"));
        if (nt == 1) return absl::OkStatus();  // the one tile is a decode token
        const bool tc = knobs_.attn_prefill_tc && nt >= kAttnPrefillTcMinTokens;
        return Check(LaunchAttnPrefillPaged(f(0), i32(3), in[1], in[2], out, ap, pg, tc, st),
                     "attention prefill (paged)");
      }
      if (nt == 1) {
        ASSIGN_OR_RETURN(void* partial, Scratch("attn_partial",
                                                AttnDecodePartialFloats(ap) * 4));
        return Check(LaunchAttnDecode(f(0), i32(3), in[1], in[2], static_cast<float*>(partial),
                                      out, ap, st),
                     "attention decode");
      }
      // The tensor-core kernel (f16 KV, nt >= 16) is opt-in until it has
      // been validated on hardware; otherwise the CUDA-core kernel.
      AttnPrefillConfig cfg;
      if (!knobs_.attn_prefill_tc) cfg.tc_min_tokens = INT64_MAX;
      return Check(LaunchAttnPrefillConfigured(f(0), i32(3), nt, in[1], in[2], out, ap, cfg, st),
                   "attention prefill");
    }
    case OpKind::kPermute: {
      int64_t x_ne[4];
      for (int i = 0; i < 4; ++i) x_ne[i] = n.shape.ne[n.p.perm[i]];
      int8_t perm[4] = {n.p.perm[0], n.p.perm[1], n.p.perm[2], n.p.perm[3]};
      return Check(LaunchPermute(f(0), x_ne, perm, out, st), "Permute");
    }
    case OpKind::kGetRows: {
      if (!n.weights.empty()) {
        ASSIGN_OR_RETURN(const WeightView* w, Weight(n.weights[0]));
        return Check(LaunchGetRowsWeight(*w, i32(0), n.shape.ne[1], out, err_flag, st),
                     "GetRows (weight)");
      }
      const int64_t ne0 = n.shape.ne[0];
      return Check(LaunchGetRowsF32(f(0), ne0, a.inputs[0].bytes / 4 / ne0, i32(1), n.shape.ne[1],
                                    out, err_flag, st),
                   "GetRows");
    }
    case OpKind::kFusedQKV: {
      if (n.shape.ne[1] > 1) {
        // Prefill: the planar [q | k | v] output (graph.h).
        std::vector<const WeightView*> ws;
        std::vector<float*> ys;
        float* y = out;
        for (const graph::Weight* gw : n.weights) {
          ASSIGN_OR_RETURN(const WeightView* w, Weight(gw));
          ws.push_back(w);
          ys.push_back(y);
          y += w->rows * n.shape.ne[1];
        }
        if (y - out != n_el) {
          return absl::InvalidArgumentError(absl::StrCat("cuda FusedQKV ", n.name, ": weights give ",
                                                         y - out, " outputs, node holds ", n_el));
        }
        return MatMulWeights(n, ws, a.inputs[0], ys);
      }
      MmvqSegments segs;
      bool all_mmvq = true;
      for (const graph::Weight* gw : n.weights) {
        ASSIGN_OR_RETURN(const WeightView* w, Weight(gw));
        segs.w[segs.n++] = *w;
        all_mmvq = all_mmvq && MmvqSupports(w->type) && !(IsKQuant(w->type) && !knobs_.kq_mmvq);
      }
      const int64_t k = segs.w[0].k;
      if (all_mmvq) {
        ASSIGN_OR_RETURN(const BlockQ8A* q, Quantized(a.inputs[0], k, 1));
        return Check(LaunchMmvqSegments(segs, q, out, st), "FusedQKV");
      }
      // Mixed float/quantized weights: each segment on its own kernel (the
      // quantized ones still on MMVQ, as the unfused MatMul would run them).
      float* y = out;
      for (int i = 0; i < segs.n; ++i) {
        const WeightView& w = segs.w[i];
        if (MmvqSupports(w.type) && !(IsKQuant(w.type) && !knobs_.kq_mmvq)) {
          ASSIGN_OR_RETURN(const BlockQ8A* q, Quantized(a.inputs[0], k, 1));
          RETURN_IF_ERROR(Check(LaunchMmvq(w, q, y, w.rows, 1, st), "FusedQKV"));
        } else {
          RETURN_IF_ERROR(Check(LaunchMatvecF32(w, f(0), y, w.rows, 1, st), "FusedQKV"));
        }
        y += w.rows;
      }
      return absl::OkStatus();
    }
    case OpKind::kQkvBiasRopeStore: {
      const auto& p = n.p;
      if (a.kv == nullptr) return absl::InternalError("QkvBiasRopeStore without a KV binding");
      const int64_t nq = static_cast<int64_t>(p.n_head) * p.head_dim;
      const int64_t nkv = static_cast<int64_t>(p.n_head_kv) * p.head_dim;
      if (nkv != a.kv_layout.n_kv_embd) {
        return absl::InvalidArgumentError(absl::StrCat("cuda QkvBiasRopeStore ", n.name, ": n_kv_embd ",
                                                       nkv, " != cache row ", a.kv_layout.n_kv_embd));
      }
      const int64_t nt = n.shape.ne[2];
      const float *q, *k, *v;
      size_t pos_index;
      if (graph::QkvParts(n) == 1) {
        // One planar FusedQKV output: q [nq, nt], k [nkv, nt], v [nkv, nt].
        q = f(0);
        k = q + nq * nt;
        v = k + nkv * nt;
        pos_index = 1;
      } else {
        q = f(0);
        k = f(1);
        v = f(2);
        pos_index = 3;
      }
      if (a.inputs[pos_index].bytes / 4 != nt) {
        return absl::InvalidArgumentError(absl::StrCat("cuda QkvBiasRopeStore ", n.name, ": ",
                                                       a.inputs[pos_index].bytes / 4,
                                                       " positions for ", nt, " tokens"));
      }
      const float* bias[3] = {nullptr, nullptr, nullptr};
      const graph::Weight* factors = graph::RopeFactors(n);  // host bytes, as for RoPE
      for (int j = 0; j < 3; ++j) {
        ASSIGN_OR_RETURN(const WeightView* w, Weight(n.weights[j]));
        if (w) bias[j] = static_cast<const float*>(w->data);
      }
      ASSIGN_OR_RETURN(uint8_t * kc, Ptr(a.kv->k, a.kv->k.bytes));
      ASSIGN_OR_RETURN(uint8_t * vc, Ptr(a.kv->v, a.kv->v.bytes));
      AttnParams ap;
      ap.n_head = p.n_head;
      ap.n_head_kv = p.n_head_kv;
      ap.head_dim = p.head_dim;
      ap.n_ctx = a.kv_layout.n_ctx;
      ap.kv_type = ToKvType(a.kv_layout.dtype);
      const int32_t* rows = graph::QkvHasRows(n) ? i32(pos_index + 1) : nullptr;
      if (rows != nullptr && a.inputs[pos_index + 1].bytes / 4 != nt) {
        return absl::InvalidArgumentError(absl::StrCat("cuda QkvBiasRopeStore ", n.name, ": ",
                                                       a.inputs[pos_index + 1].bytes / 4,
                                                       " cache rows for ", nt, " tokens"));
      }
      return Check(LaunchQkvBiasRopeStore(q, k, v, bias[0], bias[1], bias[2], i32(pos_index), nt,
                                          out, kc, vc, ap,
                                          p.rope_style == graph::RopeStyle::kNeoX ? 0 : 1,
                                          p.rope_base, err_flag, st, rows,
                                          factors ? reinterpret_cast<const float*>(factors->data)
                                                  : nullptr),
                   "QkvBiasRopeStore");
    }
    case OpKind::kTopK: {
      const int64_t n_out = n.shape.ne[1];
      const int64_t n_vocab = a.inputs[0].bytes / 4 / std::max<int64_t>(n_out, 1);
      return Check(LaunchTopK(f(0), n_vocab, n_out, i32(1), n.p.top_k, n.p.vocab_limit, out, st),
                   "TopK");
    }
    case OpKind::kFusedFFN: {
      if (n.shape.ne[1] != 1) {
        return absl::InvalidArgumentError(absl::StrCat("cuda FusedFFN ", n.name,
                                                       ": decode only, got nt = ", n.shape.ne[1]));
      }
      ASSIGN_OR_RETURN(const WeightView* g, Weight(n.weights[0]));
      ASSIGN_OR_RETURN(const WeightView* u, Weight(n.weights[1]));
      const bool mmvq = MmvqSupports(g->type) && MmvqSupports(u->type) &&
                        !((IsKQuant(g->type) || IsKQuant(u->type)) && !knobs_.kq_mmvq);
      if (mmvq) {
        ASSIGN_OR_RETURN(const BlockQ8A* q, Quantized(a.inputs[0], g->k, 1));
        return Check(LaunchMmvqSwiGlu(*g, *u, q, out, st), "FusedFFN");
      }
      ASSIGN_OR_RETURN(void* tmp, Scratch("ffn_up", g->rows * 4));
      RETURN_IF_ERROR(Check(LaunchMatvecF32(*g, f(0), out, g->rows, 1, st), "FusedFFN gate"));
      RETURN_IF_ERROR(Check(LaunchMatvecF32(*u, f(0), static_cast<float*>(tmp), u->rows, 1, st),
                            "FusedFFN up"));
      return Check(LaunchSwiGlu(out, static_cast<float*>(tmp), out, g->rows, st), "FusedFFN swiglu");
    }
  }
  return absl::UnimplementedError(absl::StrCat("cuda: op ", graph::OpName(n.op),
                                               " has no kernel (stays on the CPU backend per supports_op)"));
}

}  // namespace minfer::cuda
