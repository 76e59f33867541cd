#include "engine/runtime/kv_events.h"

#include <openssl/sha.h>

namespace minfer::runtime {

namespace {

// CBOR head: major type in the top 3 bits, the argument in the shortest
// form (canonical CBOR, RFC 8949 section 4.2.1).
void Head(std::string* out, uint8_t major, uint64_t n) {
  const uint8_t m = static_cast<uint8_t>(major << 5);
  auto be = [out](uint64_t v, int bytes) {
    for (int i = bytes - 1; i >= 0; --i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  };
  if (n < 24) {
    out->push_back(static_cast<char>(m | n));
  } else if (n <= 0xff) {
    out->push_back(static_cast<char>(m | 24));
    be(n, 1);
  } else if (n <= 0xffff) {
    out->push_back(static_cast<char>(m | 25));
    be(n, 2);
  } else if (n <= 0xffffffffull) {
    out->push_back(static_cast<char>(m | 26));
    be(n, 4);
  } else {
    out->push_back(static_cast<char>(m | 27));
    be(n, 8);
  }
}

BlockDigest Sha256(const std::string& bytes) {
  BlockDigest d;
  SHA256(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(), d.data());
  return d;
}

}  // namespace

std::string KvBlockHashInput(const BlockDigest& parent, absl::Span<const int32_t> tokens,
                             const std::optional<std::string>& ns) {
  std::string out;
  out.reserve(48 + tokens.size() * 5);
  Head(&out, 4, 3);  // the tuple (parent, tokens, extra keys)
  Head(&out, 2, parent.size());
  out.append(reinterpret_cast<const char*>(parent.data()), parent.size());
  Head(&out, 4, tokens.size());
  // Token ids are never negative (the tokenizer's ids).
  for (int32_t t : tokens) Head(&out, 0, static_cast<uint32_t>(t));
  if (ns.has_value()) {
    Head(&out, 4, 1);
    Head(&out, 3, ns->size());
    out.append(*ns);
  } else {
    out.push_back(static_cast<char>(0xf6));  // null
  }
  return out;
}

KvBlockHasher::KvBlockHasher(absl::string_view seed) : seed_(seed) {
  std::string cbor;
  Head(&cbor, 3, seed_.size());  // the seed as a text string
  cbor.append(seed_);
  none_hash_ = Sha256(cbor);
}

BlockDigest KvBlockHasher::Hash(const BlockDigest* parent, absl::Span<const int32_t> tokens,
                                absl::string_view ns) const {
  std::optional<std::string> extra;
  if (parent == nullptr && !ns.empty()) extra = std::string(ns);
  return Sha256(KvBlockHashInput(parent != nullptr ? *parent : none_hash_, tokens, extra));
}

uint64_t KvBlockHasher::External(const BlockDigest& digest) {
  uint64_t v = 0;
  for (size_t i = digest.size() - 8; i < digest.size(); ++i) v = (v << 8) | digest[i];
  return v;
}

}  // namespace minfer::runtime
