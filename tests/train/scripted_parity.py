#!/usr/bin/env python3
"""The Python half of tests/train/scripted_parity.sh: scripts the MLP-Mixer of make_scripted.py
for the trainer, and trains the same network with the same recipe in plain PyTorch on the
Fashion-MNIST IDX files, printing its test accuracy.

    scripted_parity.py script OUT.pt
    scripted_parity.py train IDX_DIR EPOCHS BATCH LR WEIGHT_DECAY SMOOTHING SEED

The recipe is the trainer's: AdamW (decoupled weight decay, none on biases and norms), label
smoothing, a cosine schedule from lr to 0 at the last step, inputs (pixel / 255 - 0.2860) /
0.3530, a new shuffle each epoch, the last incomplete batch dropped.
"""
import math
import sys

import torch
import torch.nn.functional as F

from export_check import read_idx
from make_scripted import Mixer


def inputs(images):
    return (images.float().unsqueeze(1) / 255 - 0.2860) / 0.3530


def train(idx, epochs, batch, lr, weight_decay, smoothing, seed):
    epochs, batch, seed = int(epochs), int(batch), int(seed)
    lr, weight_decay, smoothing = float(lr), float(weight_decay), float(smoothing)
    torch.manual_seed(seed)
    torch.set_num_threads(2)
    x = inputs(read_idx(idx + "/train-images-idx3-ubyte.gz"))
    y = read_idx(idx + "/train-labels-idx1-ubyte.gz").long()
    tx = inputs(read_idx(idx + "/t10k-images-idx3-ubyte.gz"))
    ty = read_idx(idx + "/t10k-labels-idx1-ubyte.gz").long()
    model = Mixer()
    decay = [p for n, p in model.named_parameters() if p.dim() > 1 and not n.endswith("bias")]
    other = [p for n, p in model.named_parameters() if not (p.dim() > 1 and not n.endswith("bias"))]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                             {"params": other, "weight_decay": 0.0}], lr=lr)
    steps_per_epoch = len(x) // batch
    total = epochs * steps_per_epoch
    step = 0
    for epoch in range(epochs):
        model.train()
        order = torch.randperm(len(x))
        for i in range(steps_per_epoch):
            for g in opt.param_groups:
                g["lr"] = lr * 0.5 * (1 + math.cos(math.pi * step / total))
            idx_ = order[i * batch:(i + 1) * batch]
            loss = F.cross_entropy(model(x[idx_]), y[idx_], label_smoothing=smoothing)
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
        model.eval()
        with torch.no_grad():
            correct = sum((model(tx[i:i + 1000]).argmax(1) == ty[i:i + 1000]).sum().item()
                          for i in range(0, len(tx), 1000))
        print("python epoch %d/%d eval accuracy %.4f" % (epoch + 1, epochs, correct / len(tx)),
              flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "script":
        torch.manual_seed(0)
        torch.jit.script(Mixer()).save(sys.argv[2])
    else:
        train(*sys.argv[2:])
