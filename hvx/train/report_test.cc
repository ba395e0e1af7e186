#include "hvx/train/report.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

namespace hvx {
namespace train {
namespace {

int Count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// The "points" attribute of the polyline inside the chart with `id`.
std::string PointsOf(const std::string& html, const std::string& id) {
  const size_t chart = html.find("id=\"" + id + "\"");
  if (chart == std::string::npos) return "<no chart>";
  const size_t end = html.find("</svg>", chart);
  const size_t line = html.find("<polyline class=\"series\" points=\"", chart);
  if (line == std::string::npos || line > end) return "<no series>";
  const size_t begin = line + std::string("<polyline class=\"series\" points=\"").size();
  return html.substr(begin, html.find('"', begin) - begin);
}

TEST(SvgLineChartTest, MapsPointsIntoThePlotArea) {
  // 560x240 with margins 64/16/28/34: x 64..544, y 28..206.
  const std::string svg = SvgLineChart("c", "t", {{0, 1}, {10, 3}, {20, 2}});
  EXPECT_EQ(PointsOf(svg, "c"), "64.0,206.0 304.0,28.0 544.0,117.0");
  EXPECT_EQ(Count(svg, "<circle"), 3);
}

TEST(SvgLineChartTest, FlatAndEmptySeries) {
  EXPECT_EQ(PointsOf(SvgLineChart("c", "t", {{5, 2}}), "c"), "304.0,117.0");
  const std::string empty = SvgLineChart("c", "t", {});
  EXPECT_NE(empty.find("no data yet"), std::string::npos);
  EXPECT_EQ(empty.find("<polyline"), std::string::npos);
}

TEST(RunReportTest, HoldsEverySeriesTheEvaluationsAndTheEscapedConfig) {
  RunReport report("cnn <test>", "model { name: \"cnn\" } # a < b & c", 4);
  for (int step = 10; step <= 40; step += 10) {
    report.AddProgress({step, 2.0 / step, 0.1, 1000.0 + step, 0.02, 0.1 * step, step / 40 * 3 - 1});
  }
  report.AddEval({1, 20, 0.8125, 0.99, 0.512345678, 60});
  report.AddEval({2, 40, 0.875, 1.0, 0.4, 60});
  report.SetState("done: 40 steps in 3.0 s");
  const std::string html = report.Html();
  for (const char* id :
       {"chart-loss", "chart-lr", "chart-samples_per_s", "chart-data_wait", "chart-straggler"}) {
    EXPECT_EQ(Count(PointsOf(html, id), ","), 4) << id;
  }
  // Step 40 names rank 2, 4 ms late; the chart rises with the lateness.
  EXPECT_NE(html.find("<td id=\"straggler\">rank 2, 4.0 ms late at step 40</td>"),
            std::string::npos);
  EXPECT_EQ(PointsOf(html, "chart-straggler"), "64.0,206.0 224.0,146.7 384.0,87.3 544.0,28.0");
  EXPECT_EQ(Count(PointsOf(html, "chart-accuracy"), ","), 2);
  EXPECT_NE(html.find("<td>1</td><td>20</td><td>0.8125</td><td>0.9900</td><td>0.512346</td>"
                      "<td>60</td>"),
            std::string::npos);
  EXPECT_NE(html.find("<td id=\"accuracy\">0.8750</td>"), std::string::npos);
  EXPECT_NE(html.find("<td id=\"world_size\">4</td>"), std::string::npos);
  EXPECT_NE(html.find("<td id=\"state\">done: 40 steps in 3.0 s</td>"), std::string::npos);
  EXPECT_NE(html.find("model { name: &quot;cnn&quot; } # a &lt; b &amp; c"), std::string::npos);
  EXPECT_NE(html.find("<title>hvx run: cnn &lt;test&gt;</title>"), std::string::npos);
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_EQ(html.find("http://www.w3.org/2000/svg\" width"), html.find("http://"));  // no links
}

TEST(RunReportTest, WritesTheFile) {
  const char* dir = std::getenv("TEST_TMPDIR");
  const std::string path = std::string(dir != nullptr ? dir : "/tmp") + "/report.html";
  RunReport report("mlp", "", 1);
  ASSERT_TRUE(report.Write(path).ok());
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str(), report.Html());
}

}  // namespace
}  // namespace train
}  // namespace hvx
