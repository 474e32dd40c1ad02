"""A ResNet-style CNN from torch.nn layers: stem conv + BatchNorm + ReLU + MaxPool, two
residual stages (the second downsamples, with a 1x1 projection shortcut), global average
pooling and a linear classifier."""

from __future__ import annotations

import torch
from torch import nn

from .common import SMALL, Case, Size


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + self.shortcut(x))


class ResNet(nn.Module):
    def __init__(self, channels: int = 8, classes: int = 10):
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, channels, 3, padding=1, bias=False), nn.BatchNorm2d(channels), nn.ReLU(inplace=True),
            nn.MaxPool2d(3, stride=2, padding=1),
        )
        self.layer1 = BasicBlock(channels, channels, 1)
        self.layer2 = BasicBlock(channels, 2 * channels, 2)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(2 * channels, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.layer2(self.layer1(self.stem(x)))
        return self.fc(torch.flatten(self.pool(x), 1))


def build_resnet(batch: int, size: Size = SMALL) -> Case:
    model = ResNet(channels=size.channels)
    # Fresh BatchNorm running stats are 0/1, which makes eval mode trivial: give them
    # values so inference exercises the normalisation with real statistics.
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 1.5)
    x = torch.randn(batch, 3, size.image, size.image)
    target = torch.randint(0, 10, (batch,))
    return Case(model, (x,), target, lambda out, t: nn.functional.cross_entropy(out, t))
