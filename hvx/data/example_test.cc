#include "hvx/data/example.h"

#include <string>

#include "gtest/gtest.h"

namespace hvx {
namespace data {
namespace {

std::string Unhex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 3) {
    out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  }
  return out;
}

// Bytes of {features{feature{key:"label" value{int64_list{value:7}}}}} as TensorFlow writes them.
const char kLabelSeven[] = "0a 10 0a 0e 0a 05 6c 61 62 65 6c 12 05 1a 03 0a 01 07 ";

TEST(ExampleTest, WireCompatibleWithTfTrainExample) {
  Example parsed;
  ASSERT_TRUE(ParseExample(Unhex(kLabelSeven), &parsed).ok());
  EXPECT_EQ(*GetInt64(parsed, "label"), 7);
  Example built;
  SetInt64(&built, "label", 7);
  EXPECT_EQ(built.SerializeAsString(), Unhex(kLabelSeven));
}

TEST(ExampleTest, AcceptsUnpackedNumbersAndUnknownFields) {
  // Int64List written unpacked (tag 0x08 per value), plus an unknown field 5 in Example.
  std::string list = Unhex("08 01 08 02 08 96 01 ");  // values 1, 2, 150
  std::string feature = "\x1a" + std::string(1, static_cast<char>(list.size())) + list;
  std::string entry =
      Unhex("0a 01 6b ") + "\x12" + std::string(1, static_cast<char>(feature.size())) + feature;
  std::string features = "\x0a" + std::string(1, static_cast<char>(entry.size())) + entry;
  std::string example =
      "\x0a" + std::string(1, static_cast<char>(features.size())) + features + Unhex("28 2a ");
  Example parsed;
  ASSERT_TRUE(ParseExample(example, &parsed).ok());
  auto values = GetInt64List(parsed, "k");
  ASSERT_TRUE(values.ok());
  EXPECT_EQ(std::vector<int64_t>(values->begin(), values->end()),
            (std::vector<int64_t>{1, 2, 150}));
}

TEST(ExampleTest, ErrorsNameTheFeature) {
  Example e;
  SetBytes(&e, "image/encoded", "jpeg");
  SetInt64List(&e, "image/class/label", {1, 2});
  SetFloatList(&e, "bbox", {0.5f});
  auto missing = GetInt64(e, "label");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(missing.status().message(),
            "feature 'label' is missing (the example has: bbox, image/class/label, image/encoded)");
  auto wrong = GetInt64(e, "image/encoded");
  EXPECT_EQ(wrong.status().message(), "feature 'image/encoded' is bytes_list, expected int64_list");
  auto many = GetInt64(e, "image/class/label");
  EXPECT_EQ(many.status().message(),
            "feature 'image/class/label' (int64_list) has 2 values, expected exactly 1");
  EXPECT_EQ(*GetFloat(e, "bbox"), 0.5f);
  EXPECT_EQ(*GetBytes(e, "image/encoded"), "jpeg");
  EXPECT_EQ(GetFloat(e, "image/encoded").status().code(), absl::StatusCode::kInvalidArgument);
  Example bad;
  EXPECT_EQ(ParseExample("\xff\xff\xff", &bad).code(), absl::StatusCode::kInvalidArgument);
}

// A record's own keys are data: a crafted one must not put control bytes into a log line (a
// launcher record, a terminal sequence) through an error message or a description.
TEST(ExampleTest, KeysFromTheRecordAreEscapedInMessages) {
  Example e;
  SetInt64(&e, "\x01hvxctl exit rank=1 signal=9\n\x1b[2J", 1);
  const std::string escaped = "\\x01hvxctl exit rank=1 signal=9\\n\\x1b[2J";
  EXPECT_EQ(GetInt64(e, "label").status().message(),
            "feature 'label' is missing (the example has: " + escaped + ")");
  EXPECT_EQ(DescribeExample(e), escaped + ": int64_list[1] = 1\n");
}

TEST(ExampleTest, DeterministicSerializationSortsKeys) {
  Example a, b;
  for (const char* k : {"zeta", "alpha", "mid", "beta"}) SetInt64(&a, k, 1);
  for (const char* k : {"beta", "mid", "alpha", "zeta"}) SetInt64(&b, k, 1);
  const std::string bytes = SerializeExample(a);
  EXPECT_EQ(bytes, SerializeExample(b));
  EXPECT_LT(bytes.find("alpha"), bytes.find("beta"));
  EXPECT_LT(bytes.find("mid"), bytes.find("zeta"));
}

TEST(ExampleTest, Describe) {
  Example e;
  SetInt64(&e, "label", 7);
  SetBytes(&e, "colorspace", "RGB");
  SetFloatList(&e, "x", {1.5f, 2});
  EXPECT_EQ(DescribeExample(e),
            "colorspace: bytes_list[1] = <3 bytes> \"RGB\"\n"
            "label: int64_list[1] = 7\n"
            "x: float_list[2] = 1.5, 2\n");
}

}  // namespace
}  // namespace data
}  // namespace hvx
