"""model { torchscript: ... }: modules scripted and traced in Python at test time train on 2 ranks
like built-in models; the exported state dict and scripted module reproduce the trainer's eval
accuracy in PyTorch; BatchNorm buffers train and an unused parameter stays as it was; a stopped and
resumed run evaluates exactly like an uninterrupted one; modules that do not fit the configured
inputs fail at start saying what was expected and found.
"""
import subprocess
import sys

import pytest
import torch

from export_check import evaluate
from trainer_harness import Trainer, tool


@pytest.fixture(scope="module")
def trainer(tmp_path_factory):
    trainer = Trainer(tmp_path_factory.mktemp("torchscript"))
    trainer.config = trainer.tiny_config(None, 400, 60, batch=10, epochs=2)
    # The same PyTorch as the trainer's LibTorch makes the modules.
    subprocess.run([sys.executable, tool("HVX_MAKE_SCRIPTED"), trainer.path("m")], check=True)
    return trainer


def train(trainer, name, module, *args, overrides=()):
    return trainer.run(name, "--config=" + trainer.config, *args,
                       overrides=('launch { num_processes: "2" } model { torchscript: "%s" }' %
                                  trainer.path("m", module + ".pt"),) + tuple(overrides),
                       timeout=300)


@pytest.fixture(scope="module")
def bn(trainer):
    return train(trainer, "bn", "bn_net", "--export=" + trainer.path("bn.pt"),
                 overrides=['checkpoint { dir: "%s" }' % trainer.path("bn")]).check()


def test_the_log_and_the_start_record_name_the_torchscript_model(trainer, bn):
    assert "training the TorchScript model %s (" % trainer.path("m", "bn_net.pt") in bn.output
    assert trainer.path("m", "bn_net.pt") in bn.start["model"]


def test_the_exported_state_dict_and_module_reproduce_the_evaluation(trainer, bn):
    final = bn.evals[-1]
    assert final["epoch"] == 2
    assert final["accuracy"] >= 0.9, "it learned"
    idx = trainer.path("tiny_idx")
    from_dict = evaluate(trainer.path("bn.pt"), idx, trainer.path("m", "bn_net.pt"))
    from_script = evaluate("-", idx, trainer.path("bn.scripted.pt"))
    assert from_dict["accuracy"] == pytest.approx(final["accuracy"], abs=1e-6)
    assert from_script["accuracy"] == pytest.approx(final["accuracy"], abs=1e-6)
    assert from_script["loss"] == pytest.approx(final["loss"], abs=2e-6)


def test_batchnorm_running_statistics_trained(trainer, bn):
    state = torch.load(trainer.path("bn.pt"))
    assert state["features.1.running_mean"].abs().sum() > 0
    assert int(state["features.1.num_batches_tracked"]) > 0


def test_stopped_and_resumed_the_run_evaluates_exactly_as_the_uninterrupted_one(trainer, bn):
    ckpt = 'checkpoint { dir: "%s" }' % trainer.path("bn2")
    train(trainer, "bn-stop", "bn_net", "--max_steps=30", overrides=[ckpt]).check()
    resumed = train(trainer, "bn-resume", "bn_net", overrides=[ckpt]).check()
    assert resumed.start["global_step"] == 30
    keys = ("epoch", "accuracy", "loss", "samples", "top5")
    assert {k: resumed.evals[-1][k] for k in keys} == {k: bn.evals[-1][k] for k in keys}


def test_an_unused_parameter_stays_as_it_was_and_the_used_ones_train(trainer):
    # A traced MLP-Mixer whose auxiliary head forward never uses: 2 ranks do not wait for its
    # gradient.
    train(trainer, "mixer", "mixer", "--export=" + trainer.path("mixer.pt")).check()
    trained = torch.load(trainer.path("mixer.pt"))
    initial = torch.jit.load(trainer.path("m", "mixer.pt")).state_dict()
    assert all(torch.equal(trained[k], initial[k]) for k in ("aux_head.weight", "aux_head.bias"))
    assert not torch.equal(trained["head.weight"], initial["head.weight"])


def test_a_forward_with_two_inputs_is_refused_with_both_signatures(trainer):
    two = train(trainer, "two", "two_inputs")
    assert two.rc not in (0, None)
    assert ("expected forward(self, x: Tensor) -> Tensor, found forward(__torch__.TwoInputs self, "
            "Tensor x, Tensor mask) -> Tensor") in two.output
    assert two.progress == [], "at start, before any step"


def test_seven_logits_where_the_config_says_ten_are_refused_with_both_shapes(trainer):
    seven = train(trainer, "seven", "seven_classes")
    assert seven.rc not in (0, None)
    assert ("on a batch of shape [2, 1, 28, 28] it should return logits of shape [2, 10] "
            "(model.num_classes), but it returned logits of shape [2, 7]") in seven.output
