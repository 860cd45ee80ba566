#!/usr/bin/env python3
"""JAX's side of towerjit_bench: the same training steps as bench/train_step.cpp and
bench/torch_baseline.py (model, batch, fp32, data shape, mean cross-entropy, SGD with momentum
0.9 and learning rate 0.05), each step one `jax.jit` call, timed step by step. Prints one JSON
line per workload in torch_baseline.py's format: {"workload", "threads", "step_ms" (median),
"step_ms_min", "step_ms_max", "samples_per_s", "steps", "first_step_ms" (the compile and one
step), "jax_version"}. Without JAX it prints {"jax": null, "error": ...} and exits 0.

  python3 bench/jax_baseline.py --threads 1 [--steps 50] [--warmup 10] [--workload cnn] [--precision bf16]

--precision bf16|f16 takes the matrix products' and convolutions' operands in that dtype, as
towerjit's precision policy does (jmp's compute dtype for just those ops): products accumulate
and return f32 (preferred_element_type), convolutions return the 16-bit type, widened to f32
for what follows; the parameters, the loss and the update stay f32.

XLA's CPU client sizes its thread pool by the CPUs this process may run on, so --threads N
pins the process to N of them before JAX loads.

The parameters use PyTorch's layouts (Linear [out, in], Conv2d [out, in, kh, kw], NCHW data),
so torch_baseline.py's weights load here unchanged (tests/bench/peer_models_test.py checks that
both compute the same step).
"""
import argparse
import json
import os
import statistics
import sys
import time

WORKLOADS = {"mlp-large": 256, "mlp-small": 64, "cnn": 128, "resnet-bn": 128, "gpt-small": 32}
# gpt-small: examples/gpt.h with examples/char_lm's defaults, as torch_baseline.py's GPT.
GPT = {"vocab": 86, "context": 64, "dim": 64, "heads": 4, "layers": 2}
LN_EPSILON = 1e-5   # PyTorch's LayerNorm default
LEARNING_RATE = 0.05
MOMENTUM = 0.9
BN_EPSILON = 1e-3   # examples/models.h; PyTorch's eps=1e-3 in torch_baseline.py
BN_MOMENTUM = 0.1   # PyTorch's convention: running = 0.9 running + 0.1 batch
DROPOUT = 0.25


def layers(name):
    """The model as a list of (kind, parameter names) in PyTorch's order of parameters.
    Kinds: linear, conv (with or without bias), bn, relu, pool, flatten, dropout, block."""
    if name in ("mlp-large", "mlp-small"):
        h = 512 if name == "mlp-large" else 64
        return [("linear", 784, h), ("relu",), ("linear", h, h), ("relu",), ("linear", h, 10)]
    if name == "cnn":
        return [("image",), ("conv", 1, 16, True), ("relu",), ("pool",),
                ("conv", 16, 32, True), ("relu",), ("pool",), ("flatten",), ("linear", 32 * 7 * 7, 10)]
    if name == "resnet-bn":
        return [("image",), ("conv", 1, 16, False), ("bn", 16), ("relu",), ("block", 16), ("pool",),
                ("conv", 16, 32, False), ("bn", 32), ("relu",), ("block", 32), ("pool",),
                ("flatten",), ("dropout",), ("linear", 32 * 7 * 7, 10)]
    if name == "gpt-small":
        return []  # not a stack of layers: gpt_init and gpt_loss
    raise ValueError(f"unknown workload {name!r}; choose one of {', '.join(sorted(WORKLOADS))}")


def expand(spec):
    """Blocks written out: conv, bn, relu, conv, bn inside a residual add and a ReLU."""
    out = []
    for layer in spec:
        if layer[0] == "block":
            w = layer[1]
            out.append(("block", [("conv", w, w, False), ("bn", w), ("relu",), ("conv", w, w, False), ("bn", w)]))
        else:
            out.append(layer)
    return out


def gpt_shapes():
    """The GPT's parameter shapes in PyTorch's parameters() order: the model's own `pos` first,
    then its modules' (the embedding, each block's two layer norms and six Linear layers, the
    final layer norm)."""
    v, t, d = GPT["vocab"], GPT["context"], GPT["dim"]
    block = [(d,), (d,), (d,), (d,)]  # ln1, ln2: weight, bias
    for out_features, in_features in ((d, d),) * 4 + ((4 * d, d), (d, 4 * d)):  # q, k, v, out, up, down
        block += [(out_features, in_features), (out_features,)]
    return [(t, d), (v, d)] + block * GPT["layers"] + [(d,), (d,)]


def gpt_init(np, seed):
    """As PyTorch's: N(0, 0.02) for the positions and the embedding, Linear's uniform in
    +-1/sqrt(fan_in), layer norms 1 and 0."""
    rng = np.random.default_rng(seed)
    shapes = gpt_shapes()
    params = [rng.normal(0, 0.02, shapes[0]), rng.normal(0, 0.02, shapes[1])]
    d = GPT["dim"]
    layer_norm = [np.ones(d), np.zeros(d)]
    for _ in range(GPT["layers"]):
        params += layer_norm * 2
        for out_features, in_features in ((d, d),) * 4 + ((4 * d, d), (d, 4 * d)):
            bound = 1 / np.sqrt(in_features)
            params += [rng.uniform(-bound, bound, (out_features, in_features)),
                       rng.uniform(-bound, bound, (out_features,))]
    params += layer_norm
    return [a.astype(np.float32) for a in params], []


def gpt_loss(jax, dot):
    """loss(params, state, tokens [B, T], targets [B * T], key) -> (mean cross-entropy over the
    tokens, []): torch_baseline.py's GPT with the attention written out (XLA fuses it itself)."""
    jnp = jax.numpy
    v, t, d, h = GPT["vocab"], GPT["context"], GPT["dim"], GPT["heads"]

    def layer_norm(x, w, b):
        mean = x.mean(axis=-1, keepdims=True)
        var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
        return (x - mean) * jax.lax.rsqrt(var + LN_EPSILON) * w + b

    def linear(x, w, b):
        return dot(x, w.T) + b

    def heads(x):  # [B, T, D] -> [B, H, T, D/H]
        return x.reshape(x.shape[0], t, h, d // h).transpose(0, 2, 1, 3)

    causal = jnp.tril(jnp.ones((t, t), dtype=bool))

    def loss(params, state, tokens, targets, key):
        p = iter(params)
        pos, tok = next(p), next(p)
        x = tok[tokens] + pos
        for _ in range(GPT["layers"]):
            ln1w, ln1b, ln2w, ln2b = next(p), next(p), next(p), next(p)
            (qw, qb), (kw, kb), (vw, vb), (ow, ob), (uw, ub), (dw, db) = [(next(p), next(p)) for _ in range(6)]
            a = layer_norm(x, ln1w, ln1b)
            q, k, w = heads(linear(a, qw, qb)), heads(linear(a, kw, kb)), heads(linear(a, vw, vb))
            # f32 under a 16-bit policy too, as towerjit's attention op stays
            scores = (q @ k.transpose(0, 1, 3, 2)) / (d // h) ** 0.5
            probs = jax.nn.softmax(jnp.where(causal, scores, -jnp.inf), axis=-1)
            o = (probs @ w).transpose(0, 2, 1, 3).reshape(x.shape[0], t, d)
            x = x + linear(o, ow, ob)
            x = x + linear(jax.nn.gelu(linear(layer_norm(x, ln2w, ln2b), uw, ub), approximate=False), dw, db)
        x = layer_norm(x, next(p), next(p))
        logp = jax.nn.log_softmax(dot(x, tok.T).reshape(-1, v))
        return -jnp.take_along_axis(logp, targets[:, None], axis=1).mean(), state

    return loss


def init(np, name, seed):
    """Parameters (a list of arrays in PyTorch's parameters() order) and batch-norm state (a
    list of [mean, var] pairs in module order), initialised as PyTorch's defaults do: uniform
    in +-1/sqrt(fan_in) for weights and biases (kaiming_uniform with a = sqrt(5)), batch-norm
    scale 1 and shift 0, running mean 0 and variance 1."""
    if name == "gpt-small":
        return gpt_init(np, seed)
    rng = np.random.default_rng(seed)
    params, state = [], []

    def visit(spec):
        for layer in spec:
            kind = layer[0]
            if kind == "linear":
                bound = 1 / np.sqrt(layer[1])
                params.append(rng.uniform(-bound, bound, (layer[2], layer[1])).astype(np.float32))
                params.append(rng.uniform(-bound, bound, (layer[2],)).astype(np.float32))
            elif kind == "conv":
                bound = 1 / np.sqrt(layer[1] * 9)
                params.append(rng.uniform(-bound, bound, (layer[2], layer[1], 3, 3)).astype(np.float32))
                if layer[3]:
                    params.append(rng.uniform(-bound, bound, (layer[2],)).astype(np.float32))
            elif kind == "bn":
                params.extend([np.ones(layer[1], np.float32), np.zeros(layer[1], np.float32)])
                state.append([np.zeros(layer[1], np.float32), np.ones(layer[1], np.float32)])
            elif kind == "block":
                visit(layer[1])

    visit(expand(layers(name)))
    return params, state


def make_loss(jax, name, dropout=DROPOUT, half=None):
    """loss(params, state, x, y, key) -> (mean cross-entropy, new batch-norm state). `half`: the
    products' and convolutions' operand dtype (a jnp dtype), None for f32."""
    jnp, lax = jax.numpy, jax.lax
    spec = expand(layers(name))

    def dot(a, b):  # f32 (or the caller's float64) as it is; else 16-bit operands, an f32 sum
        if half is None:
            return a @ b
        return jnp.matmul(a.astype(half), b.astype(half), preferred_element_type=jnp.float32)

    def conv(x, w):  # a 16-bit convolution's result is 16-bit (cuDNN's and towerjit's), widened after
        narrow = (lambda a: a) if half is None else (lambda a: a.astype(half))
        y = lax.conv_general_dilated(narrow(x), narrow(w), (1, 1), ((1, 1), (1, 1)),
                                     dimension_numbers=("NCHW", "OIHW", "NCHW"))
        return y if half is None else y.astype(jnp.float32)

    if name == "gpt-small":
        return gpt_loss(jax, dot)

    def forward(params, state, x, key):
        p, s = iter(params), iter(state)
        new_state = []

        def run(spec, x):
            nonlocal key
            for layer in spec:
                kind = layer[0]
                if kind == "image":
                    x = x.reshape(x.shape[0], 1, 28, 28)
                elif kind == "linear":
                    w, b = next(p), next(p)
                    x = dot(x, w.T) + b
                elif kind == "conv":
                    x = conv(x, next(p))
                    if layer[3]:
                        x = x + next(p)[None, :, None, None]
                elif kind == "bn":
                    # Training mode: normalise by the batch's statistics (biased variance);
                    # the running variance takes the unbiased one, as PyTorch's does.
                    gamma, beta = next(p), next(p)
                    run_mean, run_var = next(s)
                    mean = x.mean(axis=(0, 2, 3))
                    var = x.var(axis=(0, 2, 3))
                    n = x.shape[0] * x.shape[2] * x.shape[3]
                    new_state.append([(1 - BN_MOMENTUM) * run_mean + BN_MOMENTUM * lax.stop_gradient(mean),
                                      (1 - BN_MOMENTUM) * run_var + BN_MOMENTUM * lax.stop_gradient(var) * n / (n - 1)])
                    inv = lax.rsqrt(var + BN_EPSILON) * gamma
                    x = (x - mean[None, :, None, None]) * inv[None, :, None, None] + beta[None, :, None, None]
                elif kind == "relu":
                    x = jnp.maximum(x, 0)
                elif kind == "pool":
                    x = lax.reduce_window(x, -jnp.inf, lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID")
                elif kind == "flatten":
                    x = x.reshape(x.shape[0], -1)
                elif kind == "dropout":
                    if dropout > 0:
                        key, sub = jax.random.split(key)
                        keep = jax.random.bernoulli(sub, 1 - dropout, x.shape)
                        x = jnp.where(keep, x / (1 - dropout), 0)
                elif kind == "block":
                    x = jnp.maximum(x + run(layer[1], x), 0)
            return x

        return run(spec, x), new_state

    def loss(params, state, x, y, key):
        logits, new_state = forward(params, state, x, key)
        logp = jax.nn.log_softmax(logits)
        return -jnp.take_along_axis(logp, y[:, None], axis=1).mean(), new_state

    return loss


def make_step(jax, name, dropout=DROPOUT, half=None):
    """step(params, momenta, state, x, y, key) -> (params, momenta, state, loss): the forward,
    the gradients and torch.optim.SGD's momentum update (m' = 0.9 m + g, w' = w - 0.05 m')."""
    grad = jax.value_and_grad(make_loss(jax, name, dropout, half), has_aux=True)

    def step(params, momenta, state, x, y, key):
        (loss, new_state), grads = grad(params, state, x, y, key)
        momenta = [MOMENTUM * m + g for m, g in zip(momenta, grads)]
        params = [w - LEARNING_RATE * m for w, m in zip(params, momenta)]
        return params, momenta, new_state, loss

    return step


def measure(jax, np, name, steps, warmup, half=None):
    jnp = jax.numpy
    params, state = init(np, name, 0)
    params = [jnp.asarray(a) for a in params]
    state = [[jnp.asarray(a) for a in pair] for pair in state]
    momenta = [jnp.zeros_like(w) for w in params]
    rng = np.random.default_rng(1)
    batch = WORKLOADS[name]
    # Fixed random data, the same every step (as the C++ side does).
    if name == "gpt-small":  # tokens and next-token targets, [B, T] and [B * T]
        x = jnp.asarray(rng.integers(0, GPT["vocab"], (batch, GPT["context"]), dtype=np.int32))
        y = jnp.asarray(rng.integers(0, GPT["vocab"], batch * GPT["context"], dtype=np.int32))
    else:
        x = jnp.asarray(rng.random((batch, 1, 28, 28) if name == "cnn" else (batch, 784), dtype=np.float32))
        y = jnp.asarray(rng.integers(0, 10, batch, dtype=np.int32))
    step = jax.jit(make_step(jax, name, half=half), donate_argnums=(0, 1, 2))
    key = jax.random.PRNGKey(0)

    def one(i):
        nonlocal params, momenta, state
        params, momenta, state, loss = step(params, momenta, state, x, y, jax.random.fold_in(key, i))
        loss.block_until_ready()

    start = time.perf_counter()
    one(0)
    first_ms = (time.perf_counter() - start) * 1e3
    for i in range(1, warmup):
        one(i)
    times = []
    for i in range(steps):
        start = time.perf_counter()
        one(warmup + i)
        times.append((time.perf_counter() - start) * 1e3)
    median = statistics.median(times)
    return {"workload": name, "step_ms": median, "step_ms_min": min(times), "step_ms_max": max(times),
            "samples_per_s": batch / median * 1e3, "steps": steps, "first_step_ms": first_ms}


def pin_threads(threads):
    """Runs this process on `threads` of the CPUs it may use (before JAX loads)."""
    cpus = sorted(os.sched_getaffinity(0))
    if threads < len(cpus):
        os.sched_setaffinity(0, cpus[:threads])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--threads", type=int, required=True)
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--workload", action="append", choices=sorted(WORKLOADS))
    p.add_argument("--precision", choices=["f32", "bf16", "f16"], default="f32")
    args = p.parse_args()
    if args.threads < 1:
        p.error("--threads must be at least 1")
    pin_threads(args.threads)
    try:
        import jax
        import numpy as np
        jax.config.update("jax_platforms", "cpu")
    except Exception as e:  # ImportError, or a broken install
        print(json.dumps({"jax": None, "error": f"cannot import jax: {e}"}))
        return 0
    half = {"f32": None, "bf16": jax.numpy.bfloat16, "f16": jax.numpy.float16}[args.precision]
    for name in args.workload or list(WORKLOADS):
        r = measure(jax, np, name, args.steps, max(1, args.warmup), half)
        r.update(threads=args.threads, jax_version=jax.__version__, precision=args.precision)
        print(json.dumps(r), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
