#!/usr/bin/env python3
"""Writes the TorchScript modules tests/train/torchscript_test.py trains, made with the same
PyTorch as the trainer's LibTorch:

    make_scripted.py OUT_DIR

  bn_net.pt        conv-BatchNorm-ReLU blocks with dropout (running statistics as buffers), scripted
  mixer.pt         a small MLP-Mixer over 7x7 patches with LayerNorm, and an auxiliary head its
                   forward never uses (a parameter without a gradient), traced
  two_inputs.pt    forward(self, x, mask): does not fit
  seven_classes.pt returns 7 logits where the config says 10
"""
import os
import sys

import torch
import torch.nn as nn


class BnNet(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
            nn.MaxPool2d(2), nn.Dropout(0.1),
            nn.Conv2d(16, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU(),
            nn.MaxPool2d(2))
        self.head = nn.Linear(32 * 7 * 7, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).flatten(1))


class MixerBlock(nn.Module):
    def __init__(self, tokens, dim):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.token_mlp = nn.Sequential(nn.Linear(tokens, 32), nn.GELU(), nn.Linear(32, tokens))
        self.norm2 = nn.LayerNorm(dim)
        self.channel_mlp = nn.Sequential(nn.Linear(dim, 64), nn.GELU(), nn.Linear(64, dim))

    def forward(self, x):
        x = x + self.token_mlp(self.norm1(x).transpose(1, 2)).transpose(1, 2)
        return x + self.channel_mlp(self.norm2(x))


class Mixer(nn.Module):
    def __init__(self, classes=10, patch=7, dim=48, depth=2):
        super().__init__()
        tokens = (28 // patch) ** 2
        self.embed = nn.Conv2d(1, dim, patch, stride=patch)
        self.blocks = nn.Sequential(*[MixerBlock(tokens, dim) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, classes)
        self.aux_head = nn.Linear(dim, classes)  # never called: no gradient, ever

    def forward(self, x):
        x = self.embed(x).flatten(2).transpose(1, 2)
        return self.head(self.norm(self.blocks(x)).mean(1))


class TwoInputs(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(784, 10)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.fc(x.flatten(1)) * mask


def main(out):
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    torch.jit.script(BnNet()).save(os.path.join(out, "bn_net.pt"))
    torch.jit.trace(Mixer().eval(), torch.zeros(2, 1, 28, 28)).save(os.path.join(out, "mixer.pt"))
    torch.jit.script(TwoInputs()).save(os.path.join(out, "two_inputs.pt"))
    torch.jit.script(BnNet(classes=7)).save(os.path.join(out, "seven_classes.pt"))


if __name__ == "__main__":
    main(sys.argv[1])
