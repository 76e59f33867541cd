// GGUF reader: parses GGUF v2/v3 files (metadata + tensor table) over a
// memory mapping; tensor data is zero-copy (pointers into the mapping).
//
// Every malformed input yields an absl::Status naming the offending key,
// tensor or byte offset — never a crash, a hang or an allocation larger than
// the file justifies. Spec: https://github.com/ggml-org/ggml/blob/master/docs/gguf.md
//
// A GgufFile is immutable after Open/Parse and safe to share between threads.
#ifndef MINFER_ENGINE_GGUF_GGUF_H_
#define MINFER_ENGINE_GGUF_GGUF_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/base/mapped_file.h"
#include "engine/quant/ggml_types.h"

namespace minfer::gguf {

inline constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read little-endian
inline constexpr uint32_t kDefaultAlignment = 32;
inline constexpr int kMaxDims = 4;

enum class ValueType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};

const char* ValueTypeName(ValueType t);

class Array;

class Value {
 public:
  Value() : type_(ValueType::kUint8), v_(uint64_t{0}) {}

  static Value U8(uint8_t v) { return Value(ValueType::kUint8, uint64_t{v}); }
  static Value I8(int8_t v) { return Value(ValueType::kInt8, int64_t{v}); }
  static Value U16(uint16_t v) { return Value(ValueType::kUint16, uint64_t{v}); }
  static Value I16(int16_t v) { return Value(ValueType::kInt16, int64_t{v}); }
  static Value U32(uint32_t v) { return Value(ValueType::kUint32, uint64_t{v}); }
  static Value I32(int32_t v) { return Value(ValueType::kInt32, int64_t{v}); }
  static Value U64(uint64_t v) { return Value(ValueType::kUint64, v); }
  static Value I64(int64_t v) { return Value(ValueType::kInt64, v); }
  static Value F32(float v) { return Value(ValueType::kFloat32, double{v}); }
  static Value F64(double v) { return Value(ValueType::kFloat64, v); }
  static Value Bool(bool v) { return Value(ValueType::kBool, v); }
  static Value String(std::string v) { return Value(ValueType::kString, std::move(v)); }
  static Value MakeArray(Array a);
  // Arrays of one element type from plain vectors.
  static Value StringArray(const std::vector<std::string>& v);
  static Value I32Array(const std::vector<int32_t>& v);
  static Value F32Array(const std::vector<float>& v);

  ValueType type() const { return type_; }
  bool is_integer() const;
  bool is_float() const { return type_ == ValueType::kFloat32 || type_ == ValueType::kFloat64; }

  // Raw accessors; the caller checks type() first.
  uint64_t as_uint() const { return std::get<uint64_t>(v_); }
  int64_t as_int() const { return std::get<int64_t>(v_); }
  double as_double() const { return std::get<double>(v_); }
  bool as_bool() const { return std::get<bool>(v_); }
  const std::string& as_string() const { return std::get<std::string>(v_); }
  const Array& as_array() const { return *std::get<std::shared_ptr<const Array>>(v_); }

  // Bytes of one scalar of type `t` in a file (0 for strings and arrays).
  static size_t ScalarSize(ValueType t);

  // Human-readable rendering (arrays abbreviated after `max_items`).
  std::string ToString(size_t max_items = 8) const;

  friend bool operator==(const Value& a, const Value& b);

 private:
  using Storage =
      std::variant<uint64_t, int64_t, double, bool, std::string, std::shared_ptr<const Array>>;
  Value(ValueType t, Storage v) : type_(t), v_(std::move(v)) {}

  ValueType type_;
  Storage v_;
};

// An array value. Scalar elements are stored packed (so memory stays
// proportional to the file's bytes even for huge arrays); strings and nested
// arrays as Values.
class Array {
 public:
  Array() = default;
  // All items must have type `elem_type` (checked; returns an error).
  static absl::StatusOr<Array> Of(ValueType elem_type, std::vector<Value> items);

  ValueType elem_type() const { return elem_type_; }
  size_t size() const { return size_; }
  // The i-th element (i < size()).
  Value at(size_t i) const;

  friend bool operator==(const Array& a, const Array& b);

 private:
  friend class Parser;
  friend class Value;
  ValueType elem_type_ = ValueType::kUint8;
  size_t size_ = 0;
  std::vector<uint8_t> packed_;  // scalar elements, little-endian, elem size each
  std::vector<Value> items_;     // strings and nested arrays
};

struct TensorInfo {
  std::string name;
  std::vector<int64_t> dims;  // ne[0] (the contiguous row length) first
  GgmlType type = GgmlType::kF32;
  uint64_t offset = 0;  // relative to the start of the data section
  uint64_t nbytes = 0;
  int64_t n_elements = 0;
  const uint8_t* data = nullptr;  // points into the mapping (zero-copy)

  int64_t rows() const { return dims.empty() ? 1 : n_elements / dims[0]; }
};

class GgufFile {
 public:
  // Maps and parses `path`. NOT_FOUND for a missing file; INVALID_ARGUMENT
  // (message names the path and the problem) for a malformed one.
  static absl::StatusOr<std::unique_ptr<GgufFile>> Open(const std::string& path);
  // Parses an existing mapping (takes ownership).
  static absl::StatusOr<std::unique_ptr<GgufFile>> Parse(std::unique_ptr<MappedFile> file);

  uint32_t version() const { return version_; }
  uint32_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }
  const std::string& path() const { return file_->path(); }
  uint64_t file_size() const { return file_->size(); }
  const MappedFile& mapping() const { return *file_; }

  // Metadata in file order.
  const std::vector<std::pair<std::string, Value>>& metadata() const { return kv_; }
  const Value* Find(absl::string_view key) const;
  bool Has(absl::string_view key) const { return Find(key) != nullptr; }

  // Typed accessors. NOT_FOUND names a missing key; INVALID_ARGUMENT names
  // a key whose type does not fit (integers widen; a negative value does not
  // fit an unsigned read; f32/f64 both read as double).
  absl::StatusOr<std::string> GetString(absl::string_view key) const;
  absl::StatusOr<int64_t> GetInt(absl::string_view key) const;
  absl::StatusOr<uint64_t> GetUint(absl::string_view key) const;
  absl::StatusOr<double> GetFloat(absl::string_view key) const;
  absl::StatusOr<bool> GetBool(absl::string_view key) const;
  absl::StatusOr<std::vector<std::string>> GetStringArray(absl::string_view key) const;
  absl::StatusOr<std::vector<int64_t>> GetIntArray(absl::string_view key) const;
  absl::StatusOr<std::vector<double>> GetFloatArray(absl::string_view key) const;

  // Tensors in file order.
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* FindTensor(absl::string_view name) const;

 private:
  GgufFile() = default;
  friend class Parser;

  std::unique_ptr<MappedFile> file_;
  uint32_t version_ = 0;
  uint32_t alignment_ = kDefaultAlignment;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string, Value>> kv_;
  std::map<std::string, size_t, std::less<>> kv_index_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
};

}  // namespace minfer::gguf

#endif  // MINFER_ENGINE_GGUF_GGUF_H_
