"""A tensor kernel's two bindings agree: a call by position of a kernel whose parameters all
take tensors binds in the loader's tensor loop (src/kernel_loader/arguments.rs), a call with a
keyword, a default or more than 16 arguments in the general binding (src/kernels/bind.rs). The
same arguments through each give the same results, the same output types and the same errors,
over every producer; and a kernel that returns None without asking anything ends the call on
its own short path, where one that allocates, returns or reports does not."""

import os

import numpy as np
import pytest

import c_build
import dlpx
from numpy_producers import Producer
from tensor_makers import make_torch

REPO = c_build.REPO
# The loader's tensor loop takes at most this many arguments (arguments.rs's INLINE).
LOOP_MOST = 16


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    source = os.path.join(REPO, "examples", "kernel_library", "kernels.c")
    return dlpx.load_library(c_build.kernel_library(tmp_path_factory, "c", source, "dlpx_example_kernels"))


@pytest.fixture(scope="module")
def cases(tmp_path_factory):
    source = os.path.join(REPO, "c_tests", "kernel_cases", "kernel_cases.c")
    return dlpx.load_library(c_build.kernel_library(tmp_path_factory, "c", source, "kernel_cases"))


MAKERS = {
    "numpy": lambda v: np.asarray(v, dtype=np.float32),
    "dlpx": lambda v: dlpx.from_dlpack(np.asarray(v, dtype=np.float32)),
    "torch": lambda v: make_torch(v, "float32"),
    "memoryview": lambda v: memoryview(np.asarray(v, dtype=np.float32)),
    "producer": lambda v: Producer(np.asarray(v, dtype=np.float32)),
}


def raised(call):
    """The exception's type and message, or None."""
    try:
        call()
    except Exception as err:  # noqa: BLE001 - compared whole
        return type(err), str(err)
    return None


@pytest.mark.parametrize("maker", sorted(MAKERS))
def test_add_by_position_and_by_keyword_agree(lib, maker):
    make = MAKERS[maker]
    a, b = make([1.0, 2.0, 3.0]), make([10.0, 20.0, 30.0])
    by_position = lib.add(a, b)
    for by_keyword in (lib.add(a, b=b), lib.add(b=b, a=a)):
        assert type(by_keyword) is type(by_position)
        assert np.from_dlpack(by_keyword).tolist() == np.from_dlpack(by_position).tolist() == [11.0, 22.0, 33.0]


@pytest.mark.parametrize("bad", ["x", None, 3, 2.5, [1.0, 2.0], object()])
def test_a_wrong_argument_is_refused_alike_by_position_and_by_keyword(lib, bad):
    a = np.ones(2, np.float32)
    by_position = raised(lambda: lib.add(a, bad))
    assert by_position is not None and by_position == raised(lambda: lib.add(a, b=bad))
    assert "dlpx: add: parameter 'b'" in by_position[1]
    first = raised(lambda: lib.add(bad, a))
    assert first == raised(lambda: lib.add(b=a, a=bad)) and "parameter 'a'" in first[1]


def test_a_producer_s_refusal_is_named_alike_by_position_and_by_keyword(lib):
    class Refusing:
        def __dlpack__(self, **kwargs):
            raise ValueError("no view of this one")

        def __dlpack_device__(self):
            return (1, 0)

    a = np.ones(2)
    by_position = raised(lambda: lib.add(a, Refusing()))
    assert by_position == (ValueError, "dlpx: add: parameter 'b': no view of this one")
    assert by_position == raised(lambda: lib.add(a, b=Refusing()))


def test_an_optional_tensor_takes_none_alike_by_position_keyword_and_default(cases):
    a = np.ones(2)
    # The count, then each argument's kind: 1 a tensor, 0 None.
    assert cases.describe_tensors(a) == (2, 1, 0), "the default (general binding)"
    assert cases.describe_tensors(a, None) == (2, 1, 0), "by position (the tensor loop)"
    assert cases.describe_tensors(a, bias=None) == (2, 1, 0), "by keyword (general binding)"
    assert cases.describe_tensors(a, a, a, a) == (4, 1, 1, 1, 1)
    # A variadic parameter takes no None, whichever binding meets it.
    message = (TypeError, "dlpx: describe_tensors: parameter 'rest' takes a tensor, got NoneType")
    assert raised(lambda: cases.describe_tensors(a, None, a, None)) == message
    assert raised(lambda: cases.describe_tensors(a, None, *[a] * LOOP_MOST, None)) == message


@pytest.mark.parametrize("maker", sorted(MAKERS))
def test_the_tensor_loop_s_limit_changes_nothing(cases, lib, maker):
    make = MAKERS[maker]
    for n in (LOOP_MOST - 1, LOOP_MOST, LOOP_MOST + 1, 3 * LOOP_MOST):
        xs = [make([float(i)]) for i in range(n)]
        assert lib.nop(*xs) is None
        assert cases.describe_tensors(*xs) == (n, *[1] * n)
        wrong = raised(lambda: lib.nop(*xs[:-1], "x"))
        assert wrong == (TypeError, "dlpx: nop: parameter 'tensors' takes a tensor, got str")


def test_too_few_and_too_many_positional_tensors_are_refused_alike(lib):
    a = np.ones(2)
    assert raised(lambda: lib.add(a)) == (TypeError, "dlpx: add: missing required argument 'b'")
    assert raised(lambda: lib.add(a, a, a)) == (TypeError, "dlpx: add: takes at most 2 positional arguments (3 given)")
    assert raised(lambda: lib.add(a, a, b=a)) == (TypeError, "dlpx: add: got multiple values for argument 'b'")


def test_a_kernel_that_returns_none_asks_nothing_yet_one_that_asks_is_heard(cases):
    # The short end of a call (nothing asked: None) is taken only where nothing was asked.
    a = np.ones(3, np.float32)
    assert cases.nop_released(a, a) is None
    assert raised(lambda: cases.silent()) == (
        RuntimeError, "dlpx: silent: the kernel returned -1 without reporting an error (dlpx_call_error)")
    assert raised(lambda: cases.raise_("ValueError", "told")) == (ValueError, "dlpx: raise_: told")
    # Allocated and not returned (deleted by the call), or failed after allocating: nothing leaks
    # (the leak checks run these under valgrind and ASan) and the result is what the kernel said.
    assert cases.allocate_and_drop(a) is None
    assert raised(lambda: cases.allocate_then_fail(a)) == (ValueError, "dlpx: allocate_then_fail: failed after allocating")
    # A failed request the kernel ignored is still the call's error, though it returned 0.
    assert raised(lambda: cases.ninth_ignored(a))[0] is IndexError


def test_a_keyword_repeated_past_the_most_parameters_is_named(tmp_path_factory):
    # 64 parameters (the most) named, and one of them again by a str whose `__eq__` never holds:
    # CPython passes all 65 keywords on, and the loader names the repeated one as `bind` does.
    directory = tmp_path_factory.mktemp("most_parameters")
    source = directory / "most.c"
    params = ", ".join(f"p{i}=0" for i in range(64))
    source.write_text(
        "#include <dlpx/kernel.h>\n"
        "static int f(DlpxCall *call) { return dlpx_call_return_int(call, dlpx_call_argument_count(call)); }\n"
        f'DLPX_EXPORT_KERNEL(f, f, "f({params}) -> int: the count.")\n'
    )
    lib = dlpx.load_library(c_build.kernel_library(tmp_path_factory, "c", str(source), "most_parameters"))
    keywords = {f"p{i}": i for i in range(64)}
    assert lib.f(**keywords) == 64

    class Unequal(str):
        __hash__ = str.__hash__

        def __eq__(self, other):
            return False

    expected = (TypeError, "dlpx: f: got multiple values for argument 'p1'")
    assert raised(lambda: lib.f(**keywords, **{Unequal("p1"): 2})) == expected
    assert raised(lambda: lib.f(**{Unequal("p1"): 2}, **keywords)) == expected
