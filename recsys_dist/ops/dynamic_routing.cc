// Routing a step's dynamic-table keys to their parameter servers and the vectors back,
// on the worker, in one kernel each way.
//
//   RouteKeys:      each table's keys (tables grouped by id index: `index_of`, ascending)
//                   -> per server the distinct keys of every index on it, index after
//                   index, and their counts; per table, each key's server and slot (its
//                   place among its index's keys on that server). An id goes to server
//                   mix64(id) % servers; the distinct keys of an index keep the order of
//                   their first occurrence over its tables' keys, as tf.unique gives
//                   them, and each server keeps that order (as tf.dynamic_partition).
//   UnrouteRows:    per server the flat vectors PackRows made (table after table, each
//                   [its index's keys on the server, dim]) -> each table's [keys, dim]
//   RouteRowGrads:  the gradient of UnrouteRows: each table's [keys, dim] gradient ->
//                   per server a flat gradient, summed where keys repeat
//
// They replace, per index and table, the stock ops tf.unique, the hash and bucket,
// tf.dynamic_partition, tf.split, tf.dynamic_stitch and tf.gather, with their
// gradients (recsys_dist/models/dynamic_table.py keeps those for an export).

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"

#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/framework/tensor.h"
#include "mix64.h"

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

// The attr index_of: one index per table, non-decreasing from 0 without gaps.
absl::Status IndexOf(OpKernelConstruction* ctx, std::vector<int32_t>* index_of,
                     int* indexes) {
  TF_RETURN_IF_ERROR(ctx->GetAttr("index_of", index_of));
  if (index_of->empty() || index_of->front() != 0) {
    return absl::InvalidArgumentError("index_of must start at index 0");
  }
  for (size_t t = 1; t < index_of->size(); ++t) {
    const int32_t step = (*index_of)[t] - (*index_of)[t - 1];
    if (step != 0 && step != 1) {
      return absl::InvalidArgumentError(
          "index_of must group the tables by index: 0, 0, 1, 2, 2, ... without gaps");
    }
  }
  *indexes = index_of->back() + 1;
  return absl::OkStatus();
}

class RouteKeysOp : public OpKernel {
 public:
  explicit RouteKeysOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("T", &tables_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("servers", &servers_));
    OP_REQUIRES_OK(ctx, IndexOf(ctx, &index_of_, &indexes_));
    OP_REQUIRES(ctx, static_cast<int>(index_of_.size()) == tables_,
                absl::InvalidArgumentError("index_of needs one index per table"));
  }

  void Compute(OpKernelContext* ctx) override {
    OpInputList keys;
    OP_REQUIRES_OK(ctx, ctx->input_list("keys", &keys));
    for (int t = 0; t < tables_; ++t) {
      OP_REQUIRES(ctx, keys[t].dims() == 1, absl::InvalidArgumentError(absl::StrCat(
                                                "keys[", t, "] must be 1-D, got shape ",
                                                keys[t].shape().DebugString())));
    }
    OpOutputList server_out, slot_out;
    OP_REQUIRES_OK(ctx, ctx->output_list("server", &server_out));
    OP_REQUIRES_OK(ctx, ctx->output_list("slot", &slot_out));
    // distinct[s][g]: the distinct keys of index g on server s, in order
    std::vector<std::vector<std::vector<int64_t>>> distinct(
        servers_, std::vector<std::vector<int64_t>>(indexes_));
    int t = 0;
    for (int g = 0; g < indexes_; ++g) {
      absl::flat_hash_map<int64_t, std::pair<int32_t, int64_t>> placed;  // key -> server, slot
      for (; t < tables_ && index_of_[t] == g; ++t) {
        const int64_t n = keys[t].NumElements();
        const int64_t* key = keys[t].flat<int64_t>().data();
        Tensor* server = nullptr;
        Tensor* slot = nullptr;
        OP_REQUIRES_OK(ctx, server_out.allocate(t, TensorShape({n}), &server));
        OP_REQUIRES_OK(ctx, slot_out.allocate(t, TensorShape({n}), &slot));
        int32_t* server_of = server->flat<int32_t>().data();
        int64_t* slot_of = slot->flat<int64_t>().data();
        placed.reserve(placed.size() + n);
        for (int64_t j = 0; j < n; ++j) {
          auto [it, added] = placed.try_emplace(key[j]);
          if (added) {
            const int32_t s = static_cast<int32_t>(
                Mix64(static_cast<uint64_t>(key[j])) % static_cast<uint64_t>(servers_));
            it->second = {s, static_cast<int64_t>(distinct[s][g].size())};
            distinct[s][g].push_back(key[j]);
          }
          server_of[j] = it->second.first;
          slot_of[j] = it->second.second;
        }
      }
    }
    OpOutputList packed_out, sizes_out;
    OP_REQUIRES_OK(ctx, ctx->output_list("packed", &packed_out));
    OP_REQUIRES_OK(ctx, ctx->output_list("sizes", &sizes_out));
    for (int s = 0; s < servers_; ++s) {
      int64_t total = 0;
      for (const auto& part : distinct[s]) total += part.size();
      Tensor* packed = nullptr;
      Tensor* sizes = nullptr;
      OP_REQUIRES_OK(ctx, packed_out.allocate(s, TensorShape({total}), &packed));
      OP_REQUIRES_OK(ctx, sizes_out.allocate(s, TensorShape({indexes_}), &sizes));
      int64_t* to = packed->flat<int64_t>().data();
      for (int g = 0; g < indexes_; ++g) {
        to = std::copy(distinct[s][g].begin(), distinct[s][g].end(), to);
        sizes->flat<int32_t>()(g) = static_cast<int32_t>(distinct[s][g].size());
      }
    }
  }

 private:
  int tables_ = 0, servers_ = 0, indexes_ = 0;
  std::vector<int32_t> index_of_;
};

// What UnrouteRows and RouteRowGrads share: the attrs, and where each table's block
// starts in each server's flat vectors.
class Unrouting {
 public:
  absl::Status Init(OpKernelConstruction* ctx) {
    TF_RETURN_IF_ERROR(ctx->GetAttr("T", &tables_));
    TF_RETURN_IF_ERROR(ctx->GetAttr("S", &servers_));
    TF_RETURN_IF_ERROR(IndexOf(ctx, &index_of_, &indexes_));
    TF_RETURN_IF_ERROR(ctx->GetAttr("dims", &dims_));
    if (static_cast<int>(index_of_.size()) != tables_ ||
        static_cast<int>(dims_.size()) != tables_) {
      return absl::InvalidArgumentError("index_of and dims need one value per table");
    }
    for (int64_t d : dims_) {
      if (d < 1) return absl::InvalidArgumentError("dims must be >= 1");
    }
    return absl::OkStatus();
  }

  // starts[s][t]: where table t's block starts in server s's flat vectors;
  // starts[s][T]: their length. Checks each server's sizes, and every key's server and
  // slot (inputs server, slot: T tensors each, from `first`).
  absl::Status Starts(OpKernelContext* ctx, int sizes_first, int routes_first,
                      std::vector<std::vector<int64_t>>* starts) const {
    starts->assign(servers_, std::vector<int64_t>(tables_ + 1, 0));
    std::vector<std::vector<int32_t>> count(servers_);
    for (int s = 0; s < servers_; ++s) {
      const Tensor& sizes = ctx->input(sizes_first + s);
      if (sizes.dims() != 1 || sizes.NumElements() != indexes_) {
        return absl::InvalidArgumentError(absl::StrCat(
            "sizes[", s, "] must hold one count per index (", indexes_, "), got shape ",
            sizes.shape().DebugString()));
      }
      count[s].assign(sizes.flat<int32_t>().data(), sizes.flat<int32_t>().data() + indexes_);
      for (int t = 0; t < tables_; ++t) {
        (*starts)[s][t + 1] = (*starts)[s][t] + count[s][index_of_[t]] * dims_[t];
      }
    }
    for (int t = 0; t < tables_; ++t) {
      const Tensor& server = ctx->input(routes_first + t);
      const Tensor& slot = ctx->input(routes_first + tables_ + t);
      if (server.dims() != 1 || slot.shape() != server.shape()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "server[", t, "] and slot[", t, "] must be 1-D of one length"));
      }
      const int32_t* on = server.flat<int32_t>().data();
      const int64_t* at = slot.flat<int64_t>().data();
      for (int64_t j = 0; j < server.NumElements(); ++j) {
        if (on[j] < 0 || on[j] >= servers_ || at[j] < 0 ||
            at[j] >= count[on[j]][index_of_[t]]) {
          return absl::InvalidArgumentError(absl::StrCat(
              "table ", t, " key ", j, ": server ", on[j], " slot ", at[j],
              " is outside the routed keys"));
        }
      }
    }
    return absl::OkStatus();
  }

  int tables_ = 0, servers_ = 0, indexes_ = 0;
  std::vector<int32_t> index_of_;
  std::vector<int64_t> dims_;
};

// Inputs: flats (S), sizes (S), server (T), slot (T).
class UnrouteRowsOp : public OpKernel {
 public:
  explicit UnrouteRowsOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, routing_.Init(ctx));
  }

  void Compute(OpKernelContext* ctx) override {
    const int S = routing_.servers_, T = routing_.tables_;
    std::vector<std::vector<int64_t>> starts;
    OP_REQUIRES_OK(ctx, routing_.Starts(ctx, S, 2 * S, &starts));
    std::vector<const float*> flat(S);
    for (int s = 0; s < S; ++s) {
      const Tensor& f = ctx->input(s);
      OP_REQUIRES(ctx, f.dims() == 1 && f.NumElements() == starts[s][T],
                  absl::InvalidArgumentError(absl::StrCat(
                      "flats[", s, "] holds ", f.NumElements(), " values, its tables ",
                      starts[s][T])));
      flat[s] = f.flat<float>().data();
    }
    OpOutputList vectors;
    OP_REQUIRES_OK(ctx, ctx->output_list("vectors", &vectors));
    for (int t = 0; t < T; ++t) {
      const Tensor& server = ctx->input(2 * S + t);
      const int32_t* on = server.flat<int32_t>().data();
      const int64_t* at = ctx->input(2 * S + T + t).flat<int64_t>().data();
      const int64_t n = server.NumElements(), dim = routing_.dims_[t];
      Tensor* out = nullptr;
      OP_REQUIRES_OK(ctx, vectors.allocate(t, TensorShape({n, dim}), &out));
      float* to = out->flat<float>().data();
      for (int64_t j = 0; j < n; ++j, to += dim) {
        std::memcpy(to, flat[on[j]] + starts[on[j]][t] + at[j] * dim, dim * sizeof(float));
      }
    }
  }

 private:
  Unrouting routing_;
};

// Inputs: grads (T), sizes (S), server (T), slot (T).
class RouteRowGradsOp : public OpKernel {
 public:
  explicit RouteRowGradsOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, routing_.Init(ctx));
  }

  void Compute(OpKernelContext* ctx) override {
    const int S = routing_.servers_, T = routing_.tables_;
    std::vector<std::vector<int64_t>> starts;
    OP_REQUIRES_OK(ctx, routing_.Starts(ctx, T, T + S, &starts));
    OpOutputList flats;
    OP_REQUIRES_OK(ctx, ctx->output_list("flats", &flats));
    std::vector<float*> flat(S);
    for (int s = 0; s < S; ++s) {
      Tensor* out = nullptr;
      OP_REQUIRES_OK(ctx, flats.allocate(s, TensorShape({starts[s][T]}), &out));
      flat[s] = out->flat<float>().data();
      std::fill(flat[s], flat[s] + starts[s][T], 0.0f);
    }
    for (int t = 0; t < T; ++t) {
      const Tensor& grad = ctx->input(t);
      const Tensor& server = ctx->input(T + S + t);
      const int64_t n = server.NumElements(), dim = routing_.dims_[t];
      OP_REQUIRES(ctx, grad.dims() == 2 && grad.dim_size(0) == n && grad.dim_size(1) == dim,
                  absl::InvalidArgumentError(absl::StrCat(
                      "grads[", t, "] must be [", n, ", ", dim, "], got ",
                      grad.shape().DebugString())));
      const int32_t* on = server.flat<int32_t>().data();
      const int64_t* at = ctx->input(T + S + T + t).flat<int64_t>().data();
      const float* from = grad.flat<float>().data();
      for (int64_t j = 0; j < n; ++j, from += dim) {
        float* to = flat[on[j]] + starts[on[j]][t] + at[j] * dim;
        for (int64_t d = 0; d < dim; ++d) to[d] += from[d];
      }
    }
  }

 private:
  Unrouting routing_;
};

}  // namespace

REGISTER_OP("RouteKeys")
    .Input("keys: T * int64")
    .Output("packed: servers * int64")
    .Output("sizes: servers * int32")
    .Output("server: T * int32")
    .Output("slot: T * int64")
    .Attr("T: int >= 1")
    .Attr("servers: int >= 1")
    .Attr("index_of: list(int)")
    .SetShapeFn([](InferenceContext* c) {
      int servers = 0;
      TF_RETURN_IF_ERROR(c->GetAttr("servers", &servers));
      const int tables = c->num_inputs();
      for (int s = 0; s < 2 * servers; ++s) c->set_output(s, c->Vector(c->UnknownDim()));
      for (int t = 0; t < tables; ++t) {
        c->set_output(2 * servers + t, c->input(t));
        c->set_output(2 * servers + tables + t, c->input(t));
      }
      return absl::OkStatus();
    });
REGISTER_KERNEL_BUILDER(Name("RouteKeys").Device(::tensorflow::DEVICE_CPU), RouteKeysOp);

REGISTER_OP("UnrouteRows")
    .Input("flats: S * float")
    .Input("sizes: S * int32")
    .Input("server: T * int32")
    .Input("slot: T * int64")
    .Output("vectors: T * float")
    .Attr("S: int >= 1")
    .Attr("T: int >= 1")
    .Attr("index_of: list(int)")
    .Attr("dims: list(int)")
    .SetShapeFn([](InferenceContext* c) {
      int servers = 0;
      std::vector<int64_t> dims;
      TF_RETURN_IF_ERROR(c->GetAttr("S", &servers));
      TF_RETURN_IF_ERROR(c->GetAttr("dims", &dims));
      for (int t = 0; t < c->num_outputs(); ++t) {
        c->set_output(t, c->Matrix(c->Dim(c->input(2 * servers + t), 0),
                                   t < static_cast<int>(dims.size()) ? dims[t] : -1));
      }
      return absl::OkStatus();
    });
REGISTER_KERNEL_BUILDER(Name("UnrouteRows").Device(::tensorflow::DEVICE_CPU), UnrouteRowsOp);

REGISTER_OP("RouteRowGrads")
    .Input("grads: T * float")
    .Input("sizes: S * int32")
    .Input("server: T * int32")
    .Input("slot: T * int64")
    .Output("flats: S * float")
    .Attr("S: int >= 1")
    .Attr("T: int >= 1")
    .Attr("index_of: list(int)")
    .Attr("dims: list(int)")
    .SetShapeFn([](InferenceContext* c) {
      for (int s = 0; s < c->num_outputs(); ++s) c->set_output(s, c->Vector(c->UnknownDim()));
      return absl::OkStatus();
    });
REGISTER_KERNEL_BUILDER(Name("RouteRowGrads").Device(::tensorflow::DEVICE_CPU),
                        RouteRowGradsOp);

}  // namespace recsys_dist
