#!/usr/bin/env python3
"""PyTorch's side of towerjit_bench: the same training steps (model, batch, optimiser,
fp32, data shape) as bench/train_step.cpp, timed step by step. Prints one JSON line per
workload: {"workload", "threads", "step_ms" (median), "step_ms_min", "step_ms_max",
"samples_per_s", "steps", "first_step_ms"}. Without torch it prints {"torch": null, "error": ...}
and exits 0.

  python3 bench/torch_baseline.py --threads 2 [--mode eager|compile] [--steps 50] [--warmup 10] [--workload cnn]
                                   [--precision bf16]

--precision bf16|f16 runs the forward and the loss under torch.autocast("cpu", dtype) (PyTorch's
mixed precision: linear layers and convolutions in the 16-bit type, oneDNN's AMX or AVX512_BF16
kernels where the CPU has them); the parameters and the optimiser stay f32.

--mode compile runs the model through torch.compile (Inductor's C++ backend on the CPU; its
backward too, through AOTAutograd); the loss and the optimiser step stay eager, as in
bench/torch_gpu_baseline.py. The first step compiles: first_step_ms says how long it took.

Thread settings other than the count (OMP_WAIT_POLICY, OPENBLAS_NUM_THREADS) come from the
environment the caller sets; they must be set before torch loads.
"""
import argparse
import json
import statistics
import sys
import time

WORKLOADS = {"mlp-large": 256, "mlp-small": 64, "cnn": 128, "resnet-bn": 128, "gpt-small": 32}
# gpt-small: examples/gpt.h with examples/char_lm's defaults.
GPT = {"vocab": 86, "context": 64, "dim": 64, "heads": 4, "layers": 2}


def resnet(torch):
    """examples/models.h's resnet: convolutions without bias, batch norm (towerjit's momentum
    0.9 is PyTorch's 0.1, epsilon 1e-3), two residual blocks, dropout 0.25."""
    nn = torch.nn

    def conv_bn(c_in, c_out):
        return [nn.Conv2d(c_in, c_out, 3, padding=1, bias=False), nn.BatchNorm2d(c_out, eps=1e-3, momentum=0.1)]

    class Block(nn.Module):
        def __init__(self, width):
            super().__init__()
            self.body = nn.Sequential(*conv_bn(width, width), nn.ReLU(), *conv_bn(width, width))

        def forward(self, x):
            return torch.relu(x + self.body(x))

    return nn.Sequential(
        nn.Unflatten(1, (1, 28, 28)),
        *conv_bn(1, 16), nn.ReLU(), Block(16), nn.MaxPool2d(2),
        *conv_bn(16, 32), nn.ReLU(), Block(32), nn.MaxPool2d(2),
        nn.Flatten(), nn.Dropout(0.25), nn.Linear(32 * 7 * 7, 10))


def has_fused_attention(torch):
    return hasattr(torch.nn.functional, "scaled_dot_product_attention")


def gpt(torch, fused_attention):
    """examples/gpt.h: token embedding and learned positions (N(0, 0.02)), pre-norm blocks of
    causal multi-head attention and an exact-erf GELU MLP, a final layer norm, the output tied
    to the embedding. The attention is PyTorch 2.x's fused scaled_dot_product_attention
    (`fused_attention`; towerjit's is fused by default) or the softmax of the masked scores
    written out (all 1.13 has)."""
    nn = torch.nn
    v, t, d, h = GPT["vocab"], GPT["context"], GPT["dim"], GPT["heads"]

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.q, self.k, self.v, self.out = (nn.Linear(d, d) for _ in range(4))
            self.up, self.down = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
            self.register_buffer("mask", torch.tril(torch.ones(t, t, dtype=torch.bool)))

        def heads(self, x):  # [B, T, D] -> [B, H, T, D/H]
            return x.view(x.shape[0], t, h, d // h).transpose(1, 2)

        def forward(self, x):
            a = self.ln1(x)
            q, k, w = self.heads(self.q(a)), self.heads(self.k(a)), self.heads(self.v(a))
            if fused_attention:
                o = nn.functional.scaled_dot_product_attention(q, k, w, is_causal=True)
            else:
                scores = (q @ k.transpose(-1, -2)) / (d // h) ** 0.5
                o = torch.softmax(scores.masked_fill(~self.mask, float("-inf")), dim=-1) @ w
            x = x + self.out(o.transpose(1, 2).reshape(x.shape[0], t, d))
            return x + self.down(nn.functional.gelu(self.up(self.ln2(x))))

    class Gpt(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok = nn.Embedding(v, d)
            nn.init.normal_(self.tok.weight, 0, 0.02)
            self.pos = nn.Parameter(torch.randn(t, d) * 0.02)
            self.blocks = nn.Sequential(*(Block() for _ in range(GPT["layers"])))
            self.ln_f = nn.LayerNorm(d)

        def forward(self, tokens):  # [B, T] -> [B * T, V]
            x = self.ln_f(self.blocks(self.tok(tokens) + self.pos))
            return (x @ self.tok.weight.t()).reshape(-1, v)

    return Gpt()


def build(torch, name, fused_attention=False):
    nn = torch.nn
    if name == "gpt-small":
        return gpt(torch, fused_attention), (WORKLOADS[name], GPT["context"])
    if name == "resnet-bn":
        return resnet(torch), (WORKLOADS[name], 784)
    if name == "cnn":
        model = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(32 * 7 * 7, 10))
        shape = (WORKLOADS[name], 1, 28, 28)
    else:
        hidden = 512 if name == "mlp-large" else 64
        model = nn.Sequential(nn.Linear(784, hidden), nn.ReLU(), nn.Linear(hidden, hidden),
                              nn.ReLU(), nn.Linear(hidden, 10))
        shape = (WORKLOADS[name], 784)
    return model, shape


def measure(torch, name, steps, warmup, mode="eager", precision="f32"):
    """The step's figures; gpt-small's with each attention PyTorch has, the faster one reported
    (neither wins everywhere: on a 2-core EPYC the fused one was faster eager, the written-out
    one under torch.compile, which fuses it itself)."""
    if name != "gpt-small" or not has_fused_attention(torch):
        return measure_model(torch, name, steps, warmup, mode, precision)
    runs = [dict(measure_model(torch, name, steps, warmup, mode, precision, fused), attention=form)
            for fused, form in ((True, "fused"), (False, "written out"))]
    return min(runs, key=lambda r: r["step_ms"])


def measure_model(torch, name, steps, warmup, mode, precision, fused_attention=False):
    torch.manual_seed(0)
    model, shape = build(torch, name, fused_attention)
    forward = torch.compile(model) if mode == "compile" else model
    # Fixed random data, the same every step (as the C++ side does).
    if name == "gpt-small":  # tokens and next-token targets, [B, T] each
        x = torch.randint(0, GPT["vocab"], shape)
        y = torch.randint(0, GPT["vocab"], shape).reshape(-1)
    else:
        x = torch.rand(shape, dtype=torch.float32)
        y = torch.randint(0, 10, (shape[0],))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()  # mean over the batch (over its tokens for gpt-small)

    half = {"bf16": torch.bfloat16, "f16": torch.float16}.get(precision)

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=half or torch.bfloat16, enabled=half is not None):
            loss = loss_fn(forward(x), y)
        loss.backward()
        opt.step()
        return loss

    start = time.perf_counter()
    step()
    first_ms = (time.perf_counter() - start) * 1e3
    for _ in range(warmup - 1):
        step()
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        times.append((time.perf_counter() - start) * 1e3)
    median = statistics.median(times)
    return {"workload": name, "step_ms": median, "step_ms_min": min(times),
            "step_ms_max": max(times), "samples_per_s": shape[0] / median * 1e3, "steps": steps,
            "first_step_ms": first_ms}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--threads", type=int, required=True)
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--workload", action="append", choices=sorted(WORKLOADS))
    p.add_argument("--mode", choices=["eager", "compile"], default="eager")
    p.add_argument("--precision", choices=["f32", "bf16", "f16"], default="f32")
    args = p.parse_args()
    try:
        import torch
    except Exception as e:  # ImportError, or a broken install
        print(json.dumps({"torch": None, "error": f"cannot import torch: {e}"}))
        return 0
    torch.set_num_threads(args.threads)
    # towerjit computes with denormals flushed to zero (runtime/flush_denormals.h); so does
    # PyTorch here, so that neither side pays for the slow path on tiny values.
    torch.set_flush_denormal(True)
    for name in args.workload or list(WORKLOADS):
        r = measure(torch, name, args.steps, max(1, args.warmup), args.mode, args.precision)
        r.update(threads=args.threads, torch_version=torch.__version__, mode=args.mode, precision=args.precision)
        # The vector level ATen runs (ATEN_CPU_CAPABILITY caps it; bench/peer_isa_cap.h).
        capability = getattr(getattr(torch.backends, "cpu", None), "get_cpu_capability", None)
        if capability:
            r.update(cpu_capability=capability())
        print(json.dumps(r), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
