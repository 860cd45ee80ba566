#!/usr/bin/env python3
"""The training-step table of scripts/gpu-check.sh: for each workload, the cost model's
prediction (towerjit_bench --gpu-model, its last line), towerjit measured on this GPU
(towerjit_bench --measure), fit() over a dataset in host memory with each batch copied at its
step and prefetched while the step before trains (towerjit_bench --measure-fit), and PyTorch
eager and torch.compile on the same GPU (bench/torch_gpu_baseline.py), from the files
gpu-check.sh leaves in DIR:

  DIR/predict-<workload>.txt   DIR/measure.jsonl   DIR/fit.jsonl   DIR/torch.jsonl

  python3 scripts/gpu_step_table.py DIR
A missing or failed figure prints as "-" and its reason below the table.
"""
import json
import os
import sys

WORKLOADS = ["mlp", "cnn", "resnet"]


def json_lines(path):
    rows = []
    try:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line.startswith("{"):
                    try:
                        rows.append(json.loads(line))
                    except ValueError:
                        pass
    except OSError:
        pass
    return rows


def ms(v):
    return "-" if v is None else f"{v:.3f}"


def main():
    if len(sys.argv) != 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    d = sys.argv[1]
    # (workload, mode): the f32 step, "tf32" (TF32 products), "bf16" (the bf16 policy) or
    # "no cudnn" (f32, the convolutions on towerjit's implicit GEMMs) or "cudnn alone" (f32,
    # cuDNN's algorithms without the implicit GEMM timed beside them)
    measured = {}
    notes = []
    for r in json_lines(os.path.join(d, "measure.jsonl")):
        if "workload" in r:
            mode = "tf32" if r.get("tf32") else r.get("precision", "f32")
            if r.get("cudnn") is False:
                mode = "no cudnn"
            elif r.get("conv_implicit_gemm") is False:
                mode = "cudnn alone"
            measured[(r["workload"], mode)] = r
            if mode == "f32" and r.get("conv_choices"):
                notes.append(f"{r['workload']} f32: {r.get('conv_choices_implicit_gemm')} of {r['conv_choices']} "
                             "convolution passes ran on towerjit's implicit GEMM (timed faster than cuDNN's)")
    fits = {}  # (workload, prefetched)
    for r in json_lines(os.path.join(d, "fit.jsonl")):
        if "fit_ms_per_step" in r:
            fits[(r["workload"], bool(r.get("prefetch_feeds")))] = r["fit_ms_per_step"]
    torch = {}
    for r in json_lines(os.path.join(d, "torch.jsonl")):
        if r.get("torch", True) is None:
            notes.append(f"PyTorch: {r.get('error')}")
        elif "error" in r:
            notes.append(f"PyTorch {r['mode']} {r['workload']}: {r['error']}")
        else:
            torch[(r["workload"], r["mode"])] = r
    head = ("workload", "batch", "predicted ms", "floor ms", "measured ms", "meas/pred", "tf32 ms", "bf16 ms",
            "no cuDNN ms", "cuDNN alone", "fit ms", "fit, prefetched", "torch eager", "torch.compile", "eager, host batch", "launches")
    print("%-8s %6s %13s %9s %12s %10s %8s %8s %12s %12s %8s %16s %12s %14s %18s %9s" % head)
    for w in WORKLOADS:
        p = (json_lines(os.path.join(d, f"predict-{w}.txt")) or [None])[-1]
        if p is None:
            notes.append(f"{w}: no prediction (see predict-{w}.txt)")
        m = measured.get((w, "f32"))
        tf32, bf16, own = measured.get((w, "tf32")), measured.get((w, "bf16")), measured.get((w, "no cudnn"))
        alone = measured.get((w, "cudnn alone"))
        if m is None:
            notes.append(f"{w}: no measurement on the GPU (see measure.log)")
        pred = p["step_ms"] if p else None
        meas = m["measured_ms"] if m else None
        ratio = f"{meas / pred:.2f}" if pred and meas else "-"
        eager, comp, fed = torch.get((w, "eager")), torch.get((w, "compile")), torch.get((w, "eager_host_batch"))
        batch = (p or m or {}).get("batch", "-")
        print("%-8s %6s %13s %9s %12s %10s %8s %8s %12s %12s %8s %16s %12s %14s %18s %9s" % (
            w, batch, ms(pred), ms(p["floor_ms"] if p else None), ms(meas), ratio,
            ms(tf32["measured_ms"] if tf32 else None), ms(bf16["measured_ms"] if bf16 else None),
            ms(own["measured_ms"] if own else None), ms(alone["measured_ms"] if alone else None),
            ms(fits.get((w, False))), ms(fits.get((w, True))),
            ms(eager["step_ms"] if eager else None), ms(comp["step_ms"] if comp else None),
            ms(fed["step_ms"] if fed else None),
            p["launches"] if p else "-"))
    for n in notes:
        print("note: " + n)
    return 0


if __name__ == "__main__":
    sys.exit(main())
