// Byte-level BPE tokenizer for GGUF "gpt2" vocabularies with the Qwen2 or
// the Llama 3 pre-tokenizer (tokenizer.ggml.pre = qwen2 / llama-bpe):
// produces the same token ids as Hugging Face's Qwen2 and Llama 3 tokenizers
// (tokenizers/transformers) for the same vocabulary.
//
// Encoding, in Hugging Face's order:
//  1. Ill-formed UTF-8 in the input is replaced by U+FFFD, one per maximal
//     ill-formed subpart (what Python's bytes.decode(errors="replace") or a
//     WHATWG TextDecoder hands Hugging Face when it is given such bytes).
//  2. Added tokens are split out of the raw text, leftmost-longest:
//     user-defined tokens (type 4) always; control tokens (type 3, e.g.
//     <|im_start|>) only with EncodeOptions::parse_special. With it off a
//     control token's text is ordinary text ("<|im_start|>" becomes "<",
//     "|", "im", ...), so untrusted text cannot inject control tokens — the
//     semantics of HF's encode_special_tokens and llama.cpp's
//     parse_special=false.
//  3. Every other segment is NFC-normalized on its own (Qwen2; Llama 3 has
//     no normalizer), split by the pre-tokenizer (pretokenizer.h), and each
//     piece's UTF-8 bytes are BPE-merged by merge rank (ties: leftmost
//     first), starting from the 256 byte tokens. O(n log n) in a piece's
//     length. Llama 3 (HF's ignore_merges) takes a piece that is a whole
//     ordinary token as that token without merging.
//  The BOS token is prepended when the model's add_bos_token says so (Llama
//  3 yes, Qwen2 no) and the caller does not turn it off.
//
// Decoding maps each token to its bytes (normal tokens through the
// byte-level alphabet; added tokens as their text; unused tokens to nothing)
// and the concatenation to UTF-8, each ill-formed subpart becoming U+FFFD
// (Rust's String::from_utf8_lossy, Python's errors="replace").
//
// A Tokenizer is immutable after Create (but for an internal memo that is
// safe under concurrency) and may be used from many threads at once.
#ifndef MINFER_ENGINE_TOKENIZER_TOKENIZER_H_
#define MINFER_ENGINE_TOKENIZER_TOKENIZER_H_

#include <array>
#include <atomic>
#include <bitset>
#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "engine/tokenizer/chat_template.h"
#include "engine/tokenizer/pretokenizer.h"
#include "engine/tokenizer/tokenizer_data.h"

namespace minfer::tokenizer {

struct EncodeOptions {
  // Recognize control tokens written in the text (see above). Turn off for
  // text from untrusted users.
  bool parse_special = true;
  // Prepend the BOS token when the model asks for it (add_bos_token; false
  // for Qwen2).
  bool add_bos = true;
};

struct DecodeOptions {
  // Drop control tokens from the output instead of rendering their text.
  bool skip_special = false;
  // ... except the reply framing of Harmony (gpt-oss: <|channel|>,
  // <|message|>, <|start|>, <|end|>, <|constrain|>), which the output
  // parser reads (engine/chat/harmony.h). Off for the grammar vocabulary:
  // a grammar never allows them.
  bool keep_framing = true;
};

class Tokenizer {
 public:
  // Validates `data` and builds the lookup tables. Errors name the model:
  // UNIMPLEMENTED for a model other than gpt2/qwen2; INVALID_ARGUMENT for an
  // empty token list, token types of the wrong count or value, a merge that
  // is malformed or names (or produces) a token not in the vocabulary, a
  // byte with no token, a special id out of range, or a chat template that
  // does not parse (naming its line and column: a model whose every chat
  // request would fail is refused here rather than served). A model with no
  // template keeps chat_template()'s reason and still encodes text.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> Create(TokenizerData data);

  // Token ids for `text` (any bytes; see the header comment). Never fails.
  std::vector<TokenId> Encode(absl::string_view text, const EncodeOptions& options = {}) const;
  // Appends the ids to `out`.
  void EncodeTo(absl::string_view text, const EncodeOptions& options,
                std::vector<TokenId>* out) const;

  // Renders `messages` with the model's chat template (chat_template.h;
  // `options` are its extra variables) and encodes the prompt. Control
  // tokens are recognized in what the template writes only: message
  // contents (and marked option strings) are encoded as if parse_special
  // were off, so a user writing "<|im_end|>" cannot close the turn.
  // Otherwise the ids equal Encode(rendered prompt). Errors: the model's chat
  // template is unusable (naming the model), a bad role, the template fails
  // or refuses the conversation, options that are reserved or not valid
  // UTF-8, or — for a ChatML prompt — the vocabulary lacks <|im_start|> /
  // <|im_end|> as control tokens. A model with add_bos_token gets one BOS
  // first, whether the template writes bos_token or not (llama.cpp's rule);
  // otherwise the ids are the template's alone.
  absl::StatusOr<std::vector<TokenId>> EncodeChat(absl::Span<const ChatMessage> messages,
                                                  bool add_generation_prompt,
                                                  const ChatTemplateOptions& options = {}) const;
  // The rendered prompt text (what EncodeChat encodes).
  absl::StatusOr<std::string> RenderChat(absl::Span<const ChatMessage> messages,
                                         bool add_generation_prompt,
                                         const ChatTemplateOptions& options = {}) const;

  // Text of `ids` (valid UTF-8). INVALID_ARGUMENT naming the first id that
  // is out of range.
  absl::StatusOr<std::string> Decode(absl::Span<const TokenId> ids,
                                     const DecodeOptions& options = {}) const;

  // The bytes `id` contributes to decoded output: possibly a fragment of a
  // UTF-8 sequence, empty for unused (and, with skip_special, control)
  // tokens. INVALID_ARGUMENT when `id` is out of range. The view lives as
  // long as the Tokenizer.
  absl::StatusOr<absl::string_view> TokenBytes(TokenId id,
                                               const DecodeOptions& options = {}) const;

  int32_t vocab_size() const { return static_cast<int32_t>(types_.size()); }
  bool IsValidId(TokenId id) const { return id >= 0 && id < vocab_size(); }
  // Vocabulary string of `id` (requires IsValidId(id)).
  absl::string_view TokenText(TokenId id) const {
    return absl::string_view(text_arena_).substr(text_offsets_[id],
                                                  text_offsets_[id + 1] - text_offsets_[id]);
  }
  TokenType token_type(TokenId id) const { return types_[id]; }
  // The id whose vocabulary string is `text` (the lowest one if repeated).
  std::optional<TokenId> FindToken(absl::string_view text) const;

  std::optional<TokenId> bos_id() const { return bos_id_; }
  std::optional<TokenId> eos_id() const { return eos_id_; }
  std::optional<TokenId> pad_id() const { return pad_id_; }
  bool add_bos() const { return add_bos_; }
  // Ids that end generation: EOS, EOT and, when they are control tokens,
  // <|im_end|>, <|endoftext|>, <|eot_id|>, <|end_of_text|> and <|eom_id|>
  // (llama.cpp's end-of-generation set). Sorted, no duplicates.
  const std::vector<TokenId>& stop_ids() const { return stop_ids_; }
  const std::string& model_name() const { return model_name_; }
  // The model's chat template, or why it is unusable.
  const absl::StatusOr<ChatTemplate>& chat_template() const { return chat_template_; }

 private:
  // Added tokens (control and user-defined), as a byte trie.
  class SpecialMatcher {
   public:
    void Add(absl::string_view text, TokenId id, bool is_control);
    bool empty() const { return node_token_.size() <= 1; }
    bool MayStartAt(uint8_t b, bool allow_control) const {
      return allow_control ? first_any_[b] : first_user_[b];
    }
    // Longest allowed token that starts at text[pos] and ends by text[limit];
    // sets *id and returns its length, or returns 0.
    size_t Match(absl::string_view text, size_t pos, size_t limit, bool allow_control,
                 TokenId* id) const;

   private:
    absl::flat_hash_map<uint64_t, int32_t> edges_;  // (node << 8 | byte) -> child
    std::vector<TokenId> node_token_ = {-1};        // node 0 is the root
    std::vector<bool> node_control_ = {false};
    std::bitset<256> first_any_;
    std::bitset<256> first_user_;
  };

  struct Scratch;

  Tokenizer() = default;
  absl::Status Build(TokenizerData data);

  void EncodeImpl(absl::string_view text, bool parse_special,
                  absl::Span<const ContentRange> protected_ranges, Scratch* scratch,
                  std::vector<TokenId>* out) const;
  void EncodeSegment(absl::string_view segment, Scratch* scratch, std::vector<TokenId>* out) const;
  void EncodePiece(absl::string_view piece, Scratch* scratch, std::vector<TokenId>* out) const;
  void MergeSmall(Scratch* scratch) const;
  void MergeLarge(Scratch* scratch) const;

  // (rank, result) of merging `left` with `right`; rank -1 when they do not.
  struct MergeResult {
    int32_t rank;
    TokenId result;
  };
  MergeResult LookupMerge(TokenId left, TokenId right) const {
    auto it = merges_.find((static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) |
                           static_cast<uint32_t>(right));
    if (it == merges_.end()) return {-1, -1};
    return {static_cast<int32_t>(it->second >> 32), static_cast<TokenId>(it->second)};
  }

  std::string model_name_;
  std::string pre_;
  PreTokenizer split_ = PreTokenizer::kQwen2;
  bool nfc_ = true;             // NFC-normalize segments before splitting
  bool ignore_merges_ = false;  // a piece that is a normal token is that token
  std::string text_arena_;             // vocabulary strings, concatenated
  std::vector<uint32_t> text_offsets_;  // vocab_size + 1 offsets into text_arena_
  std::vector<TokenType> types_;
  // Control tokens rendered under keep_framing (sorted ids).
  std::vector<TokenId> framing_;
  bool IsFraming(TokenId id) const {
    return std::binary_search(framing_.begin(), framing_.end(), id);
  }
  absl::flat_hash_map<absl::string_view, TokenId> token_index_;  // views into text_arena_
  std::string bytes_arena_;             // decoded bytes per token
  std::vector<uint32_t> bytes_offsets_;
  // Decoded bytes -> id, for normal tokens (views into bytes_arena_).
  absl::flat_hash_map<absl::string_view, TokenId> bytes_index_;
  std::array<TokenId, 256> byte_token_{};
  // (left << 32 | right) -> (rank << 32 | result)
  absl::flat_hash_map<uint64_t, uint64_t> merges_;
  SpecialMatcher specials_;
  // Memo per token: does BPE of the token's own bytes give just that token?
  // (Usually, but not always: BPE may settle on a split it cannot merge.)
  // Lets a piece that is a whole vocabulary entry skip the merge loop. The
  // answer is deterministic, so concurrent Encode calls may race to store
  // it: relaxed atomics suffice. 0 unknown, 1 yes, 2 no.
  std::unique_ptr<std::atomic<uint8_t>[]> whole_token_;
  std::optional<TokenId> bos_id_, eos_id_, pad_id_, eot_id_;
  bool add_bos_ = false;
  std::vector<TokenId> stop_ids_;
  absl::StatusOr<ChatTemplate> chat_template_ = absl::UnknownError("not built");
};

}  // namespace minfer::tokenizer

#endif  // MINFER_ENGINE_TOKENIZER_TOKENIZER_H_
