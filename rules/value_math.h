// Value math for rules that must look at raw values: conversion of a stored
// value to float64, numpy's allclose and percentile, norms of differences,
// argmax along the last axis.
//
// All functions here are pure and thread-safe.
#ifndef TENSORKEEP_RULES_VALUE_MATH_H_
#define TENSORKEEP_RULES_VALUE_MATH_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "client/trial.h"

namespace tensorkeep {
namespace rules {

// The elements of `value` converted to float64 (as numpy's astype(float64)).
// InvalidArgument if the dtype is invalid or the bytes do not hold the shape.
absl::StatusOr<std::vector<double>> ToDoubles(const client::Value& value);

// numpy.allclose(a, b, rtol, atol, equal_nan): same size, and for every i
// |a_i - b_i| <= atol + rtol * |b_i| (infinities equal only to themselves;
// NaNs equal each other only with equal_nan).
bool AllClose(absl::Span<const double> a, absl::Span<const double> b, double rtol, double atol,
              bool equal_nan);

// numpy.percentile(values, q) with linear interpolation, q in [0, 100], of
// the non-NaN values (`values` is reordered). NaN if none.
double Percentile(std::vector<double>& values, double q);

// ||a - b||_2 of two same-sized vectors.
double L2Distance(absl::Span<const double> a, absl::Span<const double> b);
// ||a||_2.
double L2Norm(absl::Span<const double> a);

// Integer class labels from `value`: with `argmax`, for each row along the
// last axis (a value of shape (N, C) gives N labels; a 1-D value one label),
// the index of its largest element; otherwise each element rounded to the
// nearest integer.
absl::StatusOr<std::vector<int64_t>> ClassIndices(const client::Value& value, bool argmax);

}  // namespace rules
}  // namespace tensorkeep

#endif  // TENSORKEEP_RULES_VALUE_MATH_H_
