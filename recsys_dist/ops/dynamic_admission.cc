// Admission of ids into dynamic tables, one kernel per parameter server and step.
//
//   AdmitIds: the keys of N id indexes (one server's shards of a model's dynamic
//             tables, concatenated, with their sizes) -> the row of each key (-1: none),
//             after counting the keys not admitted yet, giving the keys that are due a
//             row each and inserting them, and marking every row as seen today.
//
// The state stays in stock TensorFlow resources (recsys_dist/models/dynamic_table.py):
// per index a MutableHashTable id -> row, a MutableHashTable id -> sightings, and the
// variables next_row, last_seen, dropped_full, waiting, day and counting. So checkpoints,
// eviction, evaluation and export keep using stock ops; only this step is fused. The
// stock-op chain it replaces ran some 40 small ops per index under a tf.CriticalSection;
// here one mutex per index makes its find, count, allocation and insertion one step,
// so concurrent workers never give one id two rows nor two ids one row.

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

#include "tensorflow/core/framework/lookup_interface.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/resource_mgr.h"
#include "tensorflow/core/framework/resource_var.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/framework/tensor.h"

namespace recsys_dist {
namespace {

using ::tensorflow::DT_INT64;
using ::tensorflow::HandleFromInput;
using ::tensorflow::LookupResource;
using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;
using ::tensorflow::Var;
using ::tensorflow::core::RefCountPtr;
using ::tensorflow::lookup::LookupInterface;
using ::tensorflow::shape_inference::InferenceContext;

// The state inputs, in this order, each a list of N resources (one per index).
enum State { kIndex, kCounts, kNextRow, kLastSeen, kDroppedFull, kWaiting, kDay, kCounting,
             kStates };
constexpr const char* kStateNames[kStates] = {
    "indexes", "counts", "next_rows", "last_seen", "dropped_full", "waiting", "days",
    "counting"};

// One mutex per id index (keyed by the table object), held while a step finds, counts,
// allocates and inserts. Entries are never removed: a table's address reused later is
// a new table, and sharing its mutex is harmless.
std::mutex* IndexMutex(const LookupInterface* table) {
  static std::mutex registry_mu;
  static auto* registry = new std::map<const LookupInterface*, std::unique_ptr<std::mutex>>();
  std::lock_guard<std::mutex> lock(registry_mu);
  auto& slot = (*registry)[table];
  if (!slot) slot = std::make_unique<std::mutex>();
  return slot.get();
}

// A variable's tensor, ready to be written in place (copied first if a reader still
// holds its buffer, as TensorFlow's own update kernels do). Call with var->mu() held.
absl::Status Writable(OpKernelContext* ctx, Var* var, Tensor** out) {
  Tensor* tensor = var->tensor();
  if (!tensor->RefCountIsOne()) {
    Tensor copy;
    TF_RETURN_IF_ERROR(ctx->allocate_temp(tensor->dtype(), tensor->shape(), &copy));
    copy.flat<int64_t>() = tensor->flat<int64_t>();
    *tensor = copy;
  }
  *out = tensor;
  return absl::OkStatus();
}

class AdmitIdsOp : public OpKernel {
 public:
  explicit AdmitIdsOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("N", &n_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("capacity", &capacity_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("admit_after", &admit_after_));
    OP_REQUIRES(ctx, capacity_.size() == n_ && admit_after_.size() == n_,
                absl::InvalidArgumentError("capacity and admit_after need one value per index"));
    for (int i = 0; i < n_; ++i) {
      OP_REQUIRES(ctx, capacity_[i] >= 0 && admit_after_[i] >= 1,
                  absl::InvalidArgumentError("capacity must be >= 0 and admit_after >= 1"));
    }
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& keys = ctx->input(kStates * n_);
    const Tensor& sizes = ctx->input(kStates * n_ + 1);
    OP_REQUIRES(ctx, keys.dims() == 1, absl::InvalidArgumentError("keys must be 1-D"));
    OP_REQUIRES(ctx, sizes.dims() == 1 && sizes.NumElements() == n_,
                absl::InvalidArgumentError("sizes must hold one count per index"));
    const auto size = sizes.flat<int32_t>();
    int64_t total = 0;
    for (int i = 0; i < n_; ++i) {
      OP_REQUIRES(ctx, size(i) >= 0, absl::InvalidArgumentError("sizes must be >= 0"));
      total += size(i);
    }
    OP_REQUIRES(ctx, total == keys.NumElements(),
                absl::InvalidArgumentError("sizes do not add up to the number of keys"));

    Tensor* rows = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, keys.shape(), &rows));
    const int64_t* all_keys = keys.flat<int64_t>().data();
    int64_t* all_rows = rows->flat<int64_t>().data();
    int64_t offset = 0;
    for (int i = 0; i < n_; ++i) {
      // Own tensors per index: a slice of keys may miss Eigen's alignment.
      const TensorShape shape({size(i)});
      Tensor index_keys(DT_INT64, shape), index_rows(DT_INT64, shape);
      std::copy(all_keys + offset, all_keys + offset + size(i), index_keys.flat<int64_t>().data());
      OP_REQUIRES_OK(ctx, AdmitOne(ctx, i, index_keys, &index_rows));
      std::copy(index_rows.flat<int64_t>().data(), index_rows.flat<int64_t>().data() + size(i),
                all_rows + offset);
      offset += size(i);
    }
  }

 private:
  template <typename T>
  absl::Status Get(OpKernelContext* ctx, State state, int i, RefCountPtr<T>* out) {
    absl::Status status = LookupResource(ctx, HandleFromInput(ctx, state * n_ + i), out);
    if (!status.ok()) {
      return absl::Status(status.code(), absl::StrCat(kStateNames[state], "[", i, "]: ",
                                                      status.message()));
    }
    return absl::OkStatus();
  }

  // A state variable initialized with the dtype and rank the kernel reads it as (another
  // would abort the process in Eigen's checks, not fail the step).
  static absl::Status Expect(Var* var, ::tensorflow::DataType dtype, int dims, State state,
                             int i) {
    ::tensorflow::mutex_lock lock(*var->mu());
    const Tensor& tensor = *var->tensor();
    if (!var->is_initialized) {
      return absl::FailedPreconditionError(
          absl::StrCat(kStateNames[state], "[", i, "]: variable not initialized"));
    }
    if (tensor.dtype() != dtype || tensor.dims() != dims) {
      return absl::InvalidArgumentError(absl::StrCat(
          kStateNames[state], "[", i, "]: expected a ", dims == 0 ? "scalar " : "1-D ",
          ::tensorflow::DataTypeString(dtype), " variable, got ",
          ::tensorflow::DataTypeString(tensor.dtype()), " ", tensor.shape().DebugString()));
    }
    return absl::OkStatus();
  }

  template <typename T>
  static T Read(Var* var) {
    ::tensorflow::mutex_lock lock(*var->mu());
    return var->tensor()->scalar<T>()();
  }

  static absl::Status Add(OpKernelContext* ctx, Var* var, int64_t amount) {
    if (amount == 0) return absl::OkStatus();
    ::tensorflow::mutex_lock lock(*var->mu());
    Tensor* tensor = nullptr;
    TF_RETURN_IF_ERROR(Writable(ctx, var, &tensor));
    tensor->scalar<int64_t>()() += amount;
    return absl::OkStatus();
  }

  // Index i: keys -> rows.
  absl::Status AdmitOne(OpKernelContext* ctx, int i, const Tensor& keys, Tensor* out) {
    RefCountPtr<LookupInterface> index, counts;
    RefCountPtr<Var> next_row, last_seen, dropped_full, waiting, day, counting;
    TF_RETURN_IF_ERROR(Get(ctx, kIndex, i, &index));
    TF_RETURN_IF_ERROR(Get(ctx, kCounts, i, &counts));
    TF_RETURN_IF_ERROR(Get(ctx, kNextRow, i, &next_row));
    TF_RETURN_IF_ERROR(Get(ctx, kLastSeen, i, &last_seen));
    TF_RETURN_IF_ERROR(Get(ctx, kDroppedFull, i, &dropped_full));
    TF_RETURN_IF_ERROR(Get(ctx, kWaiting, i, &waiting));
    TF_RETURN_IF_ERROR(Get(ctx, kDay, i, &day));
    TF_RETURN_IF_ERROR(Get(ctx, kCounting, i, &counting));
    if (index->key_dtype() != DT_INT64 || index->value_dtype() != DT_INT64 ||
        counts->key_dtype() != DT_INT64 || counts->value_dtype() != DT_INT64) {
      return absl::InvalidArgumentError("indexes and counts must map int64 to int64");
    }
    TF_RETURN_IF_ERROR(Expect(next_row.get(), DT_INT64, 0, kNextRow, i));
    TF_RETURN_IF_ERROR(Expect(last_seen.get(), DT_INT64, 1, kLastSeen, i));
    TF_RETURN_IF_ERROR(Expect(dropped_full.get(), DT_INT64, 0, kDroppedFull, i));
    TF_RETURN_IF_ERROR(Expect(waiting.get(), DT_INT64, 0, kWaiting, i));
    TF_RETURN_IF_ERROR(Expect(day.get(), DT_INT64, 0, kDay, i));
    TF_RETURN_IF_ERROR(Expect(counting.get(), ::tensorflow::DT_BOOL, 0, kCounting, i));
    const int64_t capacity = capacity_[i], admit_after = admit_after_[i];
    {
      ::tensorflow::mutex_lock lock(*last_seen->mu());
      const int64_t rows_held = last_seen->tensor()->NumElements();
      if (capacity > rows_held) {
        return absl::InvalidArgumentError(absl::StrCat(
            "capacity[", i, "] is ", capacity, " rows but last_seen[", i, "] holds ",
            rows_held));
      }
    }
    const int64_t n = keys.NumElements();
    const auto key = keys.flat<int64_t>();
    auto row = out->flat<int64_t>();
    Tensor minus_one(DT_INT64, TensorShape({})), zero(DT_INT64, TensorShape({}));
    minus_one.scalar<int64_t>()() = -1;
    zero.scalar<int64_t>()() = 0;
    const int64_t counting_on = Read<bool>(counting.get()) ? 1 : 0;
    const int64_t today = Read<int64_t>(day.get());
    int64_t refused = 0;
    {
      std::lock_guard<std::mutex> admission(*IndexMutex(index.get()));
      TF_RETURN_IF_ERROR(index->Find(ctx, keys, out, minus_one));
      std::vector<int64_t> missing;  // positions in keys, in order
      for (int64_t k = 0; k < n; ++k) {
        if (row(k) < 0) missing.push_back(k);
      }
      if (!missing.empty() && admit_after > 1) {
        Tensor candidates(DT_INT64, TensorShape({static_cast<int64_t>(missing.size())}));
        Tensor seen(DT_INT64, candidates.shape());
        for (size_t m = 0; m < missing.size(); ++m) {
          candidates.flat<int64_t>()(m) = key(missing[m]);
        }
        TF_RETURN_IF_ERROR(counts->Find(ctx, candidates, &seen, zero));
        std::vector<int64_t> ready, waiting_keys, waiting_seen;
        for (size_t m = 0; m < missing.size(); ++m) {
          const int64_t s = seen.flat<int64_t>()(m) + counting_on;
          if (s >= admit_after) {
            ready.push_back(missing[m]);
          } else if (counting_on) {
            waiting_keys.push_back(key(missing[m]));
            waiting_seen.push_back(s);
          }
        }
        if (!waiting_keys.empty()) {
          TF_RETURN_IF_ERROR(counts->Insert(ctx, Vector(waiting_keys), Vector(waiting_seen)));
        }
        missing.swap(ready);
      }
      if (!missing.empty()) {
        ::tensorflow::mutex_lock rows_lock(*next_row->mu());
        Tensor* counter = nullptr;
        TF_RETURN_IF_ERROR(Writable(ctx, next_row.get(), &counter));
        const int64_t start = counter->scalar<int64_t>()();
        const int64_t wanted = static_cast<int64_t>(missing.size());
        const int64_t take = std::min(wanted, std::max<int64_t>(capacity - start, 0));
        if (take > 0) {
          std::vector<int64_t> admitted(take), given(take);
          for (int64_t m = 0; m < take; ++m) {
            admitted[m] = key(missing[m]);
            given[m] = start + m;
            row(missing[m]) = start + m;
          }
          const Tensor admitted_keys = Vector(admitted);
          TF_RETURN_IF_ERROR(index->Insert(ctx, admitted_keys, Vector(given)));
          if (admit_after > 1) TF_RETURN_IF_ERROR(counts->Remove(ctx, admitted_keys));
          counter->scalar<int64_t>()() = start + take;
        }
        refused = wanted - take;
      }
    }
    // Outside the admission: the lookups without a row, and the rows seen today.
    int64_t without_row = 0;
    {
      ::tensorflow::mutex_lock lock(*last_seen->mu());
      Tensor* seen_on = nullptr;
      TF_RETURN_IF_ERROR(Writable(ctx, last_seen.get(), &seen_on));
      auto seen = seen_on->flat<int64_t>();
      const int64_t rows_held = seen.size();
      for (int64_t k = 0; k < n; ++k) {
        const int64_t r = row(k);
        if (r < 0) {
          ++without_row;
        } else if (r < rows_held) {
          seen(r) = today;
        } else {
          return absl::FailedPreconditionError(absl::StrCat(
              "indexes[", i, "] gives key ", key(k), " row ", r, ", past the ", rows_held,
              " rows of last_seen[", i, "]"));
        }
      }
    }
    TF_RETURN_IF_ERROR(Add(ctx, dropped_full.get(), refused));
    return Add(ctx, waiting.get(), without_row);
  }

  static Tensor Vector(const std::vector<int64_t>& values) {
    Tensor tensor(DT_INT64, TensorShape({static_cast<int64_t>(values.size())}));
    std::copy(values.begin(), values.end(), tensor.flat<int64_t>().data());
    return tensor;
  }

  int n_ = 0;
  std::vector<int64_t> capacity_, admit_after_;
};

}  // namespace

REGISTER_OP("AdmitIds")
    .Input("indexes: N * resource")
    .Input("counts: N * resource")
    .Input("next_rows: N * resource")
    .Input("last_seen: N * resource")
    .Input("dropped_full: N * resource")
    .Input("waiting: N * resource")
    .Input("days: N * resource")
    .Input("counting: N * resource")
    .Input("keys: int64")
    .Input("sizes: int32")
    .Output("rows: int64")
    .Attr("N: int >= 1")
    .Attr("capacity: list(int)")
    .Attr("admit_after: list(int)")
    .SetIsStateful()
    .SetShapeFn([](InferenceContext* c) {
      c->set_output(0, c->input(c->num_inputs() - 2));
      return absl::OkStatus();
    });
REGISTER_KERNEL_BUILDER(Name("AdmitIds").Device(::tensorflow::DEVICE_CPU), AdmitIdsOp);

}  // namespace recsys_dist
