// Typed access to Example records (wire-compatible with tf.train.Example; schema in example.proto).
//
//   HVX_ASSIGN_OR_RETURN(int64_t label, GetInt64(example, "image/class/label"));
//   HVX_ASSIGN_OR_RETURN(absl::string_view jpeg, GetBytes(example, "image/encoded"));
//
// Every error names the feature and says what was wrong: missing (listing the features that are
// present), of another type, or holding a different number of values than asked for.
#ifndef HVX_DATA_EXAMPLE_H_
#define HVX_DATA_EXAMPLE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "hvx/data/example.pb.h"

namespace hvx {
namespace data {

// Parses a serialized Example; InvalidArgument when the bytes are not one.
absl::Status ParseExample(absl::string_view bytes, Example* example);

// Serializes with map entries in key order, so the same features always give the same bytes
// (plain SerializeAsString() may order map entries differently from run to run).
std::string SerializeExample(const Example& example);
void SerializeExample(const Example& example, std::string* out);

// The feature `key`, or NotFound naming it and the features present.
absl::StatusOr<const Feature*> GetFeature(const Example& example, absl::string_view key);

// Lists of any length. Views stay valid while `example` is unchanged.
absl::StatusOr<absl::Span<const int64_t>> GetInt64List(const Example& example,
                                                       absl::string_view key);
absl::StatusOr<absl::Span<const float>> GetFloatList(const Example& example, absl::string_view key);
absl::StatusOr<const BytesList*> GetBytesList(const Example& example, absl::string_view key);

// Exactly one value; InvalidArgument when the list holds zero or several.
absl::StatusOr<int64_t> GetInt64(const Example& example, absl::string_view key);
absl::StatusOr<float> GetFloat(const Example& example, absl::string_view key);
absl::StatusOr<absl::string_view> GetBytes(const Example& example, absl::string_view key);

// Setters replace the feature if it exists.
void SetInt64List(Example* example, absl::string_view key, absl::Span<const int64_t> values);
void SetFloatList(Example* example, absl::string_view key, absl::Span<const float> values);
void SetBytesList(Example* example, absl::string_view key, const std::vector<std::string>& values);
void SetInt64(Example* example, absl::string_view key, int64_t value);
void SetFloat(Example* example, absl::string_view key, float value);
void SetBytes(Example* example, absl::string_view key, absl::string_view value);

// One line per feature, sorted by key: `key: int64_list[1] = 7`, `key: bytes_list[1] = <12 bytes>
// "RGB"`; long lists and byte strings are abbreviated. For inspect_records.
std::string DescribeExample(const Example& example);

}  // namespace data
}  // namespace hvx

#endif  // HVX_DATA_EXAMPLE_H_
