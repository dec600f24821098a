# SPDX-License-Identifier: Apache-2.0
"""A real PyTorch training loop (Debian's python3-torch, on the CPU) whose steps call the
CUDA runtime through ctypes from known lines: inside the model's forward(), which
torch's Module.__call__ runs; after the optimizer step on the main thread; and from a
second Python thread. Each such line is marked with a comment naming it, which the test
reads to know the line numbers. One call, then a pause, comes first, so that the
collector has found the process's interpreter before the measured steps.

Usage: pystacks_train.py LIBCUDART STEPS
"""
import ctypes
import json
import os
import sys
import threading
import time

import torch

rt = ctypes.CDLL(sys.argv[1])
sync = rt.cudaStreamSynchronize
sync.argtypes = [ctypes.c_void_p]
sync.restype = ctypes.c_int
steps = int(sys.argv[2])


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, x):
        sync(None)  # LINE forward
        return self.fc(x)


def prefetch(n, started):
    started.wait()
    for _ in range(n):
        sync(None)  # LINE thread
        time.sleep(0.001)


def main():
    sync(None)  # LINE warmup
    time.sleep(1.0)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    started = threading.Event()
    side = threading.Thread(target=prefetch, args=(steps, started), name="prefetch")
    side.start()
    started.set()
    for _ in range(steps):
        out = model(torch.randn(16, 8))  # LINE loop
        loss = out.sum()
        loss.backward()
        opt.step()
        opt.zero_grad()
        sync(None)  # LINE step
    side.join()
    print(json.dumps({"pid": os.getpid(), "main_tid": threading.get_native_id(), "thread_tid": side.native_id}), flush=True)


main()  # LINE entry
