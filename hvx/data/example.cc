#include "hvx/data/example.h"

#include <algorithm>
#include <climits>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"

namespace hvx {
namespace data {
namespace {

absl::string_view KindName(const Feature& f) {
  switch (f.kind_case()) {
    case Feature::kBytesList:
      return "bytes_list";
    case Feature::kFloatList:
      return "float_list";
    case Feature::kInt64List:
      return "int64_list";
    default:
      return "empty (no list)";
  }
}

absl::Status WrongKind(absl::string_view key, const Feature& f, absl::string_view want) {
  return absl::InvalidArgumentError(
      absl::StrCat("feature '", key, "' is ", KindName(f), ", expected ", want));
}

absl::Status NotOne(absl::string_view key, absl::string_view kind, int n) {
  return absl::InvalidArgumentError(
      absl::StrCat("feature '", key, "' (", kind, ") has ", n, " values, expected exactly 1"));
}

Feature* Mutable(Example* example, absl::string_view key) {
  Feature& f = (*example->mutable_features()->mutable_feature())[std::string(key)];
  f.Clear();
  return &f;
}

}  // namespace

absl::Status ParseExample(absl::string_view bytes, Example* example) {
  if (bytes.size() > static_cast<size_t>(INT_MAX)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a ", bytes.size(), "-byte record is past the 2 GiB protobuf messages are limited to"));
  }
  if (!example->ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return absl::InvalidArgumentError(
        absl::StrCat("a ", bytes.size(), "-byte record is not a valid Example protobuf"));
  }
  return absl::OkStatus();
}

void SerializeExample(const Example& example, std::string* out) {
  out->clear();
  {
    google::protobuf::io::StringOutputStream stream(out);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    example.SerializeToCodedStream(&coded);
  }
}

std::string SerializeExample(const Example& example) {
  std::string out;
  SerializeExample(example, &out);
  return out;
}

absl::StatusOr<const Feature*> GetFeature(const Example& example, absl::string_view key) {
  const auto& map = example.features().feature();
  auto it = map.find(std::string(key));
  if (it != map.end()) return &it->second;
  // The keys are the record's: escaped, so that a crafted one cannot put control bytes (a terminal
  // sequence, a launcher record) into a log line.
  std::vector<std::string> keys;
  for (const auto& kv : map) keys.push_back(absl::CHexEscape(kv.first));
  std::sort(keys.begin(), keys.end());
  return absl::NotFoundError(absl::StrCat("feature '", key, "' is missing (the example has: ",
                                          keys.empty() ? "no features" : absl::StrJoin(keys, ", "),
                                          ")"));
}

absl::StatusOr<absl::Span<const int64_t>> GetInt64List(const Example& example,
                                                       absl::string_view key) {
  auto f = GetFeature(example, key);
  if (!f.ok()) return f.status();
  if (!(*f)->has_int64_list()) return WrongKind(key, **f, "int64_list");
  const auto& v = (*f)->int64_list().value();
  return absl::Span<const int64_t>(v.data(), static_cast<size_t>(v.size()));
}

absl::StatusOr<absl::Span<const float>> GetFloatList(const Example& example,
                                                     absl::string_view key) {
  auto f = GetFeature(example, key);
  if (!f.ok()) return f.status();
  if (!(*f)->has_float_list()) return WrongKind(key, **f, "float_list");
  const auto& v = (*f)->float_list().value();
  return absl::Span<const float>(v.data(), static_cast<size_t>(v.size()));
}

absl::StatusOr<const BytesList*> GetBytesList(const Example& example, absl::string_view key) {
  auto f = GetFeature(example, key);
  if (!f.ok()) return f.status();
  if (!(*f)->has_bytes_list()) return WrongKind(key, **f, "bytes_list");
  return &(*f)->bytes_list();
}

absl::StatusOr<int64_t> GetInt64(const Example& example, absl::string_view key) {
  auto v = GetInt64List(example, key);
  if (!v.ok()) return v.status();
  if (v->size() != 1) return NotOne(key, "int64_list", static_cast<int>(v->size()));
  return (*v)[0];
}

absl::StatusOr<float> GetFloat(const Example& example, absl::string_view key) {
  auto v = GetFloatList(example, key);
  if (!v.ok()) return v.status();
  if (v->size() != 1) return NotOne(key, "float_list", static_cast<int>(v->size()));
  return (*v)[0];
}

absl::StatusOr<absl::string_view> GetBytes(const Example& example, absl::string_view key) {
  auto v = GetBytesList(example, key);
  if (!v.ok()) return v.status();
  if ((*v)->value_size() != 1) return NotOne(key, "bytes_list", (*v)->value_size());
  return absl::string_view((*v)->value(0));
}

void SetInt64List(Example* example, absl::string_view key, absl::Span<const int64_t> values) {
  auto* list = Mutable(example, key)->mutable_int64_list();
  list->mutable_value()->Add(values.begin(), values.end());
}

void SetFloatList(Example* example, absl::string_view key, absl::Span<const float> values) {
  auto* list = Mutable(example, key)->mutable_float_list();
  list->mutable_value()->Add(values.begin(), values.end());
}

void SetBytesList(Example* example, absl::string_view key, const std::vector<std::string>& values) {
  auto* list = Mutable(example, key)->mutable_bytes_list();
  for (const auto& v : values) list->add_value(v);
}

void SetInt64(Example* example, absl::string_view key, int64_t value) {
  SetInt64List(example, key, {value});
}

void SetFloat(Example* example, absl::string_view key, float value) {
  SetFloatList(example, key, {value});
}

void SetBytes(Example* example, absl::string_view key, absl::string_view value) {
  Mutable(example, key)->mutable_bytes_list()->add_value(std::string(value));
}

std::string DescribeExample(const Example& example) {
  constexpr int kMaxValues = 8;
  constexpr size_t kMaxBytes = 40;
  std::vector<std::string> keys;
  for (const auto& kv : example.features().feature()) keys.push_back(kv.first);
  std::sort(keys.begin(), keys.end());
  std::string out;
  for (const std::string& key : keys) {
    const Feature& f = example.features().feature().at(key);
    std::vector<std::string> shown;
    int n = 0;
    if (f.has_int64_list()) {
      n = f.int64_list().value_size();
      for (int i = 0; i < std::min(n, kMaxValues); ++i) {
        shown.push_back(absl::StrCat(f.int64_list().value(i)));
      }
    } else if (f.has_float_list()) {
      n = f.float_list().value_size();
      for (int i = 0; i < std::min(n, kMaxValues); ++i) {
        shown.push_back(absl::StrCat(f.float_list().value(i)));
      }
    } else if (f.has_bytes_list()) {
      n = f.bytes_list().value_size();
      for (int i = 0; i < std::min(n, kMaxValues); ++i) {
        const std::string& b = f.bytes_list().value(i);
        std::string text = absl::CHexEscape(b.substr(0, kMaxBytes));
        shown.push_back(
            absl::StrCat("<", b.size(), " bytes> \"", text, b.size() > kMaxBytes ? "\"..." : "\""));
      }
    }
    absl::StrAppend(&out, absl::CHexEscape(key), ": ", KindName(f), "[", n,
                    "] = ", absl::StrJoin(shown, ", "), n > kMaxValues ? ", ..." : "", "\n");
  }
  return out;
}

}  // namespace data
}  // namespace hvx
