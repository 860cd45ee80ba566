"""Round trips between towerjit and the Python ecosystem (run by ctest through roundtrip.sh):

  numpy_files       numpy writes .npz archives (savez and savez_compressed) of every dtype,
                    byte order and memory order; towerjit reads them as numpy does.
  safetensors_numpy towerjit -> safetensors -> safetensors.numpy -> a float64 NumPy MLP: the
                    same logits as towerjit's Predictor within its error bound (EMA off and on);
                    NumPy-initialised weights -> towerjit -> the same first-step loss.
  torch             the same through PyTorch: nn.Module.load_state_dict of the file (strict but for
                    batch norm's num_batches_tracked)
                    for the MLP, the CNN and the ResNet (batch norm), logits in float64 within
                    the bound; nn.Module-initialised weights -> towerjit -> the same first loss.
  data_npz_example  examples/fashion_mnist --data-npz on Fashion-MNIST saved by numpy, and
                    --export-safetensors read back by safetensors.numpy.

Usage: roundtrip.py CASE INTEROP_TOOL FASHION_MNIST. Exits 77 (ctest's skip) with a message
where a package it needs is absent.
"""
import gzip
import json
import os
import subprocess
import sys
import tempfile

SKIP = 77


def need(*modules):
    for m in modules:
        try:
            __import__(m)
        except ImportError:
            print(f"SKIP: the Python package {m} is not installed (python3 -m pip install {m}); "
                  ".ci/run installs it")
            sys.exit(SKIP)


def run(*args):
    out = subprocess.run([str(a) for a in args], capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"FAIL: {' '.join(map(str, args))} exited {out.returncode}:\n{out.stdout}{out.stderr}")
    return out.stdout


def within(name, got, exact, bound):
    """Every element of got lies within its bound of the exact (float64) value."""
    import numpy as np
    got, exact, bound = (np.asarray(a, dtype=np.float64) for a in (got, exact, bound))
    assert got.shape == exact.shape == bound.shape, (name, got.shape, exact.shape, bound.shape)
    # The float64 oracle itself is off by a few ulps of float64: far below any f32 bound.
    error = np.abs(got - exact)
    slack = bound + 1e-12 * np.abs(exact)
    worst = int(np.argmax(error / slack))
    print(f"{name}: largest error {error.flat[worst]:.3g} against its bound {slack.flat[worst]:.3g} "
          f"({got.size} values)")
    if not np.all(error <= slack):
        sys.exit(f"FAIL: {name}: element {worst} is {got.flat[worst]!r}, exact {exact.flat[worst]!r}, "
                 f"error {error.flat[worst]:.3g} over its bound {slack.flat[worst]:.3g}")


def same_exact(name, work, suffix, exact):
    """The other side's float64 logits against the reference interpreter's (also float64): the
    same sums in another order, so they differ by the f32 bound scaled to float64's unit
    roundoff (2^-53 / 2^-24 = 2^-29), once for each side. Sharp where the f32 bound is loose:
    a batch norm epsilon of 1e-5 in place of 1e-3 fails here."""
    import numpy as np
    with open(os.path.join(work, f"exact{suffix}.json")) as f:
        reference = np.array(json.load(f)).reshape(np.shape(exact))
    bound = np.load(os.path.join(work, f"bound{suffix}.npy")).astype(np.float64)
    within(f"{name}: float64 against the interpreter's", exact, reference, 2 * bound * 2.0**-29)


def same_predictions(name, got, exact):
    """Each example's predicted class is the same: a check that stays sharp where the error bound
    is loose (through a chain of batch norms the interpreter's bound reaches 100 and more)."""
    import numpy as np
    got, exact = np.asarray(got), np.asarray(exact)
    differ = np.nonzero(got.argmax(1) != exact.argmax(1))[0]
    if differ.size:
        sys.exit(f"FAIL: {name}: example {differ[0]} is predicted {got[differ[0]].argmax()} by towerjit, "
                 f"{exact[differ[0]].argmax()} by the other side (logits {got[differ[0]]} and {exact[differ[0]]})")


def numpy_files(tool, work):
    import numpy as np
    rng = np.random.default_rng(7)
    arrays = {}
    for n in (1, 7, 127):
        for order in "<>":
            arrays[f"f4{order}{n}"] = rng.standard_normal(n).astype(order + "f4")
            arrays[f"f8{order}{n}"] = rng.standard_normal(n).astype(order + "f8")
            arrays[f"i4{order}{n}"] = rng.integers(-2**31, 2**31 - 1, n).astype(order + "i4")
            arrays[f"i8{order}{n}"] = rng.integers(-2**31, 2**31 - 1, n).astype(order + "i8")
        arrays[f"u1_{n}"] = rng.integers(0, 256, n).astype(np.uint8)
        arrays[f"b1_{n}"] = rng.integers(0, 2, n).astype(bool)
    arrays["fortran"] = np.asfortranarray(rng.standard_normal((7, 3, 5)).astype(np.float32))
    arrays["fortran_i8_big"] = np.asfortranarray(rng.integers(-9, 9, (3, 7)).astype(">i8"))
    arrays["images"] = rng.integers(0, 256, (7, 28, 28)).astype(np.uint8)
    arrays["scalar"] = np.array(3.5, dtype=np.float32)
    arrays["empty"] = np.zeros((0, 4), dtype=np.float32)
    assert arrays["fortran"].flags.f_contiguous and not arrays["fortran"].flags.c_contiguous
    for kind, save in (("stored", np.savez), ("deflated", np.savez_compressed)):
        path = os.path.join(work, kind + ".npz")
        save(path, **arrays)
        out = os.path.join(work, kind)
        os.makedirs(out)
        run(tool, "read-npz", path, out)
        for name, want in arrays.items():
            got = np.load(os.path.join(out, name + ".npy"))
            cast = want.astype(np.float32) if want.dtype.kind == "f" else want.astype(np.int32)
            if got.dtype != cast.dtype or got.shape != cast.shape or not np.array_equal(got, cast):
                sys.exit(f"FAIL: {kind} array {name}: read {got.dtype}{got.shape}, numpy has {want.dtype}{want.shape}")
        print(f"{kind}: {len(arrays)} arrays read as numpy reads them")


def numpy_mlp(w, x):
    import numpy as np
    h = x.astype(np.float64)
    for layer in ("fc1", "fc2", "logits"):
        h = h @ w[layer + ".weight"].astype(np.float64).T + w[layer + ".bias"].astype(np.float64)
        if layer != "logits":
            h = np.maximum(h, 0)
    return h


def mean_cross_entropy(logits, y):
    import numpy as np
    m = logits.max(axis=1, keepdims=True)
    logp = logits - m - np.log(np.exp(logits - m).sum(axis=1, keepdims=True))
    return float(-logp[np.arange(len(y)), y].mean())


def batch(work, seed):
    import numpy as np
    rng = np.random.default_rng(seed)
    x = rng.random((13, 784), dtype=np.float32)
    y = rng.integers(0, 10, 13).astype(np.int64)  # int64, as PyTorch keeps labels: read range-checked
    np.savez(os.path.join(work, "batch.npz"), x=x, y=y)
    return x, y


def first_loss(tool, model, work, want):
    got = json.loads(run(tool, "first-step", model, work))
    print(f"first-step {model}: towerjit {got['loss']!r}, float64 {want!r}")
    within(f"first-step loss of the {model}", [got["loss"]], [want], [got["bound"]])


def safetensors_numpy(tool, work):
    need("numpy", "safetensors")
    import numpy as np
    from safetensors.numpy import load_file, save_file
    run(tool, "export", "mlp", work)
    x = np.load(os.path.join(work, "x.npy"))
    for suffix in ("", "_ema"):
        w = load_file(os.path.join(work, f"weights{suffix}.safetensors"))
        assert sorted(w) == ["fc1.bias", "fc1.weight", "fc2.bias", "fc2.weight", "logits.bias", "logits.weight"], sorted(w)
        assert w["fc1.weight"].shape == (32, 784), w["fc1.weight"].shape  # nn.Linear's [out, in]
        got = np.load(os.path.join(work, f"logits{suffix}.npy"))
        within(f"mlp logits{suffix or ' (EMA off)'}", got, numpy_mlp(w, x), np.load(os.path.join(work, f"bound{suffix}.npy")))
        same_predictions(f"mlp{suffix}", got, numpy_mlp(w, x))
        same_exact(f"mlp{suffix}", work, suffix, numpy_mlp(w, x))
    # NumPy-initialised weights, as nn.Linear initialises them: U(-1/sqrt(in), 1/sqrt(in)).
    rng = np.random.default_rng(3)
    init = {}
    for layer, (n_in, n_out) in {"fc1": (784, 32), "fc2": (32, 32), "logits": (32, 10)}.items():
        k = 1 / np.sqrt(n_in)
        init[layer + ".weight"] = rng.uniform(-k, k, (n_out, n_in)).astype(np.float32)
        init[layer + ".bias"] = rng.uniform(-k, k, n_out).astype(np.float32)
    save_file(init, os.path.join(work, "init.safetensors"))
    x, y = batch(work, 11)
    first_loss(tool, "mlp", work, mean_cross_entropy(numpy_mlp(init, x), y))


def torch_modules():
    import torch
    from torch import nn

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.fc2, self.logits = nn.Linear(784, 32), nn.Linear(32, 32), nn.Linear(32, 10)

        def forward(self, x):
            return self.logits(torch.relu(self.fc2(torch.relu(self.fc1(x)))))

    class CNN(nn.Module):  # examples::cnn
        def __init__(self):
            super().__init__()
            self.conv1, self.conv2 = nn.Conv2d(1, 16, 3, padding=1), nn.Conv2d(16, 32, 3, padding=1)
            self.fc1, self.logits = nn.Linear(32 * 7 * 7, 128), nn.Linear(128, 10)

        def forward(self, x):
            x = x.reshape(-1, 1, 28, 28)
            x = torch.max_pool2d(torch.relu(self.conv1(x)), 2)
            x = torch.max_pool2d(torch.relu(self.conv2(x)), 2)
            return self.logits(torch.relu(self.fc1(x.flatten(1))))

    class ConvBN(nn.Module):  # examples::conv_bn_relu without the ReLU; towerjit's epsilon, 1e-3
        def __init__(self, c_in, c_out):
            super().__init__()
            self.conv = nn.Conv2d(c_in, c_out, 3, padding=1, bias=False)
            self.bn = nn.BatchNorm2d(c_out, eps=1e-3)

    class ResNet(nn.Module):  # examples::resnet; towerjit's scopes become attribute paths
        def __init__(self):
            super().__init__()
            for name, c_in, c_out in (("conv1", 1, 16), ("conv2", 16, 32)):
                setattr(self, name, nn.Conv2d(c_in, c_out, 3, padding=1, bias=False))
                setattr(self, name + "_bn", nn.BatchNorm2d(c_out, eps=1e-3))
            for name, c in (("block1", 16), ("block2", 32)):
                block = nn.Module()
                block.a, block.a_bn = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c, eps=1e-3)
                block.b, block.b_bn = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c, eps=1e-3)
                setattr(self, name, block)
            self.dropout = nn.Dropout(0.25)
            self.logits = nn.Linear(32 * 7 * 7, 10)

        def forward(self, x):
            x = x.reshape(-1, 1, 28, 28)
            for stem, block in (("conv1", self.block1), ("conv2", self.block2)):
                x = torch.relu(getattr(self, stem + "_bn")(getattr(self, stem)(x)))
                y = block.b_bn(block.b(torch.relu(block.a_bn(block.a(x)))))
                x = torch.max_pool2d(torch.relu(x + y), 2)
            return self.logits(self.dropout(x.flatten(1)))

    return {"mlp": MLP, "cnn": CNN, "resnet": ResNet}


def torch_case(tool, work):
    need("numpy", "safetensors", "torch")
    import numpy as np
    import torch
    from safetensors.torch import load_file, save_file
    modules = torch_modules()
    for name in ("mlp", "cnn", "resnet"):
        out = os.path.join(work, name)
        os.makedirs(out)
        run(tool, "export", name, out)
        x = torch.from_numpy(np.load(os.path.join(out, "x.npy"))).double()
        for suffix in ("", "_ema"):
            module = modules[name]().double().eval()
            # Strict but for batch norm's num_batches_tracked, a counter PyTorch keeps and
            # towerjit has no use for (docs/interop.md).
            missing, unexpected = module.load_state_dict(
                load_file(os.path.join(out, f"weights{suffix}.safetensors")), strict=False)
            if unexpected or any(not k.endswith("num_batches_tracked") for k in missing):
                sys.exit(f"FAIL: {name}: the file's names differ from the module's: missing {missing}, "
                         f"unexpected {unexpected}")
            with torch.no_grad():
                exact = module(x).numpy()
            got = np.load(os.path.join(out, f"logits{suffix}.npy"))
            within(f"{name} logits{suffix or ' (EMA off)'} in PyTorch", got, exact,
                   np.load(os.path.join(out, f"bound{suffix}.npy")))
            same_predictions(f"{name}{suffix} in PyTorch", got, exact)
            same_exact(f"{name}{suffix} in PyTorch", out, suffix, exact)
    for name in ("mlp", "cnn"):
        out = os.path.join(work, name + "-init")
        os.makedirs(out)
        torch.manual_seed(5)
        module = modules[name]()  # PyTorch's own initialisation
        save_file({k: v.contiguous() for k, v in module.state_dict().items()}, os.path.join(out, "init.safetensors"))
        x, y = batch(out, 13)
        with torch.no_grad():
            logits = module.double()(torch.from_numpy(x).double())
            want = float(torch.nn.functional.cross_entropy(logits, torch.from_numpy(y)))
        first_loss(tool, name, out, want)


def read_idx(path):
    import numpy as np
    with gzip.open(path) as f:
        data = f.read()
    rank = data[3]
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(rank)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * rank).reshape(dims)


def data_npz_example(binary, work):
    need("numpy")
    import numpy as np
    root = "/usr/share/datasets/fashion-mnist"
    split = {"train": "train", "test": "t10k"}
    arrays = {}
    for key, prefix in split.items():
        arrays["x_" + key] = read_idx(f"{root}/{prefix}-images-idx3-ubyte.gz")[:2000]
        arrays["y_" + key] = read_idx(f"{root}/{prefix}-labels-idx1-ubyte.gz")[:2000].astype(np.int64)
    path = os.path.join(work, "fashion_mnist.npz")
    np.savez_compressed(path, **arrays)  # uint8 [N, 28, 28] images, as Keras' fashion_mnist.npz
    weights = os.path.join(work, "mlp.safetensors")
    out = run(binary, "--data-npz", path, "--towers", "cpu:0", "--steps", "40", "--batch", "64", "--hidden", "32",
              "--ema", "0.9", "--export-safetensors", weights)
    final = [line for line in out.splitlines() if line.startswith("test accuracy ")][-1]  # after training
    accuracy = float(final.split("test accuracy ")[1].split(",")[0])
    print(f"--data-npz: test accuracy {accuracy} after 40 steps on 2000 images")
    if accuracy < 0.5:
        sys.exit(f"FAIL: test accuracy {accuracy} after 40 steps; the images or labels were misread")
    if f"safetensors: {weights}" not in out or not os.path.exists(weights):
        sys.exit("FAIL: --export-safetensors wrote nothing")
    try:
        from safetensors.numpy import load_file
    except ImportError:
        print("safetensors not installed: the file's contents are left unchecked")
        return
    w = load_file(weights)
    assert w["fc1.weight"].shape == (32, 784) and w["logits.bias"].shape == (10,), {k: v.shape for k, v in w.items()}
    x = arrays["x_test"].reshape(-1, 784).astype(np.float64) / 255
    agree = float((numpy_mlp(w, x).argmax(1) == arrays["y_test"]).mean())
    print(f"the exported weights in NumPy: accuracy {agree} on the same 2000 test images")
    if abs(agree - accuracy) > 0.002:
        sys.exit(f"FAIL: the exported weights score {agree} in NumPy, the run reported {accuracy}")


def main():
    case, tool, binary = sys.argv[1:4]
    need("numpy")
    with tempfile.TemporaryDirectory(prefix="towerjit-interop-") as work:
        if case == "numpy_files":
            numpy_files(tool, work)
        elif case == "safetensors_numpy":
            safetensors_numpy(tool, work)
        elif case == "torch":
            torch_case(tool, work)
        elif case == "data_npz_example":
            data_npz_example(binary, work)
        else:
            sys.exit(f"unknown case {case}")


if __name__ == "__main__":
    main()
