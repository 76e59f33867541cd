#include "engine/tokenizer/tokenizer.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/base/logging.h"
#include "engine/base/status.h"
#include "engine/tokenizer/byte_level.h"
#include "engine/tokenizer/pretokenizer.h"
#include "engine/tokenizer/unicode.h"

namespace minfer::tokenizer {
namespace {

// Pieces up to this many bytes are merged with a rank array scanned for its
// minimum (fast for the short words that dominate text); longer ones with a
// heap over a linked list, so a 100 KB word costs O(n log n), not O(n^2).
constexpr size_t kSmallPiece = 64;

constexpr int32_t kNoRank = INT32_MAX;

// Shortens long vocabulary strings for error messages.
std::string Quote(absl::string_view s) {
  constexpr size_t kMax = 40;
  if (s.size() <= kMax) return absl::StrCat("'", s, "'");
  return absl::StrCat("'", ToValidUtf8(s.substr(0, kMax)), "...'");
}

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

// A kByte token's text, "<0xHH>".
bool ParseByteToken(absl::string_view text, uint8_t* byte) {
  if (text.size() != 6 || text.substr(0, 3) != "<0x" || text[5] != '>') return false;
  const int hi = HexDigit(text[3]);
  const int lo = HexDigit(text[4]);
  if (hi < 0 || lo < 0) return false;
  *byte = static_cast<uint8_t>(hi * 16 + lo);
  return true;
}

}  // namespace

struct Tokenizer::Scratch {
  std::string normalized;
  SplitScratch split;
  std::vector<PieceSpan> pieces;
  // Symbols of the piece being merged.
  std::vector<TokenId> ids;
  // MergeSmall: rank and result of each adjacent pair.
  std::vector<int32_t> ranks;
  std::vector<TokenId> results;
  // MergeLarge: a doubly linked list of symbols and a min-heap of candidate
  // merges ordered by (rank, position).
  struct Symbol {
    TokenId id;  // -1 once merged into its left neighbour
    int32_t prev;
    int32_t next;
  };
  struct Candidate {
    int32_t rank;
    int32_t pos;
    TokenId left;
    TokenId right;
    TokenId result;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::vector<Symbol> symbols;
  std::vector<Candidate> heap;
};

// ---------------------------------------------------------------------------
// SpecialMatcher

void Tokenizer::SpecialMatcher::Add(absl::string_view text, TokenId id, bool is_control) {
  int32_t node = 0;
  for (char c : text) {
    const uint64_t key = (static_cast<uint64_t>(node) << 8) | static_cast<uint8_t>(c);
    auto it = edges_.find(key);
    if (it == edges_.end()) {
      const int32_t child = static_cast<int32_t>(node_token_.size());
      node_token_.push_back(-1);
      node_control_.push_back(false);
      it = edges_.emplace(key, child).first;
    }
    node = it->second;
  }
  if (node_token_[node] >= 0) return;  // same text twice: the lower id wins
  node_token_[node] = id;
  node_control_[node] = is_control;
  const uint8_t first = static_cast<uint8_t>(text[0]);
  first_any_.set(first);
  if (!is_control) first_user_.set(first);
}

size_t Tokenizer::SpecialMatcher::Match(absl::string_view text, size_t pos, size_t limit,
                                        bool allow_control, TokenId* id) const {
  int32_t node = 0;
  size_t best = 0;
  for (size_t i = pos; i < limit; ++i) {
    auto it = edges_.find((static_cast<uint64_t>(node) << 8) | static_cast<uint8_t>(text[i]));
    if (it == edges_.end()) break;
    node = it->second;
    if (node_token_[node] >= 0 && (allow_control || !node_control_[node])) {
      best = i + 1 - pos;
      *id = node_token_[node];
    }
  }
  return best;
}

// ---------------------------------------------------------------------------
// Construction

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::Create(TokenizerData data) {
  std::unique_ptr<Tokenizer> t(new Tokenizer());
  RETURN_IF_ERROR(t->Build(std::move(data)));
  return t;
}

absl::Status Tokenizer::Build(TokenizerData data) {
  model_name_ = data.model_name.empty() ? "<unnamed>" : data.model_name;
  const std::string who = absl::StrCat("model '", model_name_, "'");
  if (data.model != "gpt2") {
    return absl::UnimplementedError(absl::StrCat(
        who, ": tokenizer model '", data.model,
        "' is not supported (minfer implements byte-level BPE, tokenizer.ggml.model = gpt2)"));
  }
  // llama.cpp's names for Llama 3's pre-tokenizer.
  const bool llama3 = data.pre == "llama-bpe" || data.pre == "llama3" || data.pre == "llama-v3";
  // o200k (gpt-4o, gpt-oss; llama.cpp's "gpt-4o").
  const bool o200k = data.pre == "gpt-4o";
  if (data.pre != "qwen2" && !llama3 && !o200k) {
    return absl::UnimplementedError(absl::StrCat(
        who, ": pre-tokenizer '", data.pre,
        "' is not supported (minfer implements tokenizer.ggml.pre = qwen2, llama-bpe, gpt-4o)"));
  }
  pre_ = data.pre;
  // Llama 3's and o200k's tokenizer.json have no normalizer and set
  // ignore_merges (a piece that is a vocabulary entry is that token,
  // whatever BPE would do); llama.cpp does both for these pre-tokenizers.
  split_ = o200k ? PreTokenizer::kO200k : llama3 ? PreTokenizer::kLlama3 : PreTokenizer::kQwen2;
  nfc_ = !llama3 && !o200k;
  ignore_merges_ = llama3 || o200k;
  const size_t n = data.tokens.size();
  if (n == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(who, ": the vocabulary (tokenizer.ggml.tokens) is empty"));
  }
  if (n >= static_cast<size_t>(INT32_MAX)) {
    return absl::InvalidArgumentError(absl::StrCat(who, ": ", n, " tokens is too many"));
  }
  if (!data.token_types.empty() && data.token_types.size() != n) {
    return absl::InvalidArgumentError(absl::StrCat(who, ": ", data.token_types.size(),
                                                   " token types for ", n, " tokens"));
  }
  RETURN_IF_ERROR(CheckNfcAvailable());

  // Vocabulary strings, in one arena.
  size_t total = 0;
  for (const std::string& s : data.tokens) total += s.size();
  if (total >= UINT32_MAX) {
    return absl::InvalidArgumentError(absl::StrCat(who, ": vocabulary strings too large"));
  }
  text_arena_.reserve(total);
  text_offsets_.reserve(n + 1);
  types_.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    text_offsets_.push_back(static_cast<uint32_t>(text_arena_.size()));
    text_arena_ += data.tokens[i];
    const int32_t type = data.token_types.empty() ? 1 : data.token_types[i];
    if (type < 0 || type > 6) {
      return absl::InvalidArgumentError(absl::StrCat(who, ": token ", i, " (",
                                                     Quote(data.tokens[i]), ") has token type ",
                                                     type, " (valid: 0..6)"));
    }
    const TokenType t = static_cast<TokenType>(type);
    // Harmony's framing (gpt-oss): the reply's channel headers must reach
    // the output parser (engine/chat/harmony.h) as text, so these control
    // tokens are rendered even when decoding skips control tokens
    // (DecodeOptions::keep_framing). They stay control tokens for encoding
    // (framing a user writes is text, as in OpenAI's tokenizer); the stops
    // (<|return|>, <|call|>) are still skipped.
    if (o200k && t == TokenType::kControl &&
        (data.tokens[i] == "<|channel|>" || data.tokens[i] == "<|message|>" ||
         data.tokens[i] == "<|start|>" || data.tokens[i] == "<|end|>" ||
         data.tokens[i] == "<|constrain|>")) {
      framing_.push_back(static_cast<TokenId>(i));
    }
    types_.push_back(t);
  }
  text_offsets_.push_back(static_cast<uint32_t>(text_arena_.size()));
  data.tokens = {};  // release early: the arena holds the strings now

  token_index_.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    token_index_.try_emplace(TokenText(static_cast<TokenId>(i)), static_cast<TokenId>(i));
  }
  whole_token_.reset(new std::atomic<uint8_t>[n]);
  for (size_t i = 0; i < n; ++i) whole_token_[i].store(0, std::memory_order_relaxed);

  // The 256 single-byte symbols every byte-level BPE vocabulary starts from.
  for (int b = 0; b < 256; ++b) {
    std::string symbol;
    AppendUtf8(ByteToUnicode(static_cast<uint8_t>(b)), &symbol);
    auto it = token_index_.find(symbol);
    if (it == token_index_.end()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: the vocabulary has no token for byte 0x%02X (byte-level symbol '%s')", who, b,
          symbol));
    }
    byte_token_[b] = it->second;
  }

  // Merges: "left right" in priority order.
  if (data.merges.size() >= static_cast<size_t>(INT32_MAX)) {
    return absl::InvalidArgumentError(absl::StrCat(who, ": too many merges"));
  }
  merges_.reserve(data.merges.size());
  std::string joined;
  for (size_t rank = 0; rank < data.merges.size(); ++rank) {
    const absl::string_view m = data.merges[rank];
    // Split at the first space after the first character (llama.cpp's rule).
    const size_t sp = m.size() > 1 ? m.find(' ', 1) : absl::string_view::npos;
    if (sp == absl::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat(
          who, ": merge #", rank, " (", Quote(m), ") is not of the form 'left right'"));
    }
    const absl::string_view left = m.substr(0, sp);
    const absl::string_view right = m.substr(sp + 1);
    auto l = token_index_.find(left);
    auto r = token_index_.find(right);
    if (l == token_index_.end() || r == token_index_.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          who, ": merge #", rank, " (", Quote(m), ") references ",
          Quote(l == token_index_.end() ? left : right), ", which is not in the vocabulary"));
    }
    joined.assign(left.data(), left.size());
    joined.append(right.data(), right.size());
    auto j = token_index_.find(joined);
    if (j == token_index_.end()) {
      return absl::InvalidArgumentError(absl::StrCat(who, ": merge #", rank, " (", Quote(m),
                                                     ") produces ", Quote(joined),
                                                     ", which is not in the vocabulary"));
    }
    const uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(l->second)) << 32) |
                         static_cast<uint32_t>(r->second);
    // A repeated pair keeps its last rank, as Hugging Face's loader does.
    merges_.insert_or_assign(key, (static_cast<uint64_t>(rank) << 32) |
                                      static_cast<uint32_t>(j->second));
  }
  data.merges = {};

  // Decoded bytes of every token.
  bytes_offsets_.reserve(n + 1);
  bytes_arena_.reserve(total);
  for (size_t i = 0; i < n; ++i) {
    bytes_offsets_.push_back(static_cast<uint32_t>(bytes_arena_.size()));
    const absl::string_view text = TokenText(static_cast<TokenId>(i));
    switch (types_[i]) {
      case TokenType::kUndefined:
      case TokenType::kNormal: {
        const size_t mark = bytes_arena_.size();
        if (!ByteLevelDecode(text, &bytes_arena_)) {
          // Not in the byte-level alphabet: emit the text itself, as Hugging
          // Face's ByteLevel decoder does.
          bytes_arena_.resize(mark);
          bytes_arena_.append(text.data(), text.size());
        }
        break;
      }
      case TokenType::kByte: {
        uint8_t b;
        if (ParseByteToken(text, &b)) {
          bytes_arena_.push_back(static_cast<char>(b));
        } else {
          bytes_arena_.append(text.data(), text.size());
        }
        break;
      }
      case TokenType::kUnused:
        break;
      case TokenType::kUnknown:
      case TokenType::kControl:
      case TokenType::kUserDefined:
        bytes_arena_.append(text.data(), text.size());
        break;
    }
    if (bytes_arena_.size() >= UINT32_MAX) {
      return absl::InvalidArgumentError(absl::StrCat(who, ": vocabulary too large"));
    }
  }
  bytes_offsets_.push_back(static_cast<uint32_t>(bytes_arena_.size()));
  bytes_index_.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    if (types_[i] == TokenType::kNormal || types_[i] == TokenType::kUndefined) {
      bytes_index_.try_emplace(absl::string_view(bytes_arena_).substr(
                                   bytes_offsets_[i], bytes_offsets_[i + 1] - bytes_offsets_[i]),
                               static_cast<TokenId>(i));
    }
  }

  size_t added = 0;
  for (size_t i = 0; i < n; ++i) {
    const TokenType type = types_[i];
    const absl::string_view text = TokenText(static_cast<TokenId>(i));
    if ((type == TokenType::kControl || type == TokenType::kUserDefined) && !text.empty()) {
      specials_.Add(text, static_cast<TokenId>(i), type == TokenType::kControl);
      ++added;
    }
  }

  auto check_id = [&](const std::optional<TokenId>& id, absl::string_view name) {
    if (id.has_value() && !IsValidId(*id)) {
      return absl::InvalidArgumentError(absl::StrCat(who, ": ", name, " ", *id,
                                                     " is out of range (vocabulary has ", n,
                                                     " tokens)"));
    }
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(check_id(data.bos_id, "bos_token_id"));
  RETURN_IF_ERROR(check_id(data.eos_id, "eos_token_id"));
  RETURN_IF_ERROR(check_id(data.pad_id, "padding_token_id"));
  RETURN_IF_ERROR(check_id(data.eot_id, "eot_token_id"));
  bos_id_ = data.bos_id;
  eos_id_ = data.eos_id;
  pad_id_ = data.pad_id;
  eot_id_ = data.eot_id;
  add_bos_ = data.add_bos;
  if (add_bos_ && !bos_id_.has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat(who, ": add_bos_token is set but there is no bos_token_id"));
  }

  if (eos_id_) stop_ids_.push_back(*eos_id_);
  if (eot_id_) stop_ids_.push_back(*eot_id_);
  // By text, as llama.cpp decides end of generation: ChatML's and Qwen's
  // ends, Llama 3's end of turn, end of text and end of message (a tool call
  // awaiting its result), and Harmony's (gpt-oss) end of the answer and of a
  // tool call. Harmony's <|end|> closes each message of a turn (analysis,
  // then final), so it is not an end of generation (llama.cpp drops it from
  // the set too).
  for (absl::string_view end_text :
       {kImEnd, absl::string_view("<|endoftext|>"), absl::string_view("<|eot_id|>"),
        absl::string_view("<|end_of_text|>"), absl::string_view("<|eom_id|>"),
        absl::string_view("<|return|>"), absl::string_view("<|call|>")}) {
    const std::optional<TokenId> id = FindToken(end_text);
    if (id && types_[*id] == TokenType::kControl) stop_ids_.push_back(*id);
  }
  std::sort(stop_ids_.begin(), stop_ids_.end());
  stop_ids_.erase(std::unique(stop_ids_.begin(), stop_ids_.end()), stop_ids_.end());

  // The template prints special tokens as their text (what llama.cpp and
  // transformers hand it); a model without BOS or EOS gets "".
  ChatSpecialTokens special;
  if (bos_id_) special.bos_token = std::string(*TokenBytes(*bos_id_));
  if (eos_id_) special.eos_token = std::string(*TokenBytes(*eos_id_));
  chat_template_ = ChatTemplate::Create(data.chat_template, pre_, model_name_, special);
  if (!data.chat_template.empty() && !chat_template_.ok()) return chat_template_.status();
  Logger("tokenizer")->debug(
      "model '{}': {} tokens, {} merges, {} added tokens; chat: {}", model_name_, n,
      merges_.size(), added,
      !chat_template_.ok() ? std::string(chat_template_.status().message())
      : chat_template_->from_model() ? std::string("the model's template")
                                     : std::string("built-in ChatML"));
  return absl::OkStatus();
}

std::optional<TokenId> Tokenizer::FindToken(absl::string_view text) const {
  auto it = token_index_.find(text);
  if (it == token_index_.end()) return std::nullopt;
  return it->second;
}

// ---------------------------------------------------------------------------
// Encoding

std::vector<TokenId> Tokenizer::Encode(absl::string_view text,
                                       const EncodeOptions& options) const {
  std::vector<TokenId> out;
  out.reserve(text.size() / 3 + 4);
  EncodeTo(text, options, &out);
  return out;
}

void Tokenizer::EncodeTo(absl::string_view text, const EncodeOptions& options,
                         std::vector<TokenId>* out) const {
  Scratch scratch;
  if (options.add_bos && add_bos_ && bos_id_) out->push_back(*bos_id_);
  if (IsValidUtf8(text)) {
    EncodeImpl(text, options.parse_special, {}, &scratch, out);
  } else {
    const std::string clean = ToValidUtf8(text);
    EncodeImpl(clean, options.parse_special, {}, &scratch, out);
  }
}

void Tokenizer::EncodeImpl(absl::string_view text, bool parse_special,
                           absl::Span<const ContentRange> protected_ranges, Scratch* scratch,
                           std::vector<TokenId>* out) const {
  const size_t n = text.size();
  size_t segment_begin = 0;
  if (!specials_.empty()) {
    size_t r = 0;  // first protected range that ends after pos
    for (size_t pos = 0; pos < n;) {
      while (r < protected_ranges.size() && protected_ranges[r].end <= pos) ++r;
      const bool in_protected = r < protected_ranges.size() && pos >= protected_ranges[r].begin;
      // A match may not cross into (or out of) protected content.
      const size_t limit = r < protected_ranges.size()
                               ? (in_protected ? protected_ranges[r].end : protected_ranges[r].begin)
                               : n;
      const bool allow_control = parse_special && !in_protected;
      if (!specials_.MayStartAt(static_cast<uint8_t>(text[pos]), allow_control)) {
        ++pos;
        continue;
      }
      TokenId id;
      const size_t len = specials_.Match(text, pos, limit, allow_control, &id);
      if (len == 0) {
        ++pos;
        continue;
      }
      EncodeSegment(text.substr(segment_begin, pos - segment_begin), scratch, out);
      out->push_back(id);
      pos += len;
      segment_begin = pos;
    }
  }
  EncodeSegment(text.substr(segment_begin), scratch, out);
}

void Tokenizer::EncodeSegment(absl::string_view segment, Scratch* scratch,
                              std::vector<TokenId>* out) const {
  if (segment.empty()) return;
  absl::string_view text = segment;
  if (nfc_) {
    scratch->normalized.clear();
    AppendNfc(segment, &scratch->normalized);
    text = scratch->normalized;
  }
  scratch->pieces.clear();
  SplitPieces(text, split_, &scratch->split, &scratch->pieces);
  for (const PieceSpan& p : scratch->pieces) {
    EncodePiece(text.substr(p.begin, p.end - p.begin), scratch, out);
  }
}

void Tokenizer::EncodePiece(absl::string_view piece, Scratch* scratch,
                            std::vector<TokenId>* out) const {
  if (piece.size() == 1) {
    out->push_back(byte_token_[static_cast<uint8_t>(piece[0])]);
    return;
  }
  // Most pieces of ordinary text ("Hello", " world") are vocabulary entries
  // whose BPE is the entry itself; the memo answers those with one lookup.
  TokenId whole = -1;
  uint8_t memo = 0;
  if (auto it = bytes_index_.find(piece); it != bytes_index_.end()) {
    whole = it->second;
    if (ignore_merges_) {
      out->push_back(whole);
      return;
    }
    memo = whole_token_[whole].load(std::memory_order_relaxed);
    if (memo == 1) {
      out->push_back(whole);
      return;
    }
  }
  auto& ids = scratch->ids;
  ids.clear();
  for (char c : piece) ids.push_back(byte_token_[static_cast<uint8_t>(c)]);
  if (ids.size() <= kSmallPiece) {
    MergeSmall(scratch);
  } else {
    MergeLarge(scratch);
  }
  if (whole >= 0 && memo == 0) {
    whole_token_[whole].store(ids.size() == 1 && ids[0] == whole ? 1 : 2,
                              std::memory_order_relaxed);
  }
  out->insert(out->end(), ids.begin(), ids.end());
}

// Repeatedly merges the adjacent pair of lowest rank (the leftmost among
// equals) until no pair merges: the order Hugging Face applies merges in.
void Tokenizer::MergeSmall(Scratch* scratch) const {
  auto& ids = scratch->ids;
  auto& ranks = scratch->ranks;
  auto& results = scratch->results;
  ranks.resize(ids.size() - 1);
  results.resize(ids.size() - 1);
  auto fill = [&](size_t k) {
    const MergeResult m = LookupMerge(ids[k], ids[k + 1]);
    ranks[k] = m.rank < 0 ? kNoRank : m.rank;
    results[k] = m.result;
  };
  for (size_t k = 0; k + 1 < ids.size(); ++k) fill(k);
  while (!ranks.empty()) {
    size_t best = 0;
    for (size_t k = 1; k < ranks.size(); ++k) {
      if (ranks[k] < ranks[best]) best = k;
    }
    if (ranks[best] == kNoRank) break;
    ids[best] = results[best];
    ids.erase(ids.begin() + best + 1);
    ranks.erase(ranks.begin() + best);
    results.erase(results.begin() + best);
    if (best > 0) fill(best - 1);
    if (best < ranks.size()) fill(best);
  }
}

// The same merge order with a heap of candidates over a linked list: each
// merge costs O(log n). Candidates are validated when popped (the pair at
// that position may have changed since it was pushed).
void Tokenizer::MergeLarge(Scratch* scratch) const {
  auto& ids = scratch->ids;
  auto& syms = scratch->symbols;
  auto& heap = scratch->heap;
  const int32_t m = static_cast<int32_t>(ids.size());
  syms.resize(m);
  for (int32_t i = 0; i < m; ++i) syms[i] = {ids[i], i - 1, i + 1 < m ? i + 1 : -1};
  heap.clear();
  const auto cmp = std::greater<Scratch::Candidate>();
  auto consider = [&](int32_t pos) {
    const int32_t next = syms[pos].next;
    if (next < 0) return;
    const MergeResult r = LookupMerge(syms[pos].id, syms[next].id);
    if (r.rank < 0) return;
    heap.push_back({r.rank, pos, syms[pos].id, syms[next].id, r.result});
    std::push_heap(heap.begin(), heap.end(), cmp);
  };
  for (int32_t i = 0; i + 1 < m; ++i) {
    const MergeResult r = LookupMerge(syms[i].id, syms[i + 1].id);
    if (r.rank >= 0) heap.push_back({r.rank, i, syms[i].id, syms[i + 1].id, r.result});
  }
  std::make_heap(heap.begin(), heap.end(), cmp);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), cmp);
    const Scratch::Candidate c = heap.back();
    heap.pop_back();
    Scratch::Symbol& s = syms[c.pos];
    // Stale when either symbol changed since the push (a rank names one
    // pair, so an unchanged pair is the same merge).
    if (s.id != c.left || s.next < 0 || syms[s.next].id != c.right) continue;
    const int32_t gone = s.next;
    s.id = c.result;
    s.next = syms[gone].next;
    if (s.next >= 0) syms[s.next].prev = c.pos;
    syms[gone].id = -1;
    if (s.prev >= 0) consider(s.prev);
    consider(c.pos);
  }
  ids.clear();
  for (int32_t i = 0; i >= 0; i = syms[i].next) ids.push_back(syms[i].id);
}

// ---------------------------------------------------------------------------
// Chat

absl::StatusOr<std::string> Tokenizer::RenderChat(absl::Span<const ChatMessage> messages,
                                                  bool add_generation_prompt,
                                                  const ChatTemplateOptions& options) const {
  if (!chat_template_.ok()) return chat_template_.status();
  std::vector<ChatMessage> clean(messages.begin(), messages.end());
  for (ChatMessage& m : clean) {
    if (!IsValidUtf8(m.content)) m.content = ToValidUtf8(m.content);
  }
  return chat_template_->Render(clean, add_generation_prompt, nullptr, options);
}

absl::StatusOr<std::vector<TokenId>> Tokenizer::EncodeChat(
    absl::Span<const ChatMessage> messages, bool add_generation_prompt,
    const ChatTemplateOptions& options) const {
  if (!chat_template_.ok()) return chat_template_.status();
  if (chat_template_->is_chatml()) {
    for (absl::string_view marker : {kImStart, kImEnd}) {
      const std::optional<TokenId> id = FindToken(marker);
      if (!id || types_[*id] != TokenType::kControl) {
        return absl::FailedPreconditionError(
            absl::StrCat("model '", model_name_, "': ChatML needs ", marker,
                         " as a control token, and the vocabulary has none"));
      }
    }
  }
  // Contents are made valid UTF-8 before rendering so that the content
  // ranges stay exact.
  std::vector<ChatMessage> clean(messages.begin(), messages.end());
  for (ChatMessage& m : clean) {
    if (!IsValidUtf8(m.content)) m.content = ToValidUtf8(m.content);
    if (!IsValidUtf8(m.role)) m.role = ToValidUtf8(m.role);
  }
  std::vector<ContentRange> ranges;
  ASSIGN_OR_RETURN(const std::string prompt,
                   chat_template_->Render(clean, add_generation_prompt, &ranges, options));
  // The template and the contents are valid UTF-8, and the interpreter cuts
  // strings at code points; only option strings can bring bad bytes, and
  // repairing them here would move the content ranges.
  if (!IsValidUtf8(prompt)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model '", model_name_, "': the chat template options are not valid UTF-8"));
  }
  Scratch scratch;
  std::vector<TokenId> out;
  out.reserve(prompt.size() / 3 + 8);
  // A model that wants BOS gets exactly one at the start, whether its
  // template writes bos_token (Llama 3's do) or not: llama.cpp's rule.
  if (add_bos_ && bos_id_) out.push_back(*bos_id_);
  EncodeImpl(prompt, /*parse_special=*/true, ranges, &scratch, &out);
  if (out.size() >= 2 && add_bos_ && bos_id_ && out[1] == *bos_id_) out.erase(out.begin());
  return out;
}

// ---------------------------------------------------------------------------
// Decoding

absl::StatusOr<absl::string_view> Tokenizer::TokenBytes(TokenId id,
                                                        const DecodeOptions& options) const {
  if (!IsValidId(id)) {
    return absl::InvalidArgumentError(absl::StrCat("token id ", id,
                                                   " is out of range (vocabulary of model '",
                                                   model_name_, "' has ", vocab_size(),
                                                   " tokens)"));
  }
  if (options.skip_special && types_[id] == TokenType::kControl &&
      !(options.keep_framing && IsFraming(id))) {
    return absl::string_view();
  }
  return absl::string_view(bytes_arena_)
      .substr(bytes_offsets_[id], bytes_offsets_[id + 1] - bytes_offsets_[id]);
}

absl::StatusOr<std::string> Tokenizer::Decode(absl::Span<const TokenId> ids,
                                              const DecodeOptions& options) const {
  std::string bytes;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (!IsValidId(ids[i])) {
      return absl::InvalidArgumentError(
          absl::StrCat("token id ", ids[i], " at position ", i,
                       " is out of range (vocabulary of model '", model_name_, "' has ",
                       vocab_size(), " tokens)"));
    }
    ASSIGN_OR_RETURN(const absl::string_view b, TokenBytes(ids[i], options));
    bytes.append(b.data(), b.size());
  }
  if (IsValidUtf8(bytes)) return bytes;
  return ToValidUtf8(bytes);
}

}  // namespace minfer::tokenizer
