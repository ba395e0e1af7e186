"""One run, one place: two runs of one config with the same summaries_dir, as a user tries them
(the second with only checkpoint.dir overridden), write their TensorBoard events, metrics.jsonl and
report.html into a folder each, named by the run; the first run's files are left as they were.
Resuming the first run from its checkpoint continues its own folder: its metrics file goes on from
the step resumed, its report shows the whole run and names it, and its checkpoints (single file
and sharded) store the run's name.
"""
import glob
import json
import os
import re

from trainer_harness import Trainer, read_metrics


def folders(summaries):
    return sorted(os.listdir(summaries))


def files_of(folder):
    """Every file in a run's folder with its bytes."""
    out = {}
    for name in sorted(os.listdir(folder)):
        with open(os.path.join(folder, name), "rb") as f:
            out[name] = f.read()
    return out


def cell(html, cell_id):
    match = re.search(r'<td id="%s">([^<]*)</td>' % cell_id, html)
    assert match, "report.html has no cell %s" % cell_id
    return match.group(1)


def test_each_run_has_its_own_folder_and_a_resumed_run_continues_its_own(tmp_path):
    trainer = Trainer(tmp_path)
    config = trainer.tiny_config("cnn", 240, 40, batch=10, epochs=2)  # 24 steps per epoch
    summaries = str(tmp_path / "summaries")
    first_ck, second_ck = str(tmp_path / "ck_first"), str(tmp_path / "ck_second")

    def run(name, ck, *args, extra=""):
        return trainer.run(name, "--config=" + config, *args, metrics=False, overrides=[
            'checkpoint { dir: "%s" every_epochs: 1 } summaries_dir: "%s" %s' % (ck, summaries,
                                                                              extra)]).check()

    # The first run's checkpoints are single files (the second's are directories).
    single = "checkpoint { format: SINGLE_FILE }"
    first = run("first", first_ck, "--max_steps=30", extra=single)
    [first_name] = folders(summaries)
    first_dir = os.path.join(summaries, first_name)
    assert re.fullmatch(r"\d{8}-\d{6}-[0-9a-f]{6}", first_name), first_name
    assert "run %s: started; its report, metrics and TensorBoard events are in %s" % (
        first_name, first_dir) in first.output
    first_files = files_of(first_dir)
    assert {"report.html", "metrics.jsonl"} <= set(first_files), first_files.keys()
    assert len([f for f in first_files if f.startswith("events.out.tfevents.")]) == 1
    records = read_metrics(os.path.join(first_dir, "metrics.jsonl"))
    assert [r["run"] for r in records if r["event"] == "start"] == [first_name]
    assert [r["global_step"] for r in records if r["event"] == "progress"] == list(range(1, 31))
    page = open(os.path.join(first_dir, "report.html")).read()
    assert cell(page, "run") == first_name and cell(page, "steps") == "30"

    # Another run of the same config into another checkpoint directory, sharded checkpoints.
    second = run("second", second_ck, extra="checkpoint { format: SHARDED }")
    assert len(folders(summaries)) == 2, folders(summaries)
    [second_name] = [f for f in folders(summaries) if f != first_name]
    second_dir = os.path.join(summaries, second_name)
    assert "run %s: started" % second_name in second.output
    assert files_of(first_dir) == first_files, "the second run changed the first run's files"
    second_records = read_metrics(os.path.join(second_dir, "metrics.jsonl"))
    assert [r["run"] for r in second_records if r["event"] == "start"] == [second_name]
    assert cell(open(os.path.join(second_dir, "report.html")).read(), "run") == second_name
    index = sorted(glob.glob(os.path.join(second_ck, "ckpt-*", "index.json")))[-1]
    assert json.load(open(index))["metadata"]["run"] == second_name, index
    second_files = files_of(second_dir)

    # The first run resumed from its checkpoint at step 30 goes on in its own folder.
    resumed = run("resumed", first_ck, extra=single)
    assert "run %s: resumed" % first_name in resumed.output, resumed.tail()
    assert len(folders(summaries)) == 2, folders(summaries)
    assert files_of(second_dir) == second_files, "the resumed first run changed the second's"
    records = read_metrics(os.path.join(first_dir, "metrics.jsonl"))
    starts = [r for r in records if r["event"] == "start"]
    assert [s["run"] for s in starts] == [first_name, first_name]
    assert starts[1]["global_step"] == 30
    assert [r["global_step"] for r in records if r["event"] == "progress"] == list(range(1, 49))
    assert len(glob.glob(os.path.join(first_dir, "events.out.tfevents.*"))) == 2
    page = open(os.path.join(first_dir, "report.html")).read()
    assert cell(page, "run") == first_name
    assert cell(page, "steps") == "48"
    first_after_resume = files_of(first_dir)
    # Every evaluation, those from before the resume too, is in the report's table.
    table = page.split('<table id="evals">')[1].split("</table>")[0]
    rows = [int(step) for step in re.findall(r"<tr><td>\d+</td><td>(\d+)</td>", table)]
    evals = [r["global_step"] for r in records if r["event"] == "eval"]
    assert rows == evals and 24 in rows and 48 in rows, (rows, evals)

    # A run refused before it starts (the first run's checkpoints, another model) still records
    # how it ended, in a folder of its own.
    refused = trainer.run("refused", "--config=" + config, metrics=False, overrides=[
        'model { name: "mlp" } checkpoint { dir: "%s" } summaries_dir: "%s"' % (first_ck,
                                                                              summaries)])
    assert refused.rc not in (0, None), refused.tail()
    [refused_name] = [f for f in folders(summaries) if f not in (first_name, second_name)]
    assert "run %s: failed before training" % refused_name in refused.output, refused.tail()
    [end] = read_metrics(os.path.join(summaries, refused_name, "metrics.jsonl"))
    assert end["event"] == "end" and end["state"] == "failed", end
    assert "checkpoint" in end["error"], end
    page = open(os.path.join(summaries, refused_name, "report.html")).read()
    assert cell(page, "state").startswith("failed: "), cell(page, "state")
    assert files_of(first_dir) == first_after_resume


def test_a_summaries_folder_rank_0_cannot_make_fails_every_rank_naming_it(tmp_path):
    trainer = Trainer(tmp_path)
    config = trainer.tiny_config("cnn", 240, 40, batch=10, epochs=1)
    not_a_dir = str(tmp_path / "file")
    open(not_a_dir, "w").close()
    run = trainer.run("blocked", "--config=" + config, metrics=False, overrides=[
        'launch { num_processes: "2" } checkpoint { dir: "" } summaries_dir: "%s"' % not_a_dir],
        timeout=120)
    assert run.rc not in (0, None), run.tail()
    for rank, prefix in ((0, ""), (1, r"rank 0 \(host [^)]+\): ")):
        assert re.search(r"^\[%d\] .*%sopening the run's records: .*%s" % (
            rank, prefix, re.escape(not_a_dir)), run.output, re.M), run.tail(30)
