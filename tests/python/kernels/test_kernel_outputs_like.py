"""dlpx.outputs_like: a kernel call's outputs for a framework other than its first tensor
argument's (its allocator, its stream, its type back), per context (thread, asyncio task), nested,
restored on errors."""

import asyncio
import contextvars
import os
import sys
import threading

import numpy as np
import pytest

import c_build
import dlpx

torch = pytest.importorskip("torch")

REPO = c_build.REPO


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    source = os.path.join(REPO, "examples", "kernel_library", "kernels.c")
    return dlpx.load_library(c_build.kernel_library(tmp_path_factory, "c", source, "dlpx_example_kernels"))


def test_the_first_tensor_argument_decides_without_it(lib):
    a = np.arange(4, dtype=np.float32)
    assert type(lib.add(a, a)) is np.ndarray
    assert type(lib.add(torch.from_numpy(a), a)) is torch.Tensor


@pytest.mark.parametrize("framework, expected", [
    (lambda: torch.Tensor, torch.Tensor),
    (lambda: torch.zeros(1), torch.Tensor),
    (lambda: dlpx.Tensor, dlpx.Tensor),
    (lambda: np.ndarray, np.ndarray),
])
def test_outputs_go_to_the_framework_named(lib, framework, expected):
    a = np.arange(6, dtype=np.float64).reshape(2, 3)
    t = torch.from_numpy(a.copy())
    with dlpx.outputs_like(framework()):
        for first in (a, t):
            out = lib.add(first, a)
            assert type(out) is expected
            np.testing.assert_array_equal(np.from_dlpack(out), 2 * a)


def test_blocks_nest_and_restore_on_errors(lib):
    a = np.ones(2, np.float32)
    with dlpx.outputs_like(torch.Tensor):
        with dlpx.outputs_like(dlpx.Tensor):
            assert type(lib.add(a, a)) is dlpx.Tensor
        assert type(lib.add(a, a)) is torch.Tensor
        with dlpx.outputs_like(None):  # the first argument's rule again
            assert type(lib.add(a, a)) is np.ndarray
        with pytest.raises(TypeError):
            with dlpx.outputs_like(dlpx.Tensor):
                lib.add(a, "not a tensor")
        assert type(lib.add(a, a)) is torch.Tensor
    assert type(lib.add(a, a)) is np.ndarray


def test_one_block_entered_again_nested_or_in_another_thread_restores_each_outer_choice(lib):
    a = np.ones(2, np.float32)
    like_torch = dlpx.outputs_like(torch.Tensor)
    with like_torch:
        with like_torch:
            assert type(lib.add(a, a)) is torch.Tensor
        assert type(lib.add(a, a)) is torch.Tensor
    assert type(lib.add(a, a)) is np.ndarray, "the outer choice (none) is back"

    entered, left = threading.Event(), threading.Event()
    seen = []

    def other():
        with dlpx.outputs_like(dlpx.Tensor):
            with like_torch:
                entered.set()
                left.wait(10)
            seen.append(type(lib.add(a, a)))

    thread = threading.Thread(target=other)
    thread.start()
    with like_torch:
        entered.wait(10)
        left.set()
    thread.join()
    assert seen == [dlpx.Tensor], "the other thread's own outer choice is back"
    assert type(lib.add(a, a)) is np.ndarray


def test_the_choice_is_this_thread_s(lib):
    a = np.ones(2, np.float32)
    seen = []
    started, done = threading.Event(), threading.Event()

    def other():
        started.wait()
        seen.append(type(lib.add(a, a)))
        done.set()

    thread = threading.Thread(target=other)
    thread.start()
    with dlpx.outputs_like(torch.Tensor):
        started.set()
        done.wait(10)
        assert type(lib.add(a, a)) is torch.Tensor
    thread.join()
    assert seen == [np.ndarray]


def test_an_abstract_or_derived_type_names_its_framework(lib, tmp_path):
    # jax.Array (abstract: every array is a jaxlib ArrayImpl) names jax; a subclass no framework's
    # table reads (numpy.memmap, a masked array) names its nearest base's framework.
    a = np.ones(2, np.float32)
    memmap = np.memmap(tmp_path / "m", dtype=np.float32, mode="w+", shape=(2,))
    for x in (np.memmap, memmap, np.ma.masked_array([1.0])):
        with dlpx.outputs_like(x):
            assert type(lib.add(torch.ones(2), torch.ones(2))) is np.ndarray
    jax = pytest.importorskip("jax")
    with dlpx.outputs_like(jax.Array):
        out = lib.add(a, a)
        assert isinstance(out, jax.Array)
        np.testing.assert_array_equal(np.asarray(out), 2 * a)
    assert type(lib.add(a, a)) is np.ndarray


def test_a_first_argument_of_a_derived_type_names_its_nearest_framework_base(lib, tmp_path):
    # The rule outputs_like applies, without a block: a numpy.ndarray subclass (read by the
    # `__dlpack__` row, as its __dlpack__ may be its own) gives numpy arrays back, as a torch.Tensor
    # subclass gives torch tensors; what has no framework base gives dlpx tensors.
    class Mine(np.ndarray):
        pass

    a = np.arange(3, dtype=np.float32)
    memmap = np.memmap(tmp_path / "m", dtype=np.float32, mode="w+", shape=(3,))
    memmap[:] = a
    for _ in range(2):  # found, then remembered
        for x in (a.view(Mine), memmap, np.ma.masked_array(a)):
            out = lib.add(x, a)
            assert type(out) is np.ndarray, type(x)
            np.testing.assert_array_equal(out, 2 * a)
        assert type(lib.add(torch.from_numpy(a).as_subclass(type("T", (torch.Tensor,), {})), a)) is torch.Tensor
        assert type(lib.add(memoryview(a), a)) is dlpx.Tensor
        with dlpx.outputs_like(torch.Tensor):
            assert type(lib.add(memmap, a)) is torch.Tensor


def test_a_numpy_scalar_names_numpy(lib):
    # A numpy scalar is read through its __array_interface__ (no row names numpy for it), yet it
    # is numpy's: outputs like it are numpy arrays (0-d here), first argument or outputs_like.
    for _ in range(2):  # found, then remembered
        out = lib.add(np.float32(1.5), np.float32(2.0))
        assert type(out) is np.ndarray and out.shape == () and out.dtype == np.float32 and out == 3.5
        assert type(lib.add(np.int64(3), np.asarray(4))) is np.ndarray
        for x in (np.float64(0), np.float64, np.generic, np.bool_(True)):
            with dlpx.outputs_like(x):
                assert type(lib.add(torch.ones(2), torch.ones(2))) is np.ndarray
    # Python's own scalars stay nobody's.
    for x in (1.5, float):
        with pytest.raises(TypeError, match="^dlpx: outputs_like: takes a tensor"):
            with dlpx.outputs_like(x):
                pass


@pytest.mark.parametrize("x,given", [("a str", "an instance of str"), (3, "an instance of int"), (object, "object"),
                                     (object(), "an instance of object"), (memoryview, "memoryview")],
                         ids=["str", "int", "type", "object", "buffer type"])
def test_what_is_no_framework_s_tensor_is_a_type_error(lib, x, given):
    match = rf"^dlpx: outputs_like: takes a tensor, or a tensor type, of a framework .*; got {given}$"
    with pytest.raises(TypeError, match=match):
        with dlpx.outputs_like(x):
            pass
    assert type(lib.add(np.ones(1), np.ones(1))) is np.ndarray  # nothing changed


def test_interleaved_asyncio_tasks_keep_their_own_choice(lib):
    # Each task runs in its own copy of the context: a block of one task never reaches another,
    # whichever leaves first.
    a = np.ones(2, np.float32)
    seen = []

    async def task(name, framework, hold):
        with dlpx.outputs_like(framework):
            await asyncio.sleep(hold)
            seen.append((name, "inside", type(lib.add(a, a))))
        seen.append((name, "after", type(lib.add(a, a))))
        await asyncio.sleep(0.03)

    async def both():
        await asyncio.gather(task("A", torch.Tensor, 0.01), task("B", dlpx.Tensor, 0.02))

    asyncio.run(both())
    assert sorted(seen, key=str) == sorted([("A", "inside", torch.Tensor), ("A", "after", np.ndarray),
                                            ("B", "inside", dlpx.Tensor), ("B", "after", np.ndarray)], key=str)
    assert type(lib.add(a, a)) is np.ndarray


def test_a_generator_finished_in_another_thread_leaves_no_error_and_its_context_keeps_the_block(lib):
    # As with decimal.localcontext: the block belongs to the context the generator was entered
    # in; the thread that finishes it has none to leave. (Run in a copy of the context: the block
    # it keeps goes with it.)
    a = np.ones(2, np.float32)

    def batches():
        with dlpx.outputs_like(dlpx.Tensor):
            yield type(lib.add(a, a))
            yield type(lib.add(a, a))

    def in_a_context():
        generator = batches()
        assert next(generator) is dlpx.Tensor
        seen, errors = [], []

        def worker():
            try:
                seen.extend(generator)
                seen.append(type(lib.add(a, a)))
            except BaseException as err:  # noqa: BLE001 -- reported below
                errors.append(err)

        thread = threading.Thread(target=worker)
        thread.start()
        thread.join()
        # A thread that inherits its starter's context (free-threaded 3.14) runs the generator's
        # rest inside the block, and leaves it in its own copy.
        inherits = getattr(sys.flags, "thread_inherit_context", False)
        assert not errors and seen == [dlpx.Tensor if inherits else np.ndarray, np.ndarray], seen
        assert type(lib.add(a, a)) is dlpx.Tensor, "the context it was entered in keeps the block"
        with dlpx.outputs_like(None):
            assert type(lib.add(a, a)) is np.ndarray

    contextvars.copy_context().run(in_a_context)
    assert type(lib.add(a, a)) is np.ndarray


def test_a_task_made_inside_a_block_keeps_it_after_the_block_is_left(lib):
    # The task's context is a copy holding the block: the block lives, and counts, while the
    # task does (counted per `with`, it was forgotten when the `with` ended, and the task's calls
    # went back to the first argument's rule).
    a = np.ones(2, np.float32)

    async def work():
        await asyncio.sleep(0.01)
        return type(lib.add(a, a))

    async def main():
        with dlpx.outputs_like(dlpx.Tensor):
            task = asyncio.ensure_future(work())
        return await task, type(lib.add(a, a))

    assert asyncio.run(main()) == (dlpx.Tensor, np.ndarray)
    assert type(lib.add(a, a)) is np.ndarray


def test_a_generator_s_block_that_ends_inside_a_later_block_leaves_the_later_one_in_force(lib):
    # The generator's block is entered first and left inside a block entered after it: the block
    # left is the generator's (leaving the innermost one, the later block, made the calls inside
    # it the generator's framework's, and kept the generator's block after both ended).
    a = np.ones(2, np.float32)

    def batches():
        with dlpx.outputs_like(torch.Tensor):
            yield type(lib.add(a, a))

    def in_a_context():
        generator = batches()
        assert next(generator) is torch.Tensor
        with dlpx.outputs_like(dlpx.Tensor):
            assert type(lib.add(a, a)) is dlpx.Tensor
            assert list(generator) == []
            assert type(lib.add(a, a)) is dlpx.Tensor, "the later block is still in force"
            with dlpx.outputs_like(np.ndarray):
                assert type(lib.add(a, a)) is np.ndarray
            assert type(lib.add(a, a)) is dlpx.Tensor
        assert type(lib.add(a, a)) is np.ndarray, "both blocks ended"
        # One object entered twice, then left twice, the inner entry first.
        block = dlpx.outputs_like(torch.Tensor)
        with block:
            with dlpx.outputs_like(dlpx.Tensor):
                with block:
                    assert type(lib.add(a, a)) is torch.Tensor
                assert type(lib.add(a, a)) is dlpx.Tensor
            assert type(lib.add(a, a)) is torch.Tensor
        assert type(lib.add(a, a)) is np.ndarray

    contextvars.copy_context().run(in_a_context)
    assert type(lib.add(a, a)) is np.ndarray
