"""Two jobs pointed at one checkpoint.dir: the second is refused at once on every rank, naming the
job, process and host that hold the directory, and the first trains on with its checkpoints
intact; once the first has ended, a new job resumes from them."""
import signal

from trainer_harness import Trainer, read_metrics, wait_for

TWO = 'launch { num_processes: "2" }'


def test_a_second_job_is_refused_and_the_first_keeps_its_checkpoints(tmp_path):
    trainer = Trainer(tmp_path)
    config = trainer.tiny_config("mlp", 400, 40, batch=10, epochs=200)
    ck = 'checkpoint { dir: "%s" every_steps: 5 format: SHARDED }' % trainer.path("ck")
    first, proc = trainer.start("first", "--config=" + config, overrides=[TWO + " " + ck])
    try:
        wait_for(lambda: any(r["event"] == "checkpoint"
                             for r in read_metrics(first.metrics_path, growing=True))
                 or proc.poll() is not None, timeout=120, what="the first job's first checkpoint")
        second = trainer.run("second", "--config=" + config, overrides=[TWO + " " + ck],
                             timeout=60)
        assert second.rc not in (0, "timeout after 60 s"), second.tail()
        refused = [line for line in second.output.splitlines()
                   if "is in use by another job (job " in line]
        assert any(line.startswith("[0] ") for line in refused), second.tail()
        assert any(line.startswith("[1] ") for line in refused), second.tail()
        assert "pid " in refused[0] and trainer.path("ck") in refused[0], refused[0]
        assert proc.poll() is None, "the first job ended: " + first.tail()
    finally:
        proc.send_signal(signal.SIGTERM)  # a checkpoint request: it saves and stops
    trainer.finish(first, proc, timeout=120).check(75)  # preempted, its checkpoint written
    assert first.checkpoints, first.tail()
    third = trainer.run("third", "--config=" + config, "--max_steps=%d" % (first.end["global_step"] + 2),
                        overrides=[TWO + " " + ck]).check()
    assert "resuming from %s/ckpt-%d " % (trainer.path("ck"), first.end["global_step"]) in third.output
