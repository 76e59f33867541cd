#include "engine/gguf/gguf.h"

#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "engine/base/status.h"

namespace minfer::gguf {

const char* ValueTypeName(ValueType t) {
  switch (t) {
    case ValueType::kUint8: return "u8";
    case ValueType::kInt8: return "i8";
    case ValueType::kUint16: return "u16";
    case ValueType::kInt16: return "i16";
    case ValueType::kUint32: return "u32";
    case ValueType::kInt32: return "i32";
    case ValueType::kFloat32: return "f32";
    case ValueType::kBool: return "bool";
    case ValueType::kString: return "str";
    case ValueType::kArray: return "arr";
    case ValueType::kUint64: return "u64";
    case ValueType::kInt64: return "i64";
    case ValueType::kFloat64: return "f64";
  }
  return "?";
}

size_t Value::ScalarSize(ValueType t) {
  switch (t) {
    case ValueType::kUint8:
    case ValueType::kInt8:
    case ValueType::kBool: return 1;
    case ValueType::kUint16:
    case ValueType::kInt16: return 2;
    case ValueType::kUint32:
    case ValueType::kInt32:
    case ValueType::kFloat32: return 4;
    case ValueType::kUint64:
    case ValueType::kInt64:
    case ValueType::kFloat64: return 8;
    case ValueType::kString:
    case ValueType::kArray: return 0;
  }
  return 0;
}

bool Value::is_integer() const {
  switch (type_) {
    case ValueType::kUint8:
    case ValueType::kInt8:
    case ValueType::kUint16:
    case ValueType::kInt16:
    case ValueType::kUint32:
    case ValueType::kInt32:
    case ValueType::kUint64:
    case ValueType::kInt64: return true;
    default: return false;
  }
}

namespace {

// Decodes one little-endian scalar of type `t` at `p`.
Value DecodeScalar(ValueType t, const uint8_t* p) {
  auto load = [p](auto zero) {
    decltype(zero) v;
    std::memcpy(&v, p, sizeof(v));
    return v;
  };
  switch (t) {
    case ValueType::kUint8: return Value::U8(load(uint8_t{}));
    case ValueType::kInt8: return Value::I8(load(int8_t{}));
    case ValueType::kUint16: return Value::U16(load(uint16_t{}));
    case ValueType::kInt16: return Value::I16(load(int16_t{}));
    case ValueType::kUint32: return Value::U32(load(uint32_t{}));
    case ValueType::kInt32: return Value::I32(load(int32_t{}));
    case ValueType::kFloat32: return Value::F32(load(float{}));
    case ValueType::kBool: return Value::Bool(load(uint8_t{}) != 0);
    case ValueType::kUint64: return Value::U64(load(uint64_t{}));
    case ValueType::kInt64: return Value::I64(load(int64_t{}));
    case ValueType::kFloat64: return Value::F64(load(double{}));
    default: return Value();
  }
}

// Appends the little-endian encoding of scalar `v` to `out`.
void EncodeScalar(const Value& v, std::vector<uint8_t>* out) {
  uint8_t buf[8];
  size_t n = Value::ScalarSize(v.type());
  switch (v.type()) {
    case ValueType::kUint8:
    case ValueType::kUint16:
    case ValueType::kUint32:
    case ValueType::kUint64: {
      uint64_t x = v.as_uint();
      std::memcpy(buf, &x, n);  // little-endian host: low bytes first
      break;
    }
    case ValueType::kInt8:
    case ValueType::kInt16:
    case ValueType::kInt32:
    case ValueType::kInt64: {
      int64_t x = v.as_int();
      std::memcpy(buf, &x, n);
      break;
    }
    case ValueType::kFloat32: {
      float f = static_cast<float>(v.as_double());
      std::memcpy(buf, &f, 4);
      break;
    }
    case ValueType::kFloat64: {
      double d = v.as_double();
      std::memcpy(buf, &d, 8);
      break;
    }
    case ValueType::kBool:
      buf[0] = v.as_bool() ? 1 : 0;
      break;
    default:
      return;
  }
  out->insert(out->end(), buf, buf + n);
}

}  // namespace

absl::StatusOr<Array> Array::Of(ValueType elem_type, std::vector<Value> items) {
  Array a;
  a.elem_type_ = elem_type;
  a.size_ = items.size();
  for (size_t i = 0; i < items.size(); ++i) {
    if (items[i].type() != elem_type) {
      return absl::InvalidArgumentError(absl::StrCat("array element ", i, " has type ",
                                                     ValueTypeName(items[i].type()), ", expected ",
                                                     ValueTypeName(elem_type)));
    }
  }
  if (Value::ScalarSize(elem_type) > 0) {
    a.packed_.reserve(items.size() * Value::ScalarSize(elem_type));
    for (const Value& v : items) EncodeScalar(v, &a.packed_);
  } else {
    a.items_ = std::move(items);
  }
  return a;
}

Value Array::at(size_t i) const {
  size_t es = Value::ScalarSize(elem_type_);
  if (es > 0) return DecodeScalar(elem_type_, packed_.data() + i * es);
  return items_[i];
}

bool operator==(const Array& a, const Array& b) {
  return a.elem_type_ == b.elem_type_ && a.size_ == b.size_ && a.packed_ == b.packed_ &&
         a.items_ == b.items_;
}

bool operator==(const Value& a, const Value& b) {
  if (a.type_ != b.type_) return false;
  if (a.type_ == ValueType::kArray) return a.as_array() == b.as_array();
  if (a.type_ == ValueType::kFloat32 || a.type_ == ValueType::kFloat64) {
    // Bitwise, so NaN payloads round-trip and compare equal.
    double x = a.as_double(), y = b.as_double();
    return std::memcmp(&x, &y, sizeof(double)) == 0;
  }
  return a.v_ == b.v_;
}

Value Value::MakeArray(Array a) {
  return Value(ValueType::kArray, std::make_shared<const Array>(std::move(a)));
}

Value Value::StringArray(const std::vector<std::string>& v) {
  Array a;
  a.elem_type_ = ValueType::kString;
  a.size_ = v.size();
  a.items_.reserve(v.size());
  for (const auto& s : v) a.items_.push_back(Value::String(s));
  return MakeArray(std::move(a));
}

Value Value::I32Array(const std::vector<int32_t>& v) {
  Array a;
  a.elem_type_ = ValueType::kInt32;
  a.size_ = v.size();
  a.packed_.resize(v.size() * 4);
  if (!v.empty()) std::memcpy(a.packed_.data(), v.data(), v.size() * 4);
  return MakeArray(std::move(a));
}

Value Value::F32Array(const std::vector<float>& v) {
  Array a;
  a.elem_type_ = ValueType::kFloat32;
  a.size_ = v.size();
  a.packed_.resize(v.size() * 4);
  if (!v.empty()) std::memcpy(a.packed_.data(), v.data(), v.size() * 4);
  return MakeArray(std::move(a));
}

std::string Value::ToString(size_t max_items) const {
  switch (type_) {
    case ValueType::kUint8:
    case ValueType::kUint16:
    case ValueType::kUint32:
    case ValueType::kUint64: return absl::StrCat(as_uint());
    case ValueType::kInt8:
    case ValueType::kInt16:
    case ValueType::kInt32:
    case ValueType::kInt64: return absl::StrCat(as_int());
    case ValueType::kFloat32:
    case ValueType::kFloat64: return absl::StrFormat("%g", as_double());
    case ValueType::kBool: return as_bool() ? "true" : "false";
    case ValueType::kString: {
      const std::string& s = as_string();
      std::string shown = s.size() > 200 ? s.substr(0, 200) + "..." : s;
      std::string escaped;
      for (char c : shown) {
        if (c == '\n') {
          escaped += "\\n";
        } else if (c == '"') {
          escaped += "\\\"";
        } else {
          escaped += c;
        }
      }
      return absl::StrCat("\"", escaped, "\"");
    }
    case ValueType::kArray: {
      const Array& a = as_array();
      std::vector<std::string> parts;
      for (size_t i = 0; i < a.size() && i < max_items; ++i) parts.push_back(a.at(i).ToString(max_items));
      std::string more = a.size() > max_items ? absl::StrCat(", ... (", a.size(), " items)") : "";
      return absl::StrCat("[", absl::StrJoin(parts, ", "), more, "]");
    }
  }
  return "?";
}

// ---------------------------------------------------------------------------
// Parsing

namespace {
constexpr int kMaxArrayDepth = 8;
}  // namespace

class Parser {
 public:
  Parser(const uint8_t* data, size_t size, std::string path)
      : data_(data), size_(size), path_(std::move(path)) {}

  absl::Status Run(GgufFile* out);

 private:
  absl::Status Error(absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat("GGUF file '", path_, "': ", what));
  }
  size_t remaining() const { return size_ - pos_; }

  absl::Status Need(uint64_t n, absl::string_view what) const {
    if (n > remaining()) {
      return Error(absl::StrCat("truncated at byte ", pos_, " reading ", what, ": needs ", n,
                                " bytes, ", remaining(), " left"));
    }
    return absl::OkStatus();
  }

  template <typename T>
  absl::StatusOr<T> Read(absl::string_view what) {
    RETURN_IF_ERROR(Need(sizeof(T), what));
    T v;
    std::memcpy(&v, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  absl::StatusOr<std::string> ReadString(absl::string_view what) {
    size_t at = pos_;
    ASSIGN_OR_RETURN(uint64_t len, Read<uint64_t>(what));
    if (len > remaining()) {
      return Error(absl::StrCat("string length ", len, " of ", what, " at byte ", at,
                                " runs past the end of the file (", remaining(), " bytes left)"));
    }
    std::string s(reinterpret_cast<const char*>(data_ + pos_), len);
    pos_ += len;
    return s;
  }

  absl::StatusOr<ValueType> ReadType(absl::string_view what) {
    size_t at = pos_;
    ASSIGN_OR_RETURN(uint32_t raw, Read<uint32_t>(what));
    if (raw > static_cast<uint32_t>(ValueType::kFloat64)) {
      return Error(absl::StrCat("unknown value type ", raw, " for ", what, " at byte ", at));
    }
    return static_cast<ValueType>(raw);
  }

  absl::StatusOr<Value> ReadValue(ValueType type, const std::string& key, int depth);

  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
  std::string path_;
};

absl::StatusOr<Value> Parser::ReadValue(ValueType type, const std::string& key, int depth) {
  if (type == ValueType::kString) {
    ASSIGN_OR_RETURN(std::string s, ReadString(absl::StrCat("value of key '", key, "'")));
    return Value::String(std::move(s));
  }
  if (type != ValueType::kArray) {
    size_t n = Value::ScalarSize(type);
    RETURN_IF_ERROR(Need(n, absl::StrCat("value of key '", key, "'")));
    Value v = DecodeScalar(type, data_ + pos_);
    pos_ += n;
    return v;
  }
  if (depth >= kMaxArrayDepth) {
    return Error(absl::StrCat("key '", key, "': arrays nested deeper than ", kMaxArrayDepth));
  }
  ASSIGN_OR_RETURN(ValueType elem, ReadType(absl::StrCat("array type of key '", key, "'")));
  size_t count_at = pos_;
  ASSIGN_OR_RETURN(uint64_t count, Read<uint64_t>(absl::StrCat("array length of key '", key, "'")));
  // Every element occupies at least this many bytes in the file, so a count
  // the remaining bytes cannot hold is rejected before anything is reserved.
  uint64_t min_elem = Value::ScalarSize(elem);
  if (elem == ValueType::kString) min_elem = 8;
  if (elem == ValueType::kArray) min_elem = 12;
  if (count > remaining() / min_elem) {
    return Error(absl::StrCat("key '", key, "': array length ", count, " at byte ", count_at,
                              " runs past the end of the file (", remaining(), " bytes left)"));
  }
  Array a;
  a.elem_type_ = elem;
  a.size_ = count;
  if (Value::ScalarSize(elem) > 0) {
    size_t bytes = count * min_elem;
    a.packed_.assign(data_ + pos_, data_ + pos_ + bytes);
    pos_ += bytes;
    if (elem == ValueType::kBool) {
      for (auto& b : a.packed_) b = b != 0;  // normalize like scalar bools
    }
  } else {
    a.items_.reserve(count);
    for (uint64_t i = 0; i < count; ++i) {
      ASSIGN_OR_RETURN(Value v, ReadValue(elem, key, depth + 1));
      a.items_.push_back(std::move(v));
    }
  }
  return Value::MakeArray(std::move(a));
}

absl::Status Parser::Run(GgufFile* out) {
  ASSIGN_OR_RETURN(uint32_t magic, Read<uint32_t>("magic"));
  if (magic != kMagic) {
    char m[4];
    std::memcpy(m, &magic, 4);
    std::string shown;
    for (char c : m) shown += (c >= 32 && c < 127) ? c : '?';
    return Error(absl::StrCat("bad magic '", shown, "' (expected 'GGUF'): not a GGUF file"));
  }
  ASSIGN_OR_RETURN(uint32_t version, Read<uint32_t>("version"));
  if (version == 0x02000000u || version == 0x03000000u) {
    return Error("big-endian GGUF files are not supported (version field is byte-swapped)");
  }
  if (version == 1) {
    return Error("GGUF version 1 is not supported (obsolete since 2023); re-convert the model");
  }
  if (version != 2 && version != 3) {
    return Error(absl::StrCat("unsupported GGUF version ", version, " (supported: 2, 3)"));
  }
  out->version_ = version;

  ASSIGN_OR_RETURN(uint64_t n_tensors, Read<uint64_t>("tensor count"));
  ASSIGN_OR_RETURN(uint64_t n_kv, Read<uint64_t>("metadata key count"));
  // Minimum encoded sizes: a key/value pair is >= 8 (key length) + 4 (type)
  // + 1 (smallest value); a tensor info is >= 8 + 4 + 4 + 8 bytes.
  if (n_kv > remaining() / 13) {
    return Error(absl::StrCat("metadata key count ", n_kv, " cannot fit in the file (",
                              size_, " bytes)"));
  }
  if (n_tensors > remaining() / 24) {
    return Error(absl::StrCat("tensor count ", n_tensors, " cannot fit in the file (", size_,
                              " bytes)"));
  }

  out->kv_.reserve(n_kv);
  for (uint64_t i = 0; i < n_kv; ++i) {
    size_t at = pos_;
    ASSIGN_OR_RETURN(std::string key, ReadString(absl::StrCat("key #", i)));
    if (out->kv_index_.count(key)) {
      return Error(absl::StrCat("duplicate metadata key '", key, "' at byte ", at));
    }
    ASSIGN_OR_RETURN(ValueType type, ReadType(absl::StrCat("type of key '", key, "'")));
    ASSIGN_OR_RETURN(Value v, ReadValue(type, key, 0));
    out->kv_index_.emplace(key, out->kv_.size());
    out->kv_.emplace_back(std::move(key), std::move(v));
  }

  if (const Value* a = out->Find("general.alignment")) {
    if (a->type() != ValueType::kUint32) {
      return Error(absl::StrCat("general.alignment must be u32, got ", ValueTypeName(a->type())));
    }
    uint64_t al = a->as_uint();
    if (al == 0 || (al & (al - 1)) != 0) {
      return Error(absl::StrCat("general.alignment ", al, " is not a power of two"));
    }
    out->alignment_ = static_cast<uint32_t>(al);
  }

  out->tensors_.reserve(n_tensors);
  for (uint64_t i = 0; i < n_tensors; ++i) {
    size_t at = pos_;
    TensorInfo t;
    ASSIGN_OR_RETURN(t.name, ReadString(absl::StrCat("name of tensor #", i)));
    const std::string& name = t.name;
    if (out->tensor_index_.count(name)) {
      return Error(absl::StrCat("duplicate tensor name '", name, "' (tensor #", i, " at byte ", at,
                                ")"));
    }
    ASSIGN_OR_RETURN(uint32_t n_dims, Read<uint32_t>(absl::StrCat("dims of tensor '", name, "'")));
    if (n_dims > static_cast<uint32_t>(kMaxDims)) {
      return Error(absl::StrCat("tensor '", name, "' has ", n_dims, " dimensions (at most ",
                                kMaxDims, ")"));
    }
    t.n_elements = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      ASSIGN_OR_RETURN(uint64_t ne, Read<uint64_t>(absl::StrCat("shape of tensor '", name, "'")));
      if (ne > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return Error(absl::StrCat("tensor '", name, "' dimension ", d, " is negative or too large (",
                                  ne, ")"));
      }
      int64_t ne_s = static_cast<int64_t>(ne);
      if (ne_s != 0 && t.n_elements > std::numeric_limits<int64_t>::max() / ne_s) {
        return Error(absl::StrCat("tensor '", name, "': element count overflows (dimension ", d,
                                  " = ", ne, ")"));
      }
      t.n_elements *= ne_s;
      t.dims.push_back(ne_s);
    }
    size_t type_at = pos_;
    ASSIGN_OR_RETURN(uint32_t raw_type, Read<uint32_t>(absl::StrCat("type of tensor '", name, "'")));
    auto traits = LookupGgmlType(raw_type);
    if (!traits) {
      return Error(absl::StrCat("tensor '", name, "' has unknown ggml type ", raw_type,
                                " at byte ", type_at));
    }
    t.type = traits->type;
    int64_t ne0 = t.dims.empty() ? 1 : t.dims[0];
    if (ne0 % traits->block_size != 0) {
      return Error(absl::StrCat("tensor '", name, "' row length ", ne0,
                                " is not a multiple of the ", traits->name, " block size ",
                                traits->block_size));
    }
    // n_elements / block_size * type_size, overflow-checked.
    uint64_t blocks = static_cast<uint64_t>(t.n_elements / traits->block_size);
    if (blocks > std::numeric_limits<uint64_t>::max() / traits->type_size) {
      return Error(absl::StrCat("tensor '", name, "': byte size overflows"));
    }
    t.nbytes = blocks * traits->type_size;
    ASSIGN_OR_RETURN(t.offset, Read<uint64_t>(absl::StrCat("offset of tensor '", name, "'")));
    if (t.offset % out->alignment_ != 0) {
      return Error(absl::StrCat("tensor '", name, "' data offset ", t.offset,
                                " is not aligned to ", out->alignment_, " bytes"));
    }
    out->tensor_index_.emplace(t.name, out->tensors_.size());
    out->tensors_.push_back(std::move(t));
  }

  uint64_t al = out->alignment_;
  uint64_t data_offset = (pos_ + al - 1) / al * al;
  if (out->tensors_.empty()) {
    out->data_offset_ = data_offset > size_ ? size_ : data_offset;
    return absl::OkStatus();
  }
  if (data_offset > size_) {
    return Error(absl::StrCat("truncated: the tensor data section would start at byte ",
                              data_offset, " but the file has ", size_, " bytes"));
  }
  out->data_offset_ = data_offset;
  uint64_t data_size = size_ - data_offset;
  for (TensorInfo& t : out->tensors_) {
    if (t.offset > data_size || t.nbytes > data_size - t.offset) {
      return Error(absl::StrCat("tensor '", t.name, "' data [", t.offset, ", +", t.nbytes,
                                ") lies outside the data section (", data_size,
                                " bytes): file truncated or corrupt"));
    }
    t.data = data_ + data_offset + t.offset;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::Open(const std::string& path) {
  ASSIGN_OR_RETURN(auto mapping, MappedFile::Open(path));
  return Parse(std::move(mapping));
}

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::Parse(std::unique_ptr<MappedFile> file) {
  std::unique_ptr<GgufFile> g(new GgufFile);
  Parser parser(file->data(), file->size(), file->path());
  g->file_ = std::move(file);
  RETURN_IF_ERROR(parser.Run(g.get()));
  return g;
}

const Value* GgufFile::Find(absl::string_view key) const {
  auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kv_[it->second].second;
}

const TensorInfo* GgufFile::FindTensor(absl::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

namespace {

absl::Status Missing(const GgufFile& f, absl::string_view key) {
  return absl::NotFoundError(absl::StrCat("GGUF file '", f.path(), "': missing key '", key, "'"));
}

absl::Status WrongType(const GgufFile& f, absl::string_view key, const Value& v,
                       absl::string_view wanted) {
  std::string got = ValueTypeName(v.type());
  if (v.type() == ValueType::kArray) got = absl::StrCat("arr[", ValueTypeName(v.as_array().elem_type()), "]");
  return absl::InvalidArgumentError(absl::StrCat("GGUF file '", f.path(), "': key '", key,
                                                 "' has type ", got, ", expected ", wanted));
}

bool IsSigned(ValueType t) {
  return t == ValueType::kInt8 || t == ValueType::kInt16 || t == ValueType::kInt32 ||
         t == ValueType::kInt64;
}

}  // namespace

absl::StatusOr<std::string> GgufFile::GetString(absl::string_view key) const {
  const Value* v = Find(key);
  if (!v) return Missing(*this, key);
  if (v->type() != ValueType::kString) return WrongType(*this, key, *v, "str");
  return v->as_string();
}

absl::StatusOr<int64_t> GgufFile::GetInt(absl::string_view key) const {
  const Value* v = Find(key);
  if (!v) return Missing(*this, key);
  if (!v->is_integer()) return WrongType(*this, key, *v, "an integer");
  if (IsSigned(v->type())) return v->as_int();
  if (v->as_uint() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return absl::InvalidArgumentError(absl::StrCat("GGUF file '", path(), "': key '", key,
                                                   "' value ", v->as_uint(), " is out of range"));
  }
  return static_cast<int64_t>(v->as_uint());
}

absl::StatusOr<uint64_t> GgufFile::GetUint(absl::string_view key) const {
  const Value* v = Find(key);
  if (!v) return Missing(*this, key);
  if (!v->is_integer()) return WrongType(*this, key, *v, "an integer");
  if (IsSigned(v->type())) {
    if (v->as_int() < 0) {
      return absl::InvalidArgumentError(absl::StrCat("GGUF file '", path(), "': key '", key,
                                                     "' is negative (", v->as_int(), ")"));
    }
    return static_cast<uint64_t>(v->as_int());
  }
  return v->as_uint();
}

absl::StatusOr<double> GgufFile::GetFloat(absl::string_view key) const {
  const Value* v = Find(key);
  if (!v) return Missing(*this, key);
  if (!v->is_float()) return WrongType(*this, key, *v, "f32 or f64");
  return v->as_double();
}

absl::StatusOr<bool> GgufFile::GetBool(absl::string_view key) const {
  const Value* v = Find(key);
  if (!v) return Missing(*this, key);
  if (v->type() != ValueType::kBool) return WrongType(*this, key, *v, "bool");
  return v->as_bool();
}

absl::StatusOr<std::vector<std::string>> GgufFile::GetStringArray(absl::string_view key) const {
  const Value* v = Find(key);
  if (!v) return Missing(*this, key);
  if (v->type() != ValueType::kArray || v->as_array().elem_type() != ValueType::kString) {
    return WrongType(*this, key, *v, "arr[str]");
  }
  const Array& a = v->as_array();
  std::vector<std::string> out;
  out.reserve(a.size());
  for (size_t i = 0; i < a.size(); ++i) out.push_back(a.at(i).as_string());
  return out;
}

absl::StatusOr<std::vector<int64_t>> GgufFile::GetIntArray(absl::string_view key) const {
  const Value* v = Find(key);
  if (!v) return Missing(*this, key);
  if (v->type() != ValueType::kArray) return WrongType(*this, key, *v, "an integer array");
  const Array& a = v->as_array();
  bool int_elems = Value::ScalarSize(a.elem_type()) > 0 && a.elem_type() != ValueType::kBool &&
                   a.elem_type() != ValueType::kFloat32 && a.elem_type() != ValueType::kFloat64;
  if (!int_elems) return WrongType(*this, key, *v, "an integer array");
  std::vector<int64_t> out;
  out.reserve(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    Value e = a.at(i);
    if (IsSigned(e.type())) {
      out.push_back(e.as_int());
    } else if (e.as_uint() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return absl::InvalidArgumentError(absl::StrCat("GGUF file '", path(), "': key '", key,
                                                     "' element ", i, " is out of range"));
    } else {
      out.push_back(static_cast<int64_t>(e.as_uint()));
    }
  }
  return out;
}

absl::StatusOr<std::vector<double>> GgufFile::GetFloatArray(absl::string_view key) const {
  const Value* v = Find(key);
  if (!v) return Missing(*this, key);
  if (v->type() != ValueType::kArray || (v->as_array().elem_type() != ValueType::kFloat32 &&
                                         v->as_array().elem_type() != ValueType::kFloat64)) {
    return WrongType(*this, key, *v, "arr[f32]");
  }
  const Array& a = v->as_array();
  std::vector<double> out;
  out.reserve(a.size());
  for (size_t i = 0; i < a.size(); ++i) out.push_back(a.at(i).as_double());
  return out;
}

}  // namespace minfer::gguf
