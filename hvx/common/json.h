// JSON through one library, nlohmann::json (Debian's nlohmann-json3-dev): reading what platforms
// write (SageMaker's resourceconfig.json) and quoting what hvx writes (the timeline, hvx_info).
//
//   HVX_ASSIGN_OR_RETURN(Json config, ParseJson(text, "/opt/ml/input/config/resourceconfig.json"));
//   const Json* hosts = JsonMember(config, "hosts");
//   absl::StrAppend(&out, "{\"name\":", JsonQuote(name), "}");
#ifndef HVX_COMMON_JSON_H_
#define HVX_COMMON_JSON_H_

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace hvx {

using Json = nlohmann::json;

// Parses `text`. InvalidArgument naming `what` and the byte at which it is not JSON.
absl::StatusOr<Json> ParseJson(absl::string_view text, absl::string_view what);

// The member `key` of an object, or null when `value` is not an object or has no such member.
const Json* JsonMember(const Json& value, absl::string_view key);

// A JSON array of strings as a vector. InvalidArgument naming `what` when `value` is anything else.
absl::StatusOr<std::vector<std::string>> JsonStrings(const Json& value, absl::string_view what);

// `value` as compact JSON text; bytes that are not UTF-8 in its strings become U+FFFD instead of
// throwing (a path's bytes in an error message).
std::string JsonText(const Json& value);

// `s` as a JSON string, quotes included: '"', '\' and control characters escaped, bytes that are
// not UTF-8 replaced by U+FFFD.
std::string JsonQuote(absl::string_view s);

}  // namespace hvx

#endif  // HVX_COMMON_JSON_H_
