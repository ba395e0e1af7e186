#!/usr/bin/env python3
"""Checks a report.html as headless Chromium rendered it against the trainer's log.

    report_check.py DOM.html SCREENSHOT.png TRAINER_LOG...

DOM.html is `chromium --dump-dom` of the page, SCREENSHOT.png its `--screenshot`. Checks that
the evaluation table and the summary hold the numbers of the log's evaluation and "done:" lines,
that the loss chart has a point per progress line, and that the screenshot shows drawn curves
(pixels of the series colour), then prints what it found.
"""
import re
import sys
from html.parser import HTMLParser

from PIL import Image

SERIES = (0x1F, 0x6F, 0xD1)  # svg.chart .series in hvx/train/report.cc


class Page(HTMLParser):
    def __init__(self):
        super().__init__()
        self.cells = {}       # id -> text of <td id=...>
        self.eval_rows = []   # rows of table#evals, as lists of cell texts
        self.points = {}      # chart id -> the series' points attribute
        self._chart = None
        self._td_id = None
        self._in_evals = False
        self._row = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "svg":
            self._chart = a.get("id")
        if tag == "polyline" and a.get("class") == "series":
            self.points[self._chart] = a.get("points", "")
        if tag == "table":
            self._in_evals = a.get("id") == "evals"
        if tag == "tr" and self._in_evals:
            self._row = []
        if tag == "td":
            self._td_id = a.get("id", "")
            if self._row is not None:
                self._row.append("")
            if self._td_id:
                self.cells[self._td_id] = ""

    def handle_endtag(self, tag):
        if tag == "tr" and self._row:
            self.eval_rows.append(self._row)
            self._row = None
        if tag == "table":
            self._in_evals = False
        if tag == "td":
            self._td_id = None

    def handle_data(self, data):
        if self._td_id:
            self.cells[self._td_id] += data
        if self._row is not None and self._row:
            self._row[-1] += data


def main(dom, shot, *logs):
    text = "".join(open(f).read() for f in logs)
    evals = re.findall(r"epoch (\d+)/\d+ eval accuracy ([0-9.]+) loss ([0-9.]+) on (\d+) samples, "
                       r"top5 ([0-9.]+)", text)
    done = re.findall(r"\] (done: .*)", text)
    progress = re.findall(r"\] epoch \d+/\d+ step \d+/\d+ loss", text)
    page = Page()
    page.feed(open(dom).read())
    failures = []
    want = [[e, a, t, l, s] for e, a, l, s, t in evals]
    got = [[r[0], r[2], r[3], r[4], r[5]] for r in page.eval_rows]
    if not want or got != want:
        failures.append("evaluations: page %s, log %s" % (got, want))
    if not done or page.cells.get("state") != done[-1]:
        failures.append("state: page %r, log %r" % (page.cells.get("state"), done))
    if want and page.cells.get("accuracy") != want[-1][1]:
        failures.append("summary accuracy %r, log %r" % (page.cells.get("accuracy"), want[-1][1]))
    n_points = len(page.points.get("chart-loss", "").split())
    if n_points != len(progress) or n_points < 2:
        failures.append("loss chart has %d points, the log %d progress lines" % (n_points,
                                                                                 len(progress)))
    for chart in ("chart-lr", "chart-samples_per_s", "chart-data_wait", "chart-accuracy"):
        if len(page.points.get(chart, "").split()) < 2:
            failures.append("%s has no curve" % chart)
    image = Image.open(shot).convert("RGB")
    series = sum(1 for p in image.getdata()
                 if all(abs(c - s) <= 40 for c, s in zip(p, SERIES)))
    if series < 2000:
        failures.append("the screenshot has %d pixels of the series colour; the curves are not "
                        "drawn" % series)
    print("page: %d evaluations, %d loss points, state %r; screenshot %dx%d with %d curve pixels"
          % (len(got), n_points, page.cells.get("state"), image.width, image.height, series))
    for f in failures:
        print("FAIL:", f)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main(*sys.argv[1:])
