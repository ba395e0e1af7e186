#!/usr/bin/env python3
"""Loads a state dict the trainer exported (--export) into the built-in CNN as hvx.models defines
it in PyTorch and evaluates it on Fashion-MNIST-shaped IDX files, as the trainer does.

    export_check.py WEIGHTS.pt IDX_DIR [MODEL]   # prints "accuracy A loss L top5 T on N samples"
    evaluate(weights, idx_dir, model_name)       # the same as a dict, from Python

MODEL is the trainer's model.name, "cnn" when not given, or a TorchScript file (the module the
trainer's model.torchscript named, or one it exported); WEIGHTS "-" keeps MODEL's own weights.
"""
import gzip
import struct
import sys

import torch
import torch.nn as nn

import hvx.models

MEAN, STD = 0.2860, 0.3530  # hvx/train/trainer.cc's Fashion-MNIST normalisation


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = struct.unpack(">" + "I" * dims, data[4:4 + 4 * dims])
    return torch.frombuffer(bytearray(data[4 + 4 * dims:]), dtype=torch.uint8).view(*shape)


def evaluate(weights, idx_dir, model_name="cnn"):
    """{"accuracy", "loss", "top5", "samples"} of the model on IDX_DIR's test set."""
    if model_name.endswith(".pt"):
        model = torch.jit.load(model_name)
    else:
        model = hvx.models.by_name(model_name)
    if weights != "-":
        # As PyTorch >= 2.6 loads by default: tensors and containers only, no other globals.
        state = torch.load(weights, weights_only=True)
        assert isinstance(state, dict) and all(torch.is_tensor(v) for v in state.values()), \
            type(state)
        model.load_state_dict(state, strict=True)
    model.eval()
    images = read_idx(idx_dir + "/t10k-images-idx3-ubyte.gz").float().unsqueeze(1)
    labels = read_idx(idx_dir + "/t10k-labels-idx1-ubyte.gz").long()
    # The decoder's arithmetic: pixel * (1 / (255 * std)) + (-mean / std), in float32.
    scale = torch.tensor(1.0, dtype=torch.float32) / (torch.tensor(255.0) * torch.tensor(STD))
    shift = -torch.tensor(MEAN, dtype=torch.float32) / torch.tensor(STD, dtype=torch.float32)
    x = images * scale + shift
    with torch.no_grad():
        logits = model(x)
    loss = nn.functional.cross_entropy(logits, labels).item()
    accuracy = (logits.argmax(1) == labels).float().mean().item()
    top5 = (logits.topk(5, 1).indices == labels.unsqueeze(1)).any(1).float().mean().item()
    return {"accuracy": accuracy, "loss": loss, "top5": top5, "samples": len(labels)}


def main(weights, idx_dir, model_name="cnn"):
    r = evaluate(weights, idx_dir, model_name)
    print("accuracy %.4f loss %.6f top5 %.4f on %d samples" %
          (r["accuracy"], r["loss"], r["top5"], r["samples"]))


if __name__ == "__main__":
    main(*sys.argv[1:])
