#include "engine/gguf/writer.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "engine/base/status.h"

namespace minfer::gguf {
namespace {

void PutU32(std::string* out, uint32_t v) { out->append(reinterpret_cast<const char*>(&v), 4); }
void PutU64(std::string* out, uint64_t v) { out->append(reinterpret_cast<const char*>(&v), 8); }
void PutString(std::string* out, const std::string& s) {
  PutU64(out, s.size());
  out->append(s);
}

void PutScalar(std::string* out, const Value& v) {
  switch (v.type()) {
    case ValueType::kUint8: out->push_back(static_cast<char>(v.as_uint())); break;
    case ValueType::kInt8: out->push_back(static_cast<char>(v.as_int())); break;
    case ValueType::kUint16: {
      uint16_t x = static_cast<uint16_t>(v.as_uint());
      out->append(reinterpret_cast<const char*>(&x), 2);
      break;
    }
    case ValueType::kInt16: {
      int16_t x = static_cast<int16_t>(v.as_int());
      out->append(reinterpret_cast<const char*>(&x), 2);
      break;
    }
    case ValueType::kUint32: PutU32(out, static_cast<uint32_t>(v.as_uint())); break;
    case ValueType::kInt32: {
      int32_t x = static_cast<int32_t>(v.as_int());
      out->append(reinterpret_cast<const char*>(&x), 4);
      break;
    }
    case ValueType::kFloat32: {
      float f = static_cast<float>(v.as_double());
      out->append(reinterpret_cast<const char*>(&f), 4);
      break;
    }
    case ValueType::kBool: out->push_back(v.as_bool() ? 1 : 0); break;
    case ValueType::kUint64: PutU64(out, v.as_uint()); break;
    case ValueType::kInt64: {
      int64_t x = v.as_int();
      out->append(reinterpret_cast<const char*>(&x), 8);
      break;
    }
    case ValueType::kFloat64: {
      double d = v.as_double();
      out->append(reinterpret_cast<const char*>(&d), 8);
      break;
    }
    default: break;
  }
}

void PutValue(std::string* out, const Value& v) {
  if (v.type() == ValueType::kString) {
    PutString(out, v.as_string());
  } else if (v.type() == ValueType::kArray) {
    const Array& a = v.as_array();
    PutU32(out, static_cast<uint32_t>(a.elem_type()));
    PutU64(out, a.size());
    for (size_t i = 0; i < a.size(); ++i) PutValue(out, a.at(i));
  } else {
    PutScalar(out, v);
  }
}

uint64_t AlignUp(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

// Target bytes per filler call: large enough to amortize dispatch, small
// enough that a big tensor spreads over every thread.
constexpr uint64_t kChunkBytes = 4 << 20;

}  // namespace

void GgufWriter::Set(const std::string& key, Value value) {
  for (auto& kv : kv_) {
    if (kv.first == key) {
      kv.second = std::move(value);
      return;
    }
  }
  kv_.emplace_back(key, std::move(value));
}

absl::Status GgufWriter::AddTensor(const std::string& name, std::vector<int64_t> dims,
                                   GgmlType type, RowFiller filler) {
  for (const auto& t : tensors_) {
    if (t.name == name) return absl::AlreadyExistsError(absl::StrCat("duplicate tensor '", name, "'"));
  }
  if (dims.empty() || dims.size() > static_cast<size_t>(kMaxDims)) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", name, "' must have 1..", kMaxDims, " dimensions"));
  }
  int64_t n = 1;
  for (int64_t d : dims) {
    if (d <= 0) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "' has a dimension ", d));
    }
    n *= d;
  }
  const GgmlTypeTraits& tr = TraitsOf(type);
  if (dims[0] % tr.block_size != 0) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "' row length ", dims[0],
                                                   " is not a multiple of the ", tr.name,
                                                   " block size ", tr.block_size));
  }
  PendingTensor t;
  t.name = name;
  t.dims = std::move(dims);
  t.type = type;
  t.filler = std::move(filler);
  t.nbytes = static_cast<uint64_t>(n / tr.block_size * tr.type_size);
  tensors_.push_back(std::move(t));
  return absl::OkStatus();
}

absl::Status GgufWriter::AddTensorBytes(const std::string& name, std::vector<int64_t> dims,
                                        GgmlType type, std::string bytes) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  const GgmlTypeTraits& tr = TraitsOf(type);
  if (!dims.empty() && dims[0] > 0 && dims[0] % tr.block_size == 0 &&
      static_cast<uint64_t>(n / tr.block_size * tr.type_size) != bytes.size()) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "': ", bytes.size(),
                                                   " bytes given, shape needs ",
                                                   n / tr.block_size * tr.type_size));
  }
  int64_t row_bytes = dims.empty() ? 0 : dims[0] / tr.block_size * tr.type_size;
  auto shared = std::make_shared<std::string>(std::move(bytes));
  return AddTensor(name, std::move(dims), type,
                   [shared, row_bytes](int64_t b, int64_t e, uint8_t* dst) {
                     std::memcpy(dst, shared->data() + b * row_bytes, (e - b) * row_bytes);
                     return absl::OkStatus();
                   });
}

std::string GgufWriter::EncodeHeader(std::vector<PendingTensor>* tensors,
                                     uint64_t* data_offset) const {
  std::vector<std::pair<std::string, Value>> kv = kv_;
  bool has_alignment = false;
  for (auto& p : kv) {
    if (p.first == "general.alignment") {
      p.second = Value::U32(alignment_);
      has_alignment = true;
    }
  }
  if (!has_alignment && alignment_ != kDefaultAlignment) {
    kv.emplace(kv.begin(), "general.alignment", Value::U32(alignment_));
  }
  std::string h;
  PutU32(&h, kMagic);
  PutU32(&h, version_);
  PutU64(&h, tensors->size());
  PutU64(&h, kv.size());
  for (const auto& [key, value] : kv) {
    PutString(&h, key);
    PutU32(&h, static_cast<uint32_t>(value.type()));
    PutValue(&h, value);
  }
  uint64_t offset = 0;
  for (PendingTensor& t : *tensors) {
    t.offset = offset;
    offset = AlignUp(offset + t.nbytes, alignment_);
    PutString(&h, t.name);
    PutU32(&h, static_cast<uint32_t>(t.dims.size()));
    for (int64_t d : t.dims) PutU64(&h, static_cast<uint64_t>(d));
    PutU32(&h, static_cast<uint32_t>(t.type));
    PutU64(&h, t.offset);
  }
  *data_offset = AlignUp(h.size(), alignment_);
  h.resize(*data_offset, '\0');
  return h;
}

uint64_t GgufWriter::FileSize() const {
  std::vector<PendingTensor> copy = tensors_;
  uint64_t data_offset = 0;
  EncodeHeader(&copy, &data_offset);
  uint64_t end = data_offset;
  if (!copy.empty()) end = data_offset + copy.back().offset + copy.back().nbytes;
  return end;
}

absl::Status GgufWriter::FillData(const std::vector<PendingTensor>& tensors, uint8_t* data,
                                  ThreadPool* pool) const {
  struct Chunk {
    const PendingTensor* t;
    int64_t row_begin, row_end;
    uint64_t row_bytes;
  };
  std::vector<Chunk> chunks;
  for (const PendingTensor& t : tensors) {
    int64_t rows = 1;
    for (size_t d = 1; d < t.dims.size(); ++d) rows *= t.dims[d];
    uint64_t row_bytes = rows ? t.nbytes / rows : 0;
    int64_t per = std::max<int64_t>(1, static_cast<int64_t>(kChunkBytes / std::max<uint64_t>(row_bytes, 1)));
    for (int64_t r = 0; r < rows; r += per) {
      chunks.push_back({&t, r, std::min(rows, r + per), row_bytes});
    }
  }
  // Padding between tensors must be zero (the mapping of a fresh file is).
  std::mutex mu;
  absl::Status first_error;
  std::atomic<bool> failed{false};
  auto run = [&](int64_t i, int) {
    if (failed.load(std::memory_order_relaxed)) return;
    const Chunk& c = chunks[i];
    uint8_t* dst = data + c.t->offset + c.row_begin * c.row_bytes;
    absl::Status s = c.t->filler(c.row_begin, c.row_end, dst);
    if (!s.ok()) {
      std::lock_guard<std::mutex> l(mu);
      if (first_error.ok()) first_error = Annotate(s, absl::StrCat("tensor '", c.t->name, "'"));
      failed = true;
    }
  };
  if (pool != nullptr) {
    pool->ParallelFor(static_cast<int64_t>(chunks.size()), run);
  } else {
    for (size_t i = 0; i < chunks.size(); ++i) run(static_cast<int64_t>(i), 0);
  }
  return first_error;
}

absl::StatusOr<std::string> GgufWriter::WriteString(ThreadPool* pool) const {
  std::vector<PendingTensor> tensors = tensors_;
  uint64_t data_offset = 0;
  std::string out = EncodeHeader(&tensors, &data_offset);
  uint64_t end = tensors.empty() ? data_offset : data_offset + tensors.back().offset + tensors.back().nbytes;
  out.resize(end, '\0');
  RETURN_IF_ERROR(FillData(tensors, reinterpret_cast<uint8_t*>(out.data()) + data_offset, pool));
  return out;
}

absl::Status GgufWriter::WriteFile(const std::string& path, ThreadPool* pool) const {
  std::vector<PendingTensor> tensors = tensors_;
  uint64_t data_offset = 0;
  std::string header = EncodeHeader(&tensors, &data_offset);
  uint64_t end = tensors.empty() ? data_offset : data_offset + tensors.back().offset + tensors.back().nbytes;

  std::string tmp = path + ".partial";
  int fd = ::open(tmp.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::UnavailableError(absl::StrCat("cannot create '", tmp, "': ", std::strerror(errno)));
  }
  auto fail = [&](absl::string_view what) {
    absl::Status s = absl::UnavailableError(absl::StrCat(what, " '", tmp, "': ", std::strerror(errno)));
    ::close(fd);
    ::unlink(tmp.c_str());
    return s;
  };
  if (::ftruncate(fd, static_cast<off_t>(end)) != 0) return fail("cannot size");
  void* map = nullptr;
  if (end > 0) {
    map = ::mmap(nullptr, end, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED) return fail("cannot mmap");
  }
  uint8_t* base = static_cast<uint8_t*>(map);
  std::memcpy(base, header.data(), header.size());
  absl::Status s = FillData(tensors, base + data_offset, pool);
  if (map != nullptr) ::munmap(map, end);
  if (!s.ok()) {
    ::close(fd);
    ::unlink(tmp.c_str());
    return s;
  }
  if (::close(fd) != 0) {
    ::unlink(tmp.c_str());
    return absl::UnavailableError(absl::StrCat("cannot write '", tmp, "': ", std::strerror(errno)));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    return absl::UnavailableError(
        absl::StrCat("cannot rename to '", path, "': ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace minfer::gguf
