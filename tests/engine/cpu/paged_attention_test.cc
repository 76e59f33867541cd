// Paged attention on the CPU (several sequences in one pool of blocks, each
// token reading its own sequence through its block table) against the
// contiguous kernel run per sequence: the same values bit for bit, for every
// cache type, block sizes below and above the kernel's key block, GQA ratios,
// shuffled block tables and mixed decode/prefill tiles; plus the refusals of
// malformed batch descriptions, and TopK against a brute-force selection.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "engine/base/thread_pool.h"
#include "engine/cpu/kernels.h"
#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace minfer::cpu {
namespace {

using graph::DType;

struct SeqSpec {
  int64_t len;    // rows in the cache (history + this step's tokens)
  int64_t n_new;  // tokens of this step (the last n_new positions)
};

struct Case {
  DType dtype;
  int n_head, n_head_kv, head_dim;
  int kv_block;
};

class PagedAttentionTest : public ::testing::TestWithParam<Case> {};

TEST_P(PagedAttentionTest, EqualsContiguousPerSequence) {
  const Case cs = GetParam();
  const int64_t nkv = static_cast<int64_t>(cs.n_head_kv) * cs.head_dim;
  const int64_t q_row = static_cast<int64_t>(cs.n_head) * cs.head_dim;
  const float scale = 1.0f / std::sqrt(static_cast<float>(cs.head_dim));
  std::mt19937 rng(7 + cs.kv_block + static_cast<int>(cs.dtype));
  std::normal_distribution<float> nd(0.0f, 1.0f);
  ThreadPool pool(2);
  // Decode tokens (n_new 1), a chunk continuing a prompt, a whole prompt
  // longer than a tile, and a sequence shorter than one block.
  const std::vector<SeqSpec> seqs = {{37, 1}, {200, 1}, {150, 70}, {90, 90}, {3, 1}, {129, 2}};
  const int bs = cs.kv_block;
  int64_t max_blocks = 0;
  for (const SeqSpec& s : seqs) max_blocks = std::max<int64_t>(max_blocks, (s.len + bs - 1) / bs);
  int64_t total_blocks = 1;
  for (const SeqSpec& s : seqs) total_blocks += (s.len + bs - 1) / bs;
  total_blocks += 3;  // unused blocks in between
  graph::KvLayout pool_layout{cs.dtype, total_blocks * bs, nkv};
  std::vector<uint8_t> kp(pool_layout.row_bytes() * pool_layout.n_ctx, 0xff);
  std::vector<uint8_t> vp(kp.size(), 0xff);
  // Hand blocks out in a shuffled order, so tables are not monotone.
  std::vector<int32_t> free_blocks(total_blocks - 1);
  std::iota(free_blocks.begin(), free_blocks.end(), 1);
  std::shuffle(free_blocks.begin(), free_blocks.end(), rng);

  std::vector<int32_t> tables(seqs.size() * max_blocks, 0);
  std::vector<float> q_all;
  std::vector<int32_t> pos_all, tiles;
  std::vector<std::vector<float>> want;  // per sequence, its tokens' outputs
  size_t next_block = 0;
  for (size_t si = 0; si < seqs.size(); ++si) {
    const SeqSpec& s = seqs[si];
    const int64_t nb = (s.len + bs - 1) / bs;
    for (int64_t b = 0; b < nb; ++b) tables[si * max_blocks + b] = free_blocks[next_block++];
    std::vector<float> k(nkv * s.len), v(nkv * s.len);
    for (auto& x : k) x = nd(rng);
    for (auto& x : v) x = nd(rng) + 0.5f;
    // Contiguous cache of this sequence, and its rows scattered into the pool.
    graph::KvLayout cl{cs.dtype, s.len, nkv};
    std::vector<uint8_t> kc(cl.row_bytes() * s.len), vc(kc.size());
    std::vector<int32_t> rows(s.len), prow(s.len);
    std::iota(rows.begin(), rows.end(), 0);
    for (int64_t j = 0; j < s.len; ++j) {
      prow[j] = tables[si * max_blocks + j / bs] * bs + static_cast<int32_t>(j % bs);
    }
    ASSERT_TRUE(KvStore(k.data(), v.data(), rows.data(), s.len, cl, kc.data(), vc.data()).ok());
    ASSERT_TRUE(
        KvStore(k.data(), v.data(), prow.data(), s.len, pool_layout, kp.data(), vp.data()).ok());
    std::vector<float> q(q_row * s.n_new);
    for (auto& x : q) x = nd(rng);
    std::vector<int32_t> pos(s.n_new);
    std::iota(pos.begin(), pos.end(), static_cast<int32_t>(s.len - s.n_new));
    std::vector<float> y(q.size());
    ASSERT_TRUE(Attention(pool, q.data(), pos.data(), s.n_new, cs.n_head, cs.n_head_kv,
                          cs.head_dim, scale, cl, kc.data(), vc.data(), y.data())
                    .ok());
    want.push_back(y);
    const int64_t t0 = static_cast<int64_t>(pos_all.size());
    for (int64_t off = 0; off < s.n_new; off += graph::kAttnTileTokens) {
      tiles.insert(tiles.end(), {static_cast<int32_t>(si), static_cast<int32_t>(t0 + off),
                                 static_cast<int32_t>(std::min<int64_t>(graph::kAttnTileTokens,
                                                                        s.n_new - off)),
                                 0});
    }
    q_all.insert(q_all.end(), q.begin(), q.end());
    pos_all.insert(pos_all.end(), pos.begin(), pos.end());
  }
  tiles.insert(tiles.end(), {0, 0, 0, 0});  // an unused entry
  std::vector<float> y(q_all.size(), NAN);
  PagedAttnArgs pa;
  pa.q = q_all.data();
  pa.pos = pos_all.data();
  pa.nt = static_cast<int64_t>(pos_all.size());
  pa.tiles = tiles.data();
  pa.n_tiles = static_cast<int64_t>(tiles.size() / 4);
  pa.tables = tables.data();
  pa.n_table_rows = static_cast<int64_t>(seqs.size());
  pa.max_blocks = static_cast<int>(max_blocks);
  pa.kv_block = bs;
  pa.n_head = cs.n_head;
  pa.n_head_kv = cs.n_head_kv;
  pa.head_dim = cs.head_dim;
  pa.scale = scale;
  pa.layout = pool_layout;
  pa.k_cache = kp.data();
  pa.v_cache = vp.data();
  pa.y = y.data();
  for (KernelImpl impl : {KernelImpl::kAuto, KernelImpl::kScalar}) {
    std::fill(y.begin(), y.end(), NAN);
    ASSERT_TRUE(PagedAttention(pool, pa, impl).ok());
    int64_t off = 0;
    for (size_t si = 0; si < seqs.size(); ++si) {
      if (impl == KernelImpl::kAuto) {
        ASSERT_EQ(0, std::memcmp(y.data() + off, want[si].data(), want[si].size() * 4))
            << "sequence " << si;
      } else {
        // The scalar kernel sums in another order than the SIMD one the
        // contiguous reference ran: equal within float rounding.
        for (size_t i = 0; i < want[si].size(); ++i) {
          ASSERT_NEAR(y[off + i], want[si][i], 1e-4f) << "sequence " << si << " element " << i;
        }
      }
      off += static_cast<int64_t>(want[si].size());
    }
  }

  // Malformed descriptions are refused, naming the problem.
  std::vector<int32_t> bad_tiles = tiles;
  bad_tiles[2] = 0;  // the first sequence's token is now in no tile
  pa.tiles = bad_tiles.data();
  absl::Status st = PagedAttention(pool, pa);
  EXPECT_TRUE(absl::IsInvalidArgument(st) && absl::StrContains(st.message(), "in no tile")) << st;
  pa.tiles = tiles.data();
  std::vector<int32_t> bad_tables = tables;
  bad_tables[0] = static_cast<int32_t>(total_blocks);  // past the pool
  pa.tables = bad_tables.data();
  st = PagedAttention(pool, pa);
  EXPECT_TRUE(absl::IsOutOfRange(st) && absl::StrContains(st.message(), "outside the")) << st;
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, PagedAttentionTest,
    ::testing::Values(Case{DType::kF32, 4, 2, 64, 16}, Case{DType::kF32, 4, 2, 64, 64},
                      Case{DType::kF32, 8, 2, 32, 128}, Case{DType::kF32, 7, 1, 64, 1},
                      Case{DType::kF16, 4, 2, 64, 16}, Case{DType::kF16, 8, 2, 32, 256},
                      Case{DType::kQ8_0, 4, 2, 64, 32}, Case{DType::kQ8_0, 8, 8, 32, 64},
                      Case{DType::kFp8, 4, 2, 64, 32}, Case{DType::kFp8, 8, 8, 32, 64},
                      Case{DType::kFp8, 4, 4, 16, 16}));

TEST(TopKRowsTest, MatchesBruteForce) {
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  ThreadPool pool(2);
  const int64_t n_vocab = 5000, limit = 4900, n_out = 5;
  const int k = 40;
  std::vector<float> logits(n_vocab * n_out);
  for (auto& x : logits) x = std::round(nd(rng) * 8.0f) / 8.0f;  // many ties
  logits[2 * n_vocab + 4950] = 100.0f;  // above the limit: never a candidate
  for (int64_t i = 0; i < n_vocab; ++i) logits[3 * n_vocab + i] = -INFINITY;  // all masked
  logits[4 * n_vocab + 17] = NAN;
  const std::vector<int32_t> mode = {2, 1, 2, 2, 2};
  const int64_t stride = 2 + 2 * k;
  std::vector<float> out(stride * n_out, 123.0f);
  ASSERT_TRUE(
      TopKRows(pool, logits.data(), n_vocab, n_out, mode.data(), k, limit, out.data()).ok());
  for (int64_t r = 0; r < 3; ++r) {
    const float* l = logits.data() + r * n_vocab;
    std::vector<int32_t> ids(limit);
    std::iota(ids.begin(), ids.end(), 0);
    std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return l[a] > l[b]; });
    const float* o = out.data() + r * stride;
    EXPECT_EQ(o[0], l[ids[0]]);
    const int n = mode[r] == 1 ? 1 : k;
    for (int j = 0; j < n; ++j) {
      int32_t id;
      std::memcpy(&id, o + 3 + 2 * j, 4);
      EXPECT_EQ(id, ids[j]) << "row " << r << " rank " << j;
      EXPECT_EQ(o[2 + 2 * j], l[ids[j]]);
    }
    if (mode[r] == 2) {
      double sum = 0;
      for (int64_t i = 0; i < limit; ++i) sum += std::exp(static_cast<double>(l[i]) - o[0]);
      EXPECT_NEAR(o[1], sum, sum * 1e-6);
    }
  }
  // All -inf: no candidates; a NaN: max NaN.
  int32_t id;
  std::memcpy(&id, out.data() + 3 * stride + 3, 4);
  EXPECT_EQ(id, -1);
  EXPECT_EQ(out[3 * stride], -INFINITY);
  EXPECT_TRUE(std::isnan(out[4 * stride]));
}

}  // namespace
}  // namespace minfer::cpu

namespace minfer::cpu {
namespace {

// Sliding windows and attention sinks (gpt-oss) against a float64 reference
// of graph.h's op table, on the SIMD and the scalar kernel; a query's value
// does not depend on its tile (a decode tile of one token gives the prefill
// tile's value bit for bit), windows shorter and longer than the kernel's
// key block.
TEST(PagedAttentionWindowTest, WindowAndSinksMatchFloat64) {
  const int n_head = 8, n_head_kv = 2, hd = 64, bs = 16;
  const int64_t nkv = n_head_kv * hd, len = 192, n_new = 64;
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  ThreadPool pool(2);
  graph::KvLayout layout{DType::kF32, len, nkv};
  std::vector<float> k(nkv * len), v(nkv * len), q(n_head * hd * n_new), sinks(n_head);
  for (auto& x : k) x = nd(rng);
  for (auto& x : v) x = nd(rng);
  for (auto& x : q) x = 2.0f * nd(rng);  // sharp enough that the window matters
  for (auto& x : sinks) x = 2.0f * nd(rng);
  std::vector<uint8_t> kc(layout.row_bytes() * len), vc(kc.size());
  std::vector<int32_t> rows(len);
  std::iota(rows.begin(), rows.end(), 0);
  ASSERT_TRUE(KvStore(k.data(), v.data(), rows.data(), len, layout, kc.data(), vc.data()).ok());
  std::vector<int32_t> table(len / bs + 1);
  std::iota(table.begin(), table.end(), 0);
  std::vector<int32_t> pos(n_new);
  std::iota(pos.begin(), pos.end(), static_cast<int32_t>(len - n_new));
  const float scale = 0.125f;
  for (int window : {16, 100}) {
    for (bool with_sinks : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "window " << window << " sinks " << with_sinks);
      std::vector<int32_t> tiles = {0, 0, static_cast<int32_t>(n_new), 0};
      PagedAttnArgs pa;
      pa.q = q.data();
      pa.pos = pos.data();
      pa.nt = n_new;
      pa.tiles = tiles.data();
      pa.n_tiles = 1;
      pa.tables = table.data();
      pa.n_table_rows = 1;
      pa.max_blocks = static_cast<int>(table.size());
      pa.kv_block = bs;
      pa.n_head = n_head;
      pa.n_head_kv = n_head_kv;
      pa.head_dim = hd;
      pa.scale = scale;
      pa.layout = layout;
      pa.k_cache = kc.data();
      pa.v_cache = vc.data();
      pa.window = window;
      pa.sinks = with_sinks ? sinks.data() : nullptr;
      for (KernelImpl impl : {KernelImpl::kAuto, KernelImpl::kScalar}) {
        std::vector<float> y(q.size(), NAN);
        pa.y = y.data();
        ASSERT_TRUE(PagedAttention(pool, pa, impl).ok());
        double worst = 0;
        for (int64_t t = 0; t < n_new; ++t) {
          const int64_t p = pos[t], first = std::max<int64_t>(0, p - window + 1);
          for (int h = 0; h < n_head; ++h) {
            const int hk = h / (n_head / n_head_kv);
            const float* qh = q.data() + (t * n_head + h) * hd;
            std::vector<double> w;
            double mx = with_sinks ? sinks[h] : -INFINITY;
            for (int64_t j = first; j <= p; ++j) {
              double s = 0;
              for (int i = 0; i < hd; ++i) s += double(qh[i]) * k[j * nkv + hk * hd + i];
              w.push_back(s * scale);
              mx = std::max(mx, w.back());
            }
            double den = with_sinks ? std::exp(sinks[h] - mx) : 0.0;
            for (double& x : w) den += (x = std::exp(x - mx));
            for (int i = 0; i < hd; ++i) {
              double o = 0;
              for (size_t jj = 0; jj < w.size(); ++jj) o += w[jj] * v[(first + jj) * nkv + hk * hd + i];
              worst = std::max(worst, std::abs(o / den - y[(t * n_head + h) * hd + i]));
            }
          }
        }
        EXPECT_LT(worst, 1e-4) << (impl == KernelImpl::kAuto ? "simd" : "scalar");
        if (impl != KernelImpl::kAuto) continue;
        // The last token alone (a decode tile) gives its prefill value.
        std::vector<int32_t> one_tile = {0, 0, 1, 0};
        std::vector<float> y1(n_head * hd, NAN);
        PagedAttnArgs one = pa;
        one.q = q.data() + (n_new - 1) * n_head * hd;
        one.pos = pos.data() + n_new - 1;
        one.nt = 1;
        one.tiles = one_tile.data();
        one.y = y1.data();
        ASSERT_TRUE(PagedAttention(pool, one, impl).ok());
        EXPECT_EQ(0, std::memcmp(y1.data(), y.data() + (n_new - 1) * n_head * hd, y1.size() * 4));
      }
    }
  }
}

}  // namespace
}  // namespace minfer::cpu
