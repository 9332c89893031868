// The rows of a parameter server's dynamic tables in one step, in three kernels.
//
// A step resolves the keys of every id index on a server into rows (AdmitIds in
// training, a find in evaluation): one int64 tensor `rows` holding each index's rows one
// after another, `sizes` their counts, -1 where a key has no row. Every table (a layer's
// `emb` variable) gathers the live rows of its index, and the worker gets one flat tensor
// back with every table's vectors, zeros where a key has no row:
//
//   LiveRows:       rows, sizes -> the rows >= 0 of each index (what each table gathers)
//   PackRows:       each table's gathered vectors, rows, sizes -> one flat float tensor,
//                   table after table, each [its index's keys, dim] with zero rows at -1
//   UnpackRowGrads: that flat tensor's gradient -> each table's gradient of its gathered
//                   vectors (the gradient of PackRows)
//
// They replace some 15 stock ops per index and 8 per table (masks, where, scatter, split,
// reshape, concat) that each step ran on the server (recsys_dist/models/dynamic_table.py).

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"

#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/framework/tensor.h"

namespace recsys_dist {
namespace {

using ::tensorflow::OpInputList;
using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::OpOutputList;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;
using ::tensorflow::shape_inference::InferenceContext;

// Each index's [start, end) in rows, after checking rows and sizes.
absl::Status Spans(const Tensor& rows, const Tensor& sizes, int64_t indexes,
                   std::vector<int64_t>* starts) {
  if (rows.dims() != 1) return absl::InvalidArgumentError("rows must be 1-D");
  if (sizes.dims() != 1 || sizes.NumElements() != indexes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sizes must hold one count per index (", indexes, "), got shape ",
        sizes.shape().DebugString()));
  }
  const auto size = sizes.flat<int32_t>();
  starts->assign(1, 0);
  for (int64_t i = 0; i < indexes; ++i) {
    if (size(i) < 0) return absl::InvalidArgumentError("sizes must be >= 0");
    starts->push_back(starts->back() + size(i));
  }
  if (starts->back() != rows.NumElements()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sizes add up to ", starts->back(), " but rows holds ", rows.NumElements()));
  }
  return absl::OkStatus();
}

// The tables' index of each table (attr owner), checked against the number of indexes.
absl::Status Owners(OpKernelConstruction* ctx, int tables, std::vector<int32_t>* owner) {
  TF_RETURN_IF_ERROR(ctx->GetAttr("owner", owner));
  if (static_cast<int>(owner->size()) != tables) {
    return absl::InvalidArgumentError(absl::StrCat(
        "owner needs one index per table (", tables, "), got ", owner->size()));
  }
  for (int32_t o : *owner) {
    if (o < 0) return absl::InvalidArgumentError("owner values must be >= 0");
  }
  return absl::OkStatus();
}

// A key has a row when its row is >= 0 (-1: not admitted, or refused).
bool HasRow(int64_t row) { return row >= 0; }

// The rows >= 0 among index i's rows.
int64_t LiveCount(const int64_t* row, const std::vector<int64_t>& starts, int i) {
  return std::count_if(row + starts[i], row + starts[i + 1], HasRow);
}

int64_t Indexes(const std::vector<int32_t>& owner) {
  return owner.empty() ? 0 : *std::max_element(owner.begin(), owner.end()) + 1;
}

class LiveRowsOp : public OpKernel {
 public:
  explicit LiveRowsOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("N", &n_));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& rows = ctx->input(0);
    std::vector<int64_t> starts;
    OP_REQUIRES_OK(ctx, Spans(rows, ctx->input(1), n_, &starts));
    const int64_t* row = rows.flat<int64_t>().data();
    OpOutputList live;
    OP_REQUIRES_OK(ctx, ctx->output_list("live", &live));
    for (int i = 0; i < n_; ++i) {
      const int64_t count = LiveCount(row, starts, i);
      Tensor* out = nullptr;
      OP_REQUIRES_OK(ctx, live.allocate(i, TensorShape({count}), &out));
      std::copy_if(row + starts[i], row + starts[i + 1], out->flat<int64_t>().data(), HasRow);
    }
  }

 private:
  int n_ = 0;
};

class PackRowsOp : public OpKernel {
 public:
  explicit PackRowsOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("T", &tables_));
    OP_REQUIRES_OK(ctx, Owners(ctx, tables_, &owner_));
  }

  void Compute(OpKernelContext* ctx) override {
    OpInputList gathered;
    OP_REQUIRES_OK(ctx, ctx->input_list("gathered", &gathered));
    const Tensor& rows = ctx->input(tables_);
    std::vector<int64_t> starts;
    OP_REQUIRES_OK(ctx, Spans(rows, ctx->input(tables_ + 1), Indexes(owner_), &starts));
    const int64_t* row = rows.flat<int64_t>().data();
    int64_t total = 0;
    for (int t = 0; t < tables_; ++t) {
      const Tensor& g = gathered[t];
      OP_REQUIRES(ctx, g.dims() == 2, absl::InvalidArgumentError(absl::StrCat(
                                          "gathered[", t, "] must be 2-D, got shape ",
                                          g.shape().DebugString())));
      const int o = owner_[t];
      const int64_t live = LiveCount(row, starts, o);
      OP_REQUIRES(ctx, g.dim_size(0) == live, absl::InvalidArgumentError(absl::StrCat(
                                                  "gathered[", t, "] holds ", g.dim_size(0),
                                                  " vectors but its index has ", live,
                                                  " rows >= 0")));
      total += (starts[o + 1] - starts[o]) * g.dim_size(1);
    }
    Tensor* packed = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({total}), &packed));
    float* out = packed->flat<float>().data();
    for (int t = 0; t < tables_; ++t) {
      const int64_t dim = gathered[t].dim_size(1);
      const float* in = gathered[t].flat<float>().data();
      const int o = owner_[t];
      for (int64_t k = starts[o]; k < starts[o + 1]; ++k, out += dim) {
        if (HasRow(row[k])) {
          std::memcpy(out, in, dim * sizeof(float));
          in += dim;
        } else {
          std::fill(out, out + dim, 0.0f);
        }
      }
    }
  }

 private:
  int tables_ = 0;
  std::vector<int32_t> owner_;
};

class UnpackRowGradsOp : public OpKernel {
 public:
  explicit UnpackRowGradsOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("T", &tables_));
    OP_REQUIRES_OK(ctx, Owners(ctx, tables_, &owner_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("dims", &dims_));
    OP_REQUIRES(ctx, static_cast<int>(dims_.size()) == tables_,
                absl::InvalidArgumentError("dims needs one value per table"));
    for (int64_t d : dims_) {
      OP_REQUIRES(ctx, d >= 1, absl::InvalidArgumentError("dims must be >= 1"));
    }
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& grad = ctx->input(0);
    const Tensor& rows = ctx->input(1);
    std::vector<int64_t> starts;
    OP_REQUIRES_OK(ctx, Spans(rows, ctx->input(2), Indexes(owner_), &starts));
    OP_REQUIRES(ctx, grad.dims() == 1, absl::InvalidArgumentError("grad must be 1-D"));
    const int64_t* row = rows.flat<int64_t>().data();
    int64_t total = 0;
    for (int t = 0; t < tables_; ++t) {
      total += (starts[owner_[t] + 1] - starts[owner_[t]]) * dims_[t];
    }
    OP_REQUIRES(ctx, grad.NumElements() == total, absl::InvalidArgumentError(absl::StrCat(
                                                      "grad holds ", grad.NumElements(),
                                                      " values, the tables ", total)));
    const float* in = grad.flat<float>().data();
    OpOutputList grads;
    OP_REQUIRES_OK(ctx, ctx->output_list("grads", &grads));
    for (int t = 0; t < tables_; ++t) {
      const int o = owner_[t];
      const int64_t dim = dims_[t];
      const int64_t live = LiveCount(row, starts, o);
      Tensor* out = nullptr;
      OP_REQUIRES_OK(ctx, grads.allocate(t, TensorShape({live, dim}), &out));
      float* to = out->flat<float>().data();
      for (int64_t k = starts[o]; k < starts[o + 1]; ++k, in += dim) {
        if (HasRow(row[k])) {
          std::memcpy(to, in, dim * sizeof(float));
          to += dim;
        }
      }
    }
  }

 private:
  int tables_ = 0;
  std::vector<int32_t> owner_;
  std::vector<int64_t> dims_;
};

}  // namespace

REGISTER_OP("LiveRows")
    .Input("rows: int64")
    .Input("sizes: int32")
    .Output("live: N * int64")
    .Attr("N: int >= 1")
    .SetShapeFn([](InferenceContext* c) {
      for (int i = 0; i < c->num_outputs(); ++i) c->set_output(i, c->Vector(c->UnknownDim()));
      return absl::OkStatus();
    });
REGISTER_KERNEL_BUILDER(Name("LiveRows").Device(::tensorflow::DEVICE_CPU), LiveRowsOp);

REGISTER_OP("PackRows")
    .Input("gathered: T * float")
    .Input("rows: int64")
    .Input("sizes: int32")
    .Output("packed: float")
    .Attr("T: int >= 1")
    .Attr("owner: list(int)")
    .SetShapeFn([](InferenceContext* c) {
      c->set_output(0, c->Vector(c->UnknownDim()));
      return absl::OkStatus();
    });
REGISTER_KERNEL_BUILDER(Name("PackRows").Device(::tensorflow::DEVICE_CPU), PackRowsOp);

REGISTER_OP("UnpackRowGrads")
    .Input("grad: float")
    .Input("rows: int64")
    .Input("sizes: int32")
    .Output("grads: T * float")
    .Attr("T: int >= 1")
    .Attr("owner: list(int)")
    .Attr("dims: list(int)")
    .SetShapeFn([](InferenceContext* c) {
      std::vector<int64_t> dims;
      TF_RETURN_IF_ERROR(c->GetAttr("dims", &dims));
      for (int i = 0; i < c->num_outputs(); ++i) {
        c->set_output(i, c->Matrix(c->UnknownDim(),
                                   i < static_cast<int>(dims.size()) ? dims[i] : -1));
      }
      return absl::OkStatus();
    });
REGISTER_KERNEL_BUILDER(Name("UnpackRowGrads").Device(::tensorflow::DEVICE_CPU),
                        UnpackRowGradsOp);

}  // namespace recsys_dist
