// Micro-benchmark of the matrix kernels on Qwen2.5-7B decode/prefill shapes
// (--config=cuda; run on the GPU machine).
//
//   matmul_bench [--sweep] [--quick]
//   matmul_bench --mmq [--quick]
//   matmul_bench --gates [--quick]   MMVQ vs the f32-activation matvec on
//                                    0.5B/1.5B/7B decode shapes
//
// MMVQ: each (type, rows x k) is timed on several weight buffers in rotation
// (together several times the 50 MB L2, so the weights come from HBM as in a
// real decode step), as CUDA-graph replays of a batch of launches (graph
// replay is how decode runs, and it keeps host launch overhead out of the
// numbers); the median over batches gives us per launch and GB/s of weight
// bytes. --sweep also times every MMVQ geometry (rows per warp, shared or L1
// activations, k split) and prints the best. Then multi-token MMVQ (the weight
// bytes are read once for nt tokens), the fused QKV / SwiGLU launches, an
// estimate of the matmul time of one 7B decode step per model type, and the
// f16 GEMM in TFLOPS at nt = 512.
//
// --mmq: the int8 tensor-core prefill GEMM (mmq.h) against GemmF16 on the 7B
// prefill shapes (q/o 3584x3584, k/v 512x3584, gate/up 18944x3584, down
// 3584x18944) at nt = 512 and 2048, every quantized type: us per call of
// LaunchMmq (its activation quantize prepass included), effective int8 TOPS
// (2 rows k nt / time), the 128-token-tile fast variant, the prepass alone,
// GemmF16, the speedup, which rung ran (and why kFast was skipped), and an
// estimate of the 7B Q4_K_M prefill matmul time per token.
//
// --decode-batch: the matmuls of a batched decode step (nt = 1..128 tokens)
// on the 7B shapes: multi-token MMVQ (nt <= 8) and MMQ with split-k off,
// automatic and forced to 2, 4, 8, 16: us per call and weight GB/s, to
// choose the MMVQ/MMQ crossover and the split policy.
//
// --dqw: the Hopper wgmma DQ GEMM (dq_wgmma.h) from 8 to 256 tokens.
// --dqp: its prefill form at 128 to 2048 tokens.
// --dq: the dequantizing f16 GEMM of decode batches (dq_gemm.h, one and two
// m-tiles per warp, split-k automatic or off) beside MMVQ, the staged
// few-token MMQ and the tiled MMQ, nt = 1..64 on the 7B shapes.
//
// Weights are random valid blocks (f16 scales finite, codes random): speed
// does not depend on values, but all-zero data could.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "cuda/testing/check_cuda.h"
#include "cuda/kernels/dq_gemm.h"
#include "cuda/kernels/dq_wgmma.h"
#include "cuda/kernels/matmul.h"
#include "cuda/kernels/mmq.h"
#include "engine/quant/blocks.h"
#include "engine/quant/fp16.h"
#include "engine/quant/ggml_types.h"

namespace minfer::cuda {
namespace {

std::mt19937_64 rng(12345);

// Fills `n` bytes with random blocks of `type` (sane f16 scales).
std::vector<uint8_t> RandomBlockBytes(GgmlType type, int64_t n_blocks) {
  const auto& tr = TraitsOf(type);
  std::vector<uint8_t> v(n_blocks * tr.type_size);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  std::uniform_real_distribution<float> mag(-8.0f, -2.0f);
  auto put = [&](uint8_t* p) {
    const uint16_t h = FloatToFp16(std::exp2(mag(rng)));
    std::memcpy(p, &h, 2);
  };
  for (int64_t b = 0; b < n_blocks; ++b) {
    uint8_t* p = v.data() + b * tr.type_size;
    switch (type) {
      case GgmlType::kQ4_1:
      case GgmlType::kQ5_1:
      case GgmlType::kQ4_K:
      case GgmlType::kQ5_K: put(p), put(p + 2); break;
      case GgmlType::kQ6_K: put(p + 208); break;
      case GgmlType::kF16:
        for (int i = 0; i < 1; ++i) put(p);
        break;
      case GgmlType::kF32: {
        const float f = std::exp2(mag(rng));
        std::memcpy(p, &f, 4);
        break;
      }
      default: put(p); break;
    }
  }
  return v;
}

// A device weight matrix (the registry layout: Q6_K padded) filled by tiling
// a few MB of random blocks.
struct Matrix {
  WeightView view;
  void* base = nullptr;
  int64_t bytes = 0;
};

Matrix MakeMatrix(GgmlType type, int64_t rows, int64_t k) {
  const auto& tr = TraitsOf(type);
  const bool pad = type == GgmlType::kQ6_K;
  const int64_t blocks_per_row = k / tr.block_size;
  const int64_t dev_block = DeviceBlockBytes(type, pad);
  Matrix m;
  m.view.type = type;
  m.view.k = k;
  m.view.rows = rows;
  m.view.row_bytes = blocks_per_row * dev_block;
  m.view.q6k_padded = pad;
  m.bytes = rows * m.view.row_bytes;
  CHECK_CUDA(cudaMalloc(&m.base, m.bytes));
  m.view.data = m.base;
  // 4 MB of random blocks (in the device layout, made once per type), tiled
  // over the matrix.
  static std::vector<uint8_t> tiles[64];
  std::vector<uint8_t>& tile = tiles[static_cast<int>(type) % 64];
  if (tile.empty()) {
    const int64_t tile_blocks = (4 << 20) / dev_block;
    std::vector<uint8_t> raw = RandomBlockBytes(type, tile_blocks);
    tile.assign(tile_blocks * dev_block, 0);
    for (int64_t b = 0; b < tile_blocks; ++b) {
      std::memcpy(tile.data() + b * dev_block, raw.data() + b * tr.type_size, tr.type_size);
    }
  }
  const int64_t tile_bytes = static_cast<int64_t>(tile.size());
  CHECK_CUDA(cudaMemcpy(m.base, tile.data(), std::min(tile_bytes, m.bytes), cudaMemcpyHostToDevice));
  for (int64_t off = tile_bytes; off < m.bytes; off += tile_bytes) {
    CHECK_CUDA(cudaMemcpy(static_cast<uint8_t*>(m.base) + off, m.base,
                          std::min(tile_bytes, m.bytes - off), cudaMemcpyDeviceToDevice));
  }
  return m;
}

// Enough copies of a matrix that together they exceed L2 (50 MB) five times;
// a timed batch launches on each of them in turn.
std::vector<Matrix> MakeRotation(GgmlType type, int64_t rows, int64_t k) {
  const int64_t bytes = rows * RowBytes(type, k);
  const int64_t n = std::clamp<int64_t>(((256ll << 20) + bytes - 1) / std::max<int64_t>(bytes, 1), 2, 512);
  std::vector<Matrix> v;
  for (int64_t i = 0; i < n; ++i) v.push_back(MakeMatrix(type, rows, k));
  return v;
}

void Free(std::vector<Matrix>& v) {
  for (auto& m : v) cudaFree(m.base);
  v.clear();
}

cudaStream_t stream;

// Median microseconds per launch of `launch(i)` (i = launch index), timed as
// graph replays of batches of `batch` launches.
double TimeLaunches(const std::function<cudaError_t(int)>& launch, int batch, int reps,
                    bool soft = false) {
  for (int i = 0; i < batch; ++i) {  // warm-up, lazy loading
    const cudaError_t err = launch(i);
    if (err != cudaSuccess && soft) {
      // A launcher that refuses (cudaErrorNotSupported and the like):
      // report it in the table instead of ending the run.
      std::fprintf(stderr, "launch refused: %s\n", cudaGetErrorString(err));
      (void)cudaGetLastError();
      CHECK_CUDA(cudaStreamSynchronize(stream));
      return -1.0;
    }
    CHECK_CUDA(err);
  }
  CHECK_CUDA(cudaStreamSynchronize(stream));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CHECK_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < batch; ++i) CHECK_CUDA(launch(i));
  CHECK_CUDA(cudaStreamEndCapture(stream, &graph));
  CHECK_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  CHECK_CUDA(cudaGraphLaunch(exec, stream));
  CHECK_CUDA(cudaStreamSynchronize(stream));
  cudaEvent_t a, b;
  CHECK_CUDA(cudaEventCreate(&a));
  CHECK_CUDA(cudaEventCreate(&b));
  std::vector<double> us;
  for (int r = 0; r < reps; ++r) {
    CHECK_CUDA(cudaEventRecord(a, stream));
    CHECK_CUDA(cudaGraphLaunch(exec, stream));
    CHECK_CUDA(cudaEventRecord(b, stream));
    CHECK_CUDA(cudaEventSynchronize(b));
    float ms = 0;
    CHECK_CUDA(cudaEventElapsedTime(&ms, a, b));
    us.push_back(1000.0 * ms / batch);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

struct Shape {
  const char* name;
  int64_t rows, k;
};
constexpr Shape kShapes[] = {
    {"attn_q/o 3584x3584", 3584, 3584},   {"attn_k/v 512x3584", 512, 3584},
    {"ffn_gate/up 18944x3584", 18944, 3584}, {"ffn_down 3584x18944", 3584, 18944},
    {"output 152064x3584", 152064, 3584},
};

struct Acts {
  BlockQ8A* q = nullptr;
  float* x = nullptr;
  float* y = nullptr;
};

Acts MakeActs(int64_t k, int64_t nt, int64_t y_elems) {
  Acts a;
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(k * nt);
  for (auto& v : x) v = nd(rng);
  CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&a.x), x.size() * 4));
  CHECK_CUDA(cudaMemcpy(a.x, x.data(), x.size() * 4, cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&a.q), k / 32 * nt * sizeof(BlockQ8A)));
  CHECK_CUDA(LaunchQuantizeQ8A(a.x, a.q, k, nt, stream));
  CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&a.y), y_elems * 4));
  CHECK_CUDA(cudaStreamSynchronize(stream));
  return a;
}

void FreeActs(Acts& a) {
  cudaFree(a.q), cudaFree(a.x), cudaFree(a.y);
  a = Acts{};
}

double MmvqUs(std::vector<Matrix>& rot, const Acts& a, int64_t nt, const MmvqTuning& tu, int batch,
              int reps, bool soft = false) {
  batch = std::max<int>(batch, static_cast<int>(rot.size()));
  return TimeLaunches(
      [&](int i) {
        const Matrix& m = rot[i % rot.size()];
        return LaunchMmvqTuned(m.view, a.q, a.y, m.view.rows, nt, tu, stream);
      },
      batch, reps, soft);
}

// --one TYPE ROWS K [R SMEM KS]: 30 plain launches of one MMVQ (no graph),
// for a profiler to pick one of.
int One(int argc, char** argv) {
  const auto type = ParseGgmlType(argv[2]);
  if (!type) return 2;
  const int64_t rows = std::atoll(argv[3]), k = std::atoll(argv[4]);
  MmvqTuning tu;
  if (argc >= 8) {
    tu.rows_per_warp = std::atoi(argv[5]), tu.act_smem = std::atoi(argv[6]);
    tu.ksplit = std::atoi(argv[7]);
  }
  auto rot = MakeRotation(*type, rows, k);
  Acts a = MakeActs(k, 1, rows);
  for (int i = 0; i < 30; ++i) {
    const Matrix& m = rot[i % rot.size()];
    CHECK_CUDA(LaunchMmvqTuned(m.view, a.q, a.y, rows, 1, tu, stream));
  }
  CHECK_CUDA(cudaStreamSynchronize(stream));
  std::printf("ran 30 launches of %s %lldx%lld\n", argv[2], static_cast<long long>(rows),
              static_cast<long long>(k));
  return 0;
}

// --gates: the MMVQ shape gates (docs/design.md, decode matmuls), re-measured: for each type
// and the decode shapes of the 0.5B, 1.5B and 7B models, MMVQ (plus the
// activation quantize it needs when no fused producer wrote the int8 plane)
// against the f32-activation matvec, nt = 1, weights from HBM.
int Gates(int reps) {
  struct GShape {
    const char* name;
    int64_t rows, k;
  };
  const GShape shapes[] = {
      {"0.5b k/v 128x896", 128, 896},      {"0.5b q/o 896x896", 896, 896},
      {"0.5b gate 4864x896", 4864, 896},   {"0.5b down 896x4864", 896, 4864},
      {"1.5b k/v 256x1536", 256, 1536},    {"1.5b q/o 1536x1536", 1536, 1536},
      {"1.5b gate 8960x1536", 8960, 1536}, {"1.5b down 1536x8960", 1536, 8960},
      {"7b k/v 512x3584", 512, 3584},      {"7b q/o 3584x3584", 3584, 3584},
      {"7b down 3584x18944", 3584, 18944},
  };
  const GgmlType types[] = {GgmlType::kQ4_0, GgmlType::kQ4_1, GgmlType::kQ5_0, GgmlType::kQ5_1,
                            GgmlType::kQ8_0, GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K};
  std::printf("\n== MMVQ vs f32-activation matvec, nt=1 (us per launch; quantize separately)\n");
  std::printf("%-5s %-22s %9s %9s %9s %9s  %s\n", "type", "shape", "mmvq", "+quant", "f32",
              "ratio", "winner");
  for (GgmlType type : types) {
    const int64_t bs = TraitsOf(type).block_size;
    for (const GShape& s : shapes) {
      if (s.k % bs != 0) continue;
      auto rot = MakeRotation(type, s.rows, s.k);
      Acts a = MakeActs(s.k, 1, s.rows);
      const int batch = std::max<int>(40, static_cast<int>(rot.size()));
      const double mmvq = MmvqUs(rot, a, 1, MmvqTuning{}, batch, reps);
      const double quant = TimeLaunches(
          [&](int) { return LaunchQuantizeQ8A(a.x, a.q, s.k, 1, stream); }, batch, reps);
      const double f32 = TimeLaunches(
          [&](int i) {
            const Matrix& m = rot[i % rot.size()];
            return LaunchMatvecF32(m.view, a.x, a.y, m.view.rows, 1, stream);
          },
          batch, reps);
      const double with_q = mmvq + quant;
      std::printf("%-5s %-22s %9.2f %9.2f %9.2f %9.2f  %s\n", GgmlTypeName(type), s.name, mmvq,
                  with_q, f32, f32 / with_q,
                  f32 < mmvq ? "f32" : (f32 < with_q ? "mmvq (f32 if unfused)" : "mmvq"));
      FreeActs(a);
      Free(rot);
    }
  }
  return 0;
}

// --mmq: MMQ vs GemmF16 on the prefill shapes.
int MmqMain(bool quick) {
  cudaDeviceProp prop{};
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s, %d SMs, L2 %d MB\n", prop.name, prop.multiProcessorCount,
              prop.l2CacheSize >> 20);
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const int reps = quick ? 3 : 7, batch = 4;
  const GgmlType types[] = {GgmlType::kQ4_K, GgmlType::kQ6_K, GgmlType::kQ8_0, GgmlType::kQ4_0,
                            GgmlType::kQ5_K, GgmlType::kQ4_1, GgmlType::kQ5_0, GgmlType::kQ5_1};
  const int64_t nts[] = {512, 2048};
  // us of LaunchMmq per [type index][shape][nt index], for the estimate.
  double table[8][4][2] = {};
  double table_plane[8][4][2] = {};  // with scale planes (Q4_K, Q6_K)
  double table_sk[8][4][2] = {};     // planes where the type has them, and stream-k (forced)
  void* sk_ws = nullptr;
  CHECK_CUDA(cudaMalloc(&sk_ws, MmqStreamKBytes()));
  CHECK_CUDA(cudaMemset(sk_ws, 0, MmqStreamKBytes()));
  // Forced (not kAuto's "below two waves"), so that the table shows what
  // stream-k does at every wave count.
  MmqTuning sk_tuning;
  sk_tuning.stream_k = MmqStreamK::kForce;
  sk_tuning.stream_k_workspace = sk_ws;
  sk_tuning.stream_k_bytes = MmqStreamKBytes();
  std::printf(
      "\n== MMQ (LaunchMmq incl. quantize prepass) vs GemmF16; TOPS = 2 rows k nt / time\n"
      "   sk: stream-k (forced) on top of the planes; its grid (CTAs/tile) and whether it split\n"
      "%-5s %-24s %5s | %9s %7s | %9s %7s | %9s %7s %9s | %8s | %9s %7s | %6s | %s\n",
      "type", "shape", "nt", "mmq us", "TOPS", "plane us", "TOPS", "sk us", "TOPS", "sk grid",
      "quant us", "f16 us", "TFLOPS", "f16/mmq", "rung");
  for (int ti = 0; ti < 8; ++ti) {
    const GgmlType type = types[ti];
    if (quick && ti >= 3) break;
    for (int si = 0; si < 4; ++si) {
      const Shape& s = kShapes[si];
      std::vector<Matrix> rot;
      for (int i = 0; i < 2; ++i) rot.push_back(MakeMatrix(type, s.rows, s.k));
      for (int ni = 0; ni < 2; ++ni) {
        const int64_t nt = nts[ni];
        float* x = nullptr;
        float* y = nullptr;
        void* act = nullptr;
        {
          std::normal_distribution<float> nd(0.0f, 1.0f);
          std::vector<float> hx(s.k * nt);
          for (auto& v : hx) v = nd(rng);
          CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&x), hx.size() * 4));
          CHECK_CUDA(cudaMemcpy(x, hx.data(), hx.size() * 4, cudaMemcpyHostToDevice));
        }
        CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&y), s.rows * nt * 4));
        CHECK_CUDA(cudaMalloc(&act, MmqActivationBytes(s.k, nt)));
        MmqReport rep;
        CHECK_CUDA(LaunchMmq(rot[0].view, x, act, y, nt, stream, &rep));
        CHECK_CUDA(cudaStreamSynchronize(stream));
        const double ops = 2.0 * s.rows * s.k * nt;
        const double us = TimeLaunches(
            [&](int i) { return LaunchMmq(rot[i % 2].view, x, act, y, nt, stream); }, batch, reps);
        table[ti][si][ni] = us;
        // With the W_dsc / W_exp scale plane (Q4_K, Q6_K), prepass included.
        double us_plane = -1;
        WeightView pv[2] = {rot[0].view, rot[1].view};
        void* planes[2] = {};
        if (MmqScalePlaneType(type)) {
          for (int i = 0; i < 2; ++i) {
            CHECK_CUDA(cudaMalloc(&planes[i], MmqScalePlaneBytes(type, s.k, s.rows)));
            CHECK_CUDA(LaunchMmqScalePlane(pv[i], planes[i], stream));
            pv[i].scale_plane = planes[i];
          }
          MmqReport prep;
          CHECK_CUDA(LaunchMmq(pv[0], x, act, y, nt, stream, &prep));
          if (!prep.scale_plane) std::printf("(plane not used)\n");
          us_plane = TimeLaunches(
              [&](int i) { return LaunchMmq(pv[i % 2], x, act, y, nt, stream); }, batch, reps);
          table_plane[ti][si][ni] = us_plane;
        }
        // Stream-k on top (forced; the backend's kAuto uses it below two
        // waves of tiles only).
        MmqReport srep;
        CHECK_CUDA(LaunchMmq(pv[0], x, act, y, nt, stream, &srep, &sk_tuning));
        const double us_sk = TimeLaunches(
            [&](int i) { return LaunchMmq(pv[i % 2], x, act, y, nt, stream, nullptr, &sk_tuning); },
            batch, reps);
        table_sk[ti][si][ni] = us_sk;
        char sk_grid[32];
        std::snprintf(sk_grid, sizeof(sk_grid), "%d/%d%s", srep.grid, srep.tokens_per_cta,
                      srep.stream_k ? "sk" : "");
        CHECK_CUDA(cudaStreamSynchronize(stream));
        for (void* pl : planes) cudaFree(pl);
        const double usq = TimeLaunches(
            [&](int) { return LaunchQuantizeMmq(x, act, s.k, nt, stream); }, batch, reps);
        const double usf = TimeLaunches(
            [&](int i) { return LaunchGemmF16(rot[i % 2].view, x, y, nt, stream); }, batch, reps);
        char rung[160];
        std::snprintf(rung, sizeof(rung), "%s/%d%s%s", MmqVariantName(rep.variant),
                      rep.tokens_per_cta, rep.fast_skipped ? " (fast skipped: " : "",
                      rep.fast_skipped ? rep.fast_skipped : "");
        std::printf(
            "%-5s %-24s %5lld | %9.1f %7.1f | %9.1f %7.1f | %9.1f %7.1f %9s | %8.1f | %9.1f %7.1f | "
            "%6.2fx | %s%s\n",
            GgmlTypeName(type), s.name, static_cast<long long>(nt), us, ops / us / 1e6, us_plane,
            us_plane > 0 ? ops / us_plane / 1e6 : 0.0, us_sk, ops / us_sk / 1e6, sk_grid, usq, usf,
            ops / usf / 1e6, usf / us, rung, rep.fast_skipped ? ")" : "");
        cudaFree(x), cudaFree(y), cudaFree(act);
      }
      Free(rot);
    }
  }
  // The fused QKV of the Q4_0 / Q8_0 models: q, k and v as one segmented
  // launch (4,608 rows: 288 tiles of 64 tokens at nt = 512 for 264 CTA
  // slots), without and with stream-k.
  std::printf("\n== fused QKV (3584+512+512)x3584 as one segmented launch (activations quantized)\n"
              "%-5s %5s | %9s %7s | %9s %7s %9s\n", "type", "nt", "us", "TOPS", "sk us", "TOPS",
              "sk grid");
  for (const GgmlType type : {GgmlType::kQ8_0, GgmlType::kQ4_0, GgmlType::kQ4_K}) {
    Matrix m[3] = {MakeMatrix(type, 3584, 3584), MakeMatrix(type, 512, 3584),
                   MakeMatrix(type, 512, 3584)};
    for (const int64_t nt : nts) {
      void* act = nullptr;
      float* y = nullptr;
      CHECK_CUDA(cudaMalloc(&act, MmqActivationBytes(3584, nt)));
      CHECK_CUDA(cudaMemset(act, 0, MmqActivationBytes(3584, nt)));
      CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&y), 4608 * nt * 4));
      MmqSegments seg;
      seg.n = 3;
      for (int i = 0; i < 3; ++i) seg.w[i] = m[i].view;
      seg.y[0] = y, seg.y[1] = y + 3584 * nt, seg.y[2] = y + 4096 * nt;
      const double ops = 2.0 * 4608 * 3584 * nt;
      const double us = TimeLaunches([&](int) { return LaunchMmqSegments(seg, act, nt, stream); },
                                     batch, reps);
      MmqReport srep;
      CHECK_CUDA(LaunchMmqSegments(seg, act, nt, stream, &srep, &sk_tuning));
      const double us_sk = TimeLaunches(
          [&](int) { return LaunchMmqSegments(seg, act, nt, stream, nullptr, &sk_tuning); }, batch,
          reps);
      std::printf("%-5s %5lld | %9.1f %7.1f | %9.1f %7.1f %5d/%d%s\n", GgmlTypeName(type),
                  static_cast<long long>(nt), us, ops / us / 1e6, us_sk, ops / us_sk / 1e6,
                  srep.grid, srep.tokens_per_cta, srep.stream_k ? "sk" : "");
      cudaFree(act), cudaFree(y);
    }
    for (Matrix& mm : m) cudaFree(mm.base);
  }
  cudaFree(sk_ws);

  // 7B Q4_K_M prefill matmuls per layer: q, k, o, gate, up Q4_K; v Q6_K;
  // down Q6_K in about half the layers (14 Q6_K + 14 Q4_K). Head excluded
  // (prefill computes logits for the last token only).
  std::printf("\n== estimated 7B Q4_K_M prefill matmul time (28 layers, no attention/head)\n");
  for (int plane = 0; plane < 3; ++plane) {
    auto& t = plane == 2 ? table_sk : plane ? table_plane : table;
    for (int ni = 0; ni < 2; ++ni) {
      // types[] indices: 0 Q4_K, 1 Q6_K.
      const double common = t[0][0][ni] * 2 + t[0][1][ni] + t[1][1][ni] + t[0][2][ni] * 2;
      const double us = 14 * (common + t[1][3][ni]) + 14 * (common + t[0][3][ni]);
      std::printf("%s nt=%-5lld %9.0f us per %lld tokens -> %7.0f tokens/s (matmuls only)\n",
                  plane == 2 ? "planes+sk" : plane ? "planes   " : "no planes", static_cast<long long>(nts[ni]), us,
                  static_cast<long long>(nts[ni]), nts[ni] / us * 1e6);
    }
  }
  return 0;
}

// The 7B's matmul shapes the decode-batch and prompt tables time.
struct DS {
  const char* name;
  GgmlType type;
  int64_t rows, k;
};
constexpr DS kQkv = {"q4_K qkv 4608x3584", GgmlType::kQ4_K, 4608, 3584};
constexpr DS kAttnO = {"q4_K attn_o 3584x3584", GgmlType::kQ4_K, 3584, 3584};
constexpr DS kGate = {"q4_K gate 18944x3584", GgmlType::kQ4_K, 18944, 3584};
constexpr DS kDownQ6 = {"q6_K down 3584x18944", GgmlType::kQ6_K, 3584, 18944};
constexpr DS kDownQ4 = {"q4_K down 3584x18944", GgmlType::kQ4_K, 3584, 18944};
constexpr DS kOutput = {"q6_K output 152064x3584", GgmlType::kQ6_K, 152064, 3584};
constexpr DS kGateQ8 = {"q8_0 gate 18944x3584", GgmlType::kQ8_0, 18944, 3584};
constexpr DS kAttnOQ8 = {"q8_0 attn_o 3584x3584", GgmlType::kQ8_0, 3584, 3584};

// --dq: the dequantizing f16 GEMM (dq_gemm.h) against the kernels a decode
// batch ran before it (MMVQ up to 8 tokens, the staged few-token MMQ with 3
// stages, the tiled MMQ with automatic split-k), on the 7B's shapes.
int DqMain() {
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const int reps = 5, batch = 8;
  void* ws = nullptr;
  CHECK_CUDA(cudaMalloc(&ws, MmqSplitKBytes()));
  const DS shapes[] = {kQkv, kAttnO, kGate, kDownQ6, kDownQ4, kOutput};
  std::printf("\n== decode-batch matmuls, DQ GEMM: us per call (weight GB/s)\n%-24s %4s | %14s %14s %14s | %14s %14s %14s %14s %14s %14s\n",
              "shape", "nt", "mmvq", "staged 3 st", "mmq split", "dq auto", "dq mt1", "dq mt2",
              "dq nosplit", "dq mt1 nosplit", "dq mt2 nosplit");
  for (const DS& s : shapes) {
    std::vector<Matrix> rot = MakeRotation(s.type, s.rows, s.k);
    for (int64_t nt : {1, 2, 4, 8, 16, 32, 48, 64}) {
      Acts a = MakeActs(s.k, nt, s.rows * nt);
      void* act = nullptr;
      void* dact = nullptr;
      CHECK_CUDA(cudaMalloc(&act, MmqActivationBytes(s.k, nt)));
      CHECK_CUDA(cudaMalloc(&dact, DqActivationBytes(s.k, nt)));
      CHECK_CUDA(LaunchQuantizeMmq(a.x, act, s.k, nt, stream));
      CHECK_CUDA(LaunchQuantizeDq(a.x, dact, s.k, nt, stream));
      const double gb = static_cast<double>(rot[0].bytes) / 1e9;
      auto cell = [&](double us) {
        char b[32];
        if (us < 0) return std::string("refused");
        std::snprintf(b, sizeof(b), "%7.1f (%4.0f)", us, gb / (us * 1e-6));
        return std::string(b);
      };
      const int n = std::max<int>(batch, static_cast<int>(rot.size()));
      auto one = [&](const Matrix& mm) {
        MmqSegments seg;
        seg.n = 1;
        seg.w[0] = mm.view;
        seg.y[0] = a.y;
        return seg;
      };
      std::string mmvq = "-";
      if (nt <= 8) mmvq = cell(MmvqUs(rot, a, nt, MmvqTuning{}, batch, reps, true));
      MmqTuning st;
      st.split_k = kMmqSplitAuto;
      st.small_form = kMmqSmallStaged;
      st.small_mtiles = 1;
      st.small_stages = 3;
      st.split_workspace = ws;
      st.split_bytes = MmqSplitKBytes();
      const std::string staged = cell(TimeLaunches(
          [&](int i) { return LaunchMmqSmall(one(rot[i % rot.size()]), act, nt, stream, &st); },
          n, reps, true));
      MmqTuning mt;
      mt.split_k = kMmqSplitAuto;
      mt.split_workspace = ws;
      mt.split_bytes = MmqSplitKBytes();
      const std::string mmq = cell(TimeLaunches(
          [&](int i) {
            return LaunchMmqQuantized(rot[i % rot.size()].view, act, a.y, nt, stream, nullptr, &mt);
          },
          n, reps, true));
      std::string dq[6];
      for (int v = 0; v < 6; ++v) {
        DqTuning tu;
        tu.m_tiles = v == 1 || v == 4 ? 1 : v == 2 || v == 5 ? 2 : 0;
        tu.split_k = v >= 3 ? 0 : kMmqSplitAuto;
        tu.split_workspace = ws;
        tu.split_bytes = MmqSplitKBytes();
        dq[v] = cell(TimeLaunches(
            [&](int i) { return LaunchDqGemm(one(rot[i % rot.size()]), dact, nt, stream, &tu); },
            n, reps, true));
      }
      std::printf("%-24s %4lld | %14s %14s %14s | %14s %14s %14s %14s %14s %14s\n", s.name,
                  static_cast<long long>(nt), mmvq.c_str(), staged.c_str(), mmq.c_str(),
                  dq[0].c_str(), dq[1].c_str(), dq[2].c_str(), dq[3].c_str(), dq[4].c_str(),
                  dq[5].c_str());
      cudaFree(act);
      cudaFree(dact);
      FreeActs(a);
    }
    Free(rot);
  }
  cudaFree(ws);
  return 0;
}

// --dqw: the Hopper dequantizing GEMM (dq_wgmma.h) against the sm_80 DQ
// GEMM (up to 64 tokens), on the 7B's shapes from 8 to 256 tokens; each cell
// also gives the f16 TFLOPS the call reaches (2 rows k nt / time). The
// wgmma columns: the activation copies, then TMA activations (the
// backend's default), split-k automatic.
int DqwMain() {
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const int reps = 5, batch = 8;
  void* ws = nullptr;
  CHECK_CUDA(cudaMalloc(&ws, MmqSplitKBytes()));
  const DS shapes[] = {kQkv, kAttnO, kGate, kDownQ6, kDownQ4, kOutput};
  // Columns: the sm_80 DQ GEMM; the wgmma GEMM with the activation copies,
  // then as the backend runs it (TMA activations, MINFER_DQW_TMA=1);
  // split-k automatic everywhere.
  constexpr int kDqwColumns = 2;
  const char* const dqw_names[kDqwColumns] = {"dqw copies", "dqw tma"};
  std::printf("\n== decode-batch matmuls, wgmma DQ GEMM: us per call (weight GB/s, TFLOPS)\n"
              "%-24s %4s | %22s |", "shape", "nt", "dq auto");
  for (const char* name : dqw_names) std::printf(" %22s", name);
  std::printf("\n");
  if (!DqwAvailable()) std::printf("(no sm_90a kernel in this build or not an sm_90 GPU)\n");
  for (const DS& s : shapes) {
    std::vector<Matrix> rot = MakeRotation(s.type, s.rows, s.k);
    for (int64_t nt : {8, 16, 32, 64, 128, 256}) {
      Acts a = MakeActs(s.k, nt, s.rows * nt);
      void *dact = nullptr, *wact = nullptr;
      CHECK_CUDA(cudaMalloc(&dact, DqActivationBytes(s.k, nt)));
      CHECK_CUDA(cudaMalloc(&wact, DqwActivationBytes(s.k, nt)));
      CHECK_CUDA(LaunchQuantizeDq(a.x, dact, s.k, nt, stream));
      CHECK_CUDA(LaunchQuantizeDqw(a.x, wact, s.k, nt, stream));
      const double gb = static_cast<double>(rot[0].bytes) / 1e9;
      const double flop = 2.0 * static_cast<double>(s.rows) * static_cast<double>(s.k) * nt;
      auto cell = [&](double us) {
        char b[40];
        if (us < 0) return std::string("refused");
        std::snprintf(b, sizeof(b), "%7.1f (%4.0f, %5.1f)", us, gb / (us * 1e-6), flop / (us * 1e6));
        return std::string(b);
      };
      const int n = std::max<int>(batch, static_cast<int>(rot.size()));
      auto one = [&](const Matrix& mm) {
        MmqSegments seg;
        seg.n = 1;
        seg.w[0] = mm.view;
        seg.y[0] = a.y;
        return seg;
      };
      std::string dq = "-";
      if (nt <= kDqMaxTokens) {
        DqTuning tu;
        tu.split_workspace = ws;
        tu.split_bytes = MmqSplitKBytes();
        dq = cell(TimeLaunches(
            [&](int i) { return LaunchDqGemm(one(rot[i % rot.size()]), dact, nt, stream, &tu); },
            n, reps, true));
      }
      std::printf("%-24s %4lld | %22s |", s.name, static_cast<long long>(nt), dq.c_str());
      for (int v = 0; v < kDqwColumns; ++v) {
        DqwTuning tu;
        tu.split_k = kMmqSplitAuto;
        tu.split_workspace = ws;
        tu.split_bytes = MmqSplitKBytes();
        tu.act_load = v == 0 ? 0 : 1;
        const std::string c = cell(TimeLaunches(
            [&](int i) { return LaunchDqWgmma(one(rot[i % rot.size()]), wact, nt, stream, &tu); },
            n, reps, true));
        std::printf(" %22s", c.c_str());
      }
      std::printf("\n");
      std::fflush(stdout);
      cudaFree(dact);
      cudaFree(wact);
      FreeActs(a);
    }
    Free(rot);
  }
  cudaFree(ws);
  return 0;
}

// --dqp: the Hopper prefill GEMM (dq_wgmma.h LaunchDqpWgmma) on the 7B's
// shapes at prompt sizes, against the register form as the backend ran
// prompts before it (launches of 256 tokens, TMA activations): us per call
// (weight GB/s, f16 TFLOPS), 2 and 4 consumer warpgroups (the 64-token tile
// up to 64 tokens); split-k automatic up to 256 tokens, as the backend runs
// them (it gives prompts past 256 tokens no split workspace).
int DqpMain() {
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const int reps = 5, batch = 4;
  void* ws = nullptr;
  CHECK_CUDA(cudaMalloc(&ws, MmqSplitKBytes()));
  const DS shapes[] = {kQkv, kAttnO, kGate, kDownQ6, kDownQ4, kGateQ8, kAttnOQ8};
  std::printf("\n== prompt matmuls, wgmma prefill GEMM: us per call (weight GB/s, TFLOPS)\n"
              "%-24s %5s | %22s | %22s %22s\n", "shape", "nt", "dqw (launches of 256)", "dqp 2 wg",
              "dqp 4 wg");
  if (!DqwAvailable()) std::printf("(no sm_90a kernel in this build or not an sm_90 GPU)\n");
  for (const DS& s : shapes) {
    std::vector<Matrix> rot = MakeRotation(s.type, s.rows, s.k);
    for (int64_t nt : {32, 64, 128, 256, 512, 1024, 2048}) {
      Acts a = MakeActs(s.k, nt, s.rows * nt);
      void* const split_ws = nt <= 256 ? ws : nullptr;
      void* wact = nullptr;
      CHECK_CUDA(cudaMalloc(&wact, DqwActivationBytes(s.k, nt)));
      CHECK_CUDA(LaunchQuantizeDqw(a.x, wact, s.k, nt, stream));
      const double gb = static_cast<double>(rot[0].bytes) / 1e9;
      const double flop = 2.0 * static_cast<double>(s.rows) * static_cast<double>(s.k) * nt;
      auto cell = [&](double us) {
        char b[40];
        if (us < 0) return std::string("refused");
        std::snprintf(b, sizeof(b), "%7.1f (%4.0f, %5.1f)", us, gb / (us * 1e-6), flop / (us * 1e6));
        return std::string(b);
      };
      const int n = std::max<int>(batch, static_cast<int>(rot.size()));
      auto one = [&](const Matrix& mm, int64_t t0) {
        MmqSegments seg;
        seg.n = 1;
        seg.w[0] = mm.view;
        seg.y[0] = a.y + t0 * s.rows;
        return seg;
      };
      DqwTuning rt;
      rt.split_k = kMmqSplitAuto;
      rt.split_workspace = split_ws;
      rt.split_bytes = MmqSplitKBytes();
      rt.act_load = 1;
      rt.warpgroups = nt > 64 ? 2 : 1;
      const std::string reg = cell(TimeLaunches(
          [&](int i) {
            cudaError_t e = cudaSuccess;
            for (int64_t t0 = 0; t0 < nt && e == cudaSuccess; t0 += kDqwMaxTokens) {
              e = LaunchDqWgmma(one(rot[i % rot.size()], t0),
                                static_cast<const uint8_t*>(wact) + t0 * s.k * 2,
                                std::min<int64_t>(kDqwMaxTokens, nt - t0), stream, &rt);
            }
            return e;
          },
          n, reps, true));
      std::printf("%-24s %5lld | %22s |", s.name, static_cast<long long>(nt), reg.c_str());
      for (int wg : {2, 4}) {
        DqpTuning tu;
        tu.split_k = kMmqSplitAuto;
        tu.split_workspace = split_ws;
        tu.split_bytes = MmqSplitKBytes();
        tu.warpgroups = wg;
        const std::string c = cell(TimeLaunches(
            [&](int i) { return LaunchDqpWgmma(one(rot[i % rot.size()], 0), wact, nt, stream, &tu); },
            n, reps, true));
        std::printf(" %22s", c.c_str());
      }
      std::printf("\n");
      std::fflush(stdout);
      cudaFree(wact);
      FreeActs(a);
    }
    Free(rot);
  }
  cudaFree(ws);
  return 0;
}

int DecodeBatchMain() {
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const int reps = 5, batch = 8;
  void* ws = nullptr;
  CHECK_CUDA(cudaMalloc(&ws, MmqSplitKBytes()));
  const DS shapes[] = {kAttnO, kGate, kDownQ6, kDownQ4, kOutput};
  std::printf("\n== decode-batch matmuls: us per call (weight GB/s)\n%-24s %4s | %14s | %14s %14s %14s | %14s %14s %14s %14s %14s %14s\n",
              "shape", "nt", "mmvq", "small direct", "staged", "staged 3 st", "mmq", "split auto", "split 2",
              "split 4", "split 8", "split 16");
  for (const DS& s : shapes) {
    std::vector<Matrix> rot = MakeRotation(s.type, s.rows, s.k);
    for (int64_t nt : {1, 2, 4, 8, 16, 32, 64, 128}) {
      Acts a = MakeActs(s.k, nt, s.rows * nt);
      void* act = nullptr;
      CHECK_CUDA(cudaMalloc(&act, MmqActivationBytes(s.k, nt)));
      CHECK_CUDA(LaunchQuantizeMmq(a.x, act, s.k, nt, stream));
      const double gb = static_cast<double>(rot[0].bytes) / 1e9;
      auto cell = [&](double us) {
        char b[32];
        if (us < 0) return std::string("refused");
        std::snprintf(b, sizeof(b), "%7.1f (%4.0f)", us, gb / (us * 1e-6));
        return std::string(b);
      };
      std::string mmvq = "-";
      if (nt <= 8) mmvq = cell(MmvqUs(rot, a, nt, MmvqTuning{}, batch, reps, true));
      // The few-token kernel, split-k automatic: direct form, staged with 4
      // and with 3 cp.async stages.
      std::string small[3];
      for (int sp = 0; sp < 3; ++sp) {
        MmqTuning tu;
        tu.split_k = kMmqSplitAuto;
        tu.small_form = sp == 0 ? kMmqSmallDirect : kMmqSmallStaged;
        tu.small_mtiles = 1;
        tu.small_stages = sp == 2 ? 3 : 4;
        tu.split_workspace = ws;
        tu.split_bytes = MmqSplitKBytes();
        const int n = std::max<int>(batch, static_cast<int>(rot.size()));
        small[sp] = cell(TimeLaunches(
            [&](int i) {
              const Matrix& mm = rot[i % rot.size()];
              MmqSegments seg;
              seg.n = 1;
              seg.w[0] = mm.view;
              seg.y[0] = a.y;
              return LaunchMmqSmall(seg, act, nt, stream, &tu);
            },
            n, reps, true));
      }
      std::string cols[6];
      const int modes[6] = {0, kMmqSplitAuto, 2, 4, 8, 16};
      for (int m = 0; m < 6; ++m) {
        MmqTuning tu;
        tu.split_k = modes[m];
        tu.split_workspace = ws;
        tu.split_bytes = MmqSplitKBytes();
        const int n = std::max<int>(batch, static_cast<int>(rot.size()));
        cols[m] = cell(TimeLaunches(
            [&](int i) {
              const Matrix& mm = rot[i % rot.size()];
              return LaunchMmqQuantized(mm.view, act, a.y, nt, stream, nullptr, &tu);
            },
            n, reps, true));
      }
      std::printf("%-24s %4lld | %14s | %14s %14s %14s | %14s %14s %14s %14s %14s %14s\n", s.name,
                  static_cast<long long>(nt), mmvq.c_str(), small[0].c_str(), small[1].c_str(),
                  small[2].c_str(),
                  cols[0].c_str(), cols[1].c_str(), cols[2].c_str(), cols[3].c_str(),
                  cols[4].c_str(), cols[5].c_str());
      cudaFree(act);
      FreeActs(a);
    }
    Free(rot);
  }
  cudaFree(ws);
  return 0;
}

int Main(int argc, char** argv) {
  bool sweep = false, quick = false, mmq = false;
  if (argc >= 2 && !std::strcmp(argv[1], "--decode-batch")) return DecodeBatchMain();
  if (argc >= 2 && !std::strcmp(argv[1], "--dq")) return DqMain();
  if (argc >= 2 && !std::strcmp(argv[1], "--dqw")) return DqwMain();
  if (argc >= 2 && !std::strcmp(argv[1], "--dqp")) return DqpMain();
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--sweep")) sweep = true;
    if (!std::strcmp(argv[i], "--quick")) quick = true;
    if (!std::strcmp(argv[i], "--mmq")) mmq = true;
  }
  if (mmq) return MmqMain(quick);
  if (argc >= 2 && !std::strcmp(argv[1], "--gates")) {
    CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    return Gates(quick ? 7 : 15);
  }
  if (argc >= 5 && !std::strcmp(argv[1], "--one")) {
    CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    return One(argc, argv);
  }
  cudaDeviceProp prop{};
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s, %d SMs, L2 %d MB\n", prop.name, prop.multiProcessorCount,
              prop.l2CacheSize >> 20);
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const int reps = quick ? 7 : 21, batch = 40;

  const GgmlType types[] = {GgmlType::kQ4_0, GgmlType::kQ8_0, GgmlType::kQ4_K, GgmlType::kQ6_K,
                            GgmlType::kQ5_K, GgmlType::kQ4_1, GgmlType::kQ5_0, GgmlType::kQ5_1};
  // us per launch of the default geometry, per (type, shape).
  double table[8][5] = {};

  std::printf("\n== MMVQ nt=1 (default geometry; GB/s of weight bytes)\n");
  for (int ti = 0; ti < 8; ++ti) {
    const GgmlType type = types[ti];
    if (quick && ti >= 4) break;
    for (int si = 0; si < 5; ++si) {
      const Shape& s = kShapes[si];
      auto rot = MakeRotation(type, s.rows, s.k);
      Acts a = MakeActs(s.k, 1, s.rows);
      const double bytes = static_cast<double>(s.rows) * RowBytes(type, s.k);
      const double us = MmvqUs(rot, a, 1, MmvqTuning{}, batch, reps);
      table[ti][si] = us;
      std::printf("%-5s %-24s %8.2f us %7.0f GB/s", GgmlTypeName(type), s.name, us, bytes / us / 1e3);
      if (sweep) {
        double best = us;
        std::string best_cfg = "default";
        for (int r : {1, 2, 4}) {
          for (int sm : {0, 1}) {
            for (int ks : {1, 2, 4, 8}) {
              MmvqTuning tu;
              tu.rows_per_warp = r, tu.act_smem = sm, tu.ksplit = ks;
              const double t = MmvqUs(rot, a, 1, tu, batch, quick ? 5 : 9);
              if (t < best) {
                best = t;
                best_cfg = "R=" + std::to_string(r) + " smem=" + std::to_string(sm) +
                           " ks=" + std::to_string(ks);
              }
            }
          }
        }
        std::printf("  best %7.2f us %5.0f GB/s (%s)", best, bytes / best / 1e3, best_cfg.c_str());
      }
      std::printf("\n");
      FreeActs(a);
      Free(rot);
    }
  }

  std::printf("\n== multi-token MMVQ (effective GB/s: weights read once for nt tokens)\n");
  for (GgmlType type : {GgmlType::kQ4_K, GgmlType::kQ8_0}) {
    const Shape& s = kShapes[2];
    auto rot = MakeRotation(type, s.rows, s.k);
    const double bytes = static_cast<double>(s.rows) * RowBytes(type, s.k);
    for (int64_t nt : {1, 2, 4, 8}) {
      Acts a = MakeActs(s.k, nt, s.rows * nt);
      const double us = MmvqUs(rot, a, nt, MmvqTuning{}, batch, reps);
      std::printf("%-5s %-24s nt=%lld %8.2f us %7.0f GB/s  (%.2f us/token)", GgmlTypeName(type),
                  s.name, static_cast<long long>(nt), us, bytes / us / 1e3, us / nt);
      if (sweep) {
        for (int sm : {0, 1}) {
          MmvqTuning tu;
          tu.act_smem = sm;
          const double t = MmvqUs(rot, a, nt, tu, batch, quick ? 5 : 9);
          std::printf(" smem%d=%.0f", sm, bytes / t / 1e3);
        }
      }
      std::printf("\n");
      FreeActs(a);
    }
    Free(rot);
  }

  std::printf("\n== fused decode launches\n");
  double fused_us[3][2] = {};  // [Q4_0, Q8_0, Q4_K(+Q6_K v)][qkv, swiglu]
  const GgmlType fused_types[3] = {GgmlType::kQ4_0, GgmlType::kQ8_0, GgmlType::kQ4_K};
  for (int fi = 0; fi < 3; ++fi) {
    const GgmlType type = fused_types[fi];
    const GgmlType vtype = type == GgmlType::kQ4_K ? GgmlType::kQ6_K : type;
    {
      const int n = 16;
      std::vector<Matrix> q, k, v;
      for (int i = 0; i < n; ++i) {
        q.push_back(MakeMatrix(type, 3584, 3584));
        k.push_back(MakeMatrix(type, 512, 3584));
        v.push_back(MakeMatrix(vtype, 512, 3584));
      }
      Acts a = MakeActs(3584, 1, 4608);
      const double bytes = 3584.0 * RowBytes(type, 3584) + 512.0 * RowBytes(type, 3584) +
                           512.0 * RowBytes(vtype, 3584);
      const double us = TimeLaunches(
          [&](int i) {
            MmvqSegments segs;
            segs.w[0] = q[i % n].view, segs.w[1] = k[i % n].view, segs.w[2] = v[i % n].view;
            segs.n = 3;
            return LaunchMmvqSegments(segs, a.q, a.y, stream);
          },
          batch, reps);
      fused_us[fi][0] = us;
      std::printf("QKV %s/%s 4608x3584 %8.2f us %7.0f GB/s\n", GgmlTypeName(type), GgmlTypeName(vtype),
                  us, bytes / us / 1e3);
      FreeActs(a);
      Free(q), Free(k), Free(v);
    }
    {
      const int n = 4;
      std::vector<Matrix> g, u;
      for (int i = 0; i < n; ++i) {
        g.push_back(MakeMatrix(type, 18944, 3584));
        u.push_back(MakeMatrix(type, 18944, 3584));
      }
      Acts a = MakeActs(3584, 1, 18944);
      const double bytes = 2.0 * 18944 * RowBytes(type, 3584);
      const double us = TimeLaunches(
          [&](int i) { return LaunchMmvqSwiGlu(g[i % n].view, u[i % n].view, a.q, a.y, stream); },
          batch, reps);
      fused_us[fi][1] = us;
      std::printf("SwiGLU %s 2x18944x3584 %8.2f us %7.0f GB/s\n", GgmlTypeName(type), us,
                  bytes / us / 1e3);
      FreeActs(a);
      Free(g), Free(u);
    }
  }

  // One 7B decode step's matmuls: 28 x (fused QKV + attn_o + fused gate/up +
  // ffn_down) + output head. Q4_K_M: ffn_down Q6_K in about half the layers
  // (taken as 14 Q6_K + 14 Q4_K), attn_v Q6_K (the fused QKV above), head Q6_K.
  std::printf("\n== estimated 7B decode matmul time per token (fused launches, no attention)\n");
  auto est = [&](int fi, int t_main, int t_down_a, int t_down_b, int t_head) {
    const double layer_a = fused_us[fi][0] + table[t_main][0] + fused_us[fi][1] + table[t_down_a][3];
    const double layer_b = fused_us[fi][0] + table[t_main][0] + fused_us[fi][1] + table[t_down_b][3];
    return 14 * layer_a + 14 * layer_b + table[t_head][4];
  };
  struct Model {
    const char* name;
    int fi, main, down_a, down_b, head;
    double gb;  // weight GB read per token (matmuls)
  };
  // types[] indices: 0 Q4_0, 1 Q8_0, 2 Q4_K, 3 Q6_K.
  const Model models[] = {{"Q4_0", 0, 0, 0, 0, 3, 0}, {"Q8_0", 1, 1, 1, 1, 1, 0},
                          {"Q4_K_M", 2, 2, 3, 2, 3, 0}};
  for (const Model& m : models) {
    const double us = est(m.fi, m.main, m.down_a, m.down_b, m.head);
    std::printf("%-7s %8.1f us/token -> %6.0f tokens/s (matmuls only)\n", m.name, us, 1e6 / us);
  }

  std::printf("\n== GemmF16, nt = 512\n");
  for (GgmlType type : {GgmlType::kQ4_K, GgmlType::kQ8_0, GgmlType::kQ6_K, GgmlType::kF16}) {
    for (int si : {0, 2, 3}) {
      const Shape& s = kShapes[si];
      const int64_t nt = 512;
      std::vector<Matrix> rot;
      for (int i = 0; i < 2; ++i) rot.push_back(MakeMatrix(type, s.rows, s.k));
      Acts a = MakeActs(s.k, nt, s.rows * nt);
      const double us = TimeLaunches(
          [&](int i) {
            const Matrix& m = rot[i % rot.size()];
            return LaunchGemmF16(m.view, a.x, a.y, nt, stream);
          },
          4, quick ? 3 : 7);
      const double flops = 2.0 * s.rows * s.k * nt;
      std::printf("%-5s %-24s %9.1f us %7.1f TFLOPS (%.0f tokens/s-equivalent per matrix)\n",
                  GgmlTypeName(type), s.name, us, flops / us / 1e6, nt / us * 1e6);
      FreeActs(a);
      Free(rot);
    }
  }

  std::printf("\n== MatvecF32 nt=1 (F16 / BF16 weights)\n");
  for (GgmlType type : {GgmlType::kF16, GgmlType::kBF16}) {
    for (int si : {0, 2}) {
      const Shape& s = kShapes[si];
      auto rot = MakeRotation(type, s.rows, s.k);
      Acts a = MakeActs(s.k, 1, s.rows);
      const double bytes = static_cast<double>(s.rows) * RowBytes(type, s.k);
      const double us = TimeLaunches(
          [&](int i) {
            const Matrix& m = rot[i % rot.size()];
            return LaunchMatvecF32(m.view, a.x, a.y, s.rows, 1, stream);
          },
          std::max<int>(batch, static_cast<int>(rot.size())), reps);
      std::printf("%-5s %-24s %8.2f us %7.0f GB/s\n", GgmlTypeName(type), s.name, us,
                  bytes / us / 1e3);
      FreeActs(a);
      Free(rot);
    }
  }
  return 0;
}

}  // namespace
}  // namespace minfer::cuda

int main(int argc, char** argv) { return minfer::cuda::Main(argc, argv); }
