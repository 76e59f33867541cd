// GraphBuilder::Finish marks the RmsNorm / SwiGLU / FusedFFN nodes whose every reader is
// a MatMul over an int8-dot weight (OpParams::int8_consumers): the precondition
// for a backend to write only their int8 activation plane (the CUDA
// backend's mode 2). Any other reader — a MatMul over an f16/f32 weight (a
// mixed-quant model), an elementwise op, a graph output — keeps the f32
// write (the safe mode).
#include "engine/graph/graph.h"

#include "gtest/gtest.h"

namespace minfer::graph {
namespace {

Weight MakeWeight(const char* name, GgmlType type, std::vector<int64_t> dims) {
  Weight w;
  w.name = name;
  w.type = type;
  w.dims = std::move(dims);
  return w;
}

TEST(GraphBuilderTest, MarksProducersReadOnlyByInt8DotMatMuls) {
  const int64_t k = 256, nt = 16, ff = 512;
  const Weight norm = MakeWeight("norm", GgmlType::kF32, {k});
  const Weight q8 = MakeWeight("q8", GgmlType::kQ8_0, {k, 64});
  const Weight q4k = MakeWeight("q4k", GgmlType::kQ4_K, {k, 64});
  const Weight f16 = MakeWeight("f16", GgmlType::kF16, {k, 64});
  const Weight gate = MakeWeight("gate", GgmlType::kQ4_K, {k, ff});
  const Weight up = MakeWeight("up", GgmlType::kQ4_K, {k, ff});
  const Weight down_q6 = MakeWeight("down_q6", GgmlType::kQ6_K, {ff, k});
  const Weight down_f32 = MakeWeight("down_f32", GgmlType::kF32, {ff, k});
  const Weight head = MakeWeight("head", GgmlType::kQ8_0, {k, 100});

  GraphBuilder b;
  GraphIO io;
  io.tokens = b.Input(DType::kI32, Shape(nt), "tokens");
  const NodeId x = b.Input(DType::kF32, Shape(k, nt), "x");
  // Two quantized readers (q8_0 and q4_K): marked.
  const NodeId all_int8 = b.RmsNorm(x, &norm, 1e-6f, "all_int8");
  const NodeId m1 = b.MatMul(all_int8, &q8, "m1");
  const NodeId m2 = b.MatMul(all_int8, &q4k, "m2");
  // A mixed-quant reader (f16): not marked.
  const NodeId mixed = b.RmsNorm(x, &norm, 1e-6f, "mixed");
  const NodeId m3 = b.MatMul(mixed, &q8, "m3");
  const NodeId m4 = b.MatMul(mixed, &f16, "m4");
  // An elementwise reader: not marked.
  const NodeId elementwise = b.RmsNorm(x, &norm, 1e-6f, "elementwise");
  const NodeId m5 = b.MatMul(elementwise, &q8, "m5");
  const NodeId sum = b.Add(elementwise, x, "sum");
  // SwiGLU read by a q6_K down projection: marked; by an f32 one: not.
  const NodeId g = b.MatMul(all_int8, &gate, "g");
  const NodeId u = b.MatMul(all_int8, &up, "u");
  const NodeId s_int8 = b.SwiGLU(g, u, "s_int8");
  const NodeId d1 = b.MatMul(s_int8, &down_q6, "d1");
  const NodeId s_f32 = b.SwiGLU(g, u, "s_f32");
  const NodeId d2 = b.MatMul(s_f32, &down_f32, "d2");
  // A norm read by a FusedFFN of q4_K weights, whose output a q6_K down
  // projection reads: both marked; a FusedFFN read by an f32 one: not.
  const NodeId ffn_norm = b.RmsNorm(x, &norm, 1e-6f, "ffn_norm");
  const NodeId ffn = b.FusedFFN(ffn_norm, &gate, &up, "ffn");
  const NodeId d3 = b.MatMul(ffn, &down_q6, "d3");
  const NodeId ffn_f32 = b.FusedFFN(ffn_norm, &gate, &up, "ffn_f32");
  const NodeId d4 = b.MatMul(ffn_f32, &down_f32, "d4");
  // A norm nobody reads, and one that is the graph's output: not marked.
  const NodeId unread = b.RmsNorm(x, &norm, 1e-6f, "unread");
  const NodeId out = b.RmsNorm(sum, &norm, 1e-6f, "out");
  (void)m1, (void)m2, (void)m3, (void)m4, (void)m5, (void)d1, (void)d2, (void)d3, (void)d4,
      (void)head;
  io.logits = out;
  absl::StatusOr<Graph> graph = b.Finish(io, 0);
  ASSERT_TRUE(graph.ok()) << graph.status();
  EXPECT_TRUE(graph->node(all_int8).p.int8_consumers);
  EXPECT_FALSE(graph->node(mixed).p.int8_consumers);
  EXPECT_FALSE(graph->node(elementwise).p.int8_consumers);
  EXPECT_TRUE(graph->node(s_int8).p.int8_consumers);
  EXPECT_FALSE(graph->node(s_f32).p.int8_consumers);
  EXPECT_TRUE(graph->node(ffn_norm).p.int8_consumers);
  EXPECT_TRUE(graph->node(ffn).p.int8_consumers);
  EXPECT_FALSE(graph->node(ffn_f32).p.int8_consumers);
  EXPECT_EQ(graph->node(ffn).shape.ne[1], nt);  // FusedFFN takes any token count
  EXPECT_FALSE(graph->node(unread).p.int8_consumers);
  EXPECT_FALSE(graph->node(out).p.int8_consumers);
  // Only the three producer kinds are ever marked.
  for (const Node& n : graph->nodes()) {
    if (n.op != OpKind::kRmsNorm && n.op != OpKind::kSwiGLU && n.op != OpKind::kFusedFFN) {
      EXPECT_FALSE(n.p.int8_consumers) << n.name;
    }
  }
}

// RoPE frequency factors ride on the node as its weight (RopeFactors reads
// them back for RoPE and QkvBiasRopeStore); a table of the wrong size or
// type is a build error naming the op.
TEST(GraphBuilderTest, RopeFrequencyFactors) {
  const Weight factors = MakeWeight("rope_freqs.weight", GgmlType::kF32, {32});
  const Weight wrong = MakeWeight("rope_freqs.weight", GgmlType::kF32, {16});
  GraphBuilder b;
  const NodeId x = b.Input(DType::kF32, Shape(64, 4, 2), "x");
  const NodeId pos = b.Input(DType::kI32, Shape(2), "pos");
  const NodeId plain = b.RoPE(x, pos, RopeStyle::kInterleaved, 5e5f, 64, "plain");
  const NodeId scaled = b.RoPE(x, pos, RopeStyle::kInterleaved, 5e5f, 64, "scaled", &factors);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(RopeFactors(b.node(plain)), nullptr);
  EXPECT_EQ(RopeFactors(b.node(scaled)), &factors);
  const NodeId qkv = b.Input(DType::kF32, Shape(64 * (4 + 2 * 2), 2), "qkv");
  const NodeId fused = b.QkvBiasRopeStore({qkv}, nullptr, nullptr, nullptr, pos, 4, 2, 64,
                                          RopeStyle::kInterleaved, 5e5f, 0, "store", kNoNode,
                                          &factors);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(RopeFactors(b.node(fused)), &factors);
  const NodeId unfactored = b.QkvBiasRopeStore({qkv}, nullptr, nullptr, nullptr, pos, 4, 2, 64,
                                               RopeStyle::kNeoX, 5e5f, 1, "store1");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(RopeFactors(b.node(unfactored)), nullptr);
  b.RoPE(x, pos, RopeStyle::kInterleaved, 5e5f, 64, "bad", &wrong);
  EXPECT_FALSE(b.ok());
  GraphIO io;
  auto g = b.Finish(io, 2);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("RoPE bad"), std::string::npos) << g.status();
}

// Qwen3's per-head q/k norms ride on QkvBiasRopeStore as weights [4] and
// [5] (with or without RoPE factors before them), with eps in p.eps; one
// without the other, or a norm of the wrong width, is a build error.
TEST(GraphBuilderTest, QkvEpilogueCarriesQkNorms) {
  const Weight factors = MakeWeight("rope_freqs.weight", GgmlType::kF32, {32});
  const Weight qn = MakeWeight("q_norm", GgmlType::kF32, {64});
  const Weight kn = MakeWeight("k_norm", GgmlType::kF32, {64});
  const Weight narrow = MakeWeight("k_norm", GgmlType::kF32, {32});
  auto build = [&](const Weight* f, const Weight* q, const Weight* k, GraphBuilder& b) {
    const NodeId pos = b.Input(DType::kI32, Shape(2), "pos");
    const NodeId qkv = b.Input(DType::kF32, Shape(64 * (4 + 2 * 2), 2), "qkv");
    return b.QkvBiasRopeStore({qkv}, nullptr, nullptr, nullptr, pos, 4, 2, 64, RopeStyle::kNeoX,
                              1e6f, 0, "store", kNoNode, f, q, k, 1e-6f);
  };
  for (const Weight* f : {static_cast<const Weight*>(nullptr), &factors}) {
    GraphBuilder b;
    const NodeId n = build(f, &qn, &kn, b);
    ASSERT_TRUE(b.ok());
    EXPECT_EQ(RopeFactors(b.node(n)), f);
    EXPECT_EQ(QkvQNorm(b.node(n)), &qn);
    EXPECT_EQ(QkvKNorm(b.node(n)), &kn);
    EXPECT_FLOAT_EQ(b.node(n).p.eps, 1e-6f);
  }
  {
    GraphBuilder b;
    const NodeId n = build(&factors, nullptr, nullptr, b);
    ASSERT_TRUE(b.ok());
    EXPECT_EQ(QkvQNorm(b.node(n)), nullptr);
    EXPECT_EQ(QkvKNorm(b.node(n)), nullptr);
  }
  for (const Weight* k : {static_cast<const Weight*>(nullptr), &narrow}) {
    GraphBuilder b;
    build(nullptr, &qn, k, b);
    EXPECT_FALSE(b.ok());
    GraphIO io;
    auto g = b.Finish(io, 1);
    ASSERT_FALSE(g.ok());
    EXPECT_NE(g.status().message().find("q/k norm weights must both be f32 [64]"),
              std::string::npos)
        << g.status();
  }
}

// The mixture-of-experts ops and the paged attention's sinks check their
// shapes, the first violation naming the node.
// x [64, 3], router logits [8, 3], their route (2 of 8) and a SiLU MoeFFN
// over gate/down experts: the MoE tests' common start.
struct MoeNodes {
  NodeId x, route, y;
};
MoeNodes BuildMoe(GraphBuilder& b, const Weight& gate, const Weight& down) {
  MoeNodes m;
  m.x = b.Input(DType::kF32, Shape(64, 3), "x");
  const NodeId logits = b.Input(DType::kF32, Shape(8, 3), "logits");
  m.route = b.MoeRoute(logits, 2, MoeGating::kSoftmax, true, 0, "route");
  m.y = b.MoeFFN(m.x, m.route, &gate, &gate, &down, nullptr, nullptr, nullptr, MoeAct::kSilu,
                 "moe");
  return m;
}

TEST(GraphBuilderTest, MoeAndSinkShapesAreChecked) {
  const Weight gate = MakeWeight("gate_exps", GgmlType::kQ8_0, {64, 32, 8});
  const Weight down = MakeWeight("down_exps", GgmlType::kQ8_0, {32, 64, 8});
  const Weight down_bad = MakeWeight("down_exps", GgmlType::kQ8_0, {32, 64, 6});
  const Weight bias_bad = MakeWeight("gate_exps.bias", GgmlType::kQ8_0, {32, 8});
  auto finish_error = [](GraphBuilder& b) {
    GraphIO io;
    auto g = b.Finish(io, 1);
    return g.ok() ? std::string() : std::string(g.status().message());
  };
  {
    GraphBuilder b;
    const MoeNodes m = BuildMoe(b, gate, down);
    ASSERT_TRUE(b.ok());
    EXPECT_EQ(b.node(m.route).shape.ne[0], 4);  // 2 weights, 2 ids
    EXPECT_EQ(b.node(m.y).shape.ne[0], 64);
    EXPECT_EQ(b.node(m.y).p.n_expert_used, 2);
  }
  {
    GraphBuilder b;
    const NodeId logits = b.Input(DType::kF32, Shape(8, 3), "logits");
    b.MoeRoute(logits, 9, MoeGating::kSoftmax, true, 0, "route");
    EXPECT_NE(finish_error(b).find("MoeRoute route: experts per token 9"), std::string::npos);
  }
  {
    GraphBuilder b;
    const NodeId x = b.Input(DType::kF32, Shape(64, 3), "x");
    const NodeId logits = b.Input(DType::kF32, Shape(8, 3), "logits");
    const NodeId route = b.MoeRoute(logits, 2, MoeGating::kSoftmax, true, 0, "route");
    b.MoeFFN(x, route, &gate, &gate, &down_bad, nullptr, nullptr, nullptr, MoeAct::kSilu, "moe");
    EXPECT_NE(finish_error(b).find("MoeFFN moe: expert shapes"), std::string::npos);
  }
  {
    GraphBuilder b;
    const NodeId x = b.Input(DType::kF32, Shape(64, 3), "x");
    const NodeId logits = b.Input(DType::kF32, Shape(8, 3), "logits");
    const NodeId route = b.MoeRoute(logits, 2, MoeGating::kSoftmax, true, 0, "route");
    b.MoeFFN(x, route, &gate, &gate, &down, &bias_bad, nullptr, nullptr, MoeAct::kSilu, "moe");
    EXPECT_NE(finish_error(b).find("expert biases must be f32"), std::string::npos);
  }
  {
    GraphBuilder b;
    const Weight sinks_bad = MakeWeight("attn_sinks.weight", GgmlType::kF32, {3});
    const NodeId q = b.Input(DType::kF32, Shape(16, 4, 2), "q");
    const NodeId pos = b.Input(DType::kI32, Shape(2), "pos");
    const NodeId k = b.Input(DType::kF32, Shape(32, 2), "k");
    const NodeId v = b.Input(DType::kF32, Shape(32, 2), "v");
    const NodeId store = b.KvcacheStore(k, v, pos, 0, "store");
    const NodeId kc = b.KvcacheLoad(store, 0, KvKind::kK, Shape(32, 16), DType::kF32, "kc");
    const NodeId vc = b.KvcacheLoad(store, 0, KvKind::kV, Shape(32, 16), DType::kF32, "vc");
    const NodeId tiles = b.Input(DType::kI32, Shape(4, 1), "tiles");
    const NodeId tables = b.Input(DType::kI32, Shape(1, 1), "tables");
    b.PagedAttn(q, kc, vc, pos, tiles, tables, 16, 4, 2, 16, 0.25f, 0, "attn", false, 8,
                &sinks_bad);
    EXPECT_NE(finish_error(b).find("sinks must be f32 [4]"), std::string::npos);
  }
}

// TopK's optional mask input: i32 [ceil(n_vocab / 32), n_out] or an error
// naming the node; the mode value carries the base mode and the column.
// AddInto puts the residual on the MatMul or MoeFFN that produced y when
// nothing else reads y yet, and otherwise builds the Add: a MatMul and a
// MoeFFN take it (one input more, no Add node), a read y, a y that already
// has a residual, another op, a shape that differs, and a residual built
// after y all get an Add(r, y).
TEST(GraphBuilderTest, AddIntoPutsTheResidualOnTheMatmul) {
  const Weight w = MakeWeight("w", GgmlType::kQ8_0, {64, 64});
  const Weight wide = MakeWeight("wide", GgmlType::kQ8_0, {64, 96});
  const Weight gate = MakeWeight("gate_exps", GgmlType::kQ8_0, {64, 32, 8});
  const Weight down = MakeWeight("down_exps", GgmlType::kQ8_0, {32, 64, 8});
  auto count = [](const GraphBuilder& b, NodeId last, OpKind op) {
    int c = 0;
    for (NodeId i = 0; i <= last; ++i) c += b.node(i).op == op;
    return c;
  };
  {
    GraphBuilder b;
    const NodeId x = b.Input(DType::kF32, Shape(64, 3), "x");
    const NodeId r = b.Input(DType::kF32, Shape(64, 3), "r");
    const NodeId y = b.MatMul(x, &w, "y");
    const NodeId s = b.AddInto(r, y, "sum");
    ASSERT_TRUE(b.ok());
    EXPECT_EQ(s, y);
    EXPECT_EQ(b.node(y).inputs, (std::vector<NodeId>{x, r}));
    EXPECT_EQ(count(b, s, OpKind::kAdd), 0);
    // Once it has one, the next residual is an Add.
    const NodeId s2 = b.AddInto(x, s, "sum2");
    EXPECT_EQ(b.node(s2).op, OpKind::kAdd);
    EXPECT_EQ(b.node(s2).inputs, (std::vector<NodeId>{x, s}));
  }
  {
    GraphBuilder b;
    const MoeNodes m = BuildMoe(b, gate, down);
    const NodeId s = b.AddInto(m.x, m.y, "sum");
    ASSERT_TRUE(b.ok());
    EXPECT_EQ(s, m.y);
    EXPECT_EQ(b.node(m.y).inputs, (std::vector<NodeId>{m.x, m.route, m.x}));
  }
  {
    // A bias Add (gpt-oss's attention output) takes it too; an Add of two
    // nodes does not.
    const Weight bias = MakeWeight("bias", GgmlType::kF32, {64});
    GraphBuilder b;
    const NodeId x = b.Input(DType::kF32, Shape(64, 3), "x");
    const NodeId r = b.Input(DType::kF32, Shape(64, 3), "r");
    const NodeId y = b.Add(b.MatMul(x, &w, "mm"), &bias, "biased");
    const NodeId s = b.AddInto(r, y, "sum");
    ASSERT_TRUE(b.ok());
    EXPECT_EQ(s, y);
    EXPECT_EQ(b.node(y).inputs.size(), 2u);
    EXPECT_EQ(b.node(y).inputs[1], r);
    EXPECT_EQ(b.node(b.AddInto(r, s, "again")).op, OpKind::kAdd);  // it has one now
    const NodeId two = b.Add(x, r, "two");
    const NodeId s2 = b.AddInto(x, two, "sum2");
    EXPECT_NE(s2, two);
    EXPECT_EQ(b.node(two).inputs.size(), 2u);
  }
  {
    GraphBuilder b;  // y already read by another node
    const NodeId x = b.Input(DType::kF32, Shape(64, 3), "x");
    const NodeId y = b.MatMul(x, &w, "y");
    b.Scale(y, 2.0f, "reader");
    const NodeId s = b.AddInto(x, y, "sum");
    EXPECT_EQ(b.node(s).op, OpKind::kAdd);
    EXPECT_EQ(b.node(y).inputs.size(), 1u);
  }
  {
    GraphBuilder b;  // not a matmul; a shape that differs; r after y
    const NodeId x = b.Input(DType::kF32, Shape(64, 3), "x");
    const NodeId y = b.Scale(x, 2.0f, "scaled");
    EXPECT_EQ(b.node(b.AddInto(x, y, "a")).op, OpKind::kAdd);
    const NodeId x1 = b.Input(DType::kF32, Shape(64, 1), "x1");
    const NodeId r96 = b.Input(DType::kF32, Shape(96, 3), "r96");
    const NodeId y96 = b.MatMul(x1, &wide, "y96");
    EXPECT_EQ(b.node(b.AddInto(r96, y96, "b")).op, OpKind::kAdd);  // [96,3] + [96,1]
    EXPECT_EQ(b.node(y96).inputs.size(), 1u);
    const NodeId y2 = b.MatMul(x, &w, "y2");
    const NodeId late = b.Input(DType::kF32, Shape(64, 3), "late");
    EXPECT_EQ(b.node(b.AddInto(late, y2, "c")).op, OpKind::kAdd);
    EXPECT_EQ(b.node(y2).inputs.size(), 1u);
    EXPECT_TRUE(b.ok());
  }
}

TEST(GraphBuilderTest, TopKMaskInput) {
  static_assert(TopKMaskWords(151936) == 4748 && TopKMaskWords(33) == 2);
  static_assert(TopKBaseMode(TopKModeValue(2, 5)) == 2 && TopKMaskSlot(TopKModeValue(2, 5)) == 5);
  static_assert(TopKModeValue(1) == 1 && TopKMaskSlot(1) == -1);  // unmasked: the old values
  GraphBuilder b;
  const NodeId logits = b.Input(DType::kF32, Shape(100, 3), "logits");
  const NodeId mode = b.Input(DType::kI32, Shape(3), "mode");
  const NodeId mask = b.Input(DType::kI32, Shape(4, 3), "mask");
  const NodeId top = b.TopK(logits, mode, 8, 90, "top", mask);
  const NodeId plain = b.TopK(logits, mode, 8, 90, "plain");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b.node(top).inputs, (std::vector<NodeId>{logits, mode, mask}));
  EXPECT_EQ(b.node(plain).inputs, (std::vector<NodeId>{logits, mode}));
  const NodeId short_mask = b.Input(DType::kI32, Shape(3, 3), "short_mask");
  b.TopK(logits, mode, 8, 90, "bad", short_mask);
  EXPECT_FALSE(b.ok());
  auto g = b.Finish(GraphIO{}, 0);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("TopK bad"), std::string::npos) << g.status();
  EXPECT_NE(g.status().message().find("mask [4, 3]"), std::string::npos) << g.status();
}

}  // namespace
}  // namespace minfer::graph
