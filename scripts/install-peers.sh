#!/usr/bin/env bash
# Installs towerjit_bench's peers (bench/peers.h) with pip: PyTorch 2.x from PyPI (eager and
# torch.compile) and JAX, into one Python: $TOWERJIT_BENCH_PEER_PYTHON, else python3 on PATH.
# Each that is already there is left alone, so a second run on a ready machine takes a few
# seconds (the imports). Whatever cannot be installed is said, and this still exits 0: the
# bench runs against what it has and names the peers it lacks.
#
#   scripts/install-peers.sh            (`make bench` runs it; PEERS=0 make bench skips it)
#
# PyPI's torch wheel is a CUDA build. It needs, at import, the NVIDIA wheels it loads by path:
# cuFile, cuSPARSELt, NVSHMEM and NCCL. The rest of CUDA (cuBLAS, cuDNN, ...) comes from
# /usr/local/cuda through the loader's cache, so torch goes in without its dependencies and
# then with those four and its pure-Python ones, as its own metadata names them.
set -uo pipefail

py="${TOWERJIT_BENCH_PEER_PYTHON:-python3}"
say() { echo "install-peers: $*"; }
pip_install() { "$py" -m pip install --quiet --disable-pip-version-check --break-system-packages "$@"; }

if ! "$py" -c 'import sys' 2>/dev/null; then
  say "no Python at '$py'; the bench runs without PyTorch 2.x and JAX"
  exit 0
fi
if ! "$py" -m pip --version >/dev/null 2>&1; then
  say "$py has no pip; the bench runs without the peers this Python lacks"
  pip_ok=0
else
  pip_ok=1
fi

torch_version() { "$py" -c 'import torch; print(torch.__version__)' 2>/dev/null; }
torch_major() { local v; v=$(torch_version) || return 1; echo "${v%%.*}"; }

# torch's requirements, as its installed metadata lists them for this platform: the four NVIDIA
# wheels it loads at import, and every requirement that is not an NVIDIA or Triton wheel (or
# cuda-toolkit, which stands for all of CUDA's wheels).
torch_requirements() {
  "$py" - <<'PY'
import importlib.metadata as md
try:
    from packaging.requirements import Requirement
except ImportError:  # pip carries its own copy
    from pip._vendor.packaging.requirements import Requirement
for line in md.requires("torch") or []:
    r = Requirement(line)
    if r.marker is not None and not r.marker.evaluate({"extra": ""}):
        continue
    name = r.name.lower()
    if name == "cuda-toolkit":  # a meta-package for all of CUDA's wheels: only cuFile's is needed
        if "cufile" in r.extras:
            print("nvidia-cufile")
        continue
    if name.startswith("nvidia-"):
        if any(k in name for k in ("cufile", "cusparselt", "nvshmem", "nccl")):
            print(str(r).split(";")[0])
    elif name != "triton":
        print(str(r).split(";")[0])
PY
}

major=$(torch_major || true)
if [[ "${major:-0}" =~ ^[0-9]+$ ]] && (( ${major:-0} >= 2 )); then
  say "torch $(torch_version) already in $py"
elif (( pip_ok )); then
  say "installing torch from PyPI into $py (its CUDA libraries from /usr/local/cuda, four NVIDIA wheels from PyPI)"
  if pip_install --no-deps torch && mapfile -t reqs < <(torch_requirements) && pip_install "${reqs[@]}"; then
    if v=$(torch_version); then
      say "torch $v installed"
    else
      say "torch installed but does not import: $("$py" -c 'import torch' 2>&1 | tail -1)"
      say "the bench runs without torch 2.x (eager and torch.compile)"
    fi
  else
    say "pip could not install torch; the bench runs without torch 2.x (eager and torch.compile)"
  fi
fi

if "$py" -c 'import jax' 2>/dev/null; then
  say "jax $("$py" -c 'import jax; print(jax.__version__)') already in $py"
elif (( pip_ok )); then
  say "installing jax (CPU) from PyPI into $py"
  if pip_install jax && "$py" -c 'import jax' 2>/dev/null; then
    say "jax $("$py" -c 'import jax; print(jax.__version__)') installed"
  else
    say "pip could not install jax; the bench runs without JAX"
  fi
fi

if ! command -v g++ >/dev/null && ! command -v c++ >/dev/null; then
  say "no C++ compiler on PATH: torch.compile's Inductor needs one; the bench reports it unavailable"
fi
exit 0
