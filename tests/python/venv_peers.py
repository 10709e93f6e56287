"""The Python peers of the Hugging Face tests (transformers, tokenizers, safetensors) live in a
venv that scripts/install-deps.sh --tests makes and that sees Debian's torch. A test run with
/usr/bin/python3 calls require() first: it re-executes the test under the venv's Python when the
modules are not importable here, and otherwise fails naming the install command (or skips with
exit 77 under SATURN_ALLOW_MISSING_HF=1, for a machine without the wheels on purpose)."""
import importlib
import os
import sys


def require(venv, modules):
    try:
        for m in modules:
            importlib.import_module(m)
        return
    except ImportError as e:
        missing = str(e)
    py = os.path.join(venv, "bin", "python")
    if os.path.exists(py) and not os.environ.get("SATURN_HF_REEXEC"):
        os.environ["SATURN_HF_REEXEC"] = "1"
        os.execv(py, [py] + sys.argv)
    msg = (f"{', '.join(modules)} not importable ({missing}) by {sys.executable} nor by {py}: "
           f"run `scripts/install-deps.sh --tests` (it makes the venv {venv})")
    if os.environ.get("SATURN_ALLOW_MISSING_HF") == "1":
        print("SKIPPED: " + msg)
        sys.exit(77)
    print("FAILED: " + msg)
    sys.exit(1)
