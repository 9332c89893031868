// Fused feature transforms for the workers' input pipeline.
//
// Each kernel does in one pass what recsys_dist/features/transforms.py does with a chain
// of stock TensorFlow ops, and gives the same values bit for bit
// (tests/unit/ops/test_feature_transform_ops.py). The input pipeline uses them; an
// exported SavedModel keeps the stock ops, so serving needs no custom op.
//
//   HashIntIds:    [K, N] integer ids -> table rows: splitmix64(id) % buckets[k], or
//                  missing_rows[k] where the id is null; also the splitmix64 hashes
//                  (crosses combine them).
//   BucketizeRows: [K, N] floats -> the number of row k's edges <= x (edges padded
//                  with +inf), as tf.searchsorted(side="right").
//   DelimitedIds:  delimited strings ("3:0.7|15:0.3") -> [N, L] ids and weights of the
//                  first L non-empty tokens, and the rows whose weight is not a number.
//   ListIds:       a list column (values + row splits, optional validity and a weights
//                  list column) -> [N, L] ids and weights, and the rows whose ids and
//                  weights lists differ in length.

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/string_view.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/framework/tensor.h"
#include "mix64.h"

namespace util {
// TensorFlow's Fingerprint64 (farmhash), the hash of tf.strings.to_hash_bucket_fast;
// exported by libtensorflow_framework.
uint64_t Fingerprint64(const char* s, size_t len);
}  // namespace util

namespace recsys_dist {
namespace {

using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;
using ::tensorflow::tstring;
using ::tensorflow::shape_inference::InferenceContext;

inline uint64_t HashString(absl::string_view s) {
  return util::Fingerprint64(s.data(), s.size());
}

// Full match of [-+]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)? (transforms._NUMBER_RE).
bool IsNumber(absl::string_view s) {
  size_t i = 0, n = s.size();
  auto digits = [&]() {
    size_t from = i;
    while (i < n && s[i] >= '0' && s[i] <= '9') ++i;
    return i - from;
  };
  if (i < n && (s[i] == '+' || s[i] == '-')) ++i;
  if (digits() > 0) {
    if (i < n && s[i] == '.') {
      ++i;
      digits();
    }
  } else {
    if (i >= n || s[i] != '.') return false;
    ++i;
    if (digits() == 0) return false;
  }
  if (i < n && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < n && (s[i] == '+' || s[i] == '-')) ++i;
    if (digits() == 0) return false;
  }
  return i == n;
}

// tf.strings.to_number(text, tf.float32) of a text that IsNumber accepted, through the
// function TensorFlow's kernel calls (tsl::strings::safe_strtof is absl::SimpleAtof).
absl::Status ParseWeight(absl::string_view text, float* value) {
  if (!absl::SimpleAtof(text, value)) {
    return absl::InvalidArgumentError("StringToNumberOp could not correctly convert string: " +
                                      std::string(text));
  }
  return absl::OkStatus();
}

// ---- HashIntIds ---------------------------------------------------------------------------

class HashIntIdsOp : public OpKernel {
 public:
  explicit HashIntIdsOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("buckets", &buckets_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("missing_rows", &missing_rows_));
    OP_REQUIRES(ctx, buckets_.size() == missing_rows_.size(),
                absl::InvalidArgumentError("buckets and missing_rows differ in length"));
    for (int64_t b : buckets_) {
      OP_REQUIRES(ctx, b > 0, absl::InvalidArgumentError("buckets must be positive"));
    }
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& values = ctx->input(0);
    const Tensor& present = ctx->input(1);
    const int64_t k = buckets_.size();
    OP_REQUIRES(ctx, values.dims() == 2 && values.dim_size(0) == k,
                absl::InvalidArgumentError("values must be [len(buckets), N]"));
    const int64_t n = values.dim_size(1);
    const bool has_present = present.NumElements() > 0;
    OP_REQUIRES(ctx, !has_present || present.shape() == values.shape(),
                absl::InvalidArgumentError("present must be empty or shaped as values"));
    Tensor* ids = nullptr;
    Tensor* hashes = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, values.shape(), &ids));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, values.shape(), &hashes));
    const int64_t* in = values.flat<int64_t>().data();
    const bool* ok = has_present ? present.flat<bool>().data() : nullptr;
    int64_t* out = ids->flat<int64_t>().data();
    uint64_t* hashed = hashes->flat<uint64_t>().data();
    for (int64_t row = 0; row < k; ++row) {
      const uint64_t bucket = static_cast<uint64_t>(buckets_[row]);
      const int64_t missing = missing_rows_[row];
      const int64_t base = row * n;
      for (int64_t j = base; j < base + n; ++j) {
        const uint64_t h = Mix64(static_cast<uint64_t>(in[j]));
        hashed[j] = h;
        out[j] = (ok == nullptr || ok[j]) ? static_cast<int64_t>(h % bucket) : missing;
      }
    }
  }

 private:
  std::vector<int64_t> buckets_;
  std::vector<int64_t> missing_rows_;
};

// ---- BucketizeRows --------------------------------------------------------------------------

class BucketizeRowsOp : public OpKernel {
 public:
  explicit BucketizeRowsOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    const Tensor& edges = ctx->input(1);
    OP_REQUIRES(ctx, x.dims() == 2 && edges.dims() == 2 && edges.dim_size(0) == x.dim_size(0),
                absl::InvalidArgumentError("x must be [K, N] and edges [K, W]"));
    const int64_t k = x.dim_size(0), n = x.dim_size(1), w = edges.dim_size(1);
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, x.shape(), &out));
    const float* in = x.flat<float>().data();
    const float* e = edges.flat<float>().data();
    int64_t* result = out->flat<int64_t>().data();
    for (int64_t row = 0; row < k; ++row) {
      const float* first = e + row * w;
      for (int64_t j = row * n; j < (row + 1) * n; ++j) {
        result[j] = UpperBound(first, w, in[j]);
      }
    }
  }

 private:
  // std::upper_bound(first, first + w, x) - first without branches on the data (the
  // comparisons select, so random values cost no mispredictions): the number of
  // leading edges e with !(x < e), NaN included, as std::upper_bound counts them.
  static int64_t UpperBound(const float* first, int64_t w, float x) {
    if (w == 0) return 0;
    const float* base = first;
    int64_t len = w;
    while (len > 1) {
      const int64_t half = len / 2;
      base = (x < base[half]) ? base : base + half;
      len -= half;
    }
    return (base - first) + !(x < *base);
  }
};

// ---- padded ids and weights ----------------------------------------------------------------

// Writes the kept values of one row into its first max_length slots.
struct Padded {
  int64_t* ids;
  float* weights;
  int64_t max_length;

  // (Added to the zeros, as the stock ops' segment sums do: a weight of -0.0 reads 0.0.)
  void Put(int64_t row, int64_t* slot, int64_t id, float weight) const {
    if (*slot < max_length) {
      ids[row * max_length + *slot] += id;
      weights[row * max_length + *slot] += weight;
    }
    ++*slot;
  }
};

absl::Status AllocatePadded(OpKernelContext* ctx, int64_t rows, int64_t max_length,
                            Padded* padded, bool** bad) {
  Tensor* ids = nullptr;
  Tensor* weights = nullptr;
  Tensor* bad_rows = nullptr;
  TF_RETURN_IF_ERROR(ctx->allocate_output(0, TensorShape({rows, max_length}), &ids));
  TF_RETURN_IF_ERROR(ctx->allocate_output(1, TensorShape({rows, max_length}), &weights));
  TF_RETURN_IF_ERROR(ctx->allocate_output(2, TensorShape({rows}), &bad_rows));
  ids->flat<int64_t>().setZero();
  weights->flat<float>().setZero();
  bad_rows->flat<bool>().setZero();
  *padded = Padded{ids->flat<int64_t>().data(), weights->flat<float>().data(), max_length};
  *bad = bad_rows->flat<bool>().data();
  return absl::OkStatus();
}

// ---- DelimitedIds --------------------------------------------------------------------------

class DelimitedIdsOp : public OpKernel {
 public:
  explicit DelimitedIdsOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("separator", &separator_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("weight_separator", &weight_separator_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("buckets", &buckets_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("max_length", &max_length_));
    OP_REQUIRES(ctx, !separator_.empty() && buckets_ > 0 && max_length_ > 0,
                absl::InvalidArgumentError("separator, buckets and max_length must be set"));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& text = ctx->input(0);
    OP_REQUIRES(ctx, text.dims() == 1, absl::InvalidArgumentError("strings must be [N]"));
    const int64_t rows = text.dim_size(0);
    Padded padded;
    bool* bad = nullptr;
    OP_REQUIRES_OK(ctx, AllocatePadded(ctx, rows, max_length_, &padded, &bad));
    const auto strings = text.flat<tstring>();
    const bool weighted = !weight_separator_.empty();
    const uint64_t buckets = static_cast<uint64_t>(buckets_);
    for (int64_t row = 0; row < rows; ++row) {
      const absl::string_view line(strings(row).data(), strings(row).size());
      int64_t slot = 0;
      size_t from = 0;
      while (true) {
        const size_t at = line.find(separator_, from);
        const absl::string_view token =
            line.substr(from, at == absl::string_view::npos ? absl::string_view::npos : at - from);
        if (!token.empty()) {  // an empty token is dropped
          absl::string_view id = token;
          float weight = 1.0f;
          if (weighted) {
            const size_t split = token.find(weight_separator_);
            absl::string_view weight_text;
            if (split != absl::string_view::npos) {
              id = token.substr(0, split);
              weight_text = token.substr(split + weight_separator_.size());
            }
            if (IsNumber(weight_text)) {
              OP_REQUIRES_OK(ctx, ParseWeight(weight_text, &weight));
            } else {
              weight = 0.0f;
              bad[row] = true;
            }
          }
          padded.Put(row, &slot, static_cast<int64_t>(HashString(id) % buckets), weight);
        }
        if (at == absl::string_view::npos) break;
        from = at + separator_.size();
      }
    }
  }

 private:
  std::string separator_;
  std::string weight_separator_;
  int64_t buckets_;
  int64_t max_length_;
};

// ---- ListIds -------------------------------------------------------------------------------

template <typename T>
uint64_t HashValue(const T& value);

template <>
uint64_t HashValue<int64_t>(const int64_t& value) {
  return Mix64(static_cast<uint64_t>(value));
}

template <>
uint64_t HashValue<tstring>(const tstring& value) {
  return HashString(absl::string_view(value.data(), value.size()));
}

// Row splits that index inside their values: starting at 0 or above, never decreasing.
bool Ascending(const Tensor& splits) {
  const auto s = splits.flat<int64_t>();
  if (s.size() == 0 || s(0) < 0) return false;
  for (int64_t i = 1; i < s.size(); ++i) {
    if (s(i) < s(i - 1)) return false;
  }
  return true;
}

template <typename T>
class ListIdsOp : public OpKernel {
 public:
  explicit ListIdsOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("buckets", &buckets_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("max_length", &max_length_));
    OP_REQUIRES(ctx, buckets_ > 0 && max_length_ > 0,
                absl::InvalidArgumentError("buckets and max_length must be positive"));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& values = ctx->input(0);
    const Tensor& splits = ctx->input(1);
    const Tensor& valid = ctx->input(2);
    const Tensor& weights = ctx->input(3);
    const Tensor& weight_splits = ctx->input(4);
    const Tensor& weights_valid = ctx->input(5);
    OP_REQUIRES(ctx, splits.dims() == 1 && splits.dim_size(0) >= 1,
                absl::InvalidArgumentError("row_splits must be [N + 1]"));
    const int64_t rows = splits.dim_size(0) - 1;
    const bool has_valid = valid.NumElements() > 0;
    const bool has_weights = weight_splits.NumElements() > 0;
    const bool has_weights_valid = weights_valid.NumElements() > 0;
    const auto v = values.flat<T>();
    const auto s = splits.flat<int64_t>();
    OP_REQUIRES(ctx, Ascending(splits) && s(rows) <= v.size() &&
                         (!has_valid || valid.NumElements() == v.size()),
                absl::InvalidArgumentError("row_splits or validity do not fit the values"));
    OP_REQUIRES(ctx, !has_weights || weight_splits.NumElements() == rows + 1,
                absl::InvalidArgumentError("weights_splits must be [N + 1]"));
    OP_REQUIRES(ctx, !has_weights || (Ascending(weight_splits) &&
                                      weight_splits.flat<int64_t>()(rows) <= weights.NumElements()),
                absl::InvalidArgumentError("weights_splits do not fit the weights"));
    OP_REQUIRES(ctx, !has_weights_valid || weights_valid.NumElements() == weights.NumElements(),
                absl::InvalidArgumentError("weights_valid must be empty or as long as weights"));
    Padded padded;
    bool* bad = nullptr;
    OP_REQUIRES_OK(ctx, AllocatePadded(ctx, rows, max_length_, &padded, &bad));
    const bool* ok = has_valid ? valid.flat<bool>().data() : nullptr;
    const float* w = has_weights ? weights.flat<float>().data() : nullptr;
    const int64_t* ws = has_weights ? weight_splits.flat<int64_t>().data() : nullptr;
    const bool* w_ok = has_weights_valid ? weights_valid.flat<bool>().data() : nullptr;
    const uint64_t buckets = static_cast<uint64_t>(buckets_);
    for (int64_t row = 0; row < rows; ++row) {
      const int64_t first = s(row), last = s(row + 1);
      if (has_weights && ws[row + 1] - ws[row] != last - first) {
        bad[row] = true;  // ids and weights only align when their lengths agree
        continue;
      }
      int64_t slot = 0;
      for (int64_t j = first; j < last; ++j) {
        if (ok != nullptr && !ok[j]) continue;  // a null element is dropped
        float weight = 1.0f;
        if (has_weights) {
          const int64_t at = ws[row] + (j - first);
          if (w_ok != nullptr && !w_ok[at]) continue;  // so is one with a null weight
          weight = w[at];
        }
        padded.Put(row, &slot, static_cast<int64_t>(HashValue<T>(v(j)) % buckets), weight);
      }
    }
  }

 private:
  int64_t buckets_;
  int64_t max_length_;
};

// ---- registration --------------------------------------------------------------------------

absl::Status PaddedShapes(InferenceContext* c, int64_t max_length) {
  auto rows = c->Dim(c->input(0), 0);
  c->set_output(0, c->Matrix(rows, max_length));
  c->set_output(1, c->Matrix(rows, max_length));
  c->set_output(2, c->Vector(rows));
  return absl::OkStatus();
}

}  // namespace

REGISTER_OP("HashIntIds")
    .Input("values: int64")
    .Input("present: bool")
    .Output("ids: int64")
    .Output("hashes: uint64")
    .Attr("buckets: list(int)")
    .Attr("missing_rows: list(int)")
    .SetShapeFn([](InferenceContext* c) {
      c->set_output(0, c->input(0));
      c->set_output(1, c->input(0));
      return absl::OkStatus();
    });
REGISTER_KERNEL_BUILDER(Name("HashIntIds").Device(::tensorflow::DEVICE_CPU), HashIntIdsOp);

REGISTER_OP("BucketizeRows")
    .Input("x: float")
    .Input("edges: float")
    .Output("buckets: int64")
    .SetShapeFn([](InferenceContext* c) {
      c->set_output(0, c->input(0));
      return absl::OkStatus();
    });
REGISTER_KERNEL_BUILDER(Name("BucketizeRows").Device(::tensorflow::DEVICE_CPU),
                        BucketizeRowsOp);

REGISTER_OP("DelimitedIds")
    .Input("strings: string")
    .Output("ids: int64")
    .Output("weights: float")
    .Output("bad: bool")
    .Attr("separator: string")
    .Attr("weight_separator: string = ''")
    .Attr("buckets: int")
    .Attr("max_length: int")
    .SetShapeFn([](InferenceContext* c) {
      int64_t max_length;
      TF_RETURN_IF_ERROR(c->GetAttr("max_length", &max_length));
      return PaddedShapes(c, max_length);
    });
REGISTER_KERNEL_BUILDER(Name("DelimitedIds").Device(::tensorflow::DEVICE_CPU), DelimitedIdsOp);

REGISTER_OP("ListIds")
    .Input("values: T")
    .Input("row_splits: int64")
    .Input("valid: bool")
    .Input("weights: float")
    .Input("weights_splits: int64")
    .Input("weights_valid: bool")
    .Output("ids: int64")
    .Output("weights_out: float")
    .Output("bad: bool")
    .Attr("T: {int64, string}")
    .Attr("buckets: int")
    .Attr("max_length: int")
    .SetShapeFn([](InferenceContext* c) {
      int64_t max_length;
      TF_RETURN_IF_ERROR(c->GetAttr("max_length", &max_length));
      auto splits = c->Dim(c->input(1), 0);
      ::tensorflow::shape_inference::DimensionHandle rows;
      TF_RETURN_IF_ERROR(c->Subtract(splits, 1, &rows));
      c->set_output(0, c->Matrix(rows, max_length));
      c->set_output(1, c->Matrix(rows, max_length));
      c->set_output(2, c->Vector(rows));
      return absl::OkStatus();
    });
REGISTER_KERNEL_BUILDER(
    Name("ListIds").Device(::tensorflow::DEVICE_CPU).TypeConstraint<int64_t>("T"),
    ListIdsOp<int64_t>);
REGISTER_KERNEL_BUILDER(
    Name("ListIds").Device(::tensorflow::DEVICE_CPU).TypeConstraint<tstring>("T"),
    ListIdsOp<tstring>);

}  // namespace recsys_dist
