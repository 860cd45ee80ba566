#!/usr/bin/env python3
"""What this Python offers towerjit_bench's peers (bench/peers.h): one JSON line with torch's
and JAX's versions (null, with the import error, where one does not import), where torch lives,
and the C++ compiler torch.compile's Inductor would call (null where none is on PATH)."""
import json
import shutil
import sys

out = {"python": sys.executable}
for module in ("torch", "jax"):
    try:
        m = __import__(module)
        out[module] = m.__version__
        out[module + "_path"] = m.__file__
    except Exception as e:  # ImportError, or a wheel whose libraries do not load
        out[module] = None
        out[module + "_error"] = f"{type(e).__name__}: {e}".splitlines()[0][:300]
out["cxx"] = shutil.which("g++") or shutil.which("c++") or shutil.which("clang++")
print(json.dumps(out))
