"""The training recipes do what they say, end to end on 2 ranks (each check fails if its recipe
silently did nothing):
- backward_passes_per_step: micro-batches give the MLP the same steps as whole batches (the summed
  gradient is the batch mean, one step per batch), and change the CNN's (BatchNorm and dropout see
  the micro-batches);
- clip_grad_norm: each step of plain SGD at lr 1 moves the weights by exactly the bound, while the
  recorded norm before clipping is far above it;
- label_smoothing: the recorded training loss is the smoothed loss PyTorch computes for that step's
  samples, not the plain one;
- ema_decay: the exported weights are the average, not the live weights, and reproduce the
  trainer's eval accuracy, loss and top-5 in PyTorch; a run stopped and resumed evaluates exactly
  like the uninterrupted one;
- precision: BF16 autocasts on the CPU (learns, with its own losses); FP16 there is refused;
- LAMB and AdamW with no_decay_on_bias_and_norm learn the tiny set.
"""
import pytest

import recipe_check
from export_check import evaluate
from trainer_harness import Trainer

TWO = 'launch { num_processes: "2" }'


@pytest.fixture(scope="module")
def trainer(tmp_path_factory):
    trainer = Trainer(tmp_path_factory.mktemp("recipes"))
    trainer.config = trainer.tiny_config("mlp", 400, 60, batch=10, epochs=1)
    return trainer


def train(trainer, name, *args, overrides=()):
    return trainer.run(name, "--config=" + trainer.config, *args,
                       overrides=(TWO,) + tuple(overrides), timeout=300).check()


def losses(run):
    return [p["loss"] for p in run.progress]


def close(a, b, tolerance):
    """The same count of numbers, each pair within `tolerance` relative."""
    return len(a) == len(b) > 0 and all(
        abs(x - y) <= tolerance * max(abs(x), abs(y), 1e-12) for x, y in zip(a, b))


def test_mlp_three_micro_batches_per_step_train_like_whole_batches(trainer):
    k1 = train(trainer, "mlp-k1")
    k3 = train(trainer, "mlp-k3", overrides=["optimizer { backward_passes_per_step: 3 }"])
    assert close(losses(k1), losses(k3), 1e-4), (losses(k1), losses(k3))


CNN = 'model { name: "cnn" }'


@pytest.fixture(scope="module")
def cnn(trainer):
    """The CNN for one epoch, in float32 with whole batches: what two tests compare against."""
    return train(trainer, "cnn-k1", overrides=[CNN])


def test_cnn_three_micro_batches_per_step_differ_from_whole_batches(trainer, cnn):
    # BatchNorm and dropout see the micro-batches.
    k3 = train(trainer, "cnn-k3", overrides=[CNN + " optimizer { backward_passes_per_step: 3 }"])
    assert len(cnn.progress) == 20
    assert not close(losses(cnn), losses(k3), 1e-4)


def test_a_clipped_step_moves_the_weights_by_the_bound(trainer):
    # SGD at lr 1 without momentum moves the weights by the clipped gradient.
    clip = train(trainer, "clip", "--max_steps=3", overrides=[
        "optimizer { lr: 1 momentum: 0 clip_grad_norm: 0.001 }",
        'checkpoint { dir: "%s" every_steps: 1 keep: 10 }' % trainer.path("clip")])
    for step in (1, 2):
        train(trainer, "clip-export%d" % step,
              "--export_from=" + trainer.path("clip", "ckpt-%d" % step),
              "--export=" + trainer.path("clip%d.pt" % step),
              overrides=['checkpoint { dir: "%s" }' % trainer.path("clip")])
    moved = recipe_check.step_norm(trainer.path("clip1.pt"), trainer.path("clip2.pt"))
    norm = [p["grad_norm"] for p in clip.progress if p["global_step"] == 2]
    assert moved == pytest.approx(1e-3, abs=1e-6)
    assert norm and norm[0] > 0.1, "the recorded norm before clipping is far above the bound"


def test_the_training_loss_is_the_label_smoothed_loss_of_the_steps_samples(trainer):
    # Step 4's recorded loss is PyTorch's smoothed loss at ckpt-3's weights on the 10 samples each
    # rank trained in step 4.
    smooth = train(trainer, "smooth", "--max_steps=4",
                   "--sample_log=" + trainer.path("smooth-log"), overrides=[
                       "label_smoothing: 0.3 optimizer { kind: ADAMW lr: 0.001 weight_decay: 0.05 "
                       "no_decay_on_bias_and_norm: true }",
                       'checkpoint { dir: "%s" every_steps: 1 keep: 10 }' % trainer.path("smooth")])
    train(trainer, "smooth-export", "--export_from=" + trainer.path("smooth", "ckpt-3"),
          "--export=" + trainer.path("smooth3.pt"),
          overrides=['checkpoint { dir: "%s" }' % trainer.path("smooth")])
    per_rank = [recipe_check.loss(trainer.path("smooth3.pt"), trainer.path("tiny_idx"), "mlp",
                                  trainer.path("smooth-log", "rank%d-epoch0.txt" % r), 30, 10, 0.3)
                for r in (0, 1)]
    smoothed = sum(s for s, _ in per_rank) / 2
    plain = sum(p for _, p in per_rank) / 2
    recorded = [p["loss"] for p in smooth.progress if p["global_step"] == 4][0]
    assert smoothed == pytest.approx(recorded, rel=1e-4)
    assert abs(plain - recorded) > 1e-2


EMA = 'model { name: "cnn" } epochs: 2 ema_decay: 0.9 optimizer { lr: 0.0005 momentum: 0.5 }'


@pytest.fixture(scope="module")
def ema(trainer):
    return train(trainer, "ema", "--export=" + trainer.path("ema.pt"),
                 overrides=[EMA, 'checkpoint { dir: "%s" }' % trainer.path("ema")])


def test_evaluation_uses_the_moving_average(trainer, ema):
    train(trainer, "live", "--export_from=" + trainer.path("ema", "ckpt-40"),
          "--export=" + trainer.path("live.pt"),
          overrides=[EMA + " ema_decay: 0", 'checkpoint { dir: "%s" }' % trainer.path("ema")])
    assert recipe_check.differ(trainer.path("ema.pt"), trainer.path("live.pt"))
    final = ema.evals[-1]
    assert (final["epoch"], final["averaged_weights"]) == (2, True)
    average = evaluate(trainer.path("ema.pt"), trainer.path("tiny_idx"), "cnn")
    live = evaluate(trainer.path("live.pt"), trainer.path("tiny_idx"), "cnn")
    assert average["accuracy"] == pytest.approx(final["accuracy"], abs=1e-6)
    assert average["loss"] == pytest.approx(final["loss"], abs=1e-4)
    assert average["top5"] == pytest.approx(final["top5"], abs=1e-6)
    assert abs(live["loss"] - final["loss"]) > 1e-4, "the live weights evaluate otherwise"


def test_with_ema_stopped_and_resumed_the_run_evaluates_as_the_uninterrupted_one(trainer, ema):
    ckpt = 'checkpoint { dir: "%s" }' % trainer.path("ema2")
    train(trainer, "ema-stop", "--max_steps=30", overrides=[EMA, ckpt])
    resumed = train(trainer, "ema-resume", overrides=[EMA, ckpt])
    keys = ("epoch", "accuracy", "loss", "samples", "top5", "averaged_weights")
    assert {k: resumed.evals[-1][k] for k in keys} == {k: ema.evals[-1][k] for k in keys}


def test_bf16_autocasts_on_the_cpu_and_learns_with_losses_of_its_own(trainer, cnn):
    # One epoch (this CPU emulates bfloat16, at about 50 samples/s), after which float32 and
    # bfloat16 both reached 0.9 on one machine; 0.8 leaves room for another's kernels, and chance
    # is 0.1.
    bf16 = train(trainer, "bf16", overrides=[CNN + " precision: BF16"])
    assert "mixed precision: autocast to bfloat16 on cpu" in bf16.output
    assert bf16.end["accuracy"] >= 0.8
    assert not close(losses(bf16), losses(cnn), 1e-3)


def test_fp16_on_the_cpu_is_refused_naming_bf16(trainer):
    fp16 = trainer.run("fp16", "--config=" + trainer.config,
                       overrides=['precision: FP16 device: "cpu"'], timeout=60)
    assert fp16.rc not in (0, None)
    assert ("precision: FP16 autocast needs CUDA; training runs on the CPU, where BF16 is the mixed "
            "precision") in fp16.output


@pytest.mark.parametrize("kind", ["LAMB", "ADAMW"])
def test_the_optimizer_reaches_90_percent(trainer, kind):
    run = train(trainer, kind, overrides=[
        'model { name: "cnn" } epochs: 2 optimizer { kind: %s lr: 0.01 weight_decay: 0.01 '
        "no_decay_on_bias_and_norm: true }" % kind])
    assert run.end["accuracy"] >= 0.9
