// Proves native proto_library + cc_proto_library work offline against Debian's protobuf.
#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/text_format.h>

#include <string>

#include "gtest/gtest.h"
#include "tests/deps/link_proof.pb.h"

namespace {

class Collector : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, google::protobuf::io::ColumnNumber column,
                const std::string& msg) override {
    errors += std::to_string(line + 1) + ":" + std::to_string(column + 1) + ": " + msg + "\n";
  }
  std::string errors;
};

TEST(ProtoTextTest, ParsesTextFormatWithWellKnownType) {
  hvx::tests::LinkProof p;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(
      "name: 'x' world_size: 4 timeout { seconds: 30 } hosts: 'a' hosts: 'b'", &p));
  EXPECT_EQ(p.world_size(), 4);
  EXPECT_EQ(p.timeout().seconds(), 30);
  EXPECT_EQ(p.hosts_size(), 2);
}

TEST(ProtoTextTest, ErrorsCarryLineAndColumn) {
  hvx::tests::LinkProof p;
  google::protobuf::TextFormat::Parser parser;
  Collector c;
  parser.RecordErrorsTo(&c);
  EXPECT_FALSE(parser.ParseFromString("name: 'x'\n  wrold_size: 3\n", &p));
  EXPECT_EQ(c.errors,
            "2:13: Message type \"hvx.tests.LinkProof\" has no field named \"wrold_size\".\n");
}

}  // namespace
