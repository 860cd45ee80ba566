#!/usr/bin/env python3
"""The bench's peers compute the same training step: JAX's models (bench/jax_baseline.py),
given PyTorch's initial weights (bench/torch_baseline.py) and the same batch, give the same
loss, the same weights and momenta after one SGD-momentum step, and the same batch-norm running
statistics, for every workload of jax_baseline.py (the GPT's attention written out on both
sides). Nothing here is timed.

  python3 tests/bench/peer_models_test.py [workload...]

Exits 77 (skipped) where this Python lacks torch 2.x or JAX (scripts/install-peers.sh installs
them). Dropout is off on both sides: their random masks cannot match.

Both sides compute in float64 here (the bench times float32): batch norm's backward subtracts
nearly equal terms, so float32's summation-order differences there are amplified by a factor
that no first-order bound below states, while in float64 they stay far below any difference a
modelling mistake makes (an epsilon, a momentum convention, a biased variance).

Tolerance: float64 with a unit roundoff u = 2^-53, and the summation-order bound of
jit/reference/error_bounds.cpp: an n-term sum in any order is within n u (up to 100 terms) or
about 10 sqrt(n) u beyond, relative to the sum of magnitudes. Each layer's longest sum (a dot
product, or a batch-norm statistic over N*H*W) contributes its bound once in the forward and
once in the backward; the tolerance is the sum of those, against the loss for the loss, and
against the largest magnitude of each tensor for the tensors.
"""
import math
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "bench"))

U = 2.0 ** -53


def gamma(n):
    return n * U if n <= 100 else 10 * math.sqrt(n) * U


def tolerance(jb, name, batch):
    """Twice (forward, backward) the sum over layers of the longest sum's bound."""
    if name == "gpt-small":
        return gpt_tolerance(jb, batch)
    total = 0.0
    hw = 28 * 28
    for layer in jb.expand(jb.layers(name)):
        inner = layer[1] if layer[0] == "block" else [layer]
        for l in inner:
            if l[0] == "linear":
                total += gamma(max(l[1], batch))  # forward over inputs, weight gradient over the batch
            elif l[0] == "conv":
                total += gamma(max(l[1] * 9, batch * hw))
            elif l[0] == "bn":
                total += gamma(batch * hw)
        if layer[0] == "pool":
            hw //= 4
    return 2 * total


def gpt_tolerance(jb, batch):
    """The GPT's: each Linear over its inputs or (its weight's gradient) the batch's tokens, the
    attention's scores over the head's dimension and its output over the context, each layer
    norm over the width, the tied output over the width or the tokens."""
    g = jb.GPT
    d, t, tokens = g["dim"], g["context"], batch * g["context"]
    block = (4 * gamma(max(d, tokens)) + gamma(max(4 * d, tokens)) + gamma(max(d, tokens))
             + gamma(d // g["heads"]) + gamma(t) + 2 * gamma(d))
    return 2 * (g["layers"] * block + gamma(d) + gamma(max(d, tokens)))


def batch_of(np, jb, name, shape, rng):
    """The step's inputs: images or rows and their classes; tokens and next tokens for the GPT."""
    if name == "gpt-small":
        v = jb.GPT["vocab"]
        return rng.integers(0, v, shape, dtype=np.int64), rng.integers(0, v, shape[0] * shape[1], dtype=np.int64)
    return rng.random(shape, dtype=np.float64), rng.integers(0, 10, shape[0], dtype=np.int64)


def check(torch, jax, np, jb, tb, name):
    jnp = jax.numpy
    torch.manual_seed(0)
    model, shape = tb.build(torch, name)
    model = model.double()
    for m in model.modules():
        if isinstance(m, torch.nn.Dropout):
            m.p = 0.0
    x, y = batch_of(np, jb, name, shape, np.random.default_rng(3))
    params = [p.detach().numpy().copy() for p in model.parameters()]
    bns = [m for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    state = [[m.running_mean.numpy().copy(), m.running_var.numpy().copy()] for m in bns]
    expect_params, expect_state = jb.init(np, name, 0)
    assert [p.shape for p in params] == [p.shape for p in expect_params], \
        f"{name}: parameter shapes differ: torch {[p.shape for p in params]}, jax {[p.shape for p in expect_params]}"
    assert len(state) == len(expect_state), f"{name}: {len(state)} batch norms in torch, {len(expect_state)} in jax"

    # PyTorch's step, as torch_baseline.py runs it.
    opt = torch.optim.SGD(model.parameters(), lr=jb.LEARNING_RATE, momentum=jb.MOMENTUM)
    opt.zero_grad(set_to_none=True)
    loss_t = torch.nn.CrossEntropyLoss()(model(torch.from_numpy(x)), torch.from_numpy(y))
    loss_t.backward()
    opt.step()
    torch_params = [p.detach().numpy() for p in model.parameters()]
    torch_momenta = [opt.state[p]["momentum_buffer"].numpy() for p in model.parameters()]
    torch_state = [[m.running_mean.numpy(), m.running_var.numpy()] for m in bns]

    # JAX's, as jax_baseline.py runs it.
    step = jax.jit(jb.make_step(jax, name, dropout=0.0))
    p2, m2, s2, loss_j = step([jnp.asarray(p) for p in params], [jnp.zeros_like(jnp.asarray(p)) for p in params],
                              [[jnp.asarray(a) for a in pair] for pair in state],
                              jnp.asarray(x.astype(np.int32) if name == "gpt-small" else x),
                              jnp.asarray(y.astype(np.int32)), jax.random.PRNGKey(0))

    tol = tolerance(jb, name, shape[0])
    failures = []
    lt, lj = float(loss_t.detach()), float(loss_j)
    if abs(lt - lj) > tol * abs(lt):
        failures.append(f"loss: torch {lt!r}, jax {lj!r} (relative tolerance {tol:.3g})")

    # A gradient whose terms cancel to zero (the GPT's key bias: softmax ignores a constant
    # added to a row of scores) is rounding noise on both sides: it is held to the largest
    # gradient of the step, the size of the terms that cancel, not to its own.
    largest_momentum = max(float(np.abs(m).max()) for m in torch_momenta)

    def compare(what, a, b, floor=0.0):
        a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
        scale = max(float(np.abs(a).max()), floor)
        diff = float(np.abs(a - b).max())
        if diff > tol * scale:
            failures.append(f"{what}: largest difference {diff:.3g}, largest magnitude {scale:.3g} "
                            f"(relative tolerance {tol:.3g})")

    for i, (a, b) in enumerate(zip(torch_params, p2)):
        compare(f"parameter {i} {a.shape} after the step", a, b)
    for i, (a, b) in enumerate(zip(torch_momenta, m2)):
        compare(f"momentum {i} {a.shape}", a, b, floor=largest_momentum)
    for i, (a, b) in enumerate(zip(torch_state, s2)):
        compare(f"batch norm {i} running mean", a[0], b[0])
        compare(f"batch norm {i} running variance", a[1], b[1])
    print(f"{name}: loss torch {lt:.15f} jax {lj:.15f}, {len(params)} parameters, tolerance {tol:.3g}: "
          + ("ok" if not failures else "FAILED"))
    for f in failures:
        print("  " + f)
    return not failures


def main():
    try:
        import torch
        import jax
        import numpy as np
    except Exception as e:
        print(f"SKIP: this Python ({sys.executable}) cannot import torch and jax: {e}")
        return 77
    if int(torch.__version__.split(".")[0]) < 2:
        print(f"SKIP: torch {torch.__version__} here; the peers are torch 2.x")
        return 77
    jax.config.update("jax_platforms", "cpu")
    jax.config.update("jax_enable_x64", True)
    import jax_baseline as jb
    import torch_baseline as tb
    torch.set_num_threads(1)
    names = sys.argv[1:] or list(jb.WORKLOADS)
    ok = all([check(torch, jax, np, jb, tb, n) for n in names])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
