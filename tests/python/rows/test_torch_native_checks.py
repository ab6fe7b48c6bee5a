"""The torch row asks torch's own C++ functions (at::native::is_neg, is_conj, get_autograd_meta)
whether a tensor may be taken as its table hands it out; with DLPX_DIRECT_OFF=torch it asks
torch's Python methods instead. Both must reach the same verdict on every torch case of the
faithful-import catalogue, and the fast one must not call Python's methods at all."""

import os
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")

HERE = os.path.dirname(os.path.abspath(__file__))

PROBE = textwrap.dedent("""
    import json, sys
    sys.path[:0] = sys.argv[1:]
    import torch
    import dlpx
    from faithful_catalogue import cases
    from test_faithful_import import PATHS

    asked = 0
    for method in ("is_neg", "is_conj"):
        original = getattr(torch.Tensor, method)
        def counting(self, original=original):
            # Torch's own __dlpack__ asks too (Python code under torch/): only dlpx's asks count.
            global asked
            asked += "/torch/" not in sys._getframe(1).f_code.co_filename
            return original(self)
        setattr(torch.Tensor, method, counting)

    verdicts = {}
    for case in cases():
        if case.producer != "torch":
            continue
        for path, read in PATHS.items():
            x = case.make()
            try:
                verdicts[f"{case.name} / {path}"] = ["held", repr(read(x))]
            except Exception as err:
                verdicts[f"{case.name} / {path}"] = ["refused", type(err).__name__, str(err).splitlines()[0]]
    print(json.dumps({"asked": asked, "verdicts": verdicts}))
""")


def verdicts(env):
    env = {k: v for k, v in os.environ.items() if not k.startswith("DLPX_DIRECT")} | env
    result = subprocess.run([sys.executable, "-c", PROBE, os.path.join(HERE, "..", "helpers"), os.path.join(HERE, "..", "guarantees")], env=env, capture_output=True, text=True, cwd=HERE)
    assert result.returncode == 0, result.stderr[-4000:]
    import json

    return json.loads(result.stdout.splitlines()[-1])


def test_torchs_native_checks_agree_with_its_python_methods():
    native = verdicts({})
    python = verdicts({"DLPX_DIRECT_OFF": "torch"})
    assert len(native["verdicts"]) >= 4 * 40, "every torch case through every path"
    assert native["asked"] == 0, "the native checks call no Python method"
    assert python["asked"] >= len(python["verdicts"]), "the off switch asks Python's methods"
    differ = {k: (native["verdicts"][k], python["verdicts"][k])
              for k in native["verdicts"] if native["verdicts"][k] != python["verdicts"][k]}
    assert not differ, differ
    refused = [k for k, v in native["verdicts"].items() if v[0] == "refused"]
    assert any(k.startswith("conj /") for k in refused) and any(k.startswith("requires_grad /") for k in refused)
