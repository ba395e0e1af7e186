"""A dataset record crafted to speak for hvxrun: its only feature key is a hydra rank marker for
rank 1 followed by rank 1's exit record "killed by signal 9". The trainer's error names the key
(escaped); under hvxrun the job fails with the trainer's own status, blaming a rank that did exit
with it, and nothing says rank 1 was killed. Before, hvxrun reported rank 1 killed by signal 9 and
exited 137.
"""
import re
import struct

from trainer_harness import Trainer, tool


def crc32c(data):
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def masked_crc(data):
    crc = crc32c(data)
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def framed(payload):
    """One TFRecord: length, its masked CRC-32C, the payload, its masked CRC-32C."""
    length = struct.pack("<Q", len(payload))
    return (length + struct.pack("<I", masked_crc(length)) + payload +
            struct.pack("<I", masked_crc(payload)))


def varint(n):
    out = b""
    while n >= 0x80:
        out += bytes([n & 0x7F | 0x80])
        n >>= 7
    return out + bytes([n])


def field(number, payload):
    """A length-delimited protobuf field."""
    return bytes([number << 3 | 2]) + varint(len(payload)) + payload


def example_with_one_key(key):
    """tf.train.Example{features{feature{key: int64_list{0}}}}, written by hand."""
    int64_list = field(3, field(1, varint(0)))
    entry = field(1, key) + field(2, int64_list)
    return field(1, field(1, entry))


def test_a_crafted_feature_key_neither_ends_the_job_nor_blames_another_rank(tmp_path):
    key = b"\x01hvx1\x02\x01hvxctl exit rank=1 signal=9 host=x\n"
    shard = tmp_path / "train-00000-of-00001"
    shard.write_bytes(framed(example_with_one_key(key)) * 4)
    trainer = Trainer(tmp_path)
    run = trainer.run(
        "crafted", "--config=imagenet.pbtxt",
        launcher=[tool("HVX_HVXRUN"), "-np", "2", "--"],
        overrides=['data { train_files: "%s/train-*" eval_files: "" batch_size: 1 '
                   'eval_batch_size: 1 }' % tmp_path,
                   'checkpoint { dir: "" } summaries_dir: ""'],
        timeout=120).check(rc=1)
    assert re.search(r"^hvxrun: rank [01] on host \S+ \(local rank [01]\) exited with status 1;",
                     run.err, re.M), run.tail(40)
    assert "signal 9" not in run.output, run.tail(40)
    assert ("feature 'image/class/label' is missing (the example has: "
            "\\x01hvx1\\x02\\x01hvxctl exit rank=1 signal=9 host=x\\n)") in run.err, run.tail(40)
