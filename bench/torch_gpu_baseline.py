#!/usr/bin/env python3
"""PyTorch on a GPU, for scripts/gpu-check.sh: the Fashion-MNIST example's three models
(examples/models.h; mlp 784-512-512-10, cnn with its dense 128 layer, resnet) with Adam at 1e-3,
as `fashion_mnist --towers gpu:0` trains them, timed per step in eager mode and under
torch.compile on the same GPU, the batch on the GPU; and eager with the batch copied from
pageable host memory each step (`eager_host_batch`), as towerjit's measured step does. One JSON line per workload and mode:
{"workload", "mode", "batch", "step_ms" (median), "step_ms_min", "steps", "device", "torch_version"}.
Without torch or a CUDA device it prints {"torch": null, "error": ...} and exits 0.

  python3 bench/torch_gpu_baseline.py [--workload mlp] [--mode eager|compile] [--steps 50]
"""
import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

BATCHES = {"mlp": 4096, "cnn": 512, "resnet": 512}


def build(torch, name):
    nn = torch.nn
    if name == "resnet":
        from torch_baseline import resnet  # examples/models.h's resnet, shared with the CPU bench
        return resnet(torch)
    if name == "cnn":
        return nn.Sequential(
            nn.Unflatten(1, (1, 28, 28)),
            nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(32 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))
    return nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))


def measure(torch, name, mode, steps, warmup):
    torch.manual_seed(0)
    dev = torch.device("cuda")
    model = build(torch, name).to(dev)
    batch = BATCHES[name]
    # "eager_host_batch": eager, with the batch copied from pageable host memory every step, as
    # towerjit's measured step has it (TowerTrainer::step takes host tensors).
    host_batch = mode == "eager_host_batch"
    x_host = torch.rand((batch, 784))
    y_host = torch.randint(0, 10, (batch,))
    x, y = x_host.to(dev), y_host.to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = torch.nn.CrossEntropyLoss()
    forward = torch.compile(model) if mode == "compile" else model

    def step():
        opt.zero_grad(set_to_none=True)
        xs, ys = (x_host.to(dev), y_host.to(dev)) if host_batch else (x, y)
        loss = loss_fn(forward(xs), ys)
        loss.backward()
        opt.step()
        return loss

    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        torch.cuda.synchronize()  # a step is done when the GPU is
        times.append((time.perf_counter() - start) * 1e3)
    return {"workload": name, "mode": mode, "batch": batch, "step_ms": statistics.median(times),
            "step_ms_min": min(times), "steps": steps, "device": torch.cuda.get_device_name(0),
            "torch_version": torch.__version__}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--workload", action="append", choices=sorted(BATCHES))
    p.add_argument("--mode", action="append", choices=["eager", "compile", "eager_host_batch"])
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--warmup", type=int, default=10)
    args = p.parse_args()
    try:
        import torch
        if not torch.cuda.is_available():
            raise RuntimeError("torch.cuda.is_available() is False")
    except Exception as e:  # ImportError, a CPU-only build, no device
        print(json.dumps({"torch": None, "error": f"no PyTorch on a GPU: {e}"}))
        return 0
    # Every eager step first: under a time limit, torch.compile's compiles are what gets cut.
    for mode in args.mode or ["eager", "eager_host_batch", "compile"]:
        for name in args.workload or list(BATCHES):
            try:
                r = measure(torch, name, mode, args.steps, args.warmup)
            except Exception as e:  # torch.compile without a working Triton, say
                r = {"workload": name, "mode": mode, "error": str(e).splitlines()[0] if str(e) else repr(e)}
            print(json.dumps(r), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
