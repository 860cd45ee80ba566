#!/usr/bin/env python3
"""Checks a model towerjit exported (tests/onnx/onnx_runtime_check.sh): onnx.checker with shape
inference, opset 17 or later, a dynamic batch axis, then ONNX Runtime on the driver's inputs.

  onnx_runtime_check.py DIR    (DIR as onnx_driver wrote it: model.onnx, meta.json, *.f32, *.f64)

ONNX Runtime is an f32 backend like towerjit's, so its logits must lie within the reference
interpreter's error bound of the exact ones (jit/reference/error_bounds.cpp), on the examples
the driver bounded. Where the driver also wrote a Predictor's logits (the example models),
ONNX Runtime's predicted class must be towerjit's on every example. Prints the largest
differences; exits 1 on any failure.
"""
import json
import sys

import numpy as np
import onnx
import onnxruntime as ort


def fail(message):
    print("FAIL: " + message)
    sys.exit(1)


def main(d):
    meta = json.load(open(d + "/meta.json"))
    n, k, classes = meta["n"], meta["k"], meta["classes"]
    model = onnx.load(d + "/model.onnx")
    onnx.checker.check_model(model, full_check=True)
    opset = max(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
    if opset < 17:
        fail(f"opset {opset}, want 17 or later")
    dim0 = model.graph.input[0].type.tensor_type.shape.dim[0]
    if dim0.dim_param != "batch":
        fail(f"the input's first axis is {dim0}, want the dynamic axis 'batch'")
    names = {i.name for i in model.graph.initializer}
    print(f"onnx.checker: ok; opset {opset}, {len(model.graph.node)} nodes, {len(names)} initializers, ops "
          + ", ".join(sorted({node.op_type for node in model.graph.node})))

    x = np.fromfile(d + "/input.f32", dtype="<f4").reshape([n] + meta["shape"])
    session = ort.InferenceSession(d + "/model.onnx", providers=["CPUExecutionProvider"])
    # Batches of several sizes (1, 7, then 1000s): the batch axis is dynamic.
    parts, start = [], 0
    for size in [1, 7] + [1000] * (n // 1000 + 1):
        if start >= n:
            break
        parts.append(session.run(["logits"], {meta["input"]: x[start:start + size]})[0])
        start += size
    got = np.concatenate(parts).astype(np.float64)
    if got.shape != (n, classes):
        fail(f"ONNX Runtime's logits have shape {got.shape}, want {(n, classes)}")

    exact = np.fromfile(d + "/exact.f64", dtype="<f8").reshape(k, classes)
    bound = np.fromfile(d + "/bound.f64", dtype="<f8").reshape(k, classes)
    err = np.abs(got[:k] - exact)
    worst = tuple(int(i) for i in np.unravel_index(np.argmax(err - bound), err.shape))
    print(f"ONNX Runtime vs the exact logits on {k} examples: largest error {err.max():.3g}, "
          f"largest error / bound {np.max(err / np.maximum(bound, 1e-300)):.3g}")
    if np.any(err > bound):
        fail(f"ONNX Runtime's output {worst} is {got[:k][worst]:.9g}, the exact value {exact[worst]:.9g}: "
             f"error {err[worst]:.3g} over the bound {bound[worst]:.3g}")

    try:
        predictor = np.fromfile(d + "/predictor.f32", dtype="<f4").reshape(n, classes).astype(np.float64)
    except FileNotFoundError:
        return
    diff = np.abs(got - predictor)
    print(f"ONNX Runtime vs towerjit's Predictor on {n} examples: largest logit difference {diff.max():.3g} "
          f"(on the bounded examples, largest difference / twice the bound "
          f"{np.max(diff[:k] / np.maximum(2 * bound, 1e-300)):.3g})")
    if np.any(diff[:k] > 2 * bound):  # each lies within the bound of the exact value
        fail("towerjit's Predictor and ONNX Runtime differ by more than twice the bound")
    mismatched = np.flatnonzero(got.argmax(1) != predictor.argmax(1))
    if mismatched.size:
        i = mismatched[0]
        fail(f"{mismatched.size} of {n} predictions differ, first example {i}: ONNX Runtime {got[i].tolist()}, "
             f"towerjit {predictor[i].tolist()}")
    print(f"the same predicted class on all {n} examples")


if __name__ == "__main__":
    main(sys.argv[1])
