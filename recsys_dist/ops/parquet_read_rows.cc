// ParquetReadRows: rows start, start + stride, ... below stop of chosen columns of one
// Parquet file, in-graph (stride 1: the range [start, stop)).
//
// Built against the TensorFlow and pyarrow (Arrow C++) that are installed; see
// recsys_dist/ops/build.py. Reads only the row groups that overlap the range and only
// the leaf columns asked for, through Arrow's filesystems (local, s3://, hdfs://).
//
// Outputs, for N columns:
//   values[i]:     scalar column: [rows] of dtypes[i], nulls as 0 / "" / false;
//                  list column (ragged[i]): the flat elements, null elements as 0 / "".
//   valid[i]:      scalar column: [rows], false where the value is null;
//                  list column: one flag per element, false for a null element.
//   row_splits[i]: list column: [rows + 1]; a null list is an empty list.
//                  scalar column: [0].
// Errors name the file (its URI) and the column, and keep Arrow's own reason:
// InvalidArgument for a file that is not readable Parquet or does not fit the columns,
// NotFound for a missing file, FailedPrecondition for a storage failure (denied, or still
// failing after the retries of a transient error: "<uri>: cannot read from storage: ...").
// Never Unavailable: a ClusterCoordinator would take that for a lost worker and retry.

#include <functional>
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "arrow/api.h"
#include "arrow/array/concatenate.h"
#include "arrow/compute/api_vector.h"
#include "arrow/compute/initialize.h"
#include "arrow/filesystem/api.h"
#include "arrow/filesystem/s3fs.h"
#include "arrow/io/api.h"
#include "arrow/util/byte_size.h"
#include "arrow/util/uri.h"
#include "parquet/arrow/reader.h"
#include "parquet/arrow/schema.h"
#include "parquet/exception.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/tensor_shape.h"

namespace recsys_dist {
namespace {

using ::tensorflow::DataType;
using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;
using ::tensorflow::tstring;

// ---- errors ---------------------------------------------------------------------------

absl::Status Invalid(const std::string& path, const std::string& what) {
  return absl::InvalidArgumentError(path + ": " + what);
}

bool Contains(const std::string& text, const char* part) {
  return text.find(part) != std::string::npos;
}

// Whether Arrow failed to reach the bytes (S3, HDFS or the OS said no) rather than found
// them unreadable as Parquet.
bool IsStorageFailure(const arrow::Status& st) {
  const std::string& m = st.message();
  return st.IsIOError() && (Contains(m, "AWS Error") || Contains(m, "errno") ||
                            Contains(m, "HDFS") || Contains(m, "hdfs"));
}

absl::Status FromArrow(const std::string& path, const arrow::Status& st,
                       const std::string& doing) {
  const std::string& m = st.message();
  if (st.IsIOError() && (Contains(m, "Path does not exist") || Contains(m, "No such file") ||
                         Contains(m, "NoSuchKey") || Contains(m, "NoSuchBucket"))) {
    return absl::NotFoundError(path + ": " + doing + ": " + m);
  }
  if (IsStorageFailure(st)) {
    return absl::FailedPreconditionError(path + ": cannot read from storage: " + m);
  }
  return absl::InvalidArgumentError(path + ": " + doing + ": " + m);
}

#define RD_RETURN_ARROW(path, expr, doing)                          \
  do {                                                              \
    ::arrow::Status _st = (expr);                                   \
    if (!_st.ok()) return FromArrow((path), _st, (doing));          \
  } while (0)

// ---- filesystems ----------------------------------------------------------------------

std::mutex g_fs_mutex;
std::map<std::string, std::shared_ptr<arrow::fs::FileSystem>> g_filesystems;
bool g_s3_finalizer_registered = false;

void FinalizeS3AtExit() { (void)arrow::fs::EnsureS3Finalized(); }

double EnvSeconds(const char* name, double fallback) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return fallback;
  char* end = nullptr;
  double parsed = std::strtod(value, &end);
  return (end != value && parsed > 0) ? parsed : fallback;
}

// Attempts per S3 request: AWS_MAX_ATTEMPTS (RECSYS_DIST_S3_MAX_ATTEMPTS wins when set),
// default 3, as recsys_dist/filesystems.py reads it for s3fs.
int64_t MaxAttempts() {
  double attempts = EnvSeconds("RECSYS_DIST_S3_MAX_ATTEMPTS", -1);
  if (attempts < 1) attempts = EnvSeconds("AWS_MAX_ATTEMPTS", 3);
  return std::max<int64_t>(1, static_cast<int64_t>(attempts));
}

// Retries what the AWS SDK marks retryable (5xx, throttling such as 503 SlowDown, a
// reset or timed-out connection), never a 403 or 404, up to `max_attempts` attempts in
// all, after a random wait of up to 1 s, 2 s, 4 s, ... (at most 20 s): exponential
// backoff with full jitter, as botocore's "standard" mode does for s3fs.
class JitteredRetryStrategy : public arrow::fs::S3RetryStrategy {
 public:
  explicit JitteredRetryStrategy(int64_t max_attempts) : max_attempts_(max_attempts) {}
  bool ShouldRetry(const AWSErrorDetail& error, int64_t attempted_retries) override {
    return error.should_retry && attempted_retries + 1 < max_attempts_;
  }
  int64_t CalculateDelayBeforeNextRetry(const AWSErrorDetail&,
                                        int64_t attempted_retries) override {
    const double cap = std::min(20.0, static_cast<double>(1LL << std::min<int64_t>(
                                          attempted_retries, 5)));
    std::lock_guard<std::mutex> lock(mu_);
    return static_cast<int64_t>(std::uniform_real_distribution<double>(0, cap)(rng_) * 1000);
  }

 private:
  const int64_t max_attempts_;
  std::mutex mu_;
  std::mt19937_64 rng_{std::random_device{}()};
};

// S3 settings come from the standard AWS variables, the same ones s3fs/boto3 read:
// AWS_ENDPOINT_URL (e.g. http://127.0.0.1:9000), AWS_REGION, AWS_ACCESS_KEY_ID,
// AWS_SECRET_ACCESS_KEY, AWS_MAX_ATTEMPTS. Connect and request timeouts bound a dead or
// hanging endpoint (on Linux the request timeout ends a transfer that moved nothing for
// that long).
absl::Status MakeS3(const std::string& path, std::shared_ptr<arrow::fs::FileSystem>* out) {
  // Before S3Options::Defaults(): that builds the AWS credential chain, which needs an
  // initialized SDK (without it the first s3:// read crashes in the config loader).
  arrow::Status init = arrow::fs::EnsureS3Initialized();
  if (!init.ok()) return FromArrow(path, init, "initializing S3");
  arrow::fs::S3Options options = arrow::fs::S3Options::Defaults();
  const char* endpoint = std::getenv("AWS_ENDPOINT_URL_S3");
  if (endpoint == nullptr || *endpoint == '\0') endpoint = std::getenv("AWS_ENDPOINT_URL");
  if (endpoint != nullptr && *endpoint != '\0') {
    std::string url(endpoint);
    size_t sep = url.find("://");
    if (sep != std::string::npos) {
      options.scheme = url.substr(0, sep);
      url = url.substr(sep + 3);
    }
    while (!url.empty() && url.back() == '/') url.pop_back();
    options.endpoint_override = url;
  }
  const char* region = std::getenv("AWS_REGION");
  if (region == nullptr || *region == '\0') region = std::getenv("AWS_DEFAULT_REGION");
  if (region != nullptr && *region != '\0') options.region = region;
  options.connect_timeout = EnvSeconds("RECSYS_DIST_S3_CONNECT_TIMEOUT", 5.0);
  options.request_timeout = EnvSeconds("RECSYS_DIST_S3_REQUEST_TIMEOUT", 30.0);
  options.retry_strategy = std::make_shared<JitteredRetryStrategy>(MaxAttempts());
  auto made = arrow::fs::S3FileSystem::Make(options);
  if (!made.ok()) return FromArrow(path, made.status(), "connecting to S3");
  if (!g_s3_finalizer_registered) {
    // After the first S3 filesystem exists; registered earlier, Arrow's own static
    // teardown would run first and the process would crash at exit.
    std::atexit(FinalizeS3AtExit);
    g_s3_finalizer_registered = true;
  }
  *out = *made;
  return absl::OkStatus();
}

// The filesystem for `path` and the path in its terms. Filesystems are cached per
// scheme and authority: building an S3 client per call would cost a handshake.
absl::Status ResolvePath(const std::string& path, std::shared_ptr<arrow::fs::FileSystem>* fs,
                         std::string* inner) {
  size_t sep = path.find("://");
  std::string scheme = sep == std::string::npos ? "" : path.substr(0, sep);
  std::lock_guard<std::mutex> lock(g_fs_mutex);
  if (scheme == "s3" || scheme == "s3a") {
    *inner = path.substr(sep + 3);
    size_t query = inner->find('?');
    if (query != std::string::npos) inner->resize(query);
    // Keyed by the settings too: a process whose variables change gets a new client.
    std::string key = "s3";
    for (const char* name : {"AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "AWS_REGION",
                             "AWS_DEFAULT_REGION", "AWS_MAX_ATTEMPTS",
                             "RECSYS_DIST_S3_MAX_ATTEMPTS", "RECSYS_DIST_S3_CONNECT_TIMEOUT",
                             "RECSYS_DIST_S3_REQUEST_TIMEOUT"}) {
      const char* value = std::getenv(name);
      key += std::string("\x1e") + (value == nullptr ? "" : value);
    }
    auto found = g_filesystems.find(key);
    if (found == g_filesystems.end()) {
      std::shared_ptr<arrow::fs::FileSystem> made;
      absl::Status st = MakeS3(path, &made);
      if (!st.ok()) return st;
      found = g_filesystems.emplace(key, made).first;
    }
    *fs = found->second;
    return absl::OkStatus();
  }
  if (scheme.empty() || scheme == "file") {
    *inner = scheme.empty() ? path : path.substr(sep + 3);
    auto found = g_filesystems.find("file");
    if (found == g_filesystems.end()) {
      found = g_filesystems.emplace("file", std::make_shared<arrow::fs::LocalFileSystem>())
                  .first;
    }
    *fs = found->second;
    return absl::OkStatus();
  }
  // hdfs:// and anything else Arrow knows, keyed by scheme://authority.
  size_t slash = path.find('/', sep + 3);
  std::string key = slash == std::string::npos ? path : path.substr(0, slash);
  auto found = g_filesystems.find(key);
  if (found != g_filesystems.end()) {
    auto resolved = found->second->PathFromUri(path);
    if (resolved.ok()) {
      *fs = found->second;
      *inner = *resolved;
      return absl::OkStatus();
    }
  }
  std::string resolved;
  auto made = arrow::fs::FileSystemFromUriOrPath(path, &resolved);
  if (!made.ok()) return FromArrow(path, made.status(), "opening the filesystem");
  if (found == g_filesystems.end()) found = g_filesystems.emplace(key, *made).first;
  *fs = found->second;
  *inner = resolved;
  return absl::OkStatus();
}

// ---- decoded row groups ---------------------------------------------------------------

// Row groups read for a partial range stay decoded, up to a byte budget, so the other
// work items cut from one large row group do not decode it again.
struct CachedGroup {
  std::string key;
  std::shared_ptr<arrow::Table> table;
  int64_t bytes;
};

class GroupCache {
 public:
  std::shared_ptr<arrow::Table> Get(const std::string& key) {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = entries_.begin(); it != entries_.end(); ++it) {
      if (it->key == key) {
        entries_.splice(entries_.begin(), entries_, it);
        return entries_.front().table;
      }
    }
    return nullptr;
  }
  void Put(const std::string& key, std::shared_ptr<arrow::Table> table) {
    // Every buffer, children (list elements) and dictionaries included.
    const int64_t bytes = arrow::util::TotalBufferSize(*table);
    if (bytes > Budget()) return;
    std::lock_guard<std::mutex> lock(mu_);
    entries_.push_front({key, std::move(table), bytes});
    used_ += bytes;
    while (used_ > Budget() && !entries_.empty()) {
      used_ -= entries_.back().bytes;
      entries_.pop_back();
    }
  }

 private:
  // RECSYS_DIST_PARQUET_CACHE_MB, default 256; 0 turns the cache off.
  static int64_t Budget() {
    static const int64_t budget = [] {
      const char* value = std::getenv("RECSYS_DIST_PARQUET_CACHE_MB");
      char* end = nullptr;
      double mb = value == nullptr ? -1 : std::strtod(value, &end);
      if (value == nullptr || end == value || !(mb >= 0)) mb = 256;
      return static_cast<int64_t>(mb * (1 << 20));
    }();
    return budget;
  }
  std::mutex mu_;
  std::list<CachedGroup> entries_;
  int64_t used_ = 0;
};

GroupCache& Cache() {
  static GroupCache* cache = new GroupCache();
  return *cache;
}

// ---- conversion -----------------------------------------------------------------------

std::string TypeName(const arrow::DataType& type) { return type.ToString(); }

// Calls `fn(i, value)` for every element of a primitive numeric or boolean array, as T.
template <typename T, typename Fn>
bool VisitNumbers(const arrow::Array& array, Fn&& fn) {
  const int64_t n = array.length();
#define RD_CASE(TYPE_ID, ARRAY)                                              \
  case arrow::Type::TYPE_ID: {                                              \
    const auto& a = static_cast<const ARRAY&>(array);                       \
    const auto* raw = a.raw_values();                                       \
    for (int64_t i = 0; i < n; ++i) fn(i, static_cast<T>(raw[i]));          \
    return true;                                                            \
  }
  switch (array.type_id()) {
    RD_CASE(INT8, arrow::Int8Array)
    RD_CASE(INT16, arrow::Int16Array)
    RD_CASE(INT32, arrow::Int32Array)
    RD_CASE(INT64, arrow::Int64Array)
    RD_CASE(UINT8, arrow::UInt8Array)
    RD_CASE(UINT16, arrow::UInt16Array)
    RD_CASE(UINT32, arrow::UInt32Array)
    RD_CASE(UINT64, arrow::UInt64Array)
    RD_CASE(FLOAT, arrow::FloatArray)
    RD_CASE(DOUBLE, arrow::DoubleArray)
    case arrow::Type::BOOL: {
      const auto& a = static_cast<const arrow::BooleanArray&>(array);
      for (int64_t i = 0; i < n; ++i) fn(i, static_cast<T>(a.Value(i) ? 1 : 0));
      return true;
    }
    default:
      return false;
  }
#undef RD_CASE
}

bool IsInteger(arrow::Type::type id) {
  return id >= arrow::Type::UINT8 && id <= arrow::Type::INT64;
}
bool IsFloating(arrow::Type::type id) {
  return id == arrow::Type::FLOAT || id == arrow::Type::DOUBLE;
}
bool IsStringLike(arrow::Type::type id) {
  return id == arrow::Type::STRING || id == arrow::Type::LARGE_STRING ||
         id == arrow::Type::BINARY || id == arrow::Type::LARGE_BINARY ||
         id == arrow::Type::STRING_VIEW || id == arrow::Type::BINARY_VIEW;
}

// Whether an Arrow value type can be read as `dtype` without losing meaning.
bool Readable(arrow::Type::type id, DataType dtype) {
  switch (dtype) {
    case tensorflow::DT_INT32:
    case tensorflow::DT_INT64:
      return IsInteger(id) || id == arrow::Type::BOOL;
    case tensorflow::DT_FLOAT:
    case tensorflow::DT_DOUBLE:
      return IsInteger(id) || IsFloating(id) || id == arrow::Type::BOOL;
    case tensorflow::DT_BOOL:
      return id == arrow::Type::BOOL;
    case tensorflow::DT_STRING:
      return IsStringLike(id);
    default:
      return false;
  }
}

std::string_view StringAt(const arrow::Array& array, int64_t i) {
  switch (array.type_id()) {
    case arrow::Type::STRING:
    case arrow::Type::BINARY:
      return static_cast<const arrow::BinaryArray&>(array).GetView(i);
    case arrow::Type::STRING_VIEW:
    case arrow::Type::BINARY_VIEW:
      return static_cast<const arrow::BinaryViewArray&>(array).GetView(i);
    default:
      return static_cast<const arrow::LargeBinaryArray&>(array).GetView(i);
  }
}

int64_t IndexAt(const arrow::Array& indices, int64_t i) {
  switch (indices.type_id()) {
    case arrow::Type::INT8: return static_cast<const arrow::Int8Array&>(indices).Value(i);
    case arrow::Type::INT16: return static_cast<const arrow::Int16Array&>(indices).Value(i);
    case arrow::Type::INT32: return static_cast<const arrow::Int32Array&>(indices).Value(i);
    case arrow::Type::UINT8: return static_cast<const arrow::UInt8Array&>(indices).Value(i);
    case arrow::Type::UINT16: return static_cast<const arrow::UInt16Array&>(indices).Value(i);
    case arrow::Type::UINT32: return static_cast<const arrow::UInt32Array&>(indices).Value(i);
    case arrow::Type::UINT64:
      return static_cast<int64_t>(static_cast<const arrow::UInt64Array&>(indices).Value(i));
    default: return static_cast<const arrow::Int64Array&>(indices).Value(i);
  }
}

// Writes `array` (a scalar array, possibly dictionary-encoded) into out[0..n) and its
// validity into valid[0..n); null slots get a zero value.
template <typename T>
void FillNumbers(const arrow::Array& array, T* out, bool* valid) {
  const int64_t n = array.length();
  if (array.type_id() == arrow::Type::DICTIONARY) {
    const auto& dict = static_cast<const arrow::DictionaryArray&>(array);
    const arrow::Array& dictionary = *dict.dictionary();
    std::vector<T> values(dictionary.length());
    VisitNumbers<T>(dictionary, [&](int64_t i, T v) { values[i] = v; });
    const arrow::Array& indices = *dict.indices();
    for (int64_t i = 0; i < n; ++i) {
      const int64_t index = array.IsValid(i) ? IndexAt(indices, i) : -1;
      const bool ok = index >= 0 && dictionary.IsValid(index);
      valid[i] = ok;
      out[i] = ok ? values[index] : T(0);
    }
    return;
  }
  bool same = false;
  switch (array.type_id()) {
    case arrow::Type::INT32: same = std::is_same<T, int32_t>::value; break;
    case arrow::Type::INT64: same = std::is_same<T, int64_t>::value; break;
    case arrow::Type::FLOAT: same = std::is_same<T, float>::value; break;
    case arrow::Type::DOUBLE: same = std::is_same<T, double>::value; break;
    default: break;
  }
  const auto* prim = static_cast<const arrow::PrimitiveArray*>(&array);
  if (same && n > 0 && prim->values() != nullptr) {
    // values() is the whole buffer; the array's own offset (a slice) is in elements.
    const T* raw = reinterpret_cast<const T*>(prim->values()->data()) + array.offset();
    std::memcpy(out, raw, n * sizeof(T));
  } else if (same) {
    std::fill(out, out + n, T(0));
  } else {
    VisitNumbers<T>(array, [&](int64_t i, T v) { out[i] = v; });
  }
  if (array.null_count() == 0) {
    std::fill(valid, valid + n, true);
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    valid[i] = array.IsValid(i);
    if (!valid[i]) out[i] = T(0);
  }
}

template <typename ArrayT>
void FillPlainStrings(const arrow::Array& array, tstring* out, bool* valid) {
  const auto& a = static_cast<const ArrayT&>(array);
  const int64_t n = a.length();
  const bool nulls = a.null_count() > 0;
  for (int64_t i = 0; i < n; ++i) {
    valid[i] = !nulls || a.IsValid(i);
    if (valid[i]) {
      const auto v = a.GetView(i);
      out[i].assign(v.data(), v.size());
    }
  }
}

void FillStrings(const arrow::Array& array, tstring* out, bool* valid) {
  const int64_t n = array.length();
  if (array.type_id() == arrow::Type::DICTIONARY) {
    // Parquet's dictionary pages read as a dictionary array (see ReadPieces): each
    // distinct string is looked at once, each row only copies its bytes.
    const auto& dict = static_cast<const arrow::DictionaryArray&>(array);
    const arrow::Array& values = *dict.dictionary();
    const arrow::Array& indices = *dict.indices();
    std::vector<std::string_view> views(values.length());
    std::vector<char> present(values.length());
    for (int64_t k = 0; k < values.length(); ++k) {
      present[k] = values.IsValid(k);
      if (present[k]) views[k] = StringAt(values, k);
    }
    const bool nulls = array.null_count() > 0;
    const int32_t* idx32 = indices.type_id() == arrow::Type::INT32
        ? static_cast<const arrow::Int32Array&>(indices).raw_values() : nullptr;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t index = (nulls && array.IsNull(i)) ? -1
                            : idx32 != nullptr ? idx32[i] : IndexAt(indices, i);
      valid[i] = index >= 0 && present[index];
      if (valid[i]) out[i].assign(views[index].data(), views[index].size());
    }
    return;
  }
  switch (array.type_id()) {
    case arrow::Type::STRING:
    case arrow::Type::BINARY:
      return FillPlainStrings<arrow::BinaryArray>(array, out, valid);
    case arrow::Type::LARGE_STRING:
    case arrow::Type::LARGE_BINARY:
      return FillPlainStrings<arrow::LargeBinaryArray>(array, out, valid);
    default:
      for (int64_t i = 0; i < n; ++i) {
        valid[i] = array.IsValid(i);
        if (valid[i]) {
          std::string_view v = StringAt(array, i);
          out[i].assign(v.data(), v.size());
        }
      }
  }
}

void FillBools(const arrow::Array& array, bool* out, bool* valid) {
  if (array.type_id() == arrow::Type::DICTIONARY) {  // dictionary<bool>, e.g. from IPC
    std::vector<uint8_t> bytes(array.length());
    FillNumbers<uint8_t>(array, bytes.data(), valid);
    for (int64_t i = 0; i < array.length(); ++i) out[i] = bytes[i] != 0;
    return;
  }
  const auto& a = static_cast<const arrow::BooleanArray&>(array);
  for (int64_t i = 0; i < a.length(); ++i) {
    valid[i] = a.IsValid(i);
    out[i] = valid[i] && a.Value(i);
  }
}

// Fills elements [at, at + array.length()) of `values` and `valid`.
void FillScalars(const arrow::Array& array, Tensor* values, bool* valid, int64_t at) {
  switch (values->dtype()) {
    case tensorflow::DT_INT32:
      FillNumbers<int32_t>(array, values->flat<int32_t>().data() + at, valid + at);
      break;
    case tensorflow::DT_INT64:
      FillNumbers<int64_t>(array, values->flat<int64_t>().data() + at, valid + at);
      break;
    case tensorflow::DT_FLOAT:
      FillNumbers<float>(array, values->flat<float>().data() + at, valid + at);
      break;
    case tensorflow::DT_DOUBLE:
      FillNumbers<double>(array, values->flat<double>().data() + at, valid + at);
      break;
    case tensorflow::DT_BOOL:
      FillBools(array, values->flat<bool>().data() + at, valid + at);
      break;
    default:
      FillStrings(array, values->flat<tstring>().data() + at, valid + at);
  }
}

arrow::Type::type ValueTypeId(const arrow::DataType& type) {
  if (type.id() == arrow::Type::DICTIONARY) {
    return static_cast<const arrow::DictionaryType&>(type).value_type()->id();
  }
  return type.id();
}

bool IsList(arrow::Type::type id) {
  return id == arrow::Type::LIST || id == arrow::Type::LARGE_LIST;
}

// The element range [begin, end) of list slot i, and whether the slot is a real list.
void ListSpan(const arrow::Array& array, int64_t i, int64_t* begin, int64_t* end) {
  if (array.IsNull(i)) {
    *begin = *end = 0;
  } else if (array.type_id() == arrow::Type::LIST) {
    const auto& a = static_cast<const arrow::ListArray&>(array);
    *begin = a.value_offset(i);
    *end = a.value_offset(i) + a.value_length(i);
  } else {
    const auto& a = static_cast<const arrow::LargeListArray&>(array);
    *begin = a.value_offset(i);
    *end = a.value_offset(i) + a.value_length(i);
  }
}

std::shared_ptr<arrow::Array> ListValues(const arrow::Array& array) {
  if (array.type_id() == arrow::Type::LIST) {
    return static_cast<const arrow::ListArray&>(array).values();
  }
  return static_cast<const arrow::LargeListArray&>(array).values();
}

// ---- the op ---------------------------------------------------------------------------

// The leaf column indices under each top-level field named in `columns`.
absl::Status LeafIndices(const parquet::arrow::SchemaManifest& manifest,
                         const std::vector<std::string>& columns, const std::string& path,
                         std::vector<int>* leaves) {
  std::function<void(const parquet::arrow::SchemaField&)> collect =
      [&](const parquet::arrow::SchemaField& field) {
        if (field.is_leaf()) leaves->push_back(field.column_index);
        for (const auto& child : field.children) collect(child);
      };
  for (const std::string& column : columns) {
    int found = 0;
    for (const auto& field : manifest.schema_fields) {
      if (field.field->name() == column) {
        if (found++ == 0) collect(field);
      }
    }
    if (found == 0) return Invalid(path, "column '" + column + "' is missing");
    if (found > 1) {
      return Invalid(path, "column '" + column + "' appears " + std::to_string(found) +
                               " times in the file; cannot tell which to read");
    }
  }
  std::sort(leaves->begin(), leaves->end());
  leaves->erase(std::unique(leaves->begin(), leaves->end()), leaves->end());
  return absl::OkStatus();
}

class ParquetReadRowsOp : public OpKernel {
 public:
  explicit ParquetReadRowsOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("columns", &columns_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("dtypes", &dtypes_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("ragged", &ragged_));
    OP_REQUIRES(ctx, columns_.size() == dtypes_.size() && columns_.size() == ragged_.size(),
                absl::InvalidArgumentError(
                    "ParquetReadRows: columns, dtypes and ragged must have one entry each"));
    int n = 0;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("N", &n));
    OP_REQUIRES(ctx, n == static_cast<int>(columns_.size()),
                absl::InvalidArgumentError(
                    "ParquetReadRows: N must equal the number of columns"));
    for (const auto& c : columns_) signature_ += c + "\x1f";
  }

  void Compute(OpKernelContext* ctx) override {
    static const char* const kInputs[] = {"path", "start", "stop", "stride"};
    for (int i = 0; i < 4; ++i) {
      OP_REQUIRES(ctx, ::tensorflow::TensorShapeUtils::IsScalar(ctx->input(i).shape()),
                  absl::InvalidArgumentError(
                      std::string("ParquetReadRows: ") + kInputs[i] + " must be a scalar, got " +
                      ctx->input(i).shape().DebugString()));
    }
    const std::string path(ctx->input(0).scalar<tstring>()());
    const int64_t start = ctx->input(1).scalar<int64_t>()();
    const int64_t stop = ctx->input(2).scalar<int64_t>()();
    const int64_t stride = ctx->input(3).scalar<int64_t>()();
    OP_REQUIRES(ctx, start >= 0 && stop >= start && stride >= 1,
                Invalid(path, "bad row range [" + std::to_string(start) + ", " +
                                  std::to_string(stop) + ") with stride " +
                                  std::to_string(stride)));
    std::vector<std::shared_ptr<arrow::Table>> pieces;
    absl::Status read;
    try {  // Parquet's metadata accessors throw on a corrupt footer
      read = ReadPieces(path, start, stop, stride, &pieces);
    } catch (const std::exception& e) {
      read = Invalid(path, std::string("not a readable Parquet file: ") + e.what());
    }
    OP_REQUIRES_OK(ctx, read);
    int64_t rows = 0;
    for (const auto& piece : pieces) rows += piece->num_rows();
    const int n = static_cast<int>(columns_.size());
    for (int c = 0; c < n; ++c) {
      std::vector<std::shared_ptr<arrow::Array>> chunks;
      for (const auto& piece : pieces) {
        auto column = piece->GetColumnByName(columns_[c]);
        for (const auto& chunk : column->chunks()) chunks.push_back(chunk);
      }
      absl::Status st = ragged_[c] ? EmitList(ctx, c, n, chunks, rows, path)
                                   : EmitScalar(ctx, c, n, chunks, rows, path);
      OP_REQUIRES_OK(ctx, st);
    }
  }

 private:
  // The overlapping row groups of [start, stop), each sliced to the range, or with a
  // stride above 1 to its rows start + k * stride.
  absl::Status ReadPieces(const std::string& path, int64_t start, int64_t stop,
                          int64_t stride, std::vector<std::shared_ptr<arrow::Table>>* pieces) {
    std::shared_ptr<arrow::fs::FileSystem> fs;
    std::string inner;
    absl::Status st = ResolvePath(path, &fs, &inner);
    if (!st.ok()) return st;
    auto info = fs->GetFileInfo(inner);
    if (!info.ok()) return FromArrow(path, info.status(), "cannot open");
    if (info->type() == arrow::fs::FileType::NotFound) {
      return absl::NotFoundError(path + ": no such file");
    }
    if (info->type() != arrow::fs::FileType::File) {
      return Invalid(path, "not a file (a directory?)");
    }
    auto file = fs->OpenInputFile(*info);
    if (!file.ok()) return FromArrow(path, file.status(), "cannot open");
    auto size = (*file)->GetSize();
    if (!size.ok()) return FromArrow(path, size.status(), "cannot read the size");
    if (*size == 0) return Invalid(path, "empty file (0 bytes), not Parquet");
    // Size and modification time: a file rewritten in place is not served from the cache.
    const std::string version =
        std::to_string(*size) + "\x1e" +
        std::to_string(info->mtime().time_since_epoch().count());
    parquet::ArrowReaderProperties properties;
    // Coalesced range reads (few requests) pay on object stores; on a local disk the
    // extra buffering only costs.
    properties.set_pre_buffer(fs->type_name() != "local");
    // Columns decode on Arrow's CPU pool, as pyarrow.parquet.read_table(use_threads=False)
    // does with its I/O threads (measured: 1.6 cores): same CPU time, less wall time for
    // one read (0.64-0.77 -> 0.82-0.85 of pyarrow), no change to the worker pipeline.
    properties.set_use_threads(true);
    parquet::arrow::FileReaderBuilder builder;
    try {
      RD_RETURN_ARROW(path, builder.Open(*file), "not a readable Parquet file");
    } catch (const std::exception& e) {
      return Invalid(path, std::string("not a readable Parquet file: ") + e.what());
    }
    // Scalar string columns read as dictionaries where Parquet stored them so (most
    // writers do): no dense string array is built only to be copied again.
    const parquet::SchemaDescriptor* schema = builder.raw_reader()->metadata()->schema();
    for (int leaf = 0; leaf < schema->num_columns(); ++leaf) {
      const parquet::ColumnDescriptor* column = schema->Column(leaf);
      if (column->physical_type() != parquet::Type::BYTE_ARRAY || column->max_repetition_level() > 0) {
        continue;
      }
      const std::string top = column->path()->ToDotVector()[0];
      for (size_t c = 0; c < columns_.size(); ++c) {
        if (columns_[c] == top && !ragged_[c] && dtypes_[c] == tensorflow::DT_STRING) {
          properties.set_read_dictionary(leaf, true);
        }
      }
    }
    builder.properties(properties);
    auto reader = builder.Build();
    if (!reader.ok()) return FromArrow(path, reader.status(), "not a readable Parquet file");
    std::vector<int> leaves;
    st = LeafIndices((*reader)->manifest(), columns_, path, &leaves);
    if (!st.ok()) return st;
    st = CheckTypes(**reader, path);
    if (!st.ok()) return st;
    auto metadata = (*reader)->parquet_reader()->metadata();
    const int64_t total = metadata->num_rows();
    const int64_t end = std::min(stop, total);
    // The common case, whole row groups: one read of all of them (a read per group
    // sets up every column reader again).
    std::vector<int> whole;
    int64_t offset = 0;
    bool all_whole = true;
    for (int g = 0; g < metadata->num_row_groups() && offset < end; ++g) {
      const int64_t group_rows = metadata->RowGroup(g)->num_rows();
      const int64_t lo = std::max(start, offset), hi = std::min(end, offset + group_rows);
      if (lo < hi) {
        all_whole = all_whole && hi - lo == group_rows;
        whole.push_back(g);
      }
      offset += group_rows;
    }
    if (whole.size() > 1 && all_whole && stride == 1) {
      try {
        auto read = (*reader)->ReadRowGroups(whole, leaves);
        if (read.ok()) {
          pieces->push_back(*read);
          return absl::OkStatus();
        }
        // Arrow cannot return some nested columns (e.g. lists of dictionary strings)
        // as chunks spanning row groups: read those one row group at a time below.
        if (!read.status().IsNotImplemented()) {
          return FromArrow(path, read.status(), "cannot read row groups");
        }
      } catch (const std::exception& e) {
        return Invalid(path, std::string("cannot read row groups: ") + e.what());
      }
    }
    offset = 0;
    for (int g = 0; g < metadata->num_row_groups() && offset < end; ++g) {
      const int64_t group_rows = metadata->RowGroup(g)->num_rows();
      const int64_t lo = std::max(start, offset), hi = std::min(end, offset + group_rows);
      if (lo < hi) {
        // A strided read takes part of every row group it touches.
        const bool partial = hi - lo < group_rows || stride > 1;
        std::string key = path + "\x1e" + version + "\x1e" + std::to_string(g) + "\x1e" +
                          signature_;
        std::shared_ptr<arrow::Table> table = partial ? Cache().Get(key) : nullptr;
        if (table == nullptr) {
          try {
            auto read = (*reader)->ReadRowGroup(g, leaves);
            if (!read.ok()) {
              return FromArrow(path, read.status(),
                               "cannot read row group " + std::to_string(g));
            }
            table = *read;
          } catch (const std::exception& e) {
            return Invalid(path, "cannot read row group " + std::to_string(g) + ": " +
                                     e.what());
          }
          if (partial) Cache().Put(key, table);
        }
        if (stride == 1) {
          pieces->push_back(table->Slice(lo - offset, hi - lo));
        } else {
          std::shared_ptr<arrow::Table> taken;
          st = TakeStrided(path, table, offset, lo, hi, start, stride, &taken);
          if (!st.ok()) return st;
          pieces->push_back(std::move(taken));
        }
      }
      offset += group_rows;
    }
    return absl::OkStatus();
  }

  // The rows start + k * stride in [lo, hi) of `group`, whose first row is row `offset`
  // of the file: Arrow's Take, or for a column type it has no kernel for (string views),
  // the rows' one-row slices concatenated.
  static absl::Status TakeStrided(const std::string& path,
                                  const std::shared_ptr<arrow::Table>& group,
                                  int64_t offset, int64_t lo, int64_t hi, int64_t start,
                                  int64_t stride, std::shared_ptr<arrow::Table>* out) {
    static const arrow::Status kernels = arrow::compute::Initialize();
    if (!kernels.ok()) return FromArrow(path, kernels, "initializing Arrow's compute kernels");
    const int64_t first = start + (lo - start + stride - 1) / stride * stride;
    arrow::Int64Builder indices;
    for (int64_t row = first; row < hi; row += stride) {
      RD_RETURN_ARROW(path, indices.Append(row - offset), "taking rows");
    }
    std::shared_ptr<arrow::Array> index_array;
    RD_RETURN_ARROW(path, indices.Finish(&index_array), "taking rows");
    std::vector<std::shared_ptr<arrow::ChunkedArray>> columns;
    for (const auto& column : group->columns()) {
      auto taken = arrow::compute::Take(arrow::Datum(column), arrow::Datum(index_array));
      if (taken.ok()) {
        columns.push_back(taken->chunked_array());
        continue;
      }
      if (!taken.status().IsNotImplemented()) {
        return FromArrow(path, taken.status(), "taking rows");
      }
      auto whole = arrow::Concatenate(column->chunks());
      if (!whole.ok()) return FromArrow(path, whole.status(), "taking rows");
      arrow::ArrayVector rows;
      for (int64_t row = first; row < hi; row += stride) {
        rows.push_back((*whole)->Slice(row - offset, 1));
      }
      if (rows.empty()) rows.push_back((*whole)->Slice(0, 0));
      auto joined = arrow::Concatenate(rows);
      if (!joined.ok()) return FromArrow(path, joined.status(), "taking rows");
      columns.push_back(std::make_shared<arrow::ChunkedArray>(*joined));
    }
    *out = arrow::Table::Make(group->schema(), std::move(columns));
    return absl::OkStatus();
  }

  absl::Status CheckTypes(parquet::arrow::FileReader& reader, const std::string& path) {
    std::shared_ptr<arrow::Schema> schema;
    RD_RETURN_ARROW(path, reader.GetSchema(&schema), "cannot read the schema");
    for (size_t c = 0; c < columns_.size(); ++c) {
      auto field = schema->GetFieldByName(columns_[c]);
      const arrow::DataType& type = *field->type();
      const std::string where = "column '" + columns_[c] + "' has type " + TypeName(type);
      const std::string want = tensorflow::DataTypeString(dtypes_[c]);
      if (ragged_[c]) {
        if (!IsList(type.id())) {
          return Invalid(path, where + "; expected a list column (list<...>) of " + want);
        }
        const auto& value_type = *static_cast<const arrow::BaseListType&>(type).value_type();
        if (!Readable(ValueTypeId(value_type), dtypes_[c])) {
          return Invalid(path, where + "; its elements cannot be read as " + want);
        }
      } else {
        if (IsList(type.id())) {
          return Invalid(path, where + "; expected a scalar column of " + want +
                                   ", not a list");
        }
        if (!Readable(ValueTypeId(type), dtypes_[c])) {
          return Invalid(path, where + "; expected a column readable as " + want);
        }
      }
    }
    return absl::OkStatus();
  }

  absl::Status EmitScalar(OpKernelContext* ctx, int c, int n,
                          const std::vector<std::shared_ptr<arrow::Array>>& chunks,
                          int64_t rows, const std::string& path) {
    Tensor* values = nullptr;
    Tensor* valid = nullptr;
    Tensor* splits = nullptr;
    absl::Status st = ctx->allocate_output(c, TensorShape({rows}), &values);
    if (st.ok()) st = ctx->allocate_output(n + c, TensorShape({rows}), &valid);
    if (st.ok()) st = ctx->allocate_output(2 * n + c, TensorShape({0}), &splits);
    if (!st.ok()) return st;
    bool* valid_data = valid->flat<bool>().data();
    int64_t at = 0;
    for (const auto& chunk : chunks) {
      FillScalars(*chunk, values, valid_data, at);
      at += chunk->length();
    }
    return absl::OkStatus();
  }

  absl::Status EmitList(OpKernelContext* ctx, int c, int n,
                        const std::vector<std::shared_ptr<arrow::Array>>& chunks,
                        int64_t rows, const std::string& path) {
    int64_t total = 0;
    for (const auto& chunk : chunks) {
      for (int64_t i = 0; i < chunk->length(); ++i) {
        int64_t b, e;
        ListSpan(*chunk, i, &b, &e);
        total += e - b;
      }
    }
    Tensor* values = nullptr;
    Tensor* valid = nullptr;
    Tensor* splits = nullptr;
    absl::Status st = ctx->allocate_output(c, TensorShape({total}), &values);
    if (st.ok()) st = ctx->allocate_output(n + c, TensorShape({total}), &valid);
    if (st.ok()) st = ctx->allocate_output(2 * n + c, TensorShape({rows + 1}), &splits);
    if (!st.ok()) return st;
    bool* valid_data = valid->flat<bool>().data();
    int64_t* split_data = splits->flat<int64_t>().data();
    int64_t row = 0, emitted = 0;
    split_data[0] = 0;
    for (const auto& chunk : chunks) {
      std::shared_ptr<arrow::Array> elements = ListValues(*chunk);
      // Lists whose elements lie next to each other are copied as one run.
      int64_t run_begin = 0, run_end = 0;
      auto flush = [&]() {
        if (run_end > run_begin) {
          FillScalars(*elements->Slice(run_begin, run_end - run_begin), values, valid_data,
                      emitted);
          emitted += run_end - run_begin;
        }
      };
      for (int64_t i = 0; i < chunk->length(); ++i) {
        int64_t b, e;
        ListSpan(*chunk, i, &b, &e);
        if (e > b) {
          if (b == run_end && run_end > run_begin) {
            run_end = e;
          } else {
            flush();
            run_begin = b;
            run_end = e;
          }
        }
        split_data[row + 1] = split_data[row] + (e - b);
        ++row;
      }
      flush();
    }
    return absl::OkStatus();
  }

  std::vector<std::string> columns_;
  std::vector<DataType> dtypes_;
  std::vector<bool> ragged_;
  std::string signature_;
};

}  // namespace

REGISTER_OP("ParquetReadRows")
    .Input("path: string")
    .Input("start: int64")
    .Input("stop: int64")
    .Input("stride: int64")
    .Output("values: dtypes")
    .Output("valid: N * bool")
    .Output("row_splits: N * int64")
    .Attr("columns: list(string) >= 1")
    .Attr("dtypes: list({int32, int64, float, double, bool, string}) >= 1")
    .Attr("ragged: list(bool) >= 1")
    .Attr("N: int >= 1")
    .SetIsStateful()
    .SetShapeFn([](::tensorflow::shape_inference::InferenceContext* c) {
      for (int i = 0; i < 4; ++i) {
        ::tensorflow::shape_inference::ShapeHandle scalar;
        TF_RETURN_IF_ERROR(c->WithRank(c->input(i), 0, &scalar));
      }
      for (int i = 0; i < c->num_outputs(); ++i) c->set_output(i, c->Vector(c->UnknownDim()));
      return absl::OkStatus();
    });

REGISTER_KERNEL_BUILDER(Name("ParquetReadRows").Device(::tensorflow::DEVICE_CPU),
                        ParquetReadRowsOp);

}  // namespace recsys_dist
