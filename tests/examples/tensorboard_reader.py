"""TensorBoard's own reader on towerjit's event files: run by tests/examples/tensorboard_reader.sh
as  tensorboard_reader.py <metrics.jsonl> <tensorboard dir> [<histogram every N steps>].

Loads the directory with tensorboard's EventAccumulator (what `tensorboard --logdir` uses) and
checks that every scalar of the metrics JSON lines is there, at the same steps, with the same
values (TensorBoard keeps scalars as float32, so each value is compared with its float32
rounding, exactly). Then cuts the event file's last record short, as a run killed mid-write
leaves it, and checks the reader still loads every earlier record. Exits 77 (ctest's skip)
when the tensorboard package is absent."""
import json
import os
import shutil
import struct
import sys
import tempfile

try:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
except ImportError:
    print("SKIP: the Python package tensorboard is not installed (pip install tensorboard)")
    sys.exit(77)

# The metrics lines' fields and the tags TensorBoardWriter gives them (runtime/report/tensorboard.h).
TAGS = {
    "step": {"loss": "train/loss", "lr": "train/learning_rate", "samples_per_s": "train/samples_per_s",
             "staleness": "async/staleness"},
    "eval": {"test_accuracy": "test/accuracy", "test_loss": "test/loss"},
}


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def expected_scalars(metrics_path):
    want = {}
    with open(metrics_path) as f:
        for line in f:
            if not line.strip():
                continue
            record = json.loads(line)
            for field, tag in TAGS[record["kind"]].items():
                if field not in record:  # staleness: async strategies only
                    continue
                value = record[field]
                want.setdefault(tag, []).append((record["step"], float("nan") if value is None else f32(value)))
    return want


def accumulator(directory):
    acc = EventAccumulator(directory, size_guidance={"scalars": 0, "histograms": 0})  # 0: keep every event
    acc.Reload()
    return acc


def load(directory):
    acc = accumulator(directory)
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def check_histograms(directory, every, last_step, failures):
    acc = accumulator(directory)
    tags = acc.Tags()["histograms"]
    # fashion_mnist's MLP (sync towers, variables on the host): dense layers of a kernel and a
    # bias each, each drawn as weights and as the gradient the step applied.
    weights = sorted(t[len("weights/"):] for t in tags if t.startswith("weights/"))
    gradients = sorted(t[len("gradients/"):] for t in tags if t.startswith("gradients/"))
    if not weights or weights != gradients or len(weights) + len(gradients) != len(tags) or \
            not any(t.endswith("kernel") for t in weights):
        failures.append(f"histograms: tags {tags}")
    want_steps = list(range(every, last_step + 1, every))
    for tag in tags:
        events = acc.Histograms(tag)
        steps = [e.step for e in events]
        if steps != want_steps:
            failures.append(f"{tag}: histograms at steps {steps}, expected {want_steps}")
        for e in events:
            v = e.histogram_value
            if not (v.num > 0 and sum(v.bucket) == v.num and v.min <= v.max and len(v.bucket) == len(v.bucket_limit)):
                failures.append(f"{tag} at step {e.step}: inconsistent histogram {v}")
    print(f"histograms: {len(tags)} variables at steps {want_steps}")


def same(a, b):
    return len(a) == len(b) and all(s == t and (v == w or (v != v and w != w)) for (s, v), (t, w) in zip(a, b))


def main():
    metrics_path, directory = sys.argv[1], sys.argv[2]
    want = expected_scalars(metrics_path)
    got = load(directory)
    failures = []
    for tag, points in want.items():
        if not same(got.get(tag, []), points):
            failures.append(f"{tag}: expected {points[:5]}... ({len(points)}), read {got.get(tag, [])[:5]}... "
                            f"({len(got.get(tag, []))})")
    extra = set(got) - set(want)
    if extra:
        failures.append(f"scalars the metrics file lacks: {sorted(extra)}")
    for tag, points in want.items():
        print(f"{tag}: {len(points)} points, steps {points[0][0]}..{points[-1][0]}")
    if len(sys.argv) > 3:
        check_histograms(directory, int(sys.argv[3]), max(s for s, _ in want["train/loss"]), failures)

    # A truncated last record (a run killed mid-write): the reader keeps the records before it.
    files = [f for f in os.listdir(directory) if "tfevents" in f]
    if len(files) != 1:
        failures.append(f"expected one event file, found {files}")
    else:
        with tempfile.TemporaryDirectory() as cut:
            shutil.copy(os.path.join(directory, files[0]), cut)
            path = os.path.join(cut, files[0])
            size = os.path.getsize(path)
            with open(path, "r+b") as f:
                f.truncate(size - 7)  # into the last record's payload
            truncated = load(cut)
            last_tag = "test/loss" if "test/loss" in want else "train/samples_per_s"
            for tag, points in want.items():
                keep = points[:-1] if tag == last_tag else points
                if not same(truncated.get(tag, []), keep):
                    failures.append(f"after truncation, {tag}: {len(truncated.get(tag, []))} points, "
                                    f"expected {len(keep)}")
            print(f"truncated by 7 bytes: the reader kept every record but the last ({last_tag})")
    for failure in failures:
        print("FAIL:", failure)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
