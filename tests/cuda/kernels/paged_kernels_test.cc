// GPU tests of the batched-serving kernels against the CPU backend's
// kernels (engine/cpu, the reference): paged decode and prefill attention
// over a pool of blocks holding several sequences, the QKV epilogue storing
// at cache rows that are not the positions, and TopK. Fresh random inputs
// each run (MINFER_TEST_SEED repeats one); outputs poisoned before launches.
//
// Bounds: paged attention on CUDA cores sums in another order than the CPU
// (~1e-6 relative: we allow 2e-5 of max|V| per element); the tensor-core
// prefill rounds Q and P to f16 (ops.h: <= max|V| ((2A + 2) u + 1e-5); we
// allow 2e-2 of max|V|, A ~ 4 here). A paged launch over one sequence equals
// the contiguous launch over a cache holding that sequence bit for bit (the
// same kernel reading the same rows); so does paged decode with one tile
// (32 stripes, the contiguous kernel's). TopK equals the CPU's bit for bit
// but for the normalizer (float vs double sums: 1e-5 relative).
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "cuda/kernels/ops.h"
#include "cuda/kernels/sample.h"
#include "cuda/testing/gpu_test_util.h"
#include "engine/base/thread_pool.h"
#include "engine/cpu/kernels.h"
#include "engine/quant/fp16.h"
#include "gtest/gtest.h"

namespace minfer::cuda {
namespace {

using ::minfer::cuda::testing::DeviceBuffer;
using ::minfer::cuda::testing::RandomFloats;
using ::minfer::cuda::testing::TestSeed;

graph::DType ToDType(KvType t) {
  return t == KvType::kF16    ? graph::DType::kF16
         : t == KvType::kQ8_0 ? graph::DType::kQ8_0
         : t == KvType::kFp8  ? graph::DType::kFp8
                              : graph::DType::kF32;
}

struct Seq {
  int64_t len;    // rows after this step
  int64_t n_new;  // tokens this step
};

// A pool with the given sequences stored (shuffled blocks), their tiles and
// queries, and the CPU's paged attention output.
struct Batch {
  AttnParams p;
  int kv_block = 16;
  int64_t max_blocks = 0, n_blocks = 0;
  std::vector<uint8_t> k, v;  // the pool
  std::vector<int32_t> tables, tiles, pos;
  std::vector<float> q;
  std::vector<float> want;  // CPU
  float max_v = 0;
  // Per sequence: its contiguous cache, for the bit-identity checks.
  std::vector<std::vector<uint8_t>> ck, cv;
  std::vector<int64_t> t0;
};

// window / sinks: gpt-oss's sliding window and attention sinks (host
// values; the caller puts them on the device in b.p.sinks).
Batch MakeBatch(KvType type, int n_head, int n_head_kv, int hd, int kv_block,
                const std::vector<Seq>& seqs, std::mt19937_64& rng, int window = 0,
                const std::vector<float>* sinks = nullptr) {
  Batch b;
  b.p.window = window;
  b.p.n_head = n_head;
  b.p.n_head_kv = n_head_kv;
  b.p.head_dim = hd;
  b.p.scale = 1.0f / std::sqrt(static_cast<float>(hd));
  b.p.kv_type = type;
  b.kv_block = kv_block;
  const int64_t nkv = static_cast<int64_t>(n_head_kv) * hd;
  const int64_t q_row = static_cast<int64_t>(n_head) * hd;
  for (const Seq& s : seqs) b.max_blocks = std::max<int64_t>(b.max_blocks, (s.len + kv_block - 1) / kv_block);
  b.n_blocks = 3;
  for (const Seq& s : seqs) b.n_blocks += (s.len + kv_block - 1) / kv_block;
  b.p.n_ctx = b.n_blocks * kv_block;
  graph::KvLayout layout{ToDType(type), b.p.n_ctx, nkv};
  b.k.assign(layout.row_bytes() * b.p.n_ctx, 0xFF);  // NaN bytes: a stray read shows
  b.v = b.k;
  std::vector<int32_t> blocks(b.n_blocks - 1);
  std::iota(blocks.begin(), blocks.end(), 1);
  std::shuffle(blocks.begin(), blocks.end(), rng);
  b.tables.assign(seqs.size() * b.max_blocks, 0);
  size_t next = 0;
  for (size_t si = 0; si < seqs.size(); ++si) {
    const Seq& s = seqs[si];
    for (int64_t j = 0; j < (s.len + kv_block - 1) / kv_block; ++j) {
      b.tables[si * b.max_blocks + j] = blocks[next++];
    }
    const auto k = RandomFloats(nkv * s.len), v = RandomFloats(nkv * s.len);
    for (float x : v) b.max_v = std::max(b.max_v, std::fabs(x));
    std::vector<int32_t> rows(s.len), crow(s.len);
    for (int64_t j = 0; j < s.len; ++j) {
      rows[j] = b.tables[si * b.max_blocks + j / kv_block] * kv_block + static_cast<int32_t>(j % kv_block);
      crow[j] = static_cast<int32_t>(j);
    }
    EXPECT_TRUE(cpu::KvStore(k.data(), v.data(), rows.data(), s.len, layout, b.k.data(), b.v.data()).ok());
    graph::KvLayout cl{ToDType(type), s.len, nkv};
    b.ck.emplace_back(cl.row_bytes() * s.len);
    b.cv.emplace_back(cl.row_bytes() * s.len);
    EXPECT_TRUE(cpu::KvStore(k.data(), v.data(), crow.data(), s.len, cl, b.ck.back().data(),
                             b.cv.back().data())
                    .ok());
    const int64_t t0 = static_cast<int64_t>(b.pos.size());
    b.t0.push_back(t0);
    for (int64_t off = 0; off < s.n_new; off += 64) {
      b.tiles.insert(b.tiles.end(), {static_cast<int32_t>(si), static_cast<int32_t>(t0 + off),
                                     static_cast<int32_t>(std::min<int64_t>(64, s.n_new - off)), 0});
    }
    for (int64_t j = 0; j < s.n_new; ++j) b.pos.push_back(static_cast<int32_t>(s.len - s.n_new + j));
    const auto q = RandomFloats(q_row * s.n_new, 2.0f);
    b.q.insert(b.q.end(), q.begin(), q.end());
  }
  b.tiles.insert(b.tiles.end(), {0, 0, 0, 0});  // unused entries
  b.tiles.insert(b.tiles.end(), {0, 0, 0, 0});
  b.want.assign(b.q.size(), 0.0f);
  ThreadPool pool(2);
  cpu::PagedAttnArgs pa;
  pa.q = b.q.data();
  pa.pos = b.pos.data();
  pa.nt = static_cast<int64_t>(b.pos.size());
  pa.tiles = b.tiles.data();
  pa.n_tiles = static_cast<int64_t>(b.tiles.size() / 4);
  pa.tables = b.tables.data();
  pa.n_table_rows = static_cast<int64_t>(seqs.size());
  pa.max_blocks = static_cast<int>(b.max_blocks);
  pa.kv_block = kv_block;
  pa.n_head = n_head;
  pa.n_head_kv = n_head_kv;
  pa.head_dim = hd;
  pa.scale = b.p.scale;
  pa.layout = layout;
  pa.k_cache = b.k.data();
  pa.v_cache = b.v.data();
  pa.y = b.want.data();
  pa.window = window;
  pa.sinks = sinks != nullptr ? sinks->data() : nullptr;
  EXPECT_TRUE(cpu::PagedAttention(pool, pa).ok());
  return b;
}

// A Batch's inputs and output on the device, and the AttnPaged over them.
struct DeviceBatch {
  explicit DeviceBatch(const Batch& b)
      : q(b.q), out(b.q.size()), pos(b.pos), tiles(b.tiles), tables(b.tables), k(b.k), v(b.v) {
    pg.tiles = tiles.get();
    pg.n_tiles = static_cast<int64_t>(b.tiles.size() / 4);
    pg.tables = tables.get();
    pg.max_blocks = static_cast<int32_t>(b.max_blocks);
    pg.kv_block = b.kv_block;
  }
  DeviceBuffer<float> q, out;
  DeviceBuffer<int32_t> pos, tiles, tables;
  DeviceBuffer<uint8_t> k, v;
  AttnPaged pg;
};

struct PagedCase {
  KvType type;
  int n_head, n_head_kv, hd, kv_block;
  int window = 0;      // sliding window (gpt-oss), 0: none
  bool sinks = false;  // attention sinks (gpt-oss)
};

class PagedAttentionGpuTest : public ::testing::TestWithParam<PagedCase> {};

TEST_P(PagedAttentionGpuTest, MatchesCpuAndContiguousKernels) {
  MINFER_REQUIRE_GPU();
  const PagedCase c = GetParam();
  std::mt19937_64 rng(TestSeed());
  // Decode tokens at short and long contexts (the one-warp and the GQA
  // bodies), prefill chunks after history and from row 0, a 2-token tile.
  const std::vector<Seq> seqs = {{1, 1},   {37, 1},  {300, 1}, {700, 1}, {1500, 1},
                                 {200, 70}, {64, 64}, {129, 2}, {16, 1}};
  const std::vector<float> sinks = RandomFloats(c.n_head, 3.0f);
  Batch b = MakeBatch(c.type, c.n_head, c.n_head_kv, c.hd, c.kv_block, seqs, rng, c.window,
                      c.sinks ? &sinks : nullptr);
  DeviceBuffer<float> dsinks(sinks);
  if (c.sinks) b.p.sinks = dsinks.get();
  DeviceBatch d(b);
  DeviceBuffer<float>&dq = d.q, &out = d.out;
  DeviceBuffer<int32_t>& dpos = d.pos;
  DeviceBuffer<uint8_t>&dk = d.k, &dv = d.v;
  AttnPaged pg = d.pg;
  DeviceBuffer<float> partial(AttnPagedPartialFloats(b.p, pg.n_tiles));
  for (bool tc : {false, true}) {
    SCOPED_TRACE(tc ? "tensor-core prefill" : "CUDA-core prefill");
    out.Poison();
    ASSERT_CUDA(LaunchAttnDecodePaged(dq.get(), dpos.get(), dk.get(), dv.get(), partial.get(),
                                      out.get(), b.p, pg, nullptr));
    ASSERT_CUDA(LaunchAttnPrefillPaged(dq.get(), dpos.get(), dk.get(), dv.get(), out.get(), b.p,
                                       pg, tc, nullptr));
    SYNC();
    const auto got = out.ToHost();
    const bool tc_ran = tc && c.type == KvType::kF16 && (c.hd == 64 || c.hd == 128);
    const int64_t hdh = static_cast<int64_t>(c.n_head) * c.hd;
    for (size_t si = 0; si < seqs.size(); ++si) {
      const bool prefill = seqs[si].n_new > 1;
      const float tol = (prefill && tc_ran ? 2e-2f : 2e-5f) * b.max_v;
      for (int64_t i = b.t0[si] * hdh; i < (b.t0[si] + seqs[si].n_new) * hdh; ++i) {
        ASSERT_FALSE(std::isnan(got[i])) << "sequence " << si << " element " << i;
        ASSERT_NEAR(got[i], b.want[i], tol) << "sequence " << si << " element " << i;
      }
    }
    // Each prefill sequence: bit-identical to the contiguous kernel on a
    // cache of its own rows.
    for (size_t si = 0; si < seqs.size(); ++si) {
      const Seq& s = seqs[si];
      DeviceBuffer<uint8_t> ck(b.ck[si]), cv(b.cv[si]);
      AttnParams cp = b.p;
      cp.n_ctx = s.len;
      const int64_t hdh_n = hdh * s.n_new;
      std::vector<float> qs(b.q.begin() + b.t0[si] * hdh, b.q.begin() + b.t0[si] * hdh + hdh_n);
      std::vector<int32_t> ps(b.pos.begin() + b.t0[si], b.pos.begin() + b.t0[si] + s.n_new);
      DeviceBuffer<float> dqs(qs), o2(qs.size());
      DeviceBuffer<int32_t> dps(ps);
      o2.Poison();
      if (s.n_new > 1) {
        AttnPrefillConfig cfg;
        cfg.tc_min_tokens = tc ? 0 : INT64_MAX;
        ASSERT_CUDA(LaunchAttnPrefillConfigured(dqs.get(), dps.get(), s.n_new, ck.get(), cv.get(),
                                                o2.get(), cp, cfg, nullptr));
      } else {
        continue;  // decode: checked below with one tile
      }
      SYNC();
      const auto want = o2.ToHost();
      ASSERT_EQ(0, std::memcmp(want.data(), got.data() + b.t0[si] * hdh, hdh_n * 4))
          << "prefill sequence " << si;
    }
  }
  // One decode tile: bit-identical to the contiguous decode kernel.
  for (size_t si : {2u, 3u, 4u}) {
    const Seq& s = seqs[si];
    std::vector<int32_t> one = {static_cast<int32_t>(si), static_cast<int32_t>(b.t0[si]), 1, 0};
    DeviceBuffer<int32_t> dt1(one);
    AttnPaged p1 = pg;
    p1.tiles = dt1.get();
    p1.n_tiles = 1;
    ASSERT_EQ(AttnPagedSplits(b.p, 1), kAttnSplits);
    out.Poison();
    ASSERT_CUDA(LaunchAttnDecodePaged(dq.get(), dpos.get(), dk.get(), dv.get(), partial.get(),
                                      out.get(), b.p, p1, nullptr));
    DeviceBuffer<uint8_t> ck(b.ck[si]), cv(b.cv[si]);
    AttnParams cp = b.p;
    cp.n_ctx = s.len;
    const int64_t hdh = static_cast<int64_t>(c.n_head) * c.hd;
    std::vector<float> qs(b.q.begin() + b.t0[si] * hdh, b.q.begin() + (b.t0[si] + 1) * hdh);
    DeviceBuffer<float> dqs(qs), o2(hdh), part2(AttnDecodePartialFloats(cp));
    DeviceBuffer<int32_t> dps(std::vector<int32_t>{b.pos[b.t0[si]]});
    ASSERT_CUDA(LaunchAttnDecode(dqs.get(), dps.get(), ck.get(), cv.get(), part2.get(), o2.get(),
                                 cp, nullptr));
    SYNC();
    const auto got = out.ToHost();
    const auto want = o2.ToHost();
    ASSERT_EQ(0, std::memcmp(want.data(), got.data() + b.t0[si] * hdh, hdh * 4))
        << "decode sequence " << si;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, PagedAttentionGpuTest,
    ::testing::Values(PagedCase{KvType::kF16, 28, 4, 128, 16}, PagedCase{KvType::kF16, 28, 4, 128, 64},
                      PagedCase{KvType::kF16, 14, 2, 64, 256}, PagedCase{KvType::kF32, 14, 2, 64, 16},
                      PagedCase{KvType::kF32, 8, 2, 32, 32}, PagedCase{KvType::kQ8_0, 28, 4, 128, 64},
                      PagedCase{KvType::kFp8, 28, 4, 128, 64}, PagedCase{KvType::kFp8, 14, 2, 64, 16},
                      PagedCase{KvType::kF16, 7, 7, 64, 1},
                      // gpt-oss: 64 heads over 8 KV heads of 64, a 128-row
                      // window (the one-warp decode body) and sinks; a
                      // 700-row window (the GQA body at 1,500 rows); sinks
                      // alone; a window alone over q8_0.
                      PagedCase{KvType::kF16, 64, 8, 64, 16, 128, true},
                      PagedCase{KvType::kF16, 16, 8, 64, 64, 700, true},
                      PagedCase{KvType::kF32, 14, 2, 64, 16, 0, true},
                      PagedCase{KvType::kQ8_0, 8, 2, 64, 32, 33, false}));

// The step's switch-over length (host only): the knob when set, else the
// single-token rule below 8 tiles and the GQA body from 8.
TEST(PagedLongMinRowsTest, KnobElseTheRuleByTileCount) {
  EXPECT_EQ(PagedLongMinRows(-1, 1), kAttnLongMinRows);
  EXPECT_EQ(PagedLongMinRows(-1, 4), kAttnLongMinRows);
  EXPECT_EQ(PagedLongMinRows(-1, 7), kAttnLongMinRows);
  EXPECT_EQ(PagedLongMinRows(-1, 8), 0);
  EXPECT_EQ(PagedLongMinRows(-1, 256), 0);
  EXPECT_EQ(PagedLongMinRows(0, 1), 0);
  EXPECT_EQ(PagedLongMinRows(700, 64), 700);
  EXPECT_EQ(PagedLongMinRows(INT32_MAX, 64), INT32_MAX);
}

// AttnPaged::long_min_rows (MINFER_ATTN_PAGED_LONG_MIN): a batch of decode
// tokens at short and long contexts with either body forced for every token
// (0: the GQA body, INT32_MAX: the one-warp body) and the default split
// between them, each against the CPU's paged attention within the decode
// tolerance, for every cache type; both forced bodies read the same stripes,
// so they also agree with each other within float summation order.
TEST(PagedDecodeBodiesTest, EitherBodyMatchesCpuForEveryToken) {
  MINFER_REQUIRE_GPU();
  std::mt19937_64 rng(TestSeed());
  const std::vector<Seq> seqs = {{1, 1}, {5, 1}, {37, 1}, {130, 1}, {300, 1}, {511, 1},
                                 {512, 1}, {700, 1}, {1500, 1}, {64, 1}};
  for (KvType t : {KvType::kF16, KvType::kQ8_0, KvType::kFp8, KvType::kF32}) {
    SCOPED_TRACE(static_cast<int>(t));
    Batch b = MakeBatch(t, 28, 4, 128, 16, seqs, rng, 0, nullptr);
    DeviceBatch d(b);
    AttnPaged pg = d.pg;
    DeviceBuffer<float> partial(AttnPagedPartialFloats(b.p, pg.n_tiles));
    DeviceBuffer<int32_t> counters(
        std::vector<int32_t>(static_cast<size_t>(AttnDecodeCounters(b.p, pg.n_tiles)), 0));
    std::vector<std::vector<float>> got;
    for (int32_t long_min : {INT32_MAX, 0, kAttnLongMinRows}) {
      for (bool fused : {false, true}) {
        SCOPED_TRACE(::testing::Message() << "long_min " << long_min << " fused " << fused);
        pg.long_min_rows = long_min;
        pg.counters = fused ? counters.get() : nullptr;
        d.out.Poison();
        ASSERT_CUDA(LaunchAttnDecodePaged(d.q.get(), d.pos.get(), d.k.get(), d.v.get(),
                                          partial.get(), d.out.get(), b.p, pg, nullptr));
        SYNC();
        got.push_back(d.out.ToHost());
        const float tol = 2e-5f * b.max_v;
        for (size_t i = 0; i < got.back().size(); ++i) {
          ASSERT_FALSE(std::isnan(got.back()[i])) << "element " << i;
          ASSERT_NEAR(got.back()[i], b.want[i], tol) << "element " << i;
        }
      }
    }
    // The two forced bodies: within float summation order of each other
    // (4e-6 max|V|, SplitMatchesOneStripe's bound), and not bit-identical
    // everywhere (they really are different code).
    double worst = 0;
    for (size_t i = 0; i < got[0].size(); ++i) {
      const double d = std::fabs(static_cast<double>(got[0][i]) - got[2][i]);
      ASSERT_LE(d, 4e-6 * b.max_v) << "element " << i;
      worst = std::max(worst, d);
    }
    EXPECT_GT(worst, 0.0) << "both settings ran the same body";
    std::printf("paged decode, one-warp vs GQA body: worst difference %.3g x max|V|\n",
                worst / b.max_v);
    // A negative switch-over is refused before anything is launched.
    pg.long_min_rows = -1;
    d.out.Poison();
    EXPECT_EQ(LaunchAttnDecodePaged(d.q.get(), d.pos.get(), d.k.get(), d.v.get(), partial.get(),
                                    d.out.get(), b.p, pg, nullptr),
              cudaErrorInvalidValue);
    SYNC();
    const std::vector<float> untouched = d.out.ToHost();
    const std::vector<float> poison(untouched.size(), std::bit_cast<float>(0xFFFFFFFFu));
    EXPECT_EQ(0, std::memcmp(untouched.data(), poison.data(), untouched.size() * 4))
        << "a refused launch wrote its output";
  }
}

TEST(QkvRowsTest, StoresAtRowsAndRopesAtPositions) {
  MINFER_REQUIRE_GPU();
  std::mt19937_64 rng(TestSeed());
  for (KvType t : {KvType::kF32, KvType::kF16, KvType::kQ8_0, KvType::kFp8}) {
    AttnParams p;
    p.n_head = 8;
    p.n_head_kv = 2;
    p.head_dim = 64;
    p.n_ctx = 256;  // pool rows
    p.kv_type = t;
    const int64_t nq = 512, nkv = 128, nt = 9;
    const auto qkv = RandomFloats((nq + 2 * nkv) * nt, 2.0f);
    const auto bq = RandomFloats(nq), bk = RandomFloats(nkv), bv = RandomFloats(nkv);
    std::vector<int32_t> pos(nt), rows(nt);
    std::vector<int32_t> free_rows(256);
    std::iota(free_rows.begin(), free_rows.end(), 0);
    std::shuffle(free_rows.begin(), free_rows.end(), rng);
    for (int64_t i = 0; i < nt; ++i) {
      pos[i] = static_cast<int32_t>(100 + 3 * i);
      rows[i] = free_rows[i];
    }
    graph::KvLayout layout{ToDType(t), p.n_ctx, nkv};
    const int64_t rb = layout.row_bytes();
    DeviceBuffer<float> dqkv(qkv), dbq(bq), dbk(bk), dbv(bv), qout(nq * nt);
    DeviceBuffer<int32_t> dpos(pos), drows(rows), flag(std::vector<int32_t>{0});
    DeviceBuffer<uint8_t> kc(p.n_ctx * rb), vc(p.n_ctx * rb);
    kc.Poison(0x5A);
    vc.Poison(0x5A);
    qout.Poison();
    const float* q = dqkv.get();
    ASSERT_CUDA(LaunchQkvBiasRopeStore(q, q + nq * nt, q + (nq + nkv) * nt, dbq.get(), dbk.get(),
                                       dbv.get(), dpos.get(), nt, qout.get(), kc.get(), vc.get(),
                                       p, 0, 1000000.0f, flag.get(), nullptr, drows.get()));
    SYNC();
    EXPECT_EQ(flag.ToHost()[0], 0);
    // The CPU: the same op (cpu_backend's QkvBiasRopeStore is bias + RoPE +
    // KvStore per token), computed here from its parts.
    std::vector<float> hq(qkv.begin(), qkv.begin() + nq * nt);
    std::vector<float> hk(qkv.begin() + nq * nt, qkv.begin() + (nq + nkv) * nt);
    std::vector<float> hv(qkv.begin() + (nq + nkv) * nt, qkv.end());
    for (int64_t i = 0; i < nt; ++i) {
      for (int64_t j = 0; j < nq; ++j) hq[i * nq + j] += bq[j];
      for (int64_t j = 0; j < nkv; ++j) {
        hk[i * nkv + j] += bk[j];
        hv[i * nkv + j] += bv[j];
      }
    }
    std::vector<float> rq(hq.size()), rk(hk.size());
    cpu::RopeF32(hq.data(), pos.data(), rq.data(), 64, 8, nt, 64, graph::RopeStyle::kNeoX, 1000000.0f);
    cpu::RopeF32(hk.data(), pos.data(), rk.data(), 64, 2, nt, 64, graph::RopeStyle::kNeoX, 1000000.0f);
    std::vector<uint8_t> ck(p.n_ctx * rb, 0x5A), cv(p.n_ctx * rb, 0x5A);
    ASSERT_TRUE(cpu::KvStore(rk.data(), hv.data(), rows.data(), nt, layout, ck.data(), cv.data()).ok());
    const auto gq = qout.ToHost();
    int64_t ulp_off = 0;
    for (size_t i = 0; i < gq.size(); ++i) ulp_off += gq[i] != rq[i];
    // RoPE angles differ from the CPU's in ~1e-8 of cases (ops.h).
    EXPECT_LE(ulp_off, 2) << "q_out differs in " << ulp_off << " elements";
    const auto gk = kc.ToHost(), gv = vc.ToHost();
    int64_t diff_k = 0;
    for (size_t i = 0; i < gk.size(); ++i) diff_k += gk[i] != ck[i];
    EXPECT_LE(diff_k, 8) << "k cache bytes differ";
    EXPECT_TRUE(gv == cv) << "v cache bytes differ (v is not roped: exact)";
  }
}

TEST(TopKGpuTest, EqualsCpuTopKRows) {
  MINFER_REQUIRE_GPU();
  std::mt19937_64 rng(TestSeed());
  std::normal_distribution<float> nd(0.0f, 3.0f);
  const int64_t n_vocab = 152064, limit = 151665, n_out = 9;
  for (int k : {1, 40, 64, 256}) {
    std::vector<float> l(n_vocab * n_out);
    for (auto& x : l) x = nd(rng);
    for (int64_t i = 0; i < n_vocab; ++i) l[1 * n_vocab + i] = std::round(l[1 * n_vocab + i]);  // ties
    for (int64_t i = 0; i < n_vocab; ++i) l[2 * n_vocab + i] = i < 10 ? 1.0f : -INFINITY;  // < k finite
    for (int64_t i = 0; i < n_vocab; ++i) l[3 * n_vocab + i] = -INFINITY;
    l[4 * n_vocab + 777] = NAN;
    l[5 * n_vocab + 151700] = 1e6f;  // past the limit
    l[6 * n_vocab + 5] = 0.0f;       // +0 and -0 tie
    l[6 * n_vocab + 3] = -0.0f;
    for (int64_t i = 0; i < n_vocab; ++i) l[7 * n_vocab + i] = -std::fabs(l[7 * n_vocab + i]) - 100.0f;
    l[7 * n_vocab + 3] = 0.0f;
    l[7 * n_vocab + 5] = -0.0f;
    const std::vector<int32_t> mode = {2, 2, 2, 2, 2, 2, 2, 2, 1};
    const int64_t stride = 2 + 2 * k;
    DeviceBuffer<float> dl(l), dout(stride * n_out);
    DeviceBuffer<int32_t> dm(mode);
    dout.Poison();
    ASSERT_CUDA(LaunchTopK(dl.get(), n_vocab, n_out, dm.get(), /*mask=*/nullptr, k, limit,
                           dout.get(), /*error_flag=*/nullptr, nullptr));
    SYNC();
    const auto got = dout.ToHost();
    std::vector<float> want(stride * n_out, 0.0f);
    ThreadPool pool(2);
    ASSERT_TRUE(cpu::TopKRows(pool, l.data(), n_vocab, n_out, mode.data(), k, limit, want.data())
                    .ok());
    for (int64_t r = 0; r < n_out; ++r) {
      SCOPED_TRACE(::testing::Message() << "k " << k << " row " << r);
      const float* g = got.data() + r * stride;
      const float* w = want.data() + r * stride;
      if (std::isnan(w[0])) {
        EXPECT_TRUE(std::isnan(g[0]));
        continue;
      }
      EXPECT_EQ(g[0], w[0]);
      if (mode[r] == 2) EXPECT_NEAR(g[1], w[1], 1e-5 * std::fabs(w[1]) + 1e-30);
      const int n = mode[r] == 1 ? 1 : k;
      for (int j = 0; j < n; ++j) {
        ASSERT_EQ(0, std::memcmp(g + 2 + 2 * j, w + 2 + 2 * j, 8)) << "rank " << j;
      }
    }
  }
}

}  // namespace
}  // namespace minfer::cuda
