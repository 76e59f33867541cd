// CudaBackend: the engine's Backend on an NVIDIA GPU (docs/design.md, the
// CUDA backend).
//
// One instance per loaded model (slot); all share the process-wide
// CudaState (device, stream, stream lock, weight registry). Its job is
// translation: each graph node becomes one or two kernel launches on the
// shared stream, after its structural invariants are checked — a violation
// is an error carrying the actual values, never a silent CPU detour.
//
// Execution windows: from the first launch of a split (GraphReplay or
// ExecuteNode) to the Synchronize that closes it, the backend holds the
// process-wide stream lock, so another slot's work can neither interleave
// with it nor be recorded into a capture.
//
// CUDA Graphs (the state machine is GraphRecorder, graph_recorder.h): a
// split (graph uid, node range) runs directly twice, is captured on its
// third execution (the window is closed, instantiated and launched by
// Synchronize) and replayed from then on; a pool_gen change (any buffer
// allocation or reuse) invalidates the recording. Prefill-shaped splits
// capture too unless MINFER_NO_PREFILL_CAPTURE=1; MINFER_NO_CUDA_GRAPH=1
// forces direct launches. A failed capture or replay disables graphs for
// this backend, loudly.
//
// Dispatch: each op kind maps to one handler (HandlerFor), one per op
// family, defined in ops_<family>.cc next to this file.
//
// A sticky CUDA error (e.g. an illegal address) fails this backend's
// requests from then on with a status naming the original error.
//
// Driven by one thread at a time (the slot's worker).
#ifndef MINFER_CUDA_BACKEND_CUDA_BACKEND_H_
#define MINFER_CUDA_BACKEND_CUDA_BACKEND_H_

#include <cuda_runtime_api.h>

#include <map>
#include <set>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "cuda/backend/activation_memos.h"
#include "cuda/backend/graph_recorder.h"
#include "cuda/backend/matmul_choice.h"
#include "cuda/comm/nccl.h"
#include "cuda/kernels/fp8_gemm.h"
#include "cuda/kernels/moe.h"
#include "cuda/state/cuda_state.h"
#include "engine/base/knobs.h"
#include "engine/graph/backend.h"
#include "engine/graph/buffer_pool.h"
#include "engine/models/decoder.h"

namespace minfer::cuda {

// A tensor-parallel rank of a CudaBackend (CudaBackend::Create).
struct CudaTensorParallel {
  std::shared_ptr<NcclGroup> group;  // null: not a rank
  int rank = 0;
};

class CudaBackend : public graph::Backend {
 public:
  // Uploads every weight of `model` (the all-or-nothing participation gate:
  // a weight whose type has no kernel keeps the model off the GPU, and the
  // error names the first such tensor).
  // `tp`: a tensor-parallel rank's communicator (group->device(rank) must
  // be this state's device); the backend runs the shard's AllReduce nodes on
  // it, inside the captured step. Without one, a graph with AllReduce is
  // refused by the op gate.
  using TensorParallel = CudaTensorParallel;
  static absl::StatusOr<std::unique_ptr<CudaBackend>> Create(
      CudaState* state, const models::DecoderModel& model, const KnobOverrides* knobs,
      const std::function<void(uint64_t, uint64_t)>& progress,
      const uint64_t* knob_generation = nullptr, TensorParallel tp = {});
  // The same for an explicit list of weights (tests).
  static absl::StatusOr<std::unique_ptr<CudaBackend>> Create(
      CudaState* state, const std::vector<const graph::Weight*>& weights,
      const KnobOverrides* knobs, const std::function<void(uint64_t, uint64_t)>& progress);
  ~CudaBackend() override;

  const std::string& name() const override { return name_; }
  bool SupportsOp(const graph::Node& node) const override;
  bool SupportsKvType(graph::DType t) const override;

  absl::StatusOr<int32_t> AllocBuffer(int64_t bytes) override;
  void FreeBuffer(int32_t buffer) override;
  uint64_t pool_gen() const override { return pool_.gen() + scratch_gen_; }

  absl::Status ExecuteNode(const graph::Node& node, const graph::ExecArgs& args) override;
  absl::Status WriteHost(const graph::BufferRef& dst, const void* src, int64_t bytes) override;
  absl::Status ReadHost(const graph::BufferRef& src, void* dst, int64_t bytes) override;
  absl::Status Fill(const graph::BufferRef& dst, uint8_t value) override;
  absl::Status Synchronize() override;
  // Ends a capture in progress (instantiating and launching it, as the
  // window's end would) so that what follows in the window, the late mask
  // input's copy above all, is not recorded into it. Launches are already
  // asynchronous: nothing else to issue.
  absl::Status Flush() override;
  absl::StatusOr<bool> GraphReplay(uint64_t graph_uid, int begin, int end,
                                   int64_t nt_hint) override;
  int64_t MemoryBytes() const override;

  // Introspection (tests, status reports).
  // captures, replays, direct_splits, recaptures: GraphCounters.
  struct Stats : GraphCounters {
    int64_t quantize_launches = 0;
    int64_t quantize_skipped = 0;  // the norm epilogue already wrote the int8 plane
    int64_t mmq_fast = 0;          // MMQ launches by variant
    int64_t mmq_generic = 0;
    int64_t mmq_plane = 0;         // fast launches that read a scale plane
    int64_t mmq_segmented = 0;     // launches over several weights (FusedQKV)
    int64_t mmq_small = 0;         // GEMMs of few tokens on the few-token kernel
    int64_t dq_gemm = 0;           // GEMMs of few tokens on the dequantizing f16 kernel
    int64_t dqw_gemm = 0;          // ... on the Hopper (wgmma) one
    int64_t dqw_tma = 0;           // ... of those, launches whose activations came by TMA
    int64_t dqp_gemm = 0;          // prompts' matmuls on the Hopper prefill GEMM
    int64_t fp8_gemm = 0;          // matmuls on the fp8 GEMM (MINFER_FP8_PREFILL)
    int64_t mmq_stream_k = 0;      // fast launches whose last waves ran as stream-k
    int64_t gemm_f16 = 0;          // prefill matmuls on the f16 GEMM
    int64_t int8_only_writes = 0;  // mode-2 producers (RmsNorm/SwiGLU wrote
                                   // only MMQ's activation layout)
    int64_t dq_only_writes = 0;    // ... only the DQ GEMM's layout
    int64_t moe_mma = 0;           // MoeFFN nodes on the tensor-core grouped matmul
    int64_t moe_vector = 0;        // ... on the CUDA-core one
    int64_t moe_route_group = 0;   // MoeRoute launches that also grouped for the MoeFFN
    int64_t moe_down_combine = 0;  // one-token MoeFFNs whose down ran with the combine
    int64_t moe_gate_quant = 0;    // MoeFFNs whose gate/up launch also quantized h
    int64_t moe_fused_act = 0;     // ... applied biases / gpt-oss's activation in its epilogue
    int64_t residual_epilogue = 0;  // residual adds done in a matmul's epilogue (or its reduce or
                                    // the next node's sum: pending_)
    int64_t kept_partials = 0;      // split-k launches whose partials were kept (not reduced)
    int64_t pending_summed = 0;     // ... whose next node summed them (RmsNorm, QkvBiasRopeStore)
    int64_t pending_written = 0;    // ... written by LaunchSplitSum instead
    int64_t residual_launch = 0;    // ... by an Add launch after the matmul
  };
  const Stats& stats() const { return stats_; }
  bool graphs_enabled() const { return recorder_.enabled(); }
  uint64_t weight_bytes() const;
  // VRAM of the e4m3 copies (MINFER_FP8_PREFILL at load); part of MemoryBytes.
  int64_t fp8_copy_bytes() const { return fp8_bytes_; }
  int64_t fp8_copies() const { return static_cast<int64_t>(fp8_copies_.size()); }
  // VRAM of the MMQ scale planes built at load (MINFER_MMQ_Q4K_DSC /
  // MINFER_MMQ_Q6K_EXP); not part of weight_bytes, part of MemoryBytes.
  uint64_t scale_plane_bytes() const;
  int64_t pool_bytes() const { return pool_.bytes(); }
  // Per-op-kind wall time when MINFER_OP_TIMING=1 (op name -> seconds, calls).
  std::map<std::string, std::pair<double, int64_t>> op_timing() const { return op_timing_; }

 private:
  CudaBackend(CudaState* state, const KnobOverrides* knobs, const uint64_t* knob_generation);

  struct Knobs {
    bool graphs = true;
    bool prefill_capture = true;
    bool decode_a_fuse = true;
    bool pinned_readback = true;
    // Those that choose a matmul's kernel and its producers' layout
    // (matmul_choice.h); the rest tune the chosen kernel.
    MatmulKnobs matmul;
    bool mmq_debug = false;
    bool mmq_stream_k = true;
    bool mmq_split_k = true;
    int mmq_small_chunks = 2;
    int mmq_small_form = 0;
    int mmq_small_mt = 0;
    int mmq_small_stages = 0;
    int dq_mt = 0;
    int dqw_warpgroups = 0;  // 0: by batch
    int dqw_tma = 1;         // MINFER_DQW_TMA (DqwTuning::act_load)
    int dqp_warpgroups = 0;  // MINFER_DQP_WARPGROUPS (DqpTuning::warpgroups); 0: by shape
    bool gemm_fuse = true;   // MINFER_GEMM_FUSE (residual and split-k sums folded into neighbours)
    int dqw_split_k = 0;     // MINFER_DQW_SPLIT_K: 0 automatic, 1 none, N splits
    bool pdl = true;         // MINFER_PDL (applies on sm_90+)
    bool moe_mma = true;          // MINFER_MOE_MMA
    int64_t moe_mma_min_tokens = 16;  // MINFER_MOE_MMA_MIN_TOKENS
    bool moe_route_group = true;      // MINFER_MOE_ROUTE_GROUP
    bool moe_down_combine = true;     // MINFER_MOE_DOWN_COMBINE
    bool moe_gate_quant = false;      // MINFER_MOE_GATE_QUANT
    bool moe_fused_act = false;       // MINFER_MOE_FUSED_ACT
    bool attn_prefill_tc = true;
    bool attn_fused_combine = true;  // MINFER_ATTN_FUSED_COMBINE
    int32_t attn_paged_long_min = -1;  // MINFER_ATTN_PAGED_LONG_MIN (-1: PagedLongMinRows's rule)
    bool attn_q8 = false;            // MINFER_ATTN_Q8
    bool op_timing = false;
    bool operator==(const Knobs&) const = default;
  };
  // Builds the scale planes the plane knobs (with the model's overrides)
  // ask for, after the upload; the VRAM they take is logged per type.
  absl::Status BuildScalePlanes(const std::vector<const graph::Weight*>& weights,
                                const KnobOverrides* knobs);
  void BeginWindow();
  void RefreshKnobs();
  absl::Status Failed() const;
  absl::Status Check(cudaError_t err, const char* what);
  absl::StatusOr<uint8_t*> Ptr(const graph::BufferRef& ref, int64_t need) const {
    return pool_.Resolve(ref, need);
  }
  absl::StatusOr<const WeightView*> Weight(const graph::Weight* w) const;
  absl::StatusOr<void*> Scratch(const std::string& tag, int64_t bytes);
  // At load, with MINFER_FP8_PREFILL >= 2 on an sm_89+ GPU: an e4m3 copy
  // of every 2-D Q8_0 / F16 / BF16 weight (dequantized on the device,
  // bit-exact, then LaunchQuantizeRowsFp8), for the fp8 GEMM.
  absl::Status BuildFp8Copies(const std::vector<const graph::Weight*>& weights,
                              const KnobOverrides* knobs);
  // Scratch whose users keep it zero between launches (the fused attention
  // combine's counters): zeroed when it is (re)allocated, which never
  // happens inside a capture.
  absl::StatusOr<void*> ZeroedScratch(const std::string& tag, int64_t bytes);
  // The int8 plane of activation `x` (k floats x nt rows): quantized here
  // unless a producer already wrote it in this window.
  absl::StatusOr<const BlockQ8A*> Quantized(const graph::BufferRef& x, int64_t k, int64_t nt);
  absl::StatusOr<BlockQ8A*> Q8Plane(const graph::BufferRef& x, int64_t k, int64_t nt);
  // Weights ws[i] applied to the same input x [k, nt], product i to ys[i]
  // ([nt][rows_i]): MatMul, and FusedQKV / FusedFFN at nt > 1, where runs
  // of one weight type on one kernel share a launch (MMQ, the few-token
  // and the DQ GEMM). Each weight runs the kernel ChooseMatmulKernel plans
  // for it, or that kernel's run-time fallback (matmul_choice.h).
  // residual (one weight only; may be null): ys[0] = residual + W x, in the
  // epilogue of MMVQ and (MINFER_GEMM_FUSE) of the Hopper GEMMs when one of
  // them is the kernel, else by an Add launch after.
  // allow_fp8 false: no weight takes the fp8 GEMM (FusedFFN's decode
  // batches: the CPU's emulation, their reference, keeps FusedFFN exact).
  // sums (empty, or one per output): the caller sums split-k partials
  // itself; output i is then the sum over z < sums[i].splits of
  // sums[i].part[z * sums[i].stride + j] (splits 1: ys[i] itself, written),
  // plus the residual for output 0 where it split (the caller adds it: r +
  // the sum), and the partials stay valid until the next matmul.
  struct OutputSum {
    const float* part = nullptr;
    int splits = 1;
    int64_t stride = 0;
  };
  absl::Status MatMulWeights(const graph::Node& n, absl::Span<const WeightView* const> ws,
                             const graph::BufferRef& x, absl::Span<float* const> ys,
                             const float* residual = nullptr, bool allow_fp8 = true,
                             absl::Span<OutputSum> sums = {});
  // The kernel a fused one-token launch (FusedQKV, FusedFFN) plans for
  // weight w: kMmvq or kMatvecF32 (no shape gate).
  MatmulKernel OneTokenKernel(const WeightView& w) const;
  // x quantized into MMQ's activation layout (the "mmq_act" scratch),
  // memoized per input range until something overwrites it.
  absl::StatusOr<void*> MmqActivations(const graph::Node& n, const graph::BufferRef& x,
                                       const float* xf, int64_t k, int64_t nt);
  // x in the DQ GEMM's f16 layout (the "dq_act" scratch, sized once for
  // the model's widest input), memoized like MmqActivations.
  absl::StatusOr<void*> DqActivations(ActivationLayout layout, const graph::Node& n,
                                      const graph::BufferRef& x,
                                      const float* xf, int64_t k, int64_t nt);
  // The device, knobs and model facts the matmul choice reads.
  MatmulContext MatmulCtx() const {
    return MatmulContext{device_, knobs_.matmul, dq_max_k_ > 0};
  }
  // Mode 2 (docs/design.md, prefill matmuls): the layout producer n
  // (RmsNorm, SwiGLU, FusedFFN's SwiGLU) writes its nt rows of k in —
  // ActivationLayoutFor, the layout its readers' kernels take: kMmqInt8
  // (the "mmq_act" scratch), kDqF16 (the "dq_act" scratch) or kF32 (the
  // output buffer). Mark*Only do the bookkeeping after a write in the
  // first two (the memo points at the scratch; the f32 range is dead;
  // counted).
  ActivationLayout ProducerLayout(const graph::Node& n, int64_t k, int64_t nt) const;
  void MarkInt8Only(const graph::BufferRef& out, int64_t k, int64_t nt, void* act);
  // The DQ GEMMs' activation scratch for `layout` (kDqF16: "dq_act",
  // kDqMaxTokens rows; kDqwF16: "dqw_act", kDqwMaxTokens rows or nt when
  // more: MINFER_DQW_MAX_TOKENS above 256 runs prefills in launches of 256).
  absl::StatusOr<void*> DqScratch(int64_t k, int64_t nt, ActivationLayout layout);
  // y = silu(g) * u for node n's [k, rows] output (SwiGLU, and FusedFFN's
  // last step): written as the GEMMs that read it take it when mode 2
  // applies (MMQ's or the DQ GEMM's layout, the f32 range then dead), else
  // as f32 at `out`. g and u as MatMulWeights' sums (partials only where
  // the layout is the Hopper GEMM's: its SwiGLU sums them).
  absl::Status SwiGluInto(const graph::Node& n, const OutputSum& g, const OutputSum& u,
                          const graph::BufferRef& out_ref, float* out, cudaStream_t st);
  void MarkDqOnly(const graph::BufferRef& out, int64_t k, int64_t nt, void* act);

  // One node's launch: its resolved device pointers (every input at its
  // full size, the output at the node's size) and what every handler uses.
  struct OpArgs {
    const graph::Node& n;
    const graph::ExecArgs& a;
    std::vector<uint8_t*> in;
    float* out;
    int64_t n_el;       // output elements
    int32_t* err_flag;  // the device error flag (bad positions, token ids)
    cudaStream_t st;
    const float* f(size_t i) const { return reinterpret_cast<const float*>(in[i]); }
    const int32_t* i32(size_t i) const { return reinterpret_cast<const int32_t*>(in[i]); }
  };
  using Handler = absl::Status (CudaBackend::*)(const OpArgs&);
  // The handler of each op kind; null for a kind without a kernel.
  static Handler HandlerFor(graph::OpKind op);
  absl::Status Dispatch(const graph::Node& n, const graph::ExecArgs& a);
  // The handlers, by family (ops_<family>.cc).
  absl::Status RunNothing(const OpArgs& o);  // Input and the alias ops
  // ops_elementwise.cc
  absl::Status RunBinary(const OpArgs& o);  // Add, Mul
  absl::Status RunScale(const OpArgs& o);
  absl::Status RunSilu(const OpArgs& o);
  absl::Status RunSwiGlu(const OpArgs& o);
  absl::Status RunSoftmax(const OpArgs& o);
  absl::Status RunPermute(const OpArgs& o);
  // ops_norm.cc
  absl::Status RunNorm(const OpArgs& o);  // RmsNorm, QkNorm
  // ops_matmul.cc
  absl::Status RunMatMul(const OpArgs& o);
  absl::Status RunFusedQkv(const OpArgs& o);
  absl::Status RunFusedFfn(const OpArgs& o);
  // ops_attention.cc
  absl::Status RunRope(const OpArgs& o);
  absl::Status RunQkvBiasRopeStore(const OpArgs& o);
  absl::Status RunKvStore(const OpArgs& o);
  absl::Status RunAttention(const OpArgs& o);
  // ops_rows.cc
  absl::Status RunGetRows(const OpArgs& o);
  absl::Status RunTopK(const OpArgs& o);
  // ops_moe.cc
  absl::Status RunMoeRoute(const OpArgs& o);
  absl::Status RunAllReduce(const OpArgs& o);  // cuda_backend.cc
  // FAILED_PRECONDITION once this rank's communicators were aborted.
  absl::Status CheckCollective() const;
  absl::Status RunMoeFfn(const OpArgs& o);
  // Input i of a MatMul or MoeFFN, its optional residual (graph.h): null
  // when the node has none; refused when it holds fewer than the output's
  // floats or was written only as int8 (a dead range).
  absl::StatusOr<const float*> ResidualInput(const OpArgs& o, size_t i);
  // Whether MoeFFN node n's experts have a kernel (integer-dot types or
  // MXFP4, rows of whole blocks, f32 biases, n_expert and k in moe.h's
  // limits).
  static bool MoeFfnSupported(const graph::Node& n);
  // The grouping arrays of a MoE step of nt tokens (the "moe_group"
  // scratch, sized for at least 256 tokens so decode never grows it).
  absl::StatusOr<MoeGroups> MoeGroupArrays(int64_t nt, int k, int n_expert);

  // The recorder's device side: capture, instantiate, launch and destroy on
  // the shared stream.
  class StreamGraphs : public GraphDevice {
   public:
    explicit StreamGraphs(CudaState* state) : state_(state) {}
    absl::Status BeginCapture() override;
    absl::StatusOr<Exec> EndCaptureAndLaunch() override;
    void DiscardCapture() override;
    absl::Status Launch(Exec exec) override;
    void Destroy(Exec exec) override;

   private:
    CudaState* state_;
  };

  std::string name_ = "cuda";
  CudaState* state_;
  const KnobOverrides* knob_overrides_;
  const uint64_t* model_knob_gen_;  // may be null
  TensorParallel tp_;               // group null: not a tensor-parallel rank
  uint64_t owner_;
  uint64_t knob_gen_ = ~0ull;
  Knobs knobs_;

  graph::BufferPool pool_{this, "cuda"};
  uint64_t scratch_gen_ = 0;  // scratch (re)allocations also move pool_gen()

  std::unique_lock<std::recursive_mutex> window_;
  absl::Status sticky_;

  // Pinned staging for input fills (bump-allocated, reset at Synchronize)
  // and for logits readback.
  uint8_t* pinned_in_ = nullptr;
  int64_t pinned_in_cap_ = 0;
  int64_t pinned_in_used_ = 0;
  uint8_t* pinned_out_ = nullptr;
  int64_t pinned_out_cap_ = 0;

  std::map<std::string, std::pair<void*, int64_t>> scratch_;  // tag -> (ptr, bytes)
  // tag -> the allocation (ptr, bytes) ZeroedScratch zeroed
  std::map<std::string, std::pair<void*, int64_t>> zeroed_scratch_;
  // Execution-window memos of quantized activations (the q8 planes, the
  // MMQ scratch) and the mode-2 dead ranges, each valid until a node (or a
  // host write) writes over its source range or the window ends.
  ActivationMemos memos_;
  // Split-k sums left for the next node (MINFER_GEMM_FUSE): a MatMul with a
  // residual, or FusedQKV, whose Hopper GEMM launches split k kept their
  // partials instead of reducing them. The output range `out` is segment
  // 0's `count[0]` outputs at y[0], then segment 1's... (FusedQKV's planar
  // [q | k | v]); segment i is the sum of sum[i]'s slabs, plus `residual`
  // for a MatMul's (splits 1: y[i] already holds its value). The next node
  // sums them itself where it can (a RmsNorm writing the Hopper GEMM's
  // layout; QkvBiasRopeStore), which saves the reduce's launch and a write
  // and read of the range. Anything else first gets them written
  // (ResolvePending): every other node, a range's end (the partials live
  // in the split workspace, which the next GEMM reuses, and a recorded
  // range must hold its producer's reduce), a host read.
  struct PendingSums {
    graph::BufferRef out;
    int n = 0;
    OutputSum sum[3];
    float* y[3] = {nullptr, nullptr, nullptr};
    int64_t count[3] = {0, 0, 0};
    const float* residual = nullptr;
  };
  std::optional<PendingSums> pending_;
  // Writes the pending sums (LaunchSplitSum) and forgets them.
  absl::Status ResolvePending();
  // The pending sums when they are exactly the range `x` (a node's input),
  // else null.
  const PendingSums* PendingAt(const graph::BufferRef& x) const;
  // Leaves `sums` (MatMulWeights' for the outputs `ys` of node output
  // `out`, with `residual`) pending when some segment split.
  void KeepPending(const graph::BufferRef& out, absl::Span<const OutputSum> sums,
                   absl::Span<float* const> ys, absl::Span<const int64_t> counts,
                   const float* residual);
  MatmulDevice device_;  // its MmqRuns(): sm_80+, MMQ (and so mode 2) can run
  // The largest k of a weight the DQ GEMM takes (0: none): its activation
  // scratch holds kDqMaxTokens rows of it.
  int64_t dq_max_k_ = 0;
  // The distinct classes of the model's 2-D integer-dot weights: a mode-2
  // producer's readers are among them (ProducerLayout).
  std::vector<WeightClass> int8_weights_;
  // MINFER_FP8_PREFILL (engine/quant/fp8_matmul.h): the e4m3 copies of the
  // model's 2-D Q8_0 / F16 / BF16 weights, made at load while the knob was
  // on (BuildFp8Copies), keyed by the weight's device data, and the token
  // count the knob gave then (0: none). The knob is read at load only
  // (kReload), as the CPU backend reads it.
  struct Fp8Copy {
    void* alloc = nullptr;  // codes, then the scales (state_->Malloc)
    int64_t bytes = 0;
    Fp8RowsView rows;
  };
  std::map<const void*, Fp8Copy> fp8_copies_;
  int64_t fp8_bytes_ = 0;
  int64_t fp8_min_tokens_ = 0;
  // A decode MoeRoute that grouped its assignments too (LaunchMoeRouteGroup)
  // leaves here its output and the tile width it grouped for; the MoeFFN
  // that reads that route then skips its own group launch. Cleared by every
  // MoeFFN and at the end of the window, so a grouping is used at most once
  // and only by the FFN right after its route.
  struct MoeRouteGrouped {
    const float* route = nullptr;
    int64_t nt = 0;
    int k = 0;
    int n_expert = 0;
    int tile_tokens = 0;
  };
  MoeRouteGrouped moe_grouped_;
  // The stream-k workspace (scratch "mmq_stream_k"), once allocated.
  void* mmq_sk_ws_ = nullptr;
  int64_t mmq_sk_bytes_ = 0;
  // MINFER_MMQ_RAW_NB_DEBUG: launch classes (type, rows, k, variant) already
  // logged.
  std::set<std::tuple<int, int64_t, int64_t, int>> mmq_logged_;

  Stats stats_;
  std::map<std::string, std::pair<double, int64_t>> op_timing_;

  // Declared after stats_ (it counts into it) and destroyed before
  // graph_device_.
  StreamGraphs graph_device_{state_};
  GraphRecorder recorder_{&graph_device_, &stats_};
};

}  // namespace minfer::cuda

#endif  // MINFER_CUDA_BACKEND_CUDA_BACKEND_H_
