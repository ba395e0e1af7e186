"""A rank whose training fails ends at once, and the job with it, blaming that rank: rank 1 cannot
write its sample log (a directory stands where its file goes) while rank 0 trains on. Before, rank
1 shut hvx down first: rank 0's step then failed with "hvx has been shut down", and hvxrun named
rank 0, whose exit it saw first. (With a cut link that shutdown's barrier also waited the whole
HVX_SHUTDOWN_TIMEOUT_S on every rank; tests/faults covers cuts.)
"""
import os
import time

from trainer_harness import Trainer


def test_a_rank_whose_training_fails_ends_the_job_at_once(tmp_path):
    trainer = Trainer(tmp_path)
    config = trainer.tiny_config("cnn", 240, 40, batch=10, epochs=1)
    samples = trainer.path("samples")
    os.makedirs(os.path.join(samples, "rank1-epoch0.txt"))
    trainer.env["HVX_SHUTDOWN_TIMEOUT_S"] = "30"
    trainer.env["HVX_COLLECTIVE_TIMEOUT_S"] = "60"
    start = time.monotonic()
    run = trainer.run("failing", "--config=" + config, "--sample_log=" + samples,
                      overrides=['launch { num_processes: "2" }'], timeout=120).check(rc=1)
    elapsed = time.monotonic() - start
    assert "rank 1 on host" in run.err, run.tail(30)
    assert "rank1-epoch0.txt" in run.err, run.tail(30)
    assert elapsed < 20, "the job took %.1f s to end:\n%s" % (elapsed, run.tail(30))


def test_an_exception_out_of_training_ends_the_rank_with_its_message(tmp_path):
    """An exception nothing caught (a LibTorch error, memory) ended the rank in std::terminate: an
    abort and a core dump, the job blamed on signal 6. It is the rank's failure now, said in one
    line, exit status 1; rank 0 throws as it writes its first checkpoint (failpoint "throw")."""
    trainer = Trainer(tmp_path)
    config = trainer.tiny_config("cnn", 240, 40, batch=10, epochs=1)
    trainer.env["HVX_ALLOW_FAILPOINTS"] = "1"
    trainer.env["HVX_FAILPOINT"] = "checkpoint:0:throw"
    run = trainer.run("throwing", "--config=" + config,
                      overrides=['launch { num_processes: "2" }',
                                 'checkpoint { dir: "%s" every_steps: 2 }' % trainer.path("ck")],
                      timeout=120).check(rc=1)
    assert "train: rank 0: uncaught exception: an exception thrown at a failpoint" in run.err, \
        run.tail(30)
    assert "rank 0 on host" in run.err and "exited with status 1" in run.err, run.tail(30)
    assert "signal 6" not in run.err, run.tail(30)
