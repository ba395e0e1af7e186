#!/usr/bin/env python3
"""What tests/train/recipes_test.py checks in PyTorch, on weights the trainer exported.

    step_norm(a, b)
        the L2 norm of B - A over every tensor: one optimizer step's size
    differ(a, b)
        whether some tensor differs
    loss(weights, idx_dir, model, sample_log, first, count, smoothing)
        (label-smoothed, plain) training loss of the model on lines FIRST..FIRST+COUNT-1 of a
        --sample_log file (global sample ids, which number the IDX file's images in order)

Each is also a command: recipe_check.py NAME ARGS... prints the result.
"""
import sys

import torch
import torch.nn.functional as F

import hvx.models
from export_check import MEAN, STD, read_idx


def step_norm(a, b):
    a, b = torch.load(a), torch.load(b)
    assert a.keys() == b.keys()
    return torch.sqrt(sum(((b[k].double() - a[k].double()) ** 2).sum() for k in a)).item()


def differ(a, b):
    a, b = torch.load(a), torch.load(b)
    return any(not torch.equal(a[k], b[k]) for k in a)


def loss(weights, idx_dir, model_name, sample_log, first, count, smoothing):
    model = hvx.models.by_name(model_name)
    model.load_state_dict(torch.load(weights), strict=True)
    model.train()
    ids = [int(line.split()[0]) for line in open(sample_log)][int(first):int(first) + int(count)]
    images = read_idx(idx_dir + "/train-images-idx3-ubyte.gz").float().unsqueeze(1)[ids]
    labels = read_idx(idx_dir + "/train-labels-idx1-ubyte.gz").long()[ids]
    scale = torch.tensor(1.0, dtype=torch.float32) / (torch.tensor(255.0) * torch.tensor(STD))
    shift = -torch.tensor(MEAN, dtype=torch.float32) / torch.tensor(STD, dtype=torch.float32)
    with torch.no_grad():
        logits = model(images * scale + shift)
    return (F.cross_entropy(logits, labels, label_smoothing=float(smoothing)).item(),
            F.cross_entropy(logits, labels).item())


if __name__ == "__main__":
    print({"step_norm": step_norm, "differ": differ, "loss": loss}[sys.argv[1]](*sys.argv[2:]))
