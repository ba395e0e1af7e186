#include "hvx/train/report.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "hvx/common/files.h"

namespace hvx {
namespace train {
namespace {

// A tick label: short, and exact enough to read the axis.
std::string Tick(double v) { return absl::StrFormat("%.4g", v); }

// [lo, hi] widened when flat, so a constant series is drawn as a line in the middle.
void Widen(double* lo, double* hi) {
  if (*hi > *lo) return;
  const double pad = *lo == 0 ? 1 : std::abs(*lo) * 0.05;
  *lo -= pad;
  *hi += pad;
}

constexpr char kStyle[] = R"css(
body { font: 14px/1.4 "DejaVu Sans", sans-serif; margin: 24px; color: #222; background: #fff; }
h1 { font-size: 20px; margin: 0 0 12px; }
h2 { font-size: 16px; margin: 24px 0 8px; }
table { border-collapse: collapse; }
td, th { border: 1px solid #ccc; padding: 3px 8px; text-align: right; }
th { background: #f3f3f3; }
#summary td:first-child { text-align: left; font-weight: bold; }
.charts { display: flex; flex-wrap: wrap; gap: 12px; }
svg.chart { border: 1px solid #ddd; background: #fff; margin-bottom: 8px; }
svg.chart .axis { stroke: #555; stroke-width: 1; }
svg.chart .grid { stroke: #eee; stroke-width: 1; }
svg.chart .series { fill: none; stroke: #1f6fd1; stroke-width: 2; }
svg.chart .point { fill: #1f6fd1; }
svg.chart text { font-size: 11px; fill: #444; }
svg.chart text.title { font-size: 13px; fill: #222; font-weight: bold; }
pre { background: #f7f7f7; border: 1px solid #ddd; padding: 8px; overflow: auto; }
)css";

}  // namespace

std::string HtmlEscape(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string SvgLineChart(const std::string& id, const std::string& title,
                         const std::vector<std::pair<double, double>>& points, int width,
                         int height) {
  const double left = 64, right = 16, top = 28, bottom = 34;
  const double plot_w = width - left - right, plot_h = height - top - bottom;
  std::string svg = absl::StrFormat(
      "<svg class=\"chart\" id=\"%s\" xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" "
      "height=\"%d\" viewBox=\"0 0 %d %d\">\n<text class=\"title\" x=\"%g\" y=\"18\">%s</text>\n",
      HtmlEscape(id), width, height, width, height, left, HtmlEscape(title));
  absl::StrAppendFormat(&svg,
                        "<line class=\"axis\" x1=\"%g\" y1=\"%g\" x2=\"%g\" y2=\"%g\"/>\n"
                        "<line class=\"axis\" x1=\"%g\" y1=\"%g\" x2=\"%g\" y2=\"%g\"/>\n",
                        left, top, left, top + plot_h, left, top + plot_h, left + plot_w,
                        top + plot_h);
  if (points.empty()) {
    absl::StrAppendFormat(&svg, "<text x=\"%g\" y=\"%g\">no data yet</text>\n</svg>\n",
                          left + plot_w / 2 - 30, top + plot_h / 2);
    return svg;
  }
  double x_lo = points.front().first, x_hi = x_lo, y_lo = points.front().second, y_hi = y_lo;
  for (const auto& [x, y] : points) {
    x_lo = std::min(x_lo, x);
    x_hi = std::max(x_hi, x);
    if (std::isfinite(y)) {
      y_lo = std::min(y_lo, y);
      y_hi = std::max(y_hi, y);
    }
  }
  Widen(&x_lo, &x_hi);
  Widen(&y_lo, &y_hi);
  auto px = [&](double x) { return left + (x - x_lo) / (x_hi - x_lo) * plot_w; };
  auto py = [&](double y) { return top + plot_h - (y - y_lo) / (y_hi - y_lo) * plot_h; };
  for (int i = 0; i <= 4; ++i) {
    const double y = y_lo + (y_hi - y_lo) * i / 4, x = x_lo + (x_hi - x_lo) * i / 4;
    absl::StrAppendFormat(&svg,
                          "<line class=\"grid\" x1=\"%g\" y1=\"%.1f\" x2=\"%g\" y2=\"%.1f\"/>"
                          "<text x=\"%g\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n",
                          left + 1, py(y), left + plot_w, py(y), left - 4, py(y) + 4, Tick(y));
    absl::StrAppendFormat(&svg, "<text x=\"%.1f\" y=\"%g\" text-anchor=\"middle\">%s</text>\n",
                          px(x), top + plot_h + 16, Tick(x));
  }
  absl::StrAppendFormat(&svg, "<text x=\"%g\" y=\"%d\" text-anchor=\"middle\">step</text>\n",
                        left + plot_w / 2, height - 3);
  std::string coords;
  for (const auto& [x, y] : points) {
    if (!std::isfinite(y)) continue;
    absl::StrAppendFormat(&coords, "%s%.1f,%.1f", coords.empty() ? "" : " ", px(x), py(y));
  }
  absl::StrAppendFormat(&svg, "<polyline class=\"series\" points=\"%s\"/>\n", coords);
  if (points.size() <= 30) {
    for (const auto& [x, y] : points) {
      if (std::isfinite(y))
        absl::StrAppendFormat(&svg, "<circle class=\"point\" cx=\"%.1f\" cy=\"%.1f\" r=\"3\"/>",
                              px(x), py(y));
    }
    svg += "\n";
  }
  svg += "</svg>\n";
  return svg;
}

RunReport::RunReport(std::string model, std::string config_text, int world_size)
    : model_(std::move(model)), config_text_(std::move(config_text)), world_size_(world_size) {}

std::string RunReport::Html() const {
  std::string html = absl::StrCat(
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
      "<title>hvx run: ",
      HtmlEscape(model_), "</title>\n<style>", kStyle,
      "</style>\n</head>\n<body>\n<h1>hvx run: ", HtmlEscape(model_), "</h1>\n");
  auto row = [&html](const std::string& name, const std::string& id, const std::string& value) {
    absl::StrAppend(&html, "<tr><td>", name, "</td><td id=\"", id, "\">", HtmlEscape(value),
                    "</td></tr>\n");
  };
  html += "<table id=\"summary\">\n";
  if (!run_.empty()) row("run", "run", run_);
  row("state", "state", state_);
  row("world size", "world_size", absl::StrCat(world_size_));
  row("steps", "steps", progress_.empty() ? "0" : absl::StrCat(progress_.back().step));
  if (!evals_.empty()) {
    const EvalPoint& e = evals_.back();
    row("last evaluation", "last_epoch", absl::StrCat("epoch ", e.epoch));
    row("eval accuracy", "accuracy", absl::StrFormat("%.4f", e.accuracy));
    row("eval top-5 accuracy", "top5", absl::StrFormat("%.4f", e.top5));
    row("eval loss", "loss", absl::StrFormat("%.6f", e.loss));
  }
  if (!progress_.empty()) {
    row("last training loss", "train_loss", absl::StrFormat("%.7g", progress_.back().loss));
    row("samples/s", "samples_per_s", absl::StrFormat("%.0f", progress_.back().samples_per_s));
    // The last point that named one: a later window may break its streak.
    const ProgressPoint* named = nullptr;
    for (const ProgressPoint& p : progress_) {
      if (p.straggler_rank >= 0) named = &p;
    }
    row("straggler", "straggler",
        named == nullptr
            ? "none"
            : absl::StrFormat("rank %d, %.1f ms late at step %d", named->straggler_rank,
                              named->straggler_late_ms, named->step));
  }
  html += "</table>\n<h2>Training</h2>\n<div class=\"charts\">\n";
  auto series = [this](double ProgressPoint::*field, double scale) {
    std::vector<std::pair<double, double>> points;
    for (const ProgressPoint& p : progress_) points.emplace_back(p.step, p.*field * scale);
    return points;
  };
  html += SvgLineChart("chart-loss", "training loss", series(&ProgressPoint::loss, 1));
  html += SvgLineChart("chart-lr", "learning rate", series(&ProgressPoint::lr, 1));
  html += SvgLineChart("chart-samples_per_s", "samples/s (all ranks)",
                       series(&ProgressPoint::samples_per_s, 1));
  html += SvgLineChart("chart-data_wait", "waiting for input (% of the time)",
                       series(&ProgressPoint::data_wait, 100));
  html += SvgLineChart("chart-straggler", "latest rank, ms after the median of the others",
                       series(&ProgressPoint::straggler_late_ms, 1));
  std::vector<std::pair<double, double>> accuracy;
  for (const EvalPoint& e : evals_) accuracy.emplace_back(e.step, e.accuracy);
  html += "</div>\n<h2>Evaluation</h2>\n<div class=\"charts\">\n";
  html += SvgLineChart("chart-accuracy", "eval accuracy", accuracy);
  html +=
      "</div>\n<table id=\"evals\">\n<tr><th>epoch</th><th>step</th><th>accuracy</th>"
      "<th>top-5</th><th>loss</th><th>samples</th></tr>\n";
  for (const EvalPoint& e : evals_) {
    absl::StrAppendFormat(&html,
                          "<tr><td>%d</td><td>%d</td><td>%.4f</td><td>%.4f</td><td>%.6f</td>"
                          "<td>%d</td></tr>\n",
                          e.epoch, e.step, e.accuracy, e.top5, e.loss, e.samples);
  }
  absl::StrAppend(&html, "</table>\n<h2>Effective config</h2>\n<pre id=\"config\">",
                  HtmlEscape(config_text_), "</pre>\n</body>\n</html>\n");
  return html;
}

absl::Status RunReport::Write(const std::string& path) const {
  return WriteFileAtomically(path, Html(), "run report", /*durable=*/false);
}

}  // namespace train
}  // namespace hvx
