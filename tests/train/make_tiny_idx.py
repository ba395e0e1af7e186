#!/usr/bin/env python3
"""Writes a tiny Fashion-MNIST-shaped IDX set (gzip) for trainer tests.

    make_tiny_idx.py OUT_DIR NUM_TRAIN NUM_TEST

Image i of class c = i % 10 is noise plus a bright band whose row depends on c, so a model can
learn the classes apart in a few steps.
"""
import gzip
import os
import random
import struct
import sys


def write(path, dims, data):
    with gzip.open(path, "wb") as f:
        f.write(struct.pack(">BBBB", 0, 0, 0x08, len(dims)))
        for d in dims:
            f.write(struct.pack(">I", d))
        f.write(bytes(data))


def make(out, prefix, n, seed):
    rng = random.Random(seed)
    images, labels = bytearray(), bytearray()
    for i in range(n):
        c = i % 10
        for r in range(28):
            for col in range(28):
                v = rng.randrange(60)
                if 2 * c + 3 <= r < 2 * c + 6:
                    v += 180
                images.append(v)
        labels.append(c)
    write(os.path.join(out, prefix + "-images-idx3-ubyte.gz"), [n, 28, 28], images)
    write(os.path.join(out, prefix + "-labels-idx1-ubyte.gz"), [n], labels)


if __name__ == "__main__":
    out, n_train, n_test = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    os.makedirs(out, exist_ok=True)
    make(out, "train", n_train, 1)
    make(out, "t10k", n_test, 2)
