"""The stubs are the runtime: every public name of dlpx, dlpx.cuda and dlpx.Tensor is in the stubs
(python/dlpx/*.pyi) and every name there is at run time; each callable's parameters (names,
kinds, defaults) are the stub's, read through inspect.signature, which every native function and
method answers (a text signature in its docstring); each call accepts what its signature says and
refuses the rest; mypy's stubtest agrees, and mypy reads a user's calls as the runtime runs them."""

import ast
import inspect
import os
import subprocess
import sys
import types

import numpy as np
import pytest

import dlpx
import dlpx.cuda

HERE = os.path.dirname(os.path.abspath(__file__))
TYPING = os.path.join(HERE, "..", "..", "typing")
PACKAGE = os.path.dirname(os.path.abspath(dlpx.__file__))
EMPTY = inspect.Parameter.empty
# Heap types keep their text signature from 3.10 (bpo-41689): on 3.9, inspect.signature(dlpx.Tensor) has none.
TYPE_SIGNATURES = sys.version_info >= (3, 10)
# The buffer protocol's methods: on the type from 3.12 (PEP 688), in the stub on every version (as
# typeshed declares them, so that type checkers take a tensor as a Buffer).
BUFFER_METHODS = {"__buffer__", "__release_buffer__"}
ABSENT_HERE = set() if sys.version_info >= (3, 12) else BUFFER_METHODS


# ---- the stub, read with ast ----------------------------------------------------------------------


def applies(node):
    """Whether a stub's `if sys.version_info >= ...:` holds on this interpreter."""
    return eval(compile(ast.Expression(node.test), "<stub>", "eval"), {"sys": sys})


def live_body(body):
    """The statements of a stub body that apply here, `if sys.version_info` blocks opened."""
    for node in body:
        if isinstance(node, ast.If):
            yield from live_body(node.body if applies(node) else node.orelse)
        else:
            yield node


class Stub:
    """A .pyi file: its public names, functions, classes (methods, properties, attributes), `__all__`."""

    def __init__(self, name):
        with open(os.path.join(PACKAGE, name)) as f:
            tree = ast.parse(f.read())
        self.names, self.functions, self.classes, self.all = set(), {}, {}, None
        for node in live_body(tree.body):
            if isinstance(node, ast.FunctionDef):
                self.functions[node.name] = node
                self.names.add(node.name)
            elif isinstance(node, ast.ClassDef):
                self.classes[node.name] = StubClass(node)
                self.names.add(node.name)
            elif isinstance(node, ast.AnnAssign):
                self.names.add(node.target.id)
            elif isinstance(node, ast.Assign) and node.targets[0].id == "__all__":
                self.all = ast.literal_eval(node.value)
            elif isinstance(node, ast.ImportFrom):
                # `import X as X` re-exports X; a plain import is the stub's own business.
                self.names.update(a.asname for a in node.names if a.asname == a.name)
        self.names = {n for n in self.names if not n.startswith("_") or n.endswith("__")}


class StubClass:
    def __init__(self, node):
        self.methods, self.properties, self.attributes = {}, set(), set()
        for item in live_body(node.body):
            if isinstance(item, ast.FunctionDef):
                decorators = {d.id for d in item.decorator_list if isinstance(d, ast.Name)}
                if "property" in decorators:
                    self.properties.add(item.name)
                else:
                    self.methods[item.name] = item
            elif isinstance(item, ast.AnnAssign):
                self.attributes.add(item.target.id)


def stub_parameters(function, bound):
    """(name, kind, default) of a stub function's parameters; `bound` drops self/cls."""
    a = function.args
    positional = [(p, inspect.Parameter.POSITIONAL_ONLY) for p in a.posonlyargs]
    positional += [(p, inspect.Parameter.POSITIONAL_OR_KEYWORD) for p in a.args]
    defaults = [EMPTY] * (len(positional) - len(a.defaults)) + [ast.literal_eval(d) for d in a.defaults]
    out = [(p.arg, kind, d) for (p, kind), d in zip(positional, defaults)]
    if a.vararg:
        out.append((a.vararg.arg, inspect.Parameter.VAR_POSITIONAL, EMPTY))
    for p, d in zip(a.kwonlyargs, a.kw_defaults):
        out.append((p.arg, inspect.Parameter.KEYWORD_ONLY, EMPTY if d is None else ast.literal_eval(d)))
    if a.kwarg:
        out.append((a.kwarg.arg, inspect.Parameter.VAR_KEYWORD, EMPTY))
    return out[1:] if bound else out


def runtime_parameters(signature, bound):
    out = [(p.name, p.kind, p.default) for p in signature.parameters.values()]
    return out[1:] if bound else out


INIT, CUDA = Stub("__init__.pyi"), Stub("cuda.pyi")


# ---- names ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("module, stub", [(dlpx, INIT), (dlpx.cuda, CUDA)], ids=["dlpx", "dlpx.cuda"])
def test_the_stub_names_what_the_module_has_and_nothing_else(module, stub):
    assert stub.all == module.__all__
    assert stub.names == set(module.__all__) | {"__dir__"}
    for name in stub.names:
        assert hasattr(module, name), name


def test_the_tensor_stub_has_every_method_property_and_attribute_of_the_type():
    stub = INIT.classes["Tensor"]
    runtime = vars(dlpx.Tensor)
    properties = {n for n, v in runtime.items() if isinstance(v, types.GetSetDescriptorType)}
    assert properties == stub.properties
    callables = {n for n, v in runtime.items() if callable(v)}
    # Those object has too (`__repr__`, `__new__`, ...) keep object's signature; the stub inherits them.
    assert callables - set(vars(object)) == set(stub.methods) - {"__new__"} - ABSENT_HERE
    for name in set(stub.methods) - ABSENT_HERE:
        assert name in runtime, name
    data = {n for n, v in runtime.items() if not callable(v) and n not in properties | {"__doc__", "__module__"}}
    assert data == stub.attributes


# ---- signatures ----------------------------------------------------------------------------------


def public_callables():
    """(label, runtime callable, stub function, bound) for every public function and method."""
    out = []
    for module, stub in [(dlpx, INIT), (dlpx.cuda, CUDA)]:
        for name, function in stub.functions.items():
            if name != "__dir__":
                out.append((f"{module.__name__}.{name}", getattr(module, name), function, False))
    for name, function in INIT.classes["Tensor"].methods.items():
        if name in ABSENT_HERE:
            continue
        runtime = dlpx.Tensor if name == "__new__" else getattr(dlpx.Tensor, name)
        out.append((f"dlpx.Tensor.{name}", runtime, function, True))
    return out


PUBLIC = public_callables()


@pytest.mark.parametrize("label, runtime, stub, bound", PUBLIC, ids=[p[0] for p in PUBLIC])
def test_every_public_signature_is_the_stub_s(label, runtime, stub, bound):
    if runtime is dlpx.Tensor and not TYPE_SIGNATURES:
        pytest.skip("CPython 3.9 drops a heap type's text signature (bpo-41689)")
    signature = inspect.signature(runtime)
    # inspect.signature(dlpx.Tensor) is the call's, without `cls`.
    runtime_bound = bound and runtime is not dlpx.Tensor
    assert runtime_parameters(signature, runtime_bound) == stub_parameters(stub, bound)


def native_callables():
    out = [(f"dlpx._native.{n}", v) for n, v in vars(dlpx._native).items() if isinstance(v, types.BuiltinFunctionType)]
    out += [(f"dlpx.Tensor.{n}", v) for n, v in vars(dlpx.Tensor).items() if isinstance(v, types.MethodDescriptorType)]
    return out


NATIVE = native_callables()


@pytest.mark.parametrize("label, function", NATIVE, ids=[n[0] for n in NATIVE])
def test_every_native_function_has_a_text_signature_and_a_doc_after_it(label, function):
    assert function.__text_signature__, label
    inspect.signature(function)
    assert function.__doc__ and not function.__doc__.startswith(function.__name__ + "("), label


def test_the_tensor_type_has_a_text_signature_and_a_doc_after_it():
    if TYPE_SIGNATURES:
        assert dlpx.Tensor.__text_signature__ == "(source, /)"
    assert dlpx.Tensor.__doc__.startswith("A tensor that dlpx")


# ---- each call takes what its signature says -----------------------------------------------------

# A value each parameter accepts, by name.
SAMPLES = {
    "shape": (2,),
    "dtype": "float32",
    "device": "cpu",
    "x": np.arange(2.0),
    "source": np.arange(2.0),
    "type_or_object": np.ndarray,
    "stream": None,
    "max_version": (1, 0),
    "dl_device": (1, 0),
    "copy": None,
    "read_only": False,
    "memo": {},
}
CALLS = [p for p in PUBLIC if p[0].startswith(("dlpx.empty", "dlpx.from_dlpack", "dlpx.exchange", "dlpx.Tensor"))]


def call(label, runtime, positional, keywords):
    if label.startswith("dlpx.Tensor.") and runtime is not dlpx.Tensor:
        return getattr(dlpx.empty((2,)), label.rsplit(".", 1)[1])(*positional, **keywords)
    return runtime(*positional, **keywords)


@pytest.mark.parametrize("label, runtime, stub, bound", CALLS, ids=[p[0] for p in CALLS])
def test_each_call_takes_its_parameters_as_its_signature_says(label, runtime, stub, bound):
    if label.endswith(("__buffer__", "__release_buffer__")):
        pytest.skip("CPython's own slot wrapper")
    parameters = stub_parameters(stub, bound)
    by_position = [SAMPLES[n] for n, kind, _ in parameters if kind == inspect.Parameter.POSITIONAL_ONLY]
    by_name = {n: SAMPLES[n] for n, kind, _ in parameters if kind != inspect.Parameter.POSITIONAL_ONLY}
    call(label, runtime, by_position, by_name)
    for i, (name, kind, _) in enumerate(parameters):
        if kind == inspect.Parameter.POSITIONAL_ONLY:
            rest = by_position[:i] + by_position[i + 1 :]
            with pytest.raises(TypeError):
                call(label, runtime, rest, {**by_name, name: SAMPLES[name]})
        if kind == inspect.Parameter.KEYWORD_ONLY:
            others = {n: v for n, v in by_name.items() if n != name}
            with pytest.raises(TypeError):
                call(label, runtime, by_position + [SAMPLES[name]], others)


def test_the_keyword_spellings_users_try_are_refused_as_the_stub_says():
    with pytest.raises(TypeError):
        dlpx.Tensor(source=np.zeros(2))
    with pytest.raises(TypeError):
        dlpx.exchange_api_of(type_or_object=np.ndarray)
    with pytest.raises(TypeError, match="positional-only"):
        dlpx.from_dlpack(x=np.zeros(2))
    assert dlpx.empty(shape=(2,), dtype="int8", device="cpu").dtype == "int8"


# ---- mypy ----------------------------------------------------------------------------------------


def test_the_typed_usage_runs_as_mypy_reads_it():
    """tests/typing/usage.py: what mypy takes runs, and what it refuses the runtime refuses too."""
    done = subprocess.run([sys.executable, os.path.join(TYPING, "usage.py")], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.endswith("ran as typed\n")


def test_mypy_finds_the_stubs_to_be_the_runtime():
    """scripts/check_stubs.sh: mypy's stubtest, and mypy on tests/typing/usage.py. It imports dlpx as
    this run does (PYTHONPATH, DLPX_LIBRARY inherited), in DLPX_TYPING_PYTHON when that is set (an
    interpreter with mypy), else in this one."""
    python = os.environ.get("DLPX_TYPING_PYTHON", sys.executable)
    if subprocess.run([python, "-c", "import mypy.stubtest"], capture_output=True).returncode != 0:
        if os.environ.get("DLPX_REQUIRE_ALL_TESTS"):
            pytest.fail(f"{python} has no mypy (tests/requirements.txt lists it)")
        pytest.skip(f"{python} has no mypy: set DLPX_TYPING_PYTHON to one that has")
    script = os.path.join(HERE, "..", "..", "..", "scripts", "check_stubs.sh")
    done = subprocess.run(["bash", script, python], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
