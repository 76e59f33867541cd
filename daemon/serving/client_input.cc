#include "daemon/serving/client_input.h"

#include <algorithm>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "engine/base/field_error.h"

namespace minfer::daemon {

std::string QuoteInput(absl::string_view text, size_t max_bytes) {
  if (text.size() <= max_bytes) return absl::StrCat("'", absl::CHexEscape(text), "'");
  return absl::StrCat("'", absl::CHexEscape(text.substr(0, max_bytes)), "...' (", text.size(),
                      " bytes)");
}

absl::Status CheckName(absl::string_view name, absl::string_view field) {
  if (name.size() > kMaxNameBytes) {
    return InvalidFieldThat(field, absl::StrCat("must be at most ", kMaxNameBytes,
                                                " characters, got ", QuoteInput(name)));
  }
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok) {
      return InvalidFieldThat(
          field, absl::StrCat("may use only letters, digits, '.', '_' and '-', got ",
                              QuoteInput(name)));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckPath(absl::string_view path, absl::string_view field) {
  if (path.empty()) return InvalidFieldThat(field, "must not be empty");
  if (path.size() > kMaxPathBytes) {
    return InvalidFieldThat(field, absl::StrCat("must be at most ", kMaxPathBytes,
                                                " bytes, got ", QuoteInput(path)));
  }
  if (path.find('\0') != absl::string_view::npos) {
    return InvalidFieldThat(field,
                            absl::StrCat("must not contain a NUL byte, got ", QuoteInput(path)));
  }
  return absl::OkStatus();
}

bool ConstantTimeEquals(absl::string_view given, absl::string_view expected) {
  unsigned char diff = given.size() == expected.size() ? 0 : 1;
  const size_t n = std::min(given.size(), expected.size());
  for (size_t i = 0; i < n; ++i) diff |= static_cast<unsigned char>(given[i] ^ expected[i]);
  return diff == 0;
}

}  // namespace minfer::daemon
