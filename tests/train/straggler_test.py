"""Straggler detection in the trainer: 2 ranks of the CNN, rank 1 held to half a core by a CPU
quota (a cgroup's, as a container's CPU limit is). Rank 0's progress records in metrics.jsonl
name rank 1 with each rank's lateness, report.html names it and plots the lateness, and rank 0's
log has the warning line with its host and local rank. Needs root and a cgroup cpu controller
(v1's cpu.cfs_quota_us or v2's cpu.max); skipped otherwise."""
import json
import os
import re

import pytest

from trainer_harness import Trainer, tool


def cpu_quota_group(name, share):
    """A new cgroup limited to `share` of one CPU; returns (its cgroup.procs, its directory), or
    skips the test saying why none could be made."""
    tried = []
    for base, v2 in (("/sys/fs/cgroup/cpu", False), ("/sys/fs/cgroup", True),
                     ("/sys/fs/cgroup/unified", True)):
        group = os.path.join(base, name)
        try:
            if v2:
                with open(os.path.join(base, "cgroup.subtree_control"), "w") as f:
                    f.write("+cpu")
            os.makedirs(group, exist_ok=True)
            if v2:
                with open(os.path.join(group, "cpu.max"), "w") as f:
                    f.write("%d 10000" % (share * 10000))
            else:
                with open(os.path.join(group, "cpu.cfs_period_us"), "w") as f:
                    f.write("10000")
                with open(os.path.join(group, "cpu.cfs_quota_us"), "w") as f:
                    f.write("%d" % (share * 10000))
            return os.path.join(group, "cgroup.procs"), group
        except OSError as e:
            tried.append("%s: %s" % (group, e))
            try:
                os.rmdir(group)
            except OSError:
                pass
    pytest.skip("no cgroup with a CPU quota could be made: " + "; ".join(tried))


def test_a_rank_held_to_half_a_core_is_named_in_metrics_report_and_log(tmp_path):
    procs, group = cpu_quota_group("hvx-straggler-%d" % os.getpid(), 0.5)
    try:
        trainer = Trainer(tmp_path)
        config = trainer.tiny_config("cnn", 2000, 40, batch=10, epochs=1)
        # Rank 1 joins the group before it becomes the trainer.
        join = 'if [ "$HVX_RANK" = 1 ]; then echo $$ > "%s"; fi; exec "$0" "$@"' % procs
        summaries = str(tmp_path / "summaries")
        run = trainer.run(
            "straggler", "--config=" + config,
            launcher=[tool("HVX_HVXRUN"), "-np", "2", "--", "/bin/sh", "-c", join],
            overrides=['logging { log_every_steps: 10 } summaries_dir: "%s"' % summaries],
            timeout=240).check()
    finally:
        os.rmdir(group)
    # Named from some window on (a window of the quota's bursts may break a streak later).
    named = [p["straggler"] for p in run.progress if p.get("straggler", {}).get("rank") == 1]
    assert named, [p.get("straggler") for p in run.progress]
    assert not [p for p in run.progress if p.get("straggler", {}).get("rank", -1) not in (-1, 1)]
    for record in named:
        assert len(record["late_ms"]) == len(record["wait_share"]) == 2, record
        assert record["late_ms"][1] > 1.0 and record["wait_share"][1] > 0.05, record
    assert re.search(r"^\[0\] .*straggler: rank 1 \(host \S+, local rank 1\) is late: it submitted "
                     r"its collectives [0-9.]+ ms after the median", run.err, re.M), run.tail(30)
    [run_dir] = os.listdir(summaries)  # the run's own folder (hvx/train/run_dir.h)
    page = open(os.path.join(summaries, run_dir, "report.html")).read()
    assert re.search(r'<td id="straggler">rank 1, [0-9.]+ ms late at step \d+</td>', page), \
        page[:2000]
    points = re.search(r'id="chart-straggler".*?<polyline class="series" points="([^"]*)"', page,
                       re.S)
    assert points and len(points.group(1).split()) == len(run.progress), page[:2000]
