# Parks three threads in known places and prints, as one JSON line, what a walker of
# this process's memory must find: each thread's ident (pthread_self), native id (the
# kernel tid) and its stack innermost first as [file, qualified name, line], read with
# sys._current_frames() once every thread is blocked. The reporting thread then exits,
# leaving the main thread and two workers asleep until the test kills the process.
import json
import os
import sys
import threading
import time

parked = {}
stop = threading.Event()


def park(name):
    parked[name] = threading.get_native_id()


class Sleeper:
    def outer(self):
        return self.middle(3)

    def middle(self, depth):
        if depth > 1:
            return self.middle(depth - 1)
        return inner_sleep()


def inner_sleep():
    park("sleeper")
    time.sleep(3600)


def waiter():
    def wait_for_stop():
        park("waiter")
        stop.wait()
    values = [wait_for_stop() for _ in range(1)]
    return values


def stacks():
    frames = sys._current_frames()
    out = []
    for thread in threading.enumerate():
        if thread is threading.current_thread():
            continue
        stack = []
        frame = frames[thread.ident]
        while frame is not None:
            code = frame.f_code
            stack.append([code.co_filename, code.co_qualname, frame.f_lineno])
            frame = frame.f_back
        out.append({"name": thread.name, "ident": thread.ident, "native_id": thread.native_id, "stack": stack})
    return out


def report():
    deadline = time.monotonic() + 30
    while len(parked) < 3:
        if time.monotonic() > deadline:
            sys.exit("threads did not park: %r" % parked)
        time.sleep(0.01)
    # Parked means about to block: wait until two looks a while apart agree.
    time.sleep(0.2)
    first = stacks()
    while True:
        time.sleep(0.2)
        second = stacks()
        if first == second:
            break
        first = second
    print(json.dumps({"pid": os.getpid(), "threads": first}), flush=True)


def main_hold():
    park("main")
    time.sleep(3600)


threading.Thread(target=Sleeper().outer, name="sleeper", daemon=True).start()
threading.Thread(target=waiter, name="waiter", daemon=True).start()
threading.Thread(target=report, name="reporter").start()
main_hold()
