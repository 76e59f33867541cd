#include "engine/gguf/gguf.h"

#include <cstring>
#include <fstream>
#include <limits>

#include "absl/strings/str_cat.h"
#include "engine/gguf/writer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace minfer::gguf {
namespace {

using ::testing::HasSubstr;

absl::StatusOr<std::unique_ptr<GgufFile>> ParseBytes(const std::string& bytes) {
  return GgufFile::Parse(MappedFile::FromBytes(bytes, "test.gguf"));
}

// Builds raw GGUF bytes field by field, for malformed-input tests.
class Bytes {
 public:
  Bytes& U32(uint32_t v) { return Raw(&v, 4); }
  Bytes& U64(uint64_t v) { return Raw(&v, 8); }
  Bytes& Str(const std::string& s) {
    U64(s.size());
    s_ += s;
    return *this;
  }
  Bytes& Raw(const void* p, size_t n) {
    s_.append(static_cast<const char*>(p), n);
    return *this;
  }
  Bytes& Header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
    return U32(kMagic).U32(version).U64(n_tensors).U64(n_kv);
  }
  Bytes& PadTo(size_t align) {
    while (s_.size() % align) s_.push_back('\0');
    return *this;
  }
  Bytes& Zeros(size_t n) {
    s_.append(n, '\0');
    return *this;
  }
  const std::string& str() const { return s_; }

 private:
  std::string s_;
};

// A writer exercising every value type, nested arrays and several tensor types.
GgufWriter RichWriter(uint32_t alignment = kDefaultAlignment) {
  GgufWriter w;
  w.set_alignment(alignment);
  w.SetString("general.architecture", "qwen2");
  w.Set("t.u8", Value::U8(250));
  w.Set("t.i8", Value::I8(-7));
  w.Set("t.u16", Value::U16(65000));
  w.Set("t.i16", Value::I16(-32000));
  w.Set("t.u32", Value::U32(4000000000u));
  w.Set("t.i32", Value::I32(-2000000000));
  w.Set("t.f32", Value::F32(1.5e-6f));
  w.Set("t.bool", Value::Bool(true));
  w.Set("t.u64", Value::U64(std::numeric_limits<uint64_t>::max()));
  w.Set("t.i64", Value::I64(std::numeric_limits<int64_t>::min()));
  w.Set("t.f64", Value::F64(-3.25e300));
  w.Set("t.str", Value::String("héllo\nwörld"));
  w.Set("t.empty_str", Value::String(""));
  w.Set("t.strs", Value::StringArray({"a", "", "Ġthe", "<|im_start|>"}));
  w.Set("t.i32s", Value::I32Array({1, -2, 3}));
  w.Set("t.f32s", Value::F32Array({0.5f, -0.25f}));
  auto inner1 = Array::Of(ValueType::kUint16, {Value::U16(1), Value::U16(2)});
  auto inner2 = Array::Of(ValueType::kUint16, {});
  auto nested = Array::Of(ValueType::kArray, {Value::MakeArray(*inner1), Value::MakeArray(*inner2)});
  w.Set("t.nested", Value::MakeArray(*nested));
  auto bools = Array::Of(ValueType::kBool, {Value::Bool(true), Value::Bool(false)});
  w.Set("t.bools", Value::MakeArray(*bools));

  auto bytes_of = [](size_t n, int seed) {
    std::string s(n, '\0');
    for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 131 + seed * 7) & 0xff);
    return s;
  };
  EXPECT_TRUE(w.AddTensorBytes("w.f32", {8, 3}, GgmlType::kF32, bytes_of(8 * 3 * 4, 1)).ok());
  EXPECT_TRUE(w.AddTensorBytes("w.q4_0", {64, 2}, GgmlType::kQ4_0, bytes_of(2 * 2 * 18, 2)).ok());
  EXPECT_TRUE(w.AddTensorBytes("w.q6_k", {256, 1, 1, 2}, GgmlType::kQ6_K, bytes_of(2 * 210, 3)).ok());
  EXPECT_TRUE(w.AddTensorBytes("w.f16", {5}, GgmlType::kF16, bytes_of(10, 4)).ok());
  return w;
}

TEST(GgufTest, RoundTripsEveryValueTypeAndTensor) {
  for (uint32_t alignment : {32u, 64u, 1u}) {
    GgufWriter w = RichWriter(alignment);
    auto bytes = w.WriteString();
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    EXPECT_EQ(bytes->size(), w.FileSize());
    auto f = ParseBytes(*bytes);
    ASSERT_TRUE(f.ok()) << f.status();
    const GgufFile& g = **f;
    EXPECT_EQ(g.version(), 3u);
    EXPECT_EQ(g.alignment(), alignment);
    EXPECT_EQ(g.data_offset() % alignment, 0u);

    // Every key written is read back with the same type and value, in order.
    GgufWriter ref = RichWriter(alignment);
    size_t i = alignment != kDefaultAlignment ? 1 : 0;  // general.alignment first
    ASSERT_EQ(g.metadata().size(), 19u + i);
    EXPECT_EQ(*g.GetString("general.architecture"), "qwen2");
    EXPECT_EQ(*g.GetUint("t.u8"), 250u);
    EXPECT_EQ(*g.GetInt("t.i8"), -7);
    EXPECT_EQ(*g.GetUint("t.u16"), 65000u);
    EXPECT_EQ(*g.GetInt("t.i16"), -32000);
    EXPECT_EQ(*g.GetUint("t.u32"), 4000000000u);
    EXPECT_EQ(*g.GetInt("t.i32"), -2000000000);
    EXPECT_FLOAT_EQ(static_cast<float>(*g.GetFloat("t.f32")), 1.5e-6f);
    EXPECT_TRUE(*g.GetBool("t.bool"));
    EXPECT_EQ(*g.GetUint("t.u64"), std::numeric_limits<uint64_t>::max());
    EXPECT_EQ(*g.GetInt("t.i64"), std::numeric_limits<int64_t>::min());
    EXPECT_EQ(*g.GetFloat("t.f64"), -3.25e300);
    EXPECT_EQ(*g.GetString("t.str"), "héllo\nwörld");
    EXPECT_EQ(*g.GetString("t.empty_str"), "");
    EXPECT_EQ(*g.GetStringArray("t.strs"),
              (std::vector<std::string>{"a", "", "Ġthe", "<|im_start|>"}));
    EXPECT_EQ(*g.GetIntArray("t.i32s"), (std::vector<int64_t>{1, -2, 3}));
    EXPECT_EQ(*g.GetFloatArray("t.f32s"), (std::vector<double>{0.5, -0.25}));
    const Value* nested = g.Find("t.nested");
    ASSERT_NE(nested, nullptr);
    ASSERT_EQ(nested->as_array().size(), 2u);
    EXPECT_EQ(nested->as_array().at(0).as_array().at(1).as_uint(), 2u);
    EXPECT_EQ(nested->as_array().at(1).as_array().size(), 0u);
    EXPECT_EQ(nested->as_array().at(1).as_array().elem_type(), ValueType::kUint16);
    EXPECT_EQ(g.Find("t.bools")->as_array().at(1).as_bool(), false);

    // Value equality over the whole metadata, through a second parse of a
    // re-serialization (writer(reader(file)) == file).
    GgufWriter again;
    again.set_alignment(alignment);
    for (const auto& [k, v] : g.metadata()) again.Set(k, v);
    for (const TensorInfo& t : g.tensors()) {
      ASSERT_TRUE(again
                      .AddTensorBytes(t.name, t.dims, t.type,
                                      std::string(reinterpret_cast<const char*>(t.data), t.nbytes))
                      .ok());
    }
    auto bytes2 = again.WriteString();
    ASSERT_TRUE(bytes2.ok());
    EXPECT_EQ(*bytes2, *bytes) << "re-serialization differs";

    ASSERT_EQ(g.tensors().size(), 4u);
    const TensorInfo* q6 = g.FindTensor("w.q6_k");
    ASSERT_NE(q6, nullptr);
    EXPECT_EQ(q6->type, GgmlType::kQ6_K);
    EXPECT_EQ(q6->dims, (std::vector<int64_t>{256, 1, 1, 2}));
    EXPECT_EQ(q6->n_elements, 512);
    EXPECT_EQ(q6->nbytes, 420u);
    EXPECT_EQ(q6->rows(), 2);
    EXPECT_EQ((q6->data - g.mapping().data()) % alignment, 0);
    for (size_t b = 0; b < q6->nbytes; ++b) {
      ASSERT_EQ(q6->data[b], static_cast<uint8_t>((b * 131 + 3 * 7) & 0xff)) << "byte " << b;
    }
    EXPECT_EQ(g.FindTensor("w.f16")->nbytes, 10u);
    EXPECT_EQ(g.FindTensor("missing"), nullptr);
  }
}

TEST(GgufTest, ReadsVersion2) {
  GgufWriter w = RichWriter();
  w.set_version(2);
  auto f = ParseBytes(*w.WriteString());
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ((*f)->version(), 2u);
  EXPECT_EQ((*f)->tensors().size(), 4u);
}

TEST(GgufTest, WritesAndMapsFiles) {
  GgufWriter w = RichWriter();
  ThreadPool pool(2);
  std::string path = absl::StrCat(testing::TempDir(), "/rich.gguf");
  ASSERT_TRUE(w.WriteFile(path, &pool).ok());
  auto f = GgufFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ((*f)->file_size(), w.FileSize());
  EXPECT_EQ((*f)->path(), path);
  auto missing = GgufFile::Open(path + ".nope");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
}

TEST(GgufTest, ParallelFillersCoverEveryRowOnce) {
  GgufWriter w;
  const int64_t rows = 3000, cols = 4096;  // 48 MB of f32: several chunks
  std::vector<std::atomic<int>> seen(rows);
  ASSERT_TRUE(w.AddTensor("big", {cols, rows}, GgmlType::kF32,
                          [&](int64_t b, int64_t e, uint8_t* dst) {
                            for (int64_t r = b; r < e; ++r) {
                              seen[r].fetch_add(1);
                              float v = static_cast<float>(r);
                              for (int64_t c = 0; c < cols; ++c) {
                                std::memcpy(dst + ((r - b) * cols + c) * 4, &v, 4);
                              }
                            }
                            return absl::OkStatus();
                          })
                  .ok());
  ThreadPool pool(3);
  auto bytes = w.WriteString(&pool);
  ASSERT_TRUE(bytes.ok());
  for (int64_t r = 0; r < rows; ++r) ASSERT_EQ(seen[r].load(), 1);
  auto f = ParseBytes(*bytes);
  ASSERT_TRUE(f.ok());
  const TensorInfo* t = (*f)->FindTensor("big");
  for (int64_t r : {0L, 1L, 1234L, rows - 1}) {
    float v;
    std::memcpy(&v, t->data + (r * cols + 17) * 4, 4);
    EXPECT_EQ(v, static_cast<float>(r));
  }
}

TEST(GgufTest, FillerErrorsNameTheTensor) {
  GgufWriter w;
  ASSERT_TRUE(w.AddTensor("bad", {32}, GgmlType::kF32, [](int64_t, int64_t, uint8_t*) {
                 return absl::InternalError("boom");
               }).ok());
  auto s = w.WriteString();
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("'bad'"));
  std::string path = absl::StrCat(testing::TempDir(), "/bad.gguf");
  EXPECT_FALSE(w.WriteFile(path).ok());
  EXPECT_FALSE(std::ifstream(path).good()) << "failed write must not leave a file";
  EXPECT_FALSE(std::ifstream(path + ".partial").good());
}

TEST(GgufTest, WriterRejectsBadTensors) {
  GgufWriter w;
  auto noop = [](int64_t, int64_t, uint8_t*) { return absl::OkStatus(); };
  EXPECT_TRUE(w.AddTensor("a", {32}, GgmlType::kQ8_0, noop).ok());
  EXPECT_EQ(w.AddTensor("a", {32}, GgmlType::kQ8_0, noop).code(), absl::StatusCode::kAlreadyExists);
  EXPECT_FALSE(w.AddTensor("b", {33}, GgmlType::kQ8_0, noop).ok());
  EXPECT_FALSE(w.AddTensor("c", {}, GgmlType::kF32, noop).ok());
  EXPECT_FALSE(w.AddTensor("d", {1, 1, 1, 1, 1}, GgmlType::kF32, noop).ok());
  EXPECT_FALSE(w.AddTensor("e", {0}, GgmlType::kF32, noop).ok());
  EXPECT_FALSE(w.AddTensorBytes("f", {32}, GgmlType::kF32, "short").ok());
}

TEST(GgufTest, TypedAccessorErrorsNameTheKey) {
  GgufWriter w;
  w.Set("neg", Value::I32(-1));
  w.Set("s", Value::String("x"));
  w.Set("big", Value::U64(std::numeric_limits<uint64_t>::max()));
  auto f = ParseBytes(*w.WriteString());
  ASSERT_TRUE(f.ok());
  const GgufFile& g = **f;
  EXPECT_EQ(g.GetString("nope").status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(g.GetString("nope").status().message()), HasSubstr("'nope'"));
  EXPECT_EQ(g.GetInt("s").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(g.GetInt("s").status().message()), HasSubstr("'s'"));
  EXPECT_EQ(g.GetUint("neg").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(*g.GetInt("neg"), -1);
  EXPECT_FALSE(g.GetInt("big").ok());
  EXPECT_FALSE(g.GetStringArray("s").ok());
  EXPECT_FALSE(g.GetFloat("s").ok());
  EXPECT_FALSE(g.GetBool("s").ok());
}

// --- malformed input ---------------------------------------------------------

void ExpectInvalid(const std::string& bytes, const std::string& needle) {
  auto f = ParseBytes(bytes);
  ASSERT_FALSE(f.ok()) << "parsed but should fail with: " << needle;
  EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(f.status().message()), HasSubstr(needle));
  EXPECT_THAT(std::string(f.status().message()), HasSubstr("test.gguf"));
}

TEST(GgufMalformedTest, EveryTruncationIsAnError) {
  GgufWriter w = RichWriter();
  std::string full = *w.WriteString();
  ASSERT_TRUE(ParseBytes(full).ok());
  for (size_t n = 0; n < full.size(); ++n) {
    auto f = ParseBytes(full.substr(0, n));
    ASSERT_FALSE(f.ok()) << "prefix of " << n << " bytes parsed";
    EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument);
  }
  ExpectInvalid(full.substr(0, 20), "truncated at byte 16");
}

TEST(GgufMalformedTest, BadMagicAndVersions) {
  ExpectInvalid(Bytes().U32(0x46554746).U32(3).U64(0).U64(0).str(), "bad magic");
  ExpectInvalid("", "truncated");
  ExpectInvalid(Bytes().Header(0, 0, 1).str(), "version 1 is not supported");
  ExpectInvalid(Bytes().Header(0, 0, 4).str(), "unsupported GGUF version 4");
  ExpectInvalid(Bytes().Header(0, 0, 0x03000000).str(), "big-endian");
  ASSERT_TRUE(ParseBytes(Bytes().Header(0, 0).str()).ok());
}

TEST(GgufMalformedTest, AbsurdCounts) {
  ExpectInvalid(Bytes().Header(1ull << 60, 0).str(), "tensor count 1152921504606846976");
  ExpectInvalid(Bytes().Header(0, 1ull << 60).str(), "metadata key count");
  ExpectInvalid(Bytes().Header(0, 1).Str("k").U32(9).U32(0).U64(1ull << 60).str(),
                "array length 1152921504606846976");
  ExpectInvalid(Bytes().Header(0, 1).Str("k").U32(9).U32(8).U64(1ull << 40).str(),
                "array length");
  ExpectInvalid(Bytes().Header(0, 1).Str("k").U32(8).U64(1ull << 62).str(),
                "string length 4611686018427387904 of value of key 'k'");
  ExpectInvalid(Bytes().Header(0, 1).U64(100).Raw("kk", 2).Zeros(20).str(),
                "string length 100 of key #0 at byte 24 runs past the end");
}

TEST(GgufMalformedTest, BadValueTypesAndNesting) {
  ExpectInvalid(Bytes().Header(0, 1).Str("k").U32(13).U32(0).str(), "unknown value type 13");
  ExpectInvalid(Bytes().Header(0, 1).Str("k").U32(9).U32(77).U64(0).str(),
                "unknown value type 77");
  Bytes deep;
  deep.Header(0, 1).Str("deep").U32(9);
  for (int i = 0; i < 20; ++i) deep.U32(9).U64(1);  // an array holding an array ...
  ExpectInvalid(deep.str(), "nested deeper");
  ExpectInvalid(Bytes().Header(0, 2).Str("k").U32(4).U32(1).Str("k").U32(4).U32(2).str(),
                "duplicate metadata key 'k'");
  ExpectInvalid(Bytes().Header(0, 1).Str("general.alignment").U32(4).U32(48).str(),
                "not a power of two");
  ExpectInvalid(Bytes().Header(0, 1).Str("general.alignment").U32(5).U32(32).str(),
                "general.alignment must be u32");
}

// One valid tensor info: name, dims, type, offset.
Bytes& TensorInfoBytes(Bytes& b, const std::string& name, std::vector<uint64_t> dims,
                       uint32_t type, uint64_t offset) {
  b.Str(name).U32(static_cast<uint32_t>(dims.size()));
  for (uint64_t d : dims) b.U64(d);
  return b.U32(type).U64(offset);
}

TEST(GgufMalformedTest, TensorTableErrors) {
  {
    Bytes b;
    b.Header(1, 0);
    TensorInfoBytes(b, "t", {32}, 0, 0).PadTo(32).Zeros(128);
    ASSERT_TRUE(ParseBytes(b.str()).ok());
  }
  {
    Bytes b;
    b.Header(1, 0);
    TensorInfoBytes(b, "t", {64}, 0, 0).PadTo(32).Zeros(128);  // needs 256 bytes
    ExpectInvalid(b.str(), "tensor 't' data [0, +256) lies outside the data section");
  }
  {
    Bytes b;
    b.Header(1, 0);
    TensorInfoBytes(b, "t", {8}, 0, 16).PadTo(32).Zeros(128);
    ExpectInvalid(b.str(), "offset 16 is not aligned to 32");
  }
  {
    Bytes b;
    b.Header(1, 0);
    TensorInfoBytes(b, "t", {1ull << 40, 1ull << 40}, 0, 0).PadTo(32);
    ExpectInvalid(b.str(), "element count overflows");
  }
  {
    Bytes b;
    b.Header(1, 0);
    TensorInfoBytes(b, "t", {1ull << 63}, 0, 0).PadTo(32);
    ExpectInvalid(b.str(), "negative or too large");
  }
  {
    Bytes b;
    b.Header(1, 0);
    TensorInfoBytes(b, "t", {(1ull << 62) + 32}, 0, 0).PadTo(32);  // *4 bytes overflows
    ExpectInvalid(b.str(), "byte size overflows");
  }
  {
    Bytes b;
    b.Header(2, 0);
    TensorInfoBytes(b, "t", {8}, 0, 0);
    TensorInfoBytes(b, "t", {8}, 0, 32).PadTo(32).Zeros(64);
    ExpectInvalid(b.str(), "duplicate tensor name 't'");
  }
  {
    Bytes b;
    b.Header(1, 0);
    TensorInfoBytes(b, "t", {32}, 4, 0).PadTo(32).Zeros(64);
    ExpectInvalid(b.str(), "tensor 't' has unknown ggml type 4");
  }
  {
    Bytes b;
    b.Header(1, 0);
    TensorInfoBytes(b, "t", {32}, 1000, 0).PadTo(32).Zeros(64);
    ExpectInvalid(b.str(), "unknown ggml type 1000");
  }
  {
    Bytes b;
    b.Header(1, 0);
    TensorInfoBytes(b, "t", {33}, 2, 0).PadTo(32).Zeros(64);
    ExpectInvalid(b.str(), "row length 33 is not a multiple of the q4_0 block size 32");
  }
  {
    Bytes b;
    b.Header(1, 0);
    TensorInfoBytes(b, "t", {1, 1, 1, 1, 1}, 0, 0).PadTo(32).Zeros(64);
    ExpectInvalid(b.str(), "has 5 dimensions");
  }
  {
    Bytes b;
    b.Header(1, 0);
    TensorInfoBytes(b, "t", {8}, 0, 0);  // data section missing entirely
    ExpectInvalid(b.str(), "truncated: the tensor data section would start at byte 64");
  }
}

}  // namespace
}  // namespace minfer::gguf
