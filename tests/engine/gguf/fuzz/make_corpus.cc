// Writes the seed corpus for the GGUF fuzzer: small valid files covering
// every value type, nested arrays, v2/v3, custom alignment and several
// tensor types. Usage: make_corpus OUT_DIR
#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "engine/gguf/writer.h"

using minfer::GgmlType;
using minfer::gguf::Array;
using minfer::gguf::GgufWriter;
using minfer::gguf::Value;
using minfer::gguf::ValueType;

namespace {

void Write(const std::string& dir, const std::string& name, const GgufWriter& w) {
  auto bytes = w.WriteString();
  if (!bytes.ok()) {
    std::fprintf(stderr, "%s: %s\n", name.c_str(), bytes.status().ToString().c_str());
    return;
  }
  std::string path = absl::StrCat(dir, "/", name);
  FILE* f = std::fopen(path.c_str(), "wb");
  std::fwrite(bytes->data(), 1, bytes->size(), f);
  std::fclose(f);
}

std::string Pattern(size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>(i * 37 + 11);
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  std::string dir = argv[1];
  {
    GgufWriter w;
    Write(dir, "empty_v3", w);
    w.set_version(2);
    Write(dir, "empty_v2", w);
  }
  {
    GgufWriter w;
    w.Set("u8", Value::U8(1));
    w.Set("i8", Value::I8(-1));
    w.Set("u16", Value::U16(2));
    w.Set("i16", Value::I16(-2));
    w.Set("u32", Value::U32(3));
    w.Set("i32", Value::I32(-3));
    w.Set("f32", Value::F32(0.5f));
    w.Set("bool", Value::Bool(true));
    w.Set("str", Value::String("qwen2"));
    w.Set("u64", Value::U64(4));
    w.Set("i64", Value::I64(-4));
    w.Set("f64", Value::F64(0.25));
    Write(dir, "scalars", w);
  }
  {
    GgufWriter w;
    w.Set("tokenizer.ggml.tokens", Value::StringArray({"a", "b", "ab", "<|im_end|>"}));
    w.Set("tokenizer.ggml.token_type", Value::I32Array({1, 1, 1, 3}));
    w.Set("tokenizer.ggml.merges", Value::StringArray({"a b"}));
    w.Set("scores", Value::F32Array({0.f, -1.f, -2.f, 0.f}));
    auto in = Array::Of(ValueType::kInt8, {Value::I8(1), Value::I8(2)});
    auto nested = Array::Of(ValueType::kArray, {Value::MakeArray(*in), Value::MakeArray(*in)});
    w.Set("nested", Value::MakeArray(*nested));
    Write(dir, "arrays", w);
  }
  const GgmlType types[] = {GgmlType::kF32, GgmlType::kF16, GgmlType::kBF16, GgmlType::kQ4_0,
                            GgmlType::kQ4_1, GgmlType::kQ5_0, GgmlType::kQ5_1, GgmlType::kQ8_0,
                            GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K};
  for (GgmlType t : types) {
    GgufWriter w;
    w.SetString("general.architecture", "qwen2");
    int64_t ne0 = minfer::TraitsOf(t).block_size == 256 ? 256 : 32;
    int64_t bytes = minfer::RowBytes(t, ne0) * 2;
    (void)w.AddTensorBytes("blk.0.attn_q.weight", {ne0, 2}, t, Pattern(bytes));
    (void)w.AddTensorBytes("output_norm.weight", {8}, GgmlType::kF32, Pattern(32));
    Write(dir, absl::StrCat("tensors_", minfer::GgmlTypeName(t)), w);
  }
  {
    GgufWriter w;
    w.set_alignment(64);
    (void)w.AddTensorBytes("a", {3}, GgmlType::kF32, Pattern(12));
    (void)w.AddTensorBytes("b", {1, 2, 3, 4}, GgmlType::kI8, Pattern(24));
    Write(dir, "align64", w);
    w.set_version(2);
    Write(dir, "align64_v2", w);
  }
  return 0;
}
