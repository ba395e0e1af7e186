"""format: EXAMPLE. The FASHION_MNIST preset written out as a feature spec trains exactly as the
preset does; inputs stored as float_list, int64_list, float32 bytes and channels-last RGB bytes all
train; records that do not match the spec and specs that do not fit the model fail, naming the
file, the record's offset, the key, and what was expected and found.
"""
import re
import subprocess

import pytest

from trainer_harness import Trainer, tool


@pytest.fixture(scope="module")
def trainer(tmp_path_factory):
    trainer = Trainer(tmp_path_factory.mktemp("example_format"))
    trainer.config = trainer.tiny_config("mlp", 400, 60, batch=10, epochs=1)
    idx, out = trainer.path("tiny_idx"), trainer.path("f")
    for images, labels, split, shards in (("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
                                           "train", "2"),
                                          ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz",
                                           "test", "1")):
        subprocess.run([tool("HVX_MAKE_RECORDS"), idx + "/" + images, idx + "/" + labels, out, split,
                        shards], check=True)
    trainer.features = 'train_files: "%s/train-*" eval_files: "%s/test-*" format: EXAMPLE' % (out, out)
    return trainer


def train(trainer, name, *overrides):
    return trainer.run(name, "--config=" + trainer.config,
                       overrides=('launch { num_processes: "2" }',) + overrides, timeout=300)


def test_fashion_mnist_is_a_preset_of_example_every_steps_loss_the_same(trainer):
    preset = train(trainer, "preset").check()
    spelled = train(trainer, "spelled", 'data { format: EXAMPLE example { label_key: '
                    '"image/class/label" input { key: "image/raw" kind: BYTES shape: [1, 28, 28] '
                    'divide_by: 255 mean: 0.2860 stddev: 0.3530 } } }').check()
    assert len(preset.progress) == 20
    assert spelled.steps() == preset.steps()


@pytest.mark.parametrize("spec", [
    'key: "pixels_f" kind: FLOAT_LIST shape: [1, 28, 28]',
    'key: "pixels_i" kind: INT64_LIST shape: [1, 28, 28] divide_by: 255',
    'key: "pixels_f32" kind: BYTES bytes_type: FLOAT32 shape: [784]',
])
def test_every_stored_kind_trains(trainer, spec):
    name = re.match(r'key: "(\w+)"', spec).group(1)
    run = train(trainer, name, "data { %s example { input { %s } } }" % (trainer.features, spec))
    run.check()
    assert run.end["accuracy"] >= 0.9


def test_three_channel_inputs_for_the_one_channel_mlp_are_refused_at_start(trainer):
    rgb = train(trainer, "rgb", 'data { %s example { input { key: "pixels_rgb" kind: BYTES shape: '
                '[3, 28, 28] channels_last_stored: true mean: [0.5, 0.5, 0.5] stddev: 0.5 '
                'divide_by: 255 } } }' % trainer.features)
    assert rgb.rc not in (0, None)
    assert ("mlp does not fit the configured inputs: on a batch of shape [2, 3, 28, 28] it should "
            "return logits of shape [2, 10] (model.num_classes), but it raised: ") in rgb.err
    assert rgb.progress == [], "refused before any step"


def test_a_record_whose_bytes_do_not_fill_the_shape_names_file_offset_key_and_sizes(trainer):
    short = train(trainer, "short", 'data { %s example { input { key: "pixels_rgb" kind: BYTES '
                  'shape: [1, 28, 28] } } }' % trainer.features)
    assert short.rc not in (0, None)
    assert re.search(re.escape(trainer.path("f")) + r"/train-0000[01]-of-00002:[0-9]+ \(sample "
                     r"[0-9]+\): feature 'pixels_rgb' has 2352 bytes, expected 784 \(784 uint8 "
                     r"values\) for the input shape \[1, 28, 28\]", short.err), short.tail()


def test_a_feature_of_another_type_names_file_offset_key_and_both_types(trainer):
    kind = train(trainer, "kind", 'data { %s example { input { key: "pixels_f" kind: INT64_LIST '
                 'shape: [1, 28, 28] } } }' % trainer.features)
    assert kind.rc not in (0, None)
    assert re.search(re.escape(trainer.path("f")) + r"/train-0000[01]-of-00002:[0-9]+ \(sample "
                     r"[0-9]+\): feature 'pixels_f' is float_list, expected int64_list", kind.err), \
        kind.tail()


def test_a_spec_without_a_key_is_refused_naming_the_field(trainer):
    nokey = train(trainer, "nokey", "data { format: EXAMPLE example { input { kind: FLOAT_LIST "
                  "shape: [784] } } }")
    assert nokey.rc not in (0, None)
    assert "data.example.input.key: name the Example feature that is the model's input" in nokey.err
