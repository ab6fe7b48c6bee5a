"""Threads: what several threads take at once, one of them takes. On a free-threaded interpreter
nothing serialises them but dlpx (a GIL build's GIL makes these hold by itself: there the test
is short and checks the counts alone)."""

import sys
import threading
import time

import numpy as np
import pytest

import dlpx
from numpy_producers import Managed

FREE_THREADED = not getattr(sys, "_is_gil_enabled", lambda: True)()
THREADS = 4


def test_a_capsule_that_threads_consume_at_once_is_taken_once():
    # Each capsule's check and rename were two steps: on 3.14t about 5 of 100 000 capsules
    # consumed by 4 threads at once were taken twice, and their deleters ran twice.
    count = 200_000 if FREE_THREADED else 2_000
    # 64 dimensions: the checks between a capsule's test and its rename take longer, and a
    # second thread had more time to come between them.
    array = np.zeros((4,) + (1,) * 63, np.float32)
    managed = [Managed(array) for _ in range(count)]
    # No destructor: the one consumer that takes a tensor deletes it.
    capsules = [m.capsule() for m in managed]
    taken = [[0] * count for _ in range(THREADS)]
    start = threading.Barrier(THREADS)

    def consume(me):
        start.wait()
        for i, capsule in enumerate(capsules):
            try:
                dlpx.from_dlpack(capsule)
            except BufferError:  # consumed by another thread first
                continue
            taken[me][i] += 1

    threads = [threading.Thread(target=consume, args=(k,)) for k in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    twice = [i for i in range(count) if sum(t[i] for t in taken) != 1]
    deleted_twice = [i for i, m in enumerate(managed) if m.calls != 1]
    assert not twice, f"{len(twice)} of {count} capsules taken by more than one thread (or none)"
    assert not deleted_twice, f"{len(deleted_twice)} of {count} deleters did not run exactly once"


def test_array_api_strict_s_version_is_learnt_by_threads_at_once_without_a_lost_reference():
    # The row remembers the API_VERSION str it last found new enough. Its read and replace were
    # two steps: two threads that read the same str both released it, and the one a thread
    # stored first was overwritten unreleased (on 3.14t about 25 of 70 000 strs kept one
    # reference too many in 5 seconds).
    xp = pytest.importorskip("array_api_strict")
    flags = pytest.importorskip("array_api_strict._flags")
    x = xp.asarray([1.0, 2.0, 3.0])
    was = flags.API_VERSION
    versions, stop = [], threading.Event()

    def set_versions():
        while not stop.is_set():
            version = "".join(["2024", ".12"])  # a new str each time, not interned
            versions.append(version)
            flags.API_VERSION = version
            time.sleep(0)  # the readers meet each version a few times

    def read():
        while not stop.is_set():
            assert dlpx.from_dlpack(x).shape == (3,)

    threads = [threading.Thread(target=read) for _ in range(THREADS)] + [threading.Thread(target=set_versions)]
    for thread in threads:
        thread.start()
    stop.wait(3.0 if FREE_THREADED else 0.2)
    stop.set()
    for thread in threads:
        thread.join()
    flags.API_VERSION = was
    dlpx.from_dlpack(x)  # the row lets go of the last str it kept
    # Each str is held by the list alone: counted as one that dlpx never saw is.
    alone = [sys.getrefcount(version) for version in ["".join(["2024", ".12"])]][0]
    kept = [sys.getrefcount(version) for version in versions]
    assert kept.count(alone) == len(kept), f"{len(kept) - kept.count(alone)} of {len(kept)} strs with a reference too many"


@pytest.mark.skipif(not FREE_THREADED, reason="a GIL build serialises the threads")
def test_the_interpreter_stays_free_threaded():
    assert not sys._is_gil_enabled()
