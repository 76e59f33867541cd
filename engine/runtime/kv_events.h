// KV-cache events: what a prefix cache tells a KV-aware router.
//
// Routers that place requests by prefix-cache locality (llm-d's KV-cache
// manager, NVIDIA Dynamo's router) keep an index of which model server holds
// which blocks, fed by the servers' events in vLLM's format: BlockStored
// when full blocks enter a server's prefix cache, BlockRemoved when they
// leave, AllBlocksCleared when it is reset. The router then hashes an
// incoming prompt's blocks itself and looks them up, so the block hashes
// must be what an independent implementation computes from the tokens.
//
// The hash scheme is vLLM's "sha256_cbor" (--prefix-caching-hash-algo
// sha256_cbor; vLLM's plain "sha256" hashes a Python pickle, which nothing
// outside Python reproduces, so the CBOR variant is the one an independent
// indexer can agree with):
//   digest(block) = SHA-256(CBOR_canonical([parent, tokens, extra]))
// where parent is the previous block's 32-byte digest (the first block's is
// NONE_HASH = SHA-256(CBOR_canonical(seed)), seed "vllm-none-hash" by
// default, vLLM's fixed default for cryptographic hashes), tokens the
// block's token ids (an array of unsigned integers) and extra null, or for a
// first block in a cache namespace (a tenant, a request's cache_salt) the
// one-element array [namespace] — vLLM's cache_salt extra key. On the wire a
// hash is the digest's last 8 bytes as a big-endian unsigned 64-bit integer
// (vLLM's integer block hashes). The engine's own prefix-cache keys are
// separate (kv_pool.h): these digests are computed only when events are on.
#ifndef MINFER_ENGINE_RUNTIME_KV_EVENTS_H_
#define MINFER_ENGINE_RUNTIME_KV_EVENTS_H_

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace minfer::runtime {

inline constexpr absl::string_view kDefaultKvHashSeed = "vllm-none-hash";

using BlockDigest = std::array<uint8_t, 32>;

struct KvEvent {
  enum class Type { kBlockStored, kBlockRemoved, kAllBlocksCleared };
  Type type = Type::kBlockStored;
  // kBlockStored: the stored chain's blocks, in order; kBlockRemoved: the
  // removed blocks.
  std::vector<uint64_t> block_hashes;
  // kBlockStored: the block before the first one (none for a prompt's first
  // block), and every stored block's tokens, concatenated.
  std::optional<uint64_t> parent_block_hash;
  std::vector<int32_t> token_ids;
};

class KvBlockHasher {
 public:
  explicit KvBlockHasher(absl::string_view seed = kDefaultKvHashSeed);

  // The digest of a block holding `tokens` after the block whose digest is
  // `parent` (null: a first block, in namespace `ns`; ns is ignored for
  // later blocks, which inherit it through their parent).
  BlockDigest Hash(const BlockDigest* parent, absl::Span<const int32_t> tokens,
                   absl::string_view ns) const;
  // The hash a block is published under: the digest's last 8 bytes,
  // big-endian.
  static uint64_t External(const BlockDigest& digest);
  const BlockDigest& none_hash() const { return none_hash_; }
  const std::string& seed() const { return seed_; }

 private:
  std::string seed_;
  BlockDigest none_hash_;
};

// Canonical CBOR of the hashed tuple (exposed for tests).
std::string KvBlockHashInput(const BlockDigest& parent, absl::Span<const int32_t> tokens,
                             const std::optional<std::string>& ns);

}  // namespace minfer::runtime

#endif  // MINFER_ENGINE_RUNTIME_KV_EVENTS_H_
