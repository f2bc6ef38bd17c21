// Small status-propagation macros (Abseil 20220623 has none).
//
//   RETURN_IF_ERROR(DoThing());            // returns the status if not OK
//   ASSIGN_OR_RETURN(auto x, MakeThing());  // x = *statusor, or returns
#ifndef SHARDPS_COMMON_STATUS_MACROS_H_
#define SHARDPS_COMMON_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define SHARDPS_CONCAT_INNER_(a, b) a##b
#define SHARDPS_CONCAT_(a, b) SHARDPS_CONCAT_INNER_(a, b)

#define RETURN_IF_ERROR(expr)                          \
  do {                                                 \
    const absl::Status shardps_status_ = (expr);       \
    if (!shardps_status_.ok()) return shardps_status_; \
  } while (0)

#define ASSIGN_OR_RETURN(lhs, expr) \
  ASSIGN_OR_RETURN_IMPL_(SHARDPS_CONCAT_(shardps_statusor_, __LINE__), lhs, expr)

#define ASSIGN_OR_RETURN_IMPL_(statusor, lhs, expr) \
  auto statusor = (expr);                           \
  if (!statusor.ok()) return statusor.status();     \
  lhs = std::move(*statusor)

#endif  // SHARDPS_COMMON_STATUS_MACROS_H_
