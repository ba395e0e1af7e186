#!/usr/bin/env python3
"""Horovod's PyTorch MNIST example on hvx, on Fashion-MNIST; the one changed line is the import.

    hvxrun -np 2 -- python3 examples/pytorch_mnist.py --epochs 2

The data is Debian's dataset-fashion-mnist (/usr/share/datasets/fashion-mnist), read through
torchvision. Every rank prints with hvxrun's "[rank]" prefix; metrics are printed by rank 0.
"""
import argparse
import gzip
import os
import shutil

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
import torch.utils.data
from torchvision import datasets, transforms

import hvx.torch as hvd

parser = argparse.ArgumentParser(description="PyTorch (Fashion-)MNIST example on hvx")
parser.add_argument("--batch-size", type=int, default=64, help="input batch size per rank")
parser.add_argument("--test-batch-size", type=int, default=1000)
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("--lr", type=float, default=0.01, help="learning rate of one rank")
parser.add_argument("--momentum", type=float, default=0.5)
parser.add_argument("--seed", type=int, default=42)
parser.add_argument("--log-interval", type=int, default=100, help="batches between log lines")
parser.add_argument("--fp16-allreduce", action="store_true", help="gradients travel as fp16")
parser.add_argument("--use-adasum", action="store_true")
parser.add_argument("--gradient-predivide-factor", type=float, default=1.0)
parser.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist",
                    help="the IDX files (.gz)")
parser.add_argument("--cache-dir", default=os.path.expanduser("~/.cache/hvx/torchvision"),
                    help="where torchvision's layout of the data is made")
parser.add_argument("--train-samples", type=int, default=0, help="use only the first N (0: all)")


class Net(nn.Module):
    """The network of Horovod's PyTorch MNIST example."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 10, kernel_size=5)
        self.conv2 = nn.Conv2d(10, 20, kernel_size=5)
        self.conv2_drop = nn.Dropout2d()
        self.fc1 = nn.Linear(320, 50)
        self.fc2 = nn.Linear(50, 10)

    def forward(self, x):
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = F.relu(F.max_pool2d(self.conv2_drop(self.conv2(x)), 2))
        x = x.view(-1, 320)
        x = F.relu(self.fc1(x))
        x = F.dropout(x, training=self.training)
        x = self.fc2(x)
        return F.log_softmax(x, dim=1)


def torchvision_layout(data_dir, cache_dir):
    """torchvision's FashionMNIST reads unpacked IDX files from ROOT/FashionMNIST/raw."""
    raw = os.path.join(cache_dir, "FashionMNIST", "raw")
    os.makedirs(raw, exist_ok=True)
    for name in ["train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                 "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"]:
        target = os.path.join(raw, name)
        if os.path.exists(target):
            continue
        source = os.path.join(data_dir, name + ".gz")
        if not os.path.exists(source):
            raise SystemExit("%s is missing: install Debian's dataset-fashion-mnist "
                             "(tools/setup does) or pass --data-dir" % source)
        tmp = "%s.tmp.%d" % (target, os.getpid())
        with gzip.open(source, "rb") as f, open(tmp, "wb") as out:
            shutil.copyfileobj(f, out)
        os.replace(tmp, target)
    return cache_dir


def metric_average(val, name):
    return hvd.allreduce(torch.tensor(val), name=name).item()


def main():
    args = parser.parse_args()
    hvd.init()
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)

    # One rank per host prepares the files; the others wait for it.
    if hvd.local_rank() == 0:
        torchvision_layout(args.data_dir, args.cache_dir)
    hvd.barrier()
    transform = transforms.Compose([transforms.ToTensor(), transforms.Normalize((0.2860,),
                                                                                (0.3530,))])
    train_dataset = datasets.FashionMNIST(args.cache_dir, train=True, download=False,
                                          transform=transform)
    if args.train_samples:
        train_dataset = torch.utils.data.Subset(train_dataset, range(args.train_samples))
    test_dataset = datasets.FashionMNIST(args.cache_dir, train=False, download=False,
                                         transform=transform)
    # Partition the data among the ranks (hvx's shard plan: disjoint, balanced, per epoch).
    train_sampler = hvd.data.DistributedSampler(train_dataset, num_replicas=hvd.size(),
                                                rank=hvd.rank(), seed=args.seed)
    train_loader = torch.utils.data.DataLoader(train_dataset, batch_size=args.batch_size,
                                               sampler=train_sampler)
    test_sampler = hvd.data.DistributedSampler(test_dataset, num_replicas=hvd.size(),
                                               rank=hvd.rank(), shuffle=False)
    test_loader = torch.utils.data.DataLoader(test_dataset, batch_size=args.test_batch_size,
                                              sampler=test_sampler)

    model = Net()
    # Adasum does not scale the learning rate with the number of ranks.
    lr_scaler = 1 if args.use_adasum else hvd.size()
    optimizer = optim.SGD(model.parameters(), lr=args.lr * lr_scaler, momentum=args.momentum)
    # Every rank starts from rank 0's weights and optimizer state.
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                         compression=compression,
                                         op=hvd.Adasum if args.use_adasum else hvd.Average,
                                         gradient_predivide_factor=args.gradient_predivide_factor)

    def train(epoch):
        model.train()
        train_sampler.set_epoch(epoch)
        for batch_idx, (data, target) in enumerate(train_loader):
            optimizer.zero_grad()
            loss = F.nll_loss(model(data), target)
            loss.backward()
            optimizer.step()
            if batch_idx % args.log_interval == 0 and hvd.rank() == 0:
                print("Train Epoch: {} [{}/{} ({:.0f}%)]\tLoss: {:.6f}".format(
                    epoch, batch_idx * len(data), len(train_sampler),
                    100.0 * batch_idx / len(train_loader), loss.item()), flush=True)

    def test():
        model.eval()
        test_loss, test_accuracy = 0.0, 0.0
        with torch.no_grad():
            for data, target in test_loader:
                output = model(data)
                test_loss += F.nll_loss(output, target, reduction="sum").item()
                pred = output.max(1, keepdim=True)[1]
                test_accuracy += pred.eq(target.view_as(pred)).float().sum().item()
        # The sampler pads to equal shares; the padding is few enough to leave in.
        test_loss /= len(test_sampler)
        test_accuracy /= len(test_sampler)
        test_loss = metric_average(test_loss, "avg_loss")
        test_accuracy = metric_average(test_accuracy, "avg_accuracy")
        if hvd.rank() == 0:
            print("\nTest set: Average loss: {:.4f}, Accuracy: {:.2f}%\n".format(
                test_loss, 100.0 * test_accuracy), flush=True)
        return test_accuracy

    accuracy = 0.0
    for epoch in range(1, args.epochs + 1):
        train(epoch)
        accuracy = test()
    if hvd.rank() == 0:
        print("final accuracy %.4f" % accuracy, flush=True)


if __name__ == "__main__":
    main()
