// Fuzz target: hvx/common/json.h. With the first byte even, the input is parsed as a document
// from a platform (it may fail, never crash or throw); odd, it is quoted as hvx quotes the strings
// it writes, and the quoted text must parse back to a string: the same bytes when they were UTF-8.
#include <string>
#include <vector>

#include "hvx/common/json.h"
#include "hvx/testing/fuzz.h"

namespace {

// Whether `s` is well-formed UTF-8 (no overlong forms, surrogates or code points past U+10FFFF).
bool IsUtf8(absl::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = s[i];
    int n = 0;
    unsigned int cp = 0;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xe0) == 0xc0) {
      n = 1;
      cp = c & 0x1f;
    } else if ((c & 0xf0) == 0xe0) {
      n = 2;
      cp = c & 0x0f;
    } else if ((c & 0xf8) == 0xf0) {
      n = 3;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (i + n >= s.size()) return false;
    for (int k = 1; k <= n; ++k) {
      const unsigned char d = s[i + k];
      if ((d & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (d & 0x3f);
    }
    static const unsigned int kMin[] = {0, 0x80, 0x800, 0x10000};
    if (cp < kMin[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    i += n + 1;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const absl::string_view text = hvx::fuzz::AsText(data + 1, size - 1);
  if ((data[0] & 1) == 0) {
    const absl::StatusOr<hvx::Json> doc = hvx::ParseJson(text, "fuzz");
    if (doc.ok()) {
      (void)hvx::JsonMember(*doc, "hosts");
      if (const hvx::Json* hosts = hvx::JsonMember(*doc, "hosts")) {
        (void)hvx::JsonStrings(*hosts, "hosts");
      }
    }
    return 0;
  }
  const std::string quoted = hvx::JsonQuote(text);
  const absl::StatusOr<hvx::Json> back = hvx::ParseJson(quoted, "quoted");
  HVX_FUZZ_CHECK(back.ok() && back->is_string(), "JsonQuote wrote text that is not a JSON string");
  if (IsUtf8(text)) {
    HVX_FUZZ_CHECK(back->get<std::string>() == text, "JsonQuote changed a UTF-8 string");
  }
  return 0;
}

std::vector<std::string> HvxFuzzSeeds() {
  using namespace std::string_literals;
  return {
      "\0{\"current_host\": \"algo-1\", \"hosts\": [\"algo-1\", \"algo-2\"]}"s,
      "\0[1, 2.5e3, true, null, {\"a\": [\"\\u00e9\\n\"]}]"s,
      "\1plain"s,
      "\1tab\there \"quoted\" back\\slash \x01\x1f control"s,
      "\1caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 and a stray \xff byte"s,
  };
}
