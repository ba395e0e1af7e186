"""The trainer's built-in networks (hvx/train/models.cc) in PyTorch, with the same parameter and
buffer names, so the weights `train --export=PATH` writes load into them:

    model = hvx.models.SmallCnn()
    model.load_state_dict(torch.load(PATH))
"""

import torch.nn as nn


class SmallCnn(nn.Module):
    """The trainer's "cnn": two conv blocks (conv-BN-ReLU x2, max-pool, dropout), then a dense
    head, on 1x28x28 inputs."""

    def __init__(self, num_classes=10):
        super().__init__()

        def block(cin, cout):
            return [nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout),
                    nn.ReLU()]
        self.features = nn.Sequential(*block(1, 32), *block(32, 32), nn.MaxPool2d(2),
                                      nn.Dropout(0.1), *block(32, 64), nn.MaxPool2d(2),
                                      nn.Dropout(0.2))
        self.classifier = nn.Sequential(nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.ReLU(),
                                        nn.Dropout(0.3), nn.Linear(128, num_classes))

    def forward(self, x):
        return self.classifier(self.features(x))


class Mlp(nn.Module):
    """The trainer's "mlp": 784-256-128-classes with ReLU, on 1x28x28 inputs."""

    def __init__(self, num_classes=10):
        super().__init__()
        self.fc1 = nn.Linear(28 * 28, 256)
        self.fc2 = nn.Linear(256, 128)
        self.fc3 = nn.Linear(128, num_classes)

    def forward(self, x):
        x = x.flatten(1)
        return self.fc3(self.fc2(self.fc1(x).relu()).relu())


def by_name(name, num_classes=10):
    """The network the trainer's model.name builds."""
    return {"cnn": SmallCnn, "mlp": Mlp}[name](num_classes)
