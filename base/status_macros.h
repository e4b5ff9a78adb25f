// RETURN_IF_ERROR / ASSIGN_OR_RETURN for absl::Status, which Debian's abseil
// (20220623) does not ship.
#ifndef TENSORKEEP_BASE_STATUS_MACROS_H_
#define TENSORKEEP_BASE_STATUS_MACROS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

// Evaluates `expr` (an absl::Status) and returns it from the enclosing function
// if it is not OK.
#define TK_RETURN_IF_ERROR(expr)                \
  do {                                          \
    ::absl::Status tk_status_ = (expr);         \
    if (!tk_status_.ok()) return tk_status_;    \
  } while (0)

#define TK_CONCAT_INNER_(a, b) a##b
#define TK_CONCAT_(a, b) TK_CONCAT_INNER_(a, b)

// `lhs = *expr` when the absl::StatusOr `expr` holds a value; otherwise returns
// its status from the enclosing function. `lhs` may declare a variable.
#define TK_ASSIGN_OR_RETURN(lhs, expr) \
  TK_ASSIGN_OR_RETURN_IMPL_(TK_CONCAT_(tk_statusor_, __LINE__), lhs, expr)
#define TK_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return std::move(tmp).status();  \
  lhs = std::move(tmp).value()

#endif  // TENSORKEEP_BASE_STATUS_MACROS_H_
