# SPDX-License-Identifier: Apache-2.0
"""fakegpu's GIL workload: CPython threads around ctypes calls into the CUDA runtime.

The main thread drives the GPU: each step it launches kernels and synchronises the
stream through ctypes, which releases the GIL around every foreign call, so after each
call the thread must take the GIL back. Worker threads run pure Python (a tokenizer's
loop) and keep the GIL until the interpreter's switch interval asks them to drop it. So
the main thread waits for the GIL after its CUDA calls, off its CPU voluntarily (a futex
wait), and is woken by the worker that drops it, or by its own timeout, when it asks for
the GIL to be dropped: GIL contention as in a serving or training process whose
tokenizer or data-loading threads run in the interpreter.

The gate is fakegpu-workload's: --ready-file gets {"pid":..,"tid":..} once the CUDA
runtime is loaded and before any CUDA call, and the steps start when --wait-file exists.
It runs under Debian's /usr/bin/python3 (CPython 3.11) with nothing but the standard
library.
"""

import argparse
import ctypes
import json
import os
import threading
import time


class Dim3(ctypes.Structure):
    _fields_ = [("x", ctypes.c_uint), ("y", ctypes.c_uint), ("z", ctypes.c_uint)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cudart", required=True, help="the CUDA runtime library to load")
    ap.add_argument("--steps", type=int, default=100000)
    ap.add_argument("--launches", type=int, default=10, help="kernels launched a step")
    ap.add_argument("--workers", type=int, default=4, help="pure-Python worker threads")
    ap.add_argument("--wait-file")
    ap.add_argument("--ready-file")
    ap.add_argument("--wait-timeout-ms", type=int, default=60000)
    args = ap.parse_args()

    rt = ctypes.CDLL(args.cudart)
    launch = rt.cudaLaunchKernel
    launch.argtypes = [ctypes.c_void_p, Dim3, Dim3, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    launch.restype = ctypes.c_int
    sync = rt.cudaStreamSynchronize
    sync.argtypes = [ctypes.c_void_p]
    sync.restype = ctypes.c_int
    kernel = ctypes.create_string_buffer(16)  # stands for a kernel's host-side address

    if args.ready_file:
        tmp = args.ready_file + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"pid": os.getpid(), "tid": threading.get_native_id()}, f)
        os.rename(tmp, args.ready_file)
    if args.wait_file:
        deadline = time.monotonic() + args.wait_timeout_ms / 1000
        while not os.path.exists(args.wait_file):
            if time.monotonic() > deadline:
                raise SystemExit(f"{args.wait_file} did not appear within {args.wait_timeout_ms} ms")
            time.sleep(0.002)

    stop = threading.Event()

    def tokenize():
        n = 0
        while not stop.is_set():
            for i in range(1000):
                n = (n * 31 + i) % 1000003

    workers = [threading.Thread(target=tokenize, daemon=True) for _ in range(args.workers)]
    for w in workers:
        w.start()
    one = Dim3(1, 1, 1)
    for _ in range(args.steps):
        for _ in range(args.launches):
            err = launch(ctypes.addressof(kernel), one, one, None, 0, None)  # LINE launch
            if err:
                raise SystemExit(f"cudaLaunchKernel returned {err}")
        err = sync(None)  # LINE sync
        if err:
            raise SystemExit(f"cudaStreamSynchronize returned {err}")
    stop.set()


if __name__ == "__main__":
    main()
