# SPDX-License-Identifier: Apache-2.0
"""A Python process that calls NCCL through ctypes from known lines, in PyTorch DDP's
shape: the communicator is made on the main thread, gradient all-reduces are issued
from a second thread (as DDP's hooks run on the autograd engine's thread), and the
main thread makes its own all-reduce after each step (a loss average). Each such line
is marked with a comment naming it, which the test reads to know the line numbers. One
CUDA call, then a pause, comes first, so that the collector has found the process's
interpreter before the first NCCL call.

Usage: pystacks_nccl.py LIBCUDART LIBNCCL STEPS
"""
import ctypes
import json
import os
import sys
import threading
import time

rt = ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)
nccl = ctypes.CDLL(sys.argv[2])
steps = int(sys.argv[3])

NCCL_FLOAT32, NCCL_SUM = 7, 0


class UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_char * 128)]


allreduce = nccl.ncclAllReduce
allreduce.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                      ctypes.c_void_p, ctypes.c_void_p]
allreduce.restype = ctypes.c_int
comm = ctypes.c_void_p()
buf = (ctypes.c_float * 256)()


def check(rc, what):
    if rc != 0:
        raise SystemExit(f"{what} failed: {rc}")


def reduce_gradients():
    check(allreduce(buf, buf, 256, NCCL_FLOAT32, NCCL_SUM, comm, None), "all-reduce")  # LINE hook


def autograd(n, started):
    started.wait()
    for _ in range(n):
        reduce_gradients()
        time.sleep(0.001)


def main():
    rt.cudaStreamSynchronize(None)  # LINE warmup
    time.sleep(1.0)
    uid = UniqueId()
    check(nccl.ncclGetUniqueId(ctypes.byref(uid)), "ncclGetUniqueId")
    check(nccl.ncclCommInitRank(ctypes.byref(comm), 1, uid, 0), "ncclCommInitRank")  # LINE init
    started = threading.Event()
    side = threading.Thread(target=autograd, args=(steps, started), name="autograd")
    side.start()
    started.set()
    for _ in range(steps):
        check(allreduce(buf, buf, 1, NCCL_FLOAT32, NCCL_SUM, comm, None), "loss average")  # LINE step
        time.sleep(0.001)
    side.join()
    print(json.dumps({"pid": os.getpid(), "main_tid": threading.get_native_id(), "thread_tid": side.native_id}), flush=True)


main()  # LINE entry
