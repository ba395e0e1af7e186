#include "hvx/common/json.h"

#include "absl/strings/str_cat.h"

namespace hvx {

absl::StatusOr<Json> ParseJson(absl::string_view text, absl::string_view what) {
  try {
    return Json::parse(text.begin(), text.end());
  } catch (const Json::parse_error& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " is not JSON (at byte ", e.byte, "): ", e.what()));
  } catch (const Json::exception& e) {
    // A number no double holds (1e999) is JSON the library will not read: out_of_range, which
    // escaped as an uncaught exception and ended the program.
    return absl::InvalidArgumentError(
        absl::StrCat(what, " holds JSON hvx cannot read: ", e.what()));
  }
}

const Json* JsonMember(const Json& value, absl::string_view key) {
  if (!value.is_object()) return nullptr;
  const auto it = value.find(std::string(key));
  return it == value.end() ? nullptr : &*it;
}

absl::StatusOr<std::vector<std::string>> JsonStrings(const Json& value, absl::string_view what) {
  if (!value.is_array()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": expected a JSON list of strings, got ", value.dump()));
  }
  std::vector<std::string> out;
  for (const Json& item : value) {
    if (!item.is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": expected a JSON list of strings, got item ", item.dump()));
    }
    out.push_back(item.get<std::string>());
  }
  return out;
}

std::string JsonText(const Json& value) {
  return value.dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::string JsonQuote(absl::string_view s) { return JsonText(Json(std::string(s))); }

}  // namespace hvx
