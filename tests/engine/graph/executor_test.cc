#include "engine/graph/executor.h"

#include <algorithm>
#include <cstring>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/models/decoder.h"
#include "engine/runtime/model.h"
#include "gtest/gtest.h"
#include "tests/support/test_models.h"

namespace minfer::graph {
namespace {

// A CPU backend that declines some ops, to force multi-backend plans.
class PickyCpu : public cpu::CpuBackend {
 public:
  PickyCpu(std::string name, std::set<OpKind> declined) : name_(std::move(name)), declined_(std::move(declined)) {}
  const std::string& name() const override { return name_; }
  bool SupportsOp(const Node& n) const override {
    return !declined_.count(n.op) && CpuBackend::SupportsOp(n);
  }

 private:
  std::string name_;
  std::set<OpKind> declined_;
};

std::shared_ptr<runtime::Model> Tiny() {
  auto path = testing::TestModelPath("tiny", "q8_0");
  EXPECT_TRUE(path.ok()) << path.status();
  auto m = runtime::Model::Load(*path, {.backend = "cpu"});
  EXPECT_TRUE(m.ok()) << m.status();
  return *m;
}

// The decoder's graph (the batched one, the engine's only forward) for one
// sequence of nt tokens at positions 0.. over a cache of two 16-row blocks
// (block 0 reserved for padding), with a row of logits for every token.
struct OneSequence {
  std::shared_ptr<Graph> graph;
  std::vector<int32_t> tokens, pos, out_rows, kv_rows, tiles, tables, top_mode;
  static constexpr int64_t kCacheRows = 32;
  RunInputs inputs() const {
    RunInputs in;
    in.tokens = tokens;
    in.positions = pos;
    in.out_rows = out_rows;
    in.kv_rows = kv_rows;
    in.attn_tiles = tiles;
    in.block_tables = tables;
    in.top_mode = top_mode;
    return in;
  }
};
absl::StatusOr<OneSequence> BuildOneSequence(const runtime::Model& model, int64_t nt,
                                             int64_t n_out) {
  const int64_t n_tiles = (nt + kAttnTileTokens - 1) / kAttnTileTokens;
  models::BatchGraphParams p;
  p.n_tokens = nt;
  p.n_out = n_out;
  p.n_tiles = n_tiles;
  p.n_table_rows = 2;
  p.max_blocks = 1;
  p.kv_block = 16;
  p.cache_rows = OneSequence::kCacheRows;
  p.kv_type = DType::kF32;
  p.top_k = 1;
  p.vocab_limit = static_cast<int32_t>(model.hparams().n_vocab);
  auto g = models::BuildDecoderBatchGraph(model.arch(), p);
  if (!g.ok()) return g.status();
  OneSequence s;
  s.graph = std::make_shared<Graph>(std::move(*g));
  for (int64_t t = 0; t < nt; ++t) {
    s.tokens.push_back(static_cast<int32_t>((t * 97 + 3) % 1000));
    s.pos.push_back(static_cast<int32_t>(t));
    s.kv_rows.push_back(static_cast<int32_t>(16 + t));  // block 1
  }
  for (int64_t r = 0; r < n_out; ++r) {
    s.out_rows.push_back(static_cast<int32_t>(nt - n_out + r));
    s.top_mode.push_back(TopKModeValue(1));
  }
  for (int64_t i = 0; i < n_tiles; ++i) {
    const int64_t t0 = i * kAttnTileTokens;
    s.tiles.insert(s.tiles.end(), {0, static_cast<int32_t>(t0),
                                   static_cast<int32_t>(std::min<int64_t>(kAttnTileTokens, nt - t0)), 0});
  }
  s.tables = {1, 0};  // the sequence's block; the padding row's reserved block
  return s;
}

absl::StatusOr<std::unique_ptr<KvCache>> Cache(Backend* b, const runtime::Model& model) {
  return KvCache::Create(b, static_cast<int>(model.hparams().n_layer),
                         {DType::kF32, OneSequence::kCacheRows, model.hparams().n_embd_kv()});
}

// No two tensors whose lifetimes overlap share bytes; KV regions belong to
// the KV cache and no activation is placed in them.
void CheckNoOverlap(const GraphExec& e, const KvCache& kv) {
  const Graph& g = e.graph();
  std::set<std::pair<Backend*, int32_t>> kv_buffers;
  for (int l = 0; l < kv.n_layers(); ++l) {
    kv_buffers.insert({kv.layer(l).k.backend, kv.layer(l).k.buffer});
    kv_buffers.insert({kv.layer(l).v.backend, kv.layer(l).v.buffer});
  }
  for (const Node& a : g.nodes()) {
    const BufferRef& ra = e.storage(a.id);
    ASSERT_TRUE(ra.valid()) << a.name;
    if (a.op == OpKind::kKvcacheLoad) {
      EXPECT_TRUE(kv_buffers.count({ra.backend, ra.buffer})) << a.name;
      continue;
    }
    EXPECT_FALSE(kv_buffers.count({ra.backend, ra.buffer})) << a.name << " placed in a KV region";
    if (IsAliasOp(a.op)) continue;
    for (const Node& b : g.nodes()) {
      if (b.id <= a.id || IsAliasOp(b.op) || b.op == OpKind::kKvcacheLoad) continue;
      const BufferRef& rb = e.storage(b.id);
      if (ra.backend != rb.backend || ra.buffer != rb.buffer) continue;
      auto [a0, a1] = e.lifetime(a.id);
      auto [b0, b1] = e.lifetime(b.id);
      bool live_together = a0 <= b1 && b0 <= a1;
      bool bytes_overlap = ra.offset < rb.offset + rb.bytes && rb.offset < ra.offset + ra.bytes;
      EXPECT_FALSE(live_together && bytes_overlap)
          << a.name << " [" << a0 << "," << a1 << "] and " << b.name << " [" << b0 << "," << b1
          << "] share buffer " << ra.buffer;
    }
  }
}

TEST(ExecutorTest, LivenessAllocationNeverOverlapsLiveTensors) {
  auto model = Tiny();
  ASSERT_NE(model, nullptr);
  for (int64_t nt : {1, 7}) {
    auto one = BuildOneSequence(*model, nt, nt);
    ASSERT_TRUE(one.ok()) << one.status();
    std::shared_ptr<Graph> graph = one->graph;
    auto kv = Cache(model->kv_backend(), *model);
    ASSERT_TRUE(kv.ok());
    auto e = GraphExec::Create(graph, model->backends(), kv->get());
    ASSERT_TRUE(e.ok()) << e.status();
    CheckNoOverlap(**e, **kv);
    // Reuse pays off: far fewer bytes than one buffer per tensor.
    int64_t naive = 0;
    for (const Node& n : graph->nodes()) {
      if (!IsAliasOp(n.op)) naive += n.bytes();
    }
    EXPECT_LT((*e)->activation_bytes(model->kv_backend()), naive);
  }
}

TEST(ExecutorTest, KvRegionsPersistAcrossGraphRebuilds) {
  auto model = Tiny();
  ASSERT_NE(model, nullptr);
  auto kv = Cache(model->kv_backend(), *model);
  ASSERT_TRUE(kv.ok());
  const BufferRef k0 = (*kv)->layer(0).k;
  for (int round = 0; round < 3; ++round) {
    auto one = BuildOneSequence(*model, 3 + round, 1);
    ASSERT_TRUE(one.ok()) << one.status();
    auto e = GraphExec::Create(one->graph, model->backends(), kv->get());
    ASSERT_TRUE(e.ok());
    // Destroying the exec frees its activation buffers; the KV regions stay.
  }
  EXPECT_EQ((*kv)->layer(0).k.buffer, k0.buffer);
  EXPECT_EQ(model->kv_backend()->HostPtr(k0) != nullptr, true);
}

// A second backend that declines MatMul: the plan alternates splits, copies
// tensors only where a split consumes another backend's output, and computes
// exactly what the single-backend plan computes.
TEST(ExecutorTest, MultiBackendSplitsMatchSingleBackend) {
  auto model = Tiny();
  ASSERT_NE(model, nullptr);
  PickyCpu picky("picky", {OpKind::kMatMul});
  cpu::CpuBackend& plain = *static_cast<cpu::CpuBackend*>(model->kv_backend());
  auto one = BuildOneSequence(*model, 5, 5);
  ASSERT_TRUE(one.ok()) << one.status();
  std::shared_ptr<Graph> graph = one->graph;

  auto run = [&](std::vector<Backend*> backends, Backend* kv_backend, int* n_splits,
                 int* n_copies) {
    auto kv = Cache(kv_backend, *model);
    auto e = GraphExec::Create(graph, backends, kv->get());
    EXPECT_TRUE(e.ok()) << e.status();
    std::vector<float> logits;
    EXPECT_TRUE((*e)->Run(one->inputs(), &logits).ok());
    *n_splits = static_cast<int>((*e)->splits().size());
    *n_copies = 0;
    for (const Split& s : (*e)->splits()) {
      *n_copies += static_cast<int>(s.copies.size());
      for (const Split::Copy& c : s.copies) {
        // A copy always crosses backends.
        EXPECT_NE((*e)->placement(c.node), s.backend);
      }
    }
    return logits;
  };
  int s1, c1, s2, c2;
  auto single = run({&plain}, &plain, &s1, &c1);
  auto mixed = run({&picky, &plain}, &picky, &s2, &c2);
  EXPECT_EQ(s1, 1);
  EXPECT_EQ(c1, 0);
  EXPECT_GT(s2, 10);  // every MatMul sits in its own CPU split
  EXPECT_GT(c2, 0);
  ASSERT_EQ(single.size(), mixed.size());
  for (size_t i = 0; i < single.size(); ++i) ASSERT_EQ(single[i], mixed[i]) << i;
}

TEST(ExecutorTest, UnsupportedNodeIsAClearError) {
  auto model = Tiny();
  ASSERT_NE(model, nullptr);
  PickyCpu no_attn("no-attn", {OpKind::kAttn});
  auto one = BuildOneSequence(*model, 1, 1);
  ASSERT_TRUE(one.ok()) << one.status();
  auto kv = Cache(&no_attn, *model);
  auto e = GraphExec::Create(one->graph, {&no_attn}, kv->get());
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("Attn"), std::string::npos) << e.status();
  EXPECT_NE(e.status().message().find("no-attn"), std::string::npos) << e.status();
}

// A CPU backend that logs what the executor asks of it, in order.
class LoggingCpu : public cpu::CpuBackend {
 public:
  explicit LoggingCpu(std::vector<std::string>* log) : log_(log) {}
  absl::Status ExecuteNode(const Node& node, const ExecArgs& args) override {
    log_->push_back(std::string("node ") + OpName(node.op));
    return CpuBackend::ExecuteNode(node, args);
  }
  absl::Status WriteHost(const BufferRef& dst, const void* src, int64_t bytes) override {
    log_->push_back("write");
    return CpuBackend::WriteHost(dst, src, bytes);
  }
  absl::Status Flush() override {
    log_->push_back("flush");
    return absl::OkStatus();
  }

 private:
  std::vector<std::string>* log_;
};

// Late masks (RunInputs::late_top_mask): the callback runs once, after
// every node before TopK was issued and the backend flushed, and before
// TopK; its masks are the ones TopK applies: each masked row's id is the
// argmax of its logits over the allowed ids (found here from the logits
// themselves), equal to the same masks given up front; an unmasked row
// keeps its plain argmax. Giving both forms, or a failing callback, is an
// error that names it.
TEST(ExecutorTest, LateMasksAreWrittenRightBeforeTopK) {
  auto model = Tiny();
  ASSERT_NE(model, nullptr);
  auto one = BuildOneSequence(*model, 4, 3);
  ASSERT_TRUE(one.ok()) << one.status();
  const int64_t V = model->hparams().n_vocab;
  const int64_t words = TopKMaskWords(V);
  // Row 0: every third id below 600; row 1 unmasked; row 2: ids 700 and 701.
  std::vector<uint32_t> masks(2 * words, 0);
  for (int64_t id = 0; id < 600; id += 3) masks[id / 32] |= 1u << (id % 32);
  for (int64_t id : {700, 701}) masks[words + id / 32] |= 1u << (id % 32);
  one->top_mode = {TopKModeValue(1, 0), TopKModeValue(1), TopKModeValue(1, 1)};
  std::vector<std::string> log;
  LoggingCpu backend(&log);
  auto kv = Cache(&backend, *model);
  auto e = GraphExec::Create(one->graph, {&backend}, kv->get());
  ASSERT_TRUE(e.ok()) << e.status();
  const Graph& g = (*e)->graph();

  auto top_ids = [&]() {
    std::vector<float> top(3 * 4);  // [2 + 2k, n_out] with k = 1
    EXPECT_TRUE((*e)->ReadNode(g.io.top, top.data(), top.size() * 4).ok());
    std::vector<int32_t> ids;
    for (int r = 0; r < 3; ++r) {
      int32_t id;
      std::memcpy(&id, &top[r * 4 + 3], 4);
      ids.push_back(id);
    }
    return ids;
  };
  // Up front.
  RunInputs in = one->inputs();
  in.top_mask = masks;
  ASSERT_TRUE((*e)->Run(in, nullptr).ok());
  const std::vector<int32_t> eager = top_ids();
  // The reference: argmax over each row's allowed ids, from the logits.
  std::vector<float> logits(V * 3);
  ASSERT_TRUE((*e)->ReadNode(g.io.logits, logits.data(), logits.size() * 4).ok());
  const int64_t limit = std::min<int64_t>(V, model->tokenizer().vocab_size());
  for (int r = 0; r < 3; ++r) {
    int32_t best = -1;
    for (int64_t id = 0; id < limit; ++id) {
      const uint32_t* m = r == 0 ? masks.data() : r == 2 ? masks.data() + words : nullptr;
      if (m != nullptr && !((m[id / 32] >> (id % 32)) & 1u)) continue;
      if (best < 0 || logits[r * V + id] > logits[r * V + best]) best = static_cast<int32_t>(id);
    }
    EXPECT_EQ(eager[r], best) << "row " << r;
  }
  EXPECT_EQ(eager[0] % 3, 0);
  EXPECT_TRUE(eager[2] == 700 || eager[2] == 701);

  // Late: the masks exist only once the callback runs.
  std::vector<uint32_t> late_masks(2 * words, 0);
  int calls = 0;
  in = one->inputs();
  in.late_top_mask = [&]() -> absl::StatusOr<absl::Span<const uint32_t>> {
    ++calls;
    log.push_back("late");
    late_masks = masks;
    return absl::Span<const uint32_t>(late_masks);
  };
  log.clear();
  ASSERT_TRUE((*e)->Run(in, nullptr).ok());
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(top_ids(), eager);
  auto at = [&](const std::string& what) {
    return std::find(log.begin(), log.end(), what) - log.begin();
  };
  const auto late = at("late"), topk = at("node TopK");
  ASSERT_LT(late, static_cast<long>(log.size()));
  ASSERT_LT(topk, static_cast<long>(log.size()));
  EXPECT_EQ(log[late - 1], "flush");
  EXPECT_EQ(log[late + 1], "write");  // the masks
  EXPECT_EQ(topk, late + 2);
  // Every other node was issued before the flush (TopK is the graph's last).
  EXPECT_EQ(topk, static_cast<long>(log.size()) - 1);
  EXPECT_GT(late, 20);

  // Both forms at once; a failing callback.
  in.top_mask = masks;
  absl::Status both = (*e)->Run(in, nullptr);
  EXPECT_EQ(both.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(both.message().find("late_top_mask"), std::string::npos) << both;
  in.top_mask = {};
  in.late_top_mask = []() -> absl::StatusOr<absl::Span<const uint32_t>> {
    return absl::ResourceExhaustedError("no masks today");
  };
  absl::Status failed = (*e)->Run(in, nullptr);
  EXPECT_EQ(failed.code(), absl::StatusCode::kResourceExhausted);
  // And the executor still runs after it.
  in.late_top_mask = nullptr;
  in.top_mask = masks;
  ASSERT_TRUE((*e)->Run(in, nullptr).ok());
  EXPECT_EQ(top_ids(), eager);

  // TopK on a backend of its own: its split opens with the reader, so the
  // callback runs before that split (after the forward's has synchronized),
  // with the same result. (This case found that a cross-backend mirror
  // carried its rounded-up allocation size, from which TopK derived a wrong
  // row length.)
  PickyCpu no_topk("no-topk", {OpKind::kTopK});
  cpu::CpuBackend plain;
  auto kv2 = Cache(&no_topk, *model);
  auto e2 = GraphExec::Create(one->graph, {&no_topk, &plain}, kv2->get());
  ASSERT_TRUE(e2.ok()) << e2.status();
  const Split& last = (*e2)->splits().back();
  ASSERT_EQ(last.backend, &plain);
  ASSERT_EQ(g.node(last.begin).op, OpKind::kTopK);
  calls = 0;
  in = one->inputs();
  in.late_top_mask = [&]() -> absl::StatusOr<absl::Span<const uint32_t>> {
    ++calls;
    late_masks = masks;
    return absl::Span<const uint32_t>(late_masks);
  };
  std::fill(late_masks.begin(), late_masks.end(), 0u);
  ASSERT_TRUE((*e2)->Run(in, nullptr).ok());
  EXPECT_EQ(calls, 1);
  std::vector<float> top2(3 * 4);
  ASSERT_TRUE((*e2)->ReadNode(g.io.top, top2.data(), top2.size() * 4).ok());
  for (int r = 0; r < 3; ++r) {
    int32_t id;
    std::memcpy(&id, &top2[r * 4 + 3], 4);
    EXPECT_EQ(id, eager[r]) << "row " << r;
  }
}

// An f32 weight over `data` (which must outlive it).
Weight F32Weight(const char* name, std::vector<int64_t> dims, const std::vector<float>& data) {
  Weight w;
  w.name = name;
  w.type = GgmlType::kF32;
  w.dims = std::move(dims);
  w.data = reinterpret_cast<const uint8_t*>(data.data());
  w.nbytes = data.size() * 4;
  return w;
}

// A CPU buffer holding v.
BufferRef HostBuffer(cpu::CpuBackend& cpu, const std::vector<float>& v) {
  auto id = cpu.AllocBuffer(static_cast<int64_t>(v.size()) * 4);
  EXPECT_TRUE(id.ok()) << id.status();
  BufferRef ref{&cpu, *id, 0, static_cast<int64_t>(v.size()) * 4};
  EXPECT_TRUE(cpu.WriteHost(ref, v.data(), ref.bytes).ok());
  return ref;
}

// A MatMul carrying a residual (GraphBuilder::AddInto) on the CPU: y = r +
// W x, the floats Add(r, W x) gives; a residual buffer smaller than the
// output (a hand-made graph) is refused with the sizes, not read past.
TEST(ExecutorTest, CpuMatMulResidualAddsLastAndShortResidualIsRefused) {
  cpu::CpuBackend cpu;
  constexpr int64_t k = 64, n = 32, nt = 2;
  std::vector<float> wdata(k * n);
  for (size_t i = 0; i < wdata.size(); ++i) wdata[i] = 0.01f * static_cast<float>(i % 17) - 0.05f;
  const Weight w = F32Weight("w", {k, n}, wdata);
  GraphBuilder b;
  const NodeId x = b.Input(DType::kF32, Shape(k, nt), "x");
  const NodeId r = b.Input(DType::kF32, Shape(n, nt), "r");
  const NodeId y = b.MatMul(x, &w, "y");
  ASSERT_EQ(b.AddInto(r, y, "sum"), y);
  ASSERT_TRUE(b.ok());
  const Node& node = b.node(y);
  auto buffer = [&](const std::vector<float>& v) { return HostBuffer(cpu, v); };
  std::vector<float> xv(k * nt), rv(n * nt);
  for (size_t i = 0; i < xv.size(); ++i) xv[i] = 0.1f * static_cast<float>(i % 7) - 0.3f;
  for (size_t i = 0; i < rv.size(); ++i) rv[i] = 100.0f + static_cast<float>(i);
  ExecArgs a;
  a.inputs = {buffer(xv), buffer(rv)};
  a.output = buffer(std::vector<float>(n * nt, -1.0f));
  ASSERT_TRUE(cpu.ExecuteNode(node, a).ok());
  std::vector<float> got(n * nt), plain(n * nt);
  ASSERT_TRUE(cpu.ReadHost(a.output, got.data(), a.output.bytes).ok());
  // The same node without the residual, then the add on the host.
  Node bare = node;
  bare.inputs.resize(1);
  ExecArgs a1 = a;
  a1.inputs.resize(1);
  ASSERT_TRUE(cpu.ExecuteNode(bare, a1).ok());
  ASSERT_TRUE(cpu.ReadHost(a1.output, plain.data(), a1.output.bytes).ok());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i], rv[i] + plain[i]) << i;
    ASSERT_NE(got[i], plain[i]) << i;  // the residual is really there
  }
  a.inputs[1] = buffer(std::vector<float>(n));  // one token's worth of two
  const absl::Status st = cpu.ExecuteNode(node, a);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("residual holds 32 floats, needs 64"), std::string::npos) << st;
}

// A bias Add carrying a residual (GraphBuilder::AddInto; gpt-oss's
// attention output) on the CPU: y = (a + w) + r, the floats of Add(r,
// Add(a, w)), with the output apart and over r's buffer (the executor may
// hand a node the buffer of an input it reads last).
TEST(ExecutorTest, CpuBiasAddResidualEqualsTheTwoAdds) {
  cpu::CpuBackend cpu;
  constexpr int64_t n = 2880, nt = 3;
  std::vector<float> bias(n);
  for (int64_t i = 0; i < n; ++i) bias[i] = 0.37f * static_cast<float>(i % 11) - 1.1f;
  const Weight w = F32Weight("bias", {n}, bias);
  GraphBuilder b;
  const NodeId x = b.Input(DType::kF32, Shape(n, nt), "x");
  const NodeId r = b.Input(DType::kF32, Shape(n, nt), "r");
  const NodeId y = b.Add(x, &w, "biased");
  ASSERT_EQ(b.AddInto(r, y, "sum"), y);
  ASSERT_TRUE(b.ok());
  const Node& node = b.node(y);
  auto buffer = [&](const std::vector<float>& v) { return HostBuffer(cpu, v); };
  std::vector<float> xv(n * nt), rv(n * nt), want(n * nt);
  for (size_t i = 0; i < xv.size(); ++i) {
    xv[i] = 0.013f * static_cast<float>(i % 101) - 0.6f;
    rv[i] = 3.0f + 0.7f * static_cast<float>(i % 13);
    const float t = xv[i] + bias[i % n];
    want[i] = rv[i] + t;
  }
  for (bool over_r : {false, true}) {
    SCOPED_TRACE(over_r ? "output over r" : "output apart");
    ExecArgs a;
    a.inputs = {buffer(xv), buffer(rv)};
    a.output = over_r ? a.inputs[1] : buffer(std::vector<float>(n * nt, -1.0f));
    ASSERT_TRUE(cpu.ExecuteNode(node, a).ok());
    std::vector<float> got(n * nt);
    ASSERT_TRUE(cpu.ReadHost(a.output, got.data(), a.output.bytes).ok());
    for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], want[i]) << i;
  }
  ExecArgs a;  // a residual of one token for three is refused, not read past
  a.inputs = {buffer(xv), buffer(std::vector<float>(n))};
  a.output = buffer(std::vector<float>(n * nt));
  const absl::Status st = cpu.ExecuteNode(node, a);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("residual holds 2880 floats, needs 8640"), std::string::npos) << st;
}

// Qwen2's prefill graph marks each layer's attn_norm, ffn_norm and SwiGLU,
// and the output norm (read only by the quantized head), as read only by
// int8-dot GEMMs when every projection is block-quantized (a Q4_K_M mix);
// none when the projections are f16.
TEST(ExecutorTest, Qwen2MarksInt8OnlyProducersByQuantMix) {
  for (const char* type : {"q4_k_m", "f16"}) {
    SCOPED_TRACE(type);
    auto path = testing::TestModelPath("tiny", type);
    ASSERT_TRUE(path.ok()) << path.status();
    auto model = runtime::Model::Load(*path, {.backend = "cpu"});
    ASSERT_TRUE(model.ok()) << model.status();
    auto one = BuildOneSequence(**model, 16, 1);
    ASSERT_TRUE(one.ok()) << one.status();
    int marked = 0;
    for (const Node& n : one->graph->nodes()) {
      if (n.p.int8_consumers) {
        ++marked;
        EXPECT_TRUE(n.name.find("attn_norm") != std::string::npos ||
                    n.name.find("ffn_norm") != std::string::npos ||
                    n.name.find("swiglu") != std::string::npos || n.name == "output_norm")
            << n.name;
      }
    }
    const int layers = static_cast<int>((*model)->hparams().n_layer);
    EXPECT_EQ(marked, std::string(type) == "f16" ? 0 : 3 * layers + 1);
  }
}

// Which batches run gate and up as one FusedFFN: on a GPU every batch up to
// kFusedFfnMaxTokens (256, the Hopper GEMM's largest, so gate and up share a
// launch and its SwiGLU can sum their split-k partials), on the CPU only a
// single token (its batched matmul is faster apart); past the limit, gate,
// up and SwiGLU are three nodes. Counted per layer on the tiny model.
TEST(ExecutorTest, GpuBatchesUpTo256TokensFuseTheFfn) {
  auto path = testing::TestModelPath("tiny", "q4_k_m");
  ASSERT_TRUE(path.ok()) << path.status();
  auto model = runtime::Model::Load(*path, {.backend = "cpu"});
  ASSERT_TRUE(model.ok()) << model.status();
  const int layers = static_cast<int>((*model)->hparams().n_layer);
  EXPECT_EQ(models::kFusedFfnMaxTokens, 256);
  for (bool gpu : {false, true}) {
    for (int64_t nt : {1, 17, 64, 65, 128, 256, 257, 300}) {
      SCOPED_TRACE(absl::StrCat(gpu ? "gpu" : "cpu", " nt=", nt));
      models::BatchGraphParams p;
      p.n_tokens = nt;
      p.n_out = 1;
      p.n_tiles = (nt + kAttnTileTokens - 1) / kAttnTileTokens;
      p.n_table_rows = 2;
      p.max_blocks = 32;
      p.kv_block = 16;
      p.cache_rows = 512;
      p.kv_type = DType::kF32;
      p.gpu = gpu;
      p.top_k = 1;
      p.vocab_limit = static_cast<int32_t>((*model)->hparams().n_vocab);
      auto g = models::BuildDecoderBatchGraph((*model)->arch(), p);
      ASSERT_TRUE(g.ok()) << g.status();
      int fused = 0, swiglu = 0;
      for (const Node& n : g->nodes()) {
        fused += n.op == OpKind::kFusedFFN;
        swiglu += n.op == OpKind::kSwiGLU;
      }
      const bool want = nt == 1 || (gpu && nt <= 256);
      EXPECT_EQ(fused, want ? layers : 0);
      EXPECT_EQ(swiglu, want ? 0 : layers);
    }
  }
}

}  // namespace
}  // namespace minfer::graph
