// Status helpers used across minfer.
//
// Every module boundary returns absl::Status / absl::StatusOr<T>; minfer code
// never throws. These macros keep the early-return plumbing short.
#ifndef MINFER_ENGINE_BASE_STATUS_H_
#define MINFER_ENGINE_BASE_STATUS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

#define MINFER_STATUS_CONCAT_INNER_(a, b) a##b
#define MINFER_STATUS_CONCAT_(a, b) MINFER_STATUS_CONCAT_INNER_(a, b)

// Evaluates `expr` (an absl::Status) and returns it from the enclosing
// function when it is not OK.
#define RETURN_IF_ERROR(expr)                                  \
  do {                                                         \
    ::absl::Status minfer_status_ = (expr);                    \
    if (!minfer_status_.ok()) return minfer_status_;           \
  } while (0)

// `ASSIGN_OR_RETURN(auto x, MaybeX());` declares/assigns `x` from a
// StatusOr, or returns its error status from the enclosing function.
#define ASSIGN_OR_RETURN(lhs, rexpr) \
  MINFER_ASSIGN_OR_RETURN_IMPL_(     \
      MINFER_STATUS_CONCAT_(minfer_statusor_, __LINE__), lhs, rexpr)

#define MINFER_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, rexpr) \
  auto statusor = (rexpr);                                  \
  if (!statusor.ok()) return std::move(statusor).status();  \
  lhs = std::move(statusor).value()

namespace minfer {

// Returns `status` with `context` prefixed to its message ("context: msg"),
// keeping the code. OK statuses pass through unchanged.
inline absl::Status Annotate(const absl::Status& status,
                             absl::string_view context) {
  if (status.ok()) return status;
  return absl::Status(status.code(),
                      absl::StrCat(context, ": ", status.message()));
}

}  // namespace minfer

#endif  // MINFER_ENGINE_BASE_STATUS_H_
