#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Writes torch_functions.onnx for io_functions_ort_test.cpp: a small CNN exported by PyTorch
(Debian's python3-torch 1.13) with export_modules_as_functions, so each residual Block (Conv 3x3,
Relu, Add) is a model-local function '__main__:Block' called twice, its weights passed in as
inputs. Graph: x [1, 3, 16, 16] -> Conv -> Relu -> Block -> Block -> ReduceMean(2, 3) -> Gemm
-> y [1, 4]. Run from this folder (needs torch; CI uses the committed file):
  /usr/bin/python3 gen_torch_functions.py"""
import torch


class Block(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv = torch.nn.Conv2d(c, c, 3, padding=1)
        self.act = torch.nn.ReLU()

    def forward(self, x):
        return self.act(self.conv(x)) + x


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.b1 = Block(8)
        self.b2 = Block(8)
        self.head = torch.nn.Linear(8, 4)

    def forward(self, x):
        y = self.b2(self.b1(torch.relu(self.stem(x))))
        return self.head(y.mean(dim=(2, 3)))


torch.manual_seed(0)
torch.onnx.export(Net().eval(), torch.randn(1, 3, 16, 16), "torch_functions.onnx", opset_version=15,
                  export_modules_as_functions={Block}, input_names=["x"], output_names=["y"])
