#include "engine/cpu/cpu_backend.h"

#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "engine/base/status.h"
#include "engine/cpu/kernels.h"
#include "engine/cpu/vec_math.h"
#include "engine/quant/quantize.h"
#include "engine/quant/vec_dot.h"

namespace minfer::cpu {

using graph::BufferRef;
using graph::DType;
using graph::ExecArgs;
using graph::Node;
using graph::OpKind;

namespace {
constexpr int64_t kBufferAlign = 64;
}  // namespace

CpuBackend::CpuBackend(ThreadPool* pool) : pool_(pool ? pool : &DefaultThreadPool()) {}

CpuBackend::CpuBackend(ThreadPool* pool, const CpuBackendOptions& options) : CpuBackend(pool) {
  options_ = options;
}

CpuBackend::~CpuBackend() {
  buffers_.ReleaseAll([](void* p) { std::free(p); });
}

bool CpuBackend::SupportsKvType(DType t) const {
  return t == DType::kF32 || t == DType::kF16 || t == DType::kQ8_0 || t == DType::kFp8;
}

bool CpuBackend::SupportsOp(const Node& node) const {
  auto weight_ok = [](const graph::Weight* w) {
    return w == nullptr || GetQ8AKernels(w->type) != nullptr || GetF32Kernels(w->type) != nullptr;
  };
  switch (node.op) {
    case OpKind::kMatMul:
    case OpKind::kFusedQKV:
    case OpKind::kFusedFFN:
    case OpKind::kMoeFFN:
      for (const graph::Weight* w : node.weights) {
        if (!weight_ok(w)) return false;
      }
      return true;
    case OpKind::kGetRows:
      return node.weights.empty() || CanDequantize(node.weights[0]->type);
    case OpKind::kKvcacheLoad:
      return SupportsKvType(node.dtype);
    case OpKind::kAllReduce:
      return collective_ != nullptr;
    default:
      return true;  // every op has a CPU kernel
  }
}

absl::StatusOr<int32_t> CpuBackend::AllocBuffer(int64_t bytes) {
  return buffers_.Acquire(bytes, [](int64_t n) -> absl::StatusOr<void*> {
    int64_t rounded = (n + kBufferAlign - 1) / kBufferAlign * kBufferAlign;
    void* p = std::aligned_alloc(kBufferAlign, rounded);
    if (p == nullptr) {
      return absl::ResourceExhaustedError(
          absl::StrCat("cpu: cannot allocate ", n, " bytes of host memory"));
    }
    return p;
  });
}

void CpuBackend::FreeBuffer(int32_t buffer) { buffers_.Release(buffer); }

int64_t CpuBackend::ReleaseUnused() {
  int64_t n = buffers_.FreeUnused([](void* p) { std::free(p); });
  n += static_cast<int64_t>(scratch_.capacity());
  std::vector<uint8_t>().swap(scratch_);
  // The FP8 weight copies are rebuilt on the next FP8 matmul.
  n += fp8_weight_bytes_;
  fp8_weights_.clear();
  fp8_weight_bytes_ = 0;
  return n;
}

bool CpuBackend::UsesFp8(const graph::Weight& w, int64_t nt) const {
  // Below 2 is off, as on the GPU (matmul_choice): decode's single token
  // never takes the FP8 path.
  const int64_t min = options_.fp8_prefill_min_tokens;
  if (min < 2 || nt < min) return false;
  return w.type == GgmlType::kQ8_0 || w.type == GgmlType::kF16 || w.type == GgmlType::kBF16;
}

absl::Status CpuBackend::Fp8MatMul(const graph::Weight& w, const float* x, int64_t nt, float* y) {
  const int64_t k = w.ne0(), n = w.rows();
  auto it = fp8_weights_.find(&w);
  if (it != fp8_weights_.end() && it->second.data != w.data) {
    const Fp8Rows& stale = it->second.rows;
    fp8_weight_bytes_ -= static_cast<int64_t>(stale.codes.size() + 4 * stale.scales.size());
    fp8_weights_.erase(it);
    it = fp8_weights_.end();
  }
  if (it == fp8_weights_.end()) {
    // Converted at first use, as the GPU converts at load: each row through
    // the engine's own dequantizer to f32 (exact for F16 / BF16, Q8_0's
    // definition), then one FP8 scale per row.
    const DequantizeRowFn dequantize = GetDequantizeRowFn(w.type);
    if (dequantize == nullptr) {
      return absl::InternalError(absl::StrCat("cpu fp8 MatMul: no dequantizer for ", w.name));
    }
    Fp8Weight fw;
    fw.data = w.data;
    fw.rows.rows = n;
    fw.rows.k = k;
    fw.rows.codes.resize(static_cast<size_t>(n * k));
    fw.rows.scales.resize(static_cast<size_t>(n));
    const int64_t rb = w.row_bytes();
    pool_->ParallelRange(n, 8, [&](int64_t b, int64_t e) {
      std::vector<float> row(static_cast<size_t>(k));
      for (int64_t r = b; r < e; ++r) {
        dequantize(w.data + r * rb, row.data(), k);
        QuantizeRowFp8(row.data(), k, fw.rows.codes.data() + r * k, &fw.rows.scales[r]);
      }
    });
    fp8_weight_bytes_ += n * k + 4 * n;
    it = fp8_weights_.emplace(&w, std::move(fw)).first;
  }
  const Fp8Rows& w8 = it->second.rows;
  const Fp8Rows x8 = QuantizeRowsFp8(x, nt, k);
  // Each range writes only its own rows' outputs (every token's).
  pool_->ParallelRange(n, 8,
                       [&](int64_t b, int64_t e) { MatMulFp8ReferenceRows(w8, x8, b, e, y); });
  ++fp8_matmuls_;
  return absl::OkStatus();
}

absl::Status CpuBackend::WeightProduct(const graph::Weight& w, const float* x, int64_t nt,
                                       float* y) {
  if (UsesFp8(w, nt)) return Fp8MatMul(w, x, nt, y);
  return MatMul(*pool_, w, x, nt, y, scratch_);
}

uint8_t* CpuBackend::HostPtr(const BufferRef& ref) {
  auto p = Ptr(ref, ref.bytes);
  return p.ok() ? *p : nullptr;
}

absl::Status CpuBackend::WriteHost(const BufferRef& dst, const void* src, int64_t bytes) {
  ASSIGN_OR_RETURN(uint8_t * p, Ptr(dst, bytes));
  std::memcpy(p, src, bytes);
  return absl::OkStatus();
}

absl::Status CpuBackend::ReadHost(const BufferRef& src, void* dst, int64_t bytes) {
  ASSIGN_OR_RETURN(uint8_t * p, Ptr(src, bytes));
  std::memcpy(dst, p, bytes);
  return absl::OkStatus();
}

absl::Status CpuBackend::Fill(const BufferRef& dst, uint8_t value) {
  ASSIGN_OR_RETURN(uint8_t * p, Ptr(dst, dst.bytes));
  std::memset(p, value, dst.bytes);
  return absl::OkStatus();
}

absl::Status CpuBackend::AddResidual(const Node& node, const ExecArgs& args, size_t i,
                                      const std::vector<uint8_t*>& in, float* out) {
  if (node.inputs.size() <= i) return absl::OkStatus();
  const int64_t n = node.shape.elements();
  if (args.inputs[i].bytes < n * 4) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cpu ", graph::OpName(node.op), " ", node.name, ": residual holds ",
        args.inputs[i].bytes / 4, " floats, needs ", n));
  }
  // What Add(r, y) computes (GraphBuilder::AddInto).
  AddF32(*pool_, reinterpret_cast<const float*>(in[i]), out, n, out, n);
  return absl::OkStatus();
}

absl::Status CpuBackend::ExecuteNode(const Node& node, const ExecArgs& args) {
  // Resolve every input and the output to host pointers, checking sizes.
  std::vector<uint8_t*> in(args.inputs.size());
  for (size_t i = 0; i < args.inputs.size(); ++i) {
    ASSIGN_OR_RETURN(in[i], Ptr(args.inputs[i], args.inputs[i].bytes));
  }
  ASSIGN_OR_RETURN(uint8_t * out_bytes, Ptr(args.output, node.bytes()));
  float* out = reinterpret_cast<float*>(out_bytes);
  auto f = [&](size_t i) { return reinterpret_cast<const float*>(in[i]); };
  auto i32 = [&](size_t i) { return reinterpret_cast<const int32_t*>(in[i]); };
  const int64_t n = node.shape.elements();
  ThreadPool& pool = *pool_;

  switch (node.op) {
    case OpKind::kInput:
    case OpKind::kView:
    case OpKind::kReshape:
    case OpKind::kKvcacheLoad:
      return absl::OkStatus();  // no kernel: data is written or aliased
    case OpKind::kAdd:
    case OpKind::kMul: {
      const float* b;
      int64_t nb;
      if (!node.weights.empty()) {
        b = reinterpret_cast<const float*>(node.weights[0]->data);
        nb = node.weights[0]->ne0() * node.weights[0]->rows();
      } else {
        b = f(1);
        nb = args.inputs[1].bytes / 4;
      }
      if (node.op == OpKind::kAdd && !node.weights.empty() && node.inputs.size() == 2) {
        // A bias add with the residual (graph.h).
        if (args.inputs[1].bytes / 4 != n) {
          return absl::InvalidArgumentError(absl::StrCat("Add ", node.name, ": residual holds ",
                                                         args.inputs[1].bytes / 4,
                                                         " floats, needs ", n));
        }
        AddF32Residual(pool, f(0), b, nb, f(1), out, n);
      } else if (node.op == OpKind::kAdd) {
        AddF32(pool, f(0), b, nb, out, n);
      } else {
        MulF32(pool, f(0), b, nb, out, n);
      }
      return absl::OkStatus();
    }
    case OpKind::kScale:
      ScaleF32(f(0), node.p.scale, out, n);
      return absl::OkStatus();
    case OpKind::kSilu:
      SiluF32(f(0), out, n);
      return absl::OkStatus();
    case OpKind::kSwiGLU:
      SwiGluF32(pool, f(0), f(1), out, n);
      return absl::OkStatus();
    case OpKind::kSoftmax:
      SoftmaxRows(f(0), out, node.shape.ne[0], node.shape.rows());
      return absl::OkStatus();
    case OpKind::kRmsNorm:
    case OpKind::kQkNorm: {
      const float* w =
          node.weights.empty() ? nullptr : reinterpret_cast<const float*>(node.weights[0]->data);
      RmsNormRows(pool, f(0), w, node.p.eps, out, node.shape.ne[0], node.shape.rows());
      return absl::OkStatus();
    }
    case OpKind::kMatMul:
      RETURN_IF_ERROR(WeightProduct(*node.weights[0], f(0), node.shape.ne[1], out));
      return AddResidual(node, args, 1, in, out);
    case OpKind::kRoPE: {
      const auto& s = node.shape;
      if (node.p.rope_style != graph::RopeStyle::kNeoX &&
          node.p.rope_style != graph::RopeStyle::kInterleaved) {
        return absl::InvalidArgumentError("cpu RoPE: unknown style");
      }
      const graph::Weight* factors = graph::RopeFactors(node);
      RopeF32(f(0), i32(1), out, s.ne[0], s.ne[1], s.ne[2], node.p.n_rot, node.p.rope_style,
              node.p.rope_base,
              factors ? reinterpret_cast<const float*>(factors->data) : nullptr, &node.p.yarn);
      return absl::OkStatus();
    }
    case OpKind::kKvcacheStore: {
      if (args.kv == nullptr) return absl::InternalError("KvcacheStore without a KV binding");
      const int64_t nt = args.inputs[2].bytes / 4;
      if (args.inputs[0].bytes / 4 != nt * args.kv_layout.n_kv_embd) {
        return absl::InvalidArgumentError(absl::StrCat(
            "KvcacheStore: k has ", args.inputs[0].bytes / 4, " values for ", nt,
            " tokens of n_kv_embd ", args.kv_layout.n_kv_embd));
      }
      ASSIGN_OR_RETURN(uint8_t * kc, Ptr(args.kv->k, args.kv->k.bytes));
      ASSIGN_OR_RETURN(uint8_t * vc, Ptr(args.kv->v, args.kv->v.bytes));
      return KvStore(f(0), f(1), i32(2), nt, args.kv_layout, kc, vc);
    }
    case OpKind::kAttn: {
      const auto& p = node.p;
      if (args.kv_layout.n_kv_embd != static_cast<int64_t>(p.n_head_kv) * p.head_dim) {
        return absl::InvalidArgumentError(
            absl::StrCat("Attn: cache row ", args.kv_layout.n_kv_embd, " != n_head_kv ",
                         p.n_head_kv, " x head_dim ", p.head_dim));
      }
      if (p.kv_block > 0) {
        PagedAttnArgs pa;
        pa.q = f(0);
        pa.pos = i32(3);
        pa.nt = node.shape.ne[1];
        pa.tiles = i32(4);
        pa.n_tiles = args.inputs[4].bytes / 16;
        pa.tables = i32(5);
        pa.max_blocks = p.max_blocks;
        pa.n_table_rows = args.inputs[5].bytes / 4 / p.max_blocks;
        pa.kv_block = p.kv_block;
        pa.n_head = p.n_head;
        pa.n_head_kv = p.n_head_kv;
        pa.head_dim = p.head_dim;
        pa.scale = p.scale;
        pa.layout = args.kv_layout;
        pa.k_cache = in[1];
        pa.v_cache = in[2];
        pa.y = out;
        pa.window = p.attn_window;
        if (!node.weights.empty() && node.weights[0] != nullptr) {
          pa.sinks = reinterpret_cast<const float*>(node.weights[0]->data);
        }
        return PagedAttention(pool, pa);
      }
      return Attention(pool, f(0), i32(3), node.shape.ne[1], p.n_head, p.n_head_kv, p.head_dim,
                       p.scale, args.kv_layout, in[1], in[2], out);
    }
    case OpKind::kTopK:
      return TopKRows(pool, f(0), args.inputs[0].bytes / 4 / node.shape.ne[1], node.shape.ne[1],
                      i32(1), node.p.top_k, node.p.vocab_limit, out,
                      node.inputs.size() > 2 ? reinterpret_cast<const uint32_t*>(in[2]) : nullptr);
    case OpKind::kMoeRoute: {
      const graph::Weight* bias = node.weights.empty() ? nullptr : node.weights[0];
      return MoeRouteRows(f(0), node.p.n_expert, node.shape.ne[1], node.p, out,
                          bias != nullptr ? reinterpret_cast<const float*>(bias->data) : nullptr);
    }
    case OpKind::kMoeFFN:
      RETURN_IF_ERROR(MoeFfn(pool, node, f(0), f(1), node.shape.ne[1], out));
      return AddResidual(node, args, 2, in, out);
    case OpKind::kAllReduce:
      if (collective_ == nullptr) {
        return absl::FailedPreconditionError("AllReduce on a CPU backend without a collective");
      }
      if (out != f(0)) std::memcpy(out, f(0), static_cast<size_t>(n) * sizeof(float));
      return collective_->AllReduceSum(rank_, out, n);
    case OpKind::kPermute: {
      graph::Shape xs;  // the input's shape: out.ne[perm[i]] = in.ne[i]
      for (int i = 0; i < 4; ++i) xs.ne[i] = node.shape.ne[node.p.perm[i]];
      PermuteF32(f(0), xs, node.p.perm, out);
      return absl::OkStatus();
    }
    case OpKind::kGetRows: {
      if (!node.weights.empty()) {
        return GetRowsWeight(*node.weights[0], i32(0), node.shape.ne[1], out);
      }
      const int64_t ne0 = node.shape.ne[0];
      return GetRowsF32(f(0), ne0, args.inputs[0].bytes / 4 / ne0, i32(1), node.shape.ne[1], out);
    }
    case OpKind::kFusedQKV: {
      const int64_t nt = node.shape.ne[1];
      if (nt > 1) {
        // Planar: each weight's [rows, nt] product after the previous one
        // (graph.h), exactly the unfused MatMuls' values.
        float* y = out;
        for (const graph::Weight* w : node.weights) {
          RETURN_IF_ERROR(WeightProduct(*w, f(0), nt, y));
          y += w->rows() * nt;
        }
        return absl::OkStatus();
      }
      std::vector<const graph::Weight*> ws(node.weights.begin(), node.weights.end());
      return MatMulConcat(pool, ws, f(0), out, scratch_);
    }
    case OpKind::kFusedFFN:
      return FusedFfn(pool, *node.weights[0], *node.weights[1], f(0), node.shape.ne[1], out,
                      scratch_);
    case OpKind::kQkvBiasRopeStore: {
      if (args.kv == nullptr) return absl::InternalError("QkvBiasRopeStore without a KV binding");
      const auto& p = node.p;
      const int64_t nq = static_cast<int64_t>(p.n_head) * p.head_dim;
      const int64_t nkv = static_cast<int64_t>(p.n_head_kv) * p.head_dim;
      if (nkv != args.kv_layout.n_kv_embd) {
        return absl::InvalidArgumentError(absl::StrCat("QkvBiasRopeStore: n_kv_embd ", nkv,
                                                       " != cache row ", args.kv_layout.n_kv_embd));
      }
      const int64_t nt = node.shape.ne[2];
      // q [nq, nt], k and v [nkv, nt]: one planar FusedQKV output, or three
      // inputs; then the positions and, optionally, the cache rows.
      const size_t n_parts = graph::QkvParts(node);
      const float* src[3];
      if (n_parts == 1) {
        src[0] = f(0);
        src[1] = src[0] + nq * nt;
        src[2] = src[1] + nkv * nt;
      } else {
        for (int j = 0; j < 3; ++j) src[j] = f(j);
      }
      const int64_t sizes[3] = {nq, nkv, nkv};
      const int32_t* pos = i32(n_parts);
      const int32_t* rows = graph::QkvHasRows(node) ? i32(n_parts + 1) : pos;
      ASSIGN_OR_RETURN(uint8_t * kc, Ptr(args.kv->k, args.kv->k.bytes));
      ASSIGN_OR_RETURN(uint8_t * vc, Ptr(args.kv->v, args.kv->v.bytes));
      // Token by token, each gathered into one scratch row q | k | v.
      std::vector<float> qkv(nq + 2 * nkv);
      const graph::Weight* fw = graph::RopeFactors(node);
      const float* factors = fw ? reinterpret_cast<const float*>(fw->data) : nullptr;
      const graph::Weight* qnw = graph::QkvQNorm(node);
      const graph::Weight* knw = graph::QkvKNorm(node);
      const float* qn = qnw ? reinterpret_cast<const float*>(qnw->data) : nullptr;
      const float* kn = knw ? reinterpret_cast<const float*>(knw->data) : nullptr;
      for (int64_t t = 0; t < nt; ++t) {
        int64_t off = 0;
        for (int j = 0; j < 3; ++j) {
          std::memcpy(qkv.data() + off, src[j] + t * sizes[j], sizes[j] * 4);
          if (const graph::Weight* b = node.weights[j]) {
            const float* bias = reinterpret_cast<const float*>(b->data);
            for (int64_t i = 0; i < sizes[j]; ++i) qkv[off + i] += bias[i];
          }
          off += sizes[j];
        }
        // Qwen3's per-head norms, between the bias and RoPE (QkNorm's rows).
        if (qn != nullptr) {
          for (int64_t h = 0; h < p.n_head; ++h) {
            float* row = qkv.data() + h * p.head_dim;
            RmsNormF32Row(row, qn, p.eps, row, p.head_dim);
          }
          for (int64_t h = 0; h < p.n_head_kv; ++h) {
            float* row = qkv.data() + nq + h * p.head_dim;
            RmsNormF32Row(row, kn, p.eps, row, p.head_dim);
          }
        }
        RopeF32(qkv.data(), pos + t, out + t * nq, p.head_dim, p.n_head, 1, p.n_rot,
                p.rope_style, p.rope_base, factors, &p.yarn);
        RopeF32(qkv.data() + nq, pos + t, qkv.data() + nq, p.head_dim, p.n_head_kv, 1, p.n_rot,
                p.rope_style, p.rope_base, factors, &p.yarn);
        RETURN_IF_ERROR(
            KvStore(qkv.data() + nq, qkv.data() + nq + nkv, rows + t, 1, args.kv_layout, kc, vc));
      }
      return absl::OkStatus();
    }
  }
  return absl::UnimplementedError(absl::StrCat("cpu: op ", graph::OpName(node.op), " has no kernel"));
}

}  // namespace minfer::cpu
