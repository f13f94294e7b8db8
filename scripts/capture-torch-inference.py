"""Captures torch.profiler traces of CPU inference passes (memory events, one ProfilerStep per pass), the
way the shared training traces were captured: torch.profiler.profile(profile_memory=True), one thread,
after warm-up passes. Usage: python3 scripts/capture-torch-inference.py OUTDIR [model ...]
Models: resnet18, mobilenet_v2, squeezenet, transformer, gru. Needs python3-torch (and python3-torchvision
for the vision models).

Debian's torch 1.13 has no libkineto, and its export_chrome_trace() drops the [memory] events, so the trace
is written from the profiler's event tree instead: [memory] instant events (Addr, Bytes, Total Allocated,
Device Type) and the ProfilerStep#k spans that mark the passes."""
import gzip
import json
import os
import sys

if __name__ == "__main__" and any(arg in ("-h", "--help") for arg in sys.argv[1:]):
    print(__doc__)
    sys.exit(0)

import torch  # noqa: E402 (after --help, which needs no torch)
from torch.profiler import ProfilerActivity, profile, schedule


def vision(name, batch):
    import torchvision

    model = getattr(torchvision.models, name)()
    return model, torch.randn(batch, 3, 224, 224)


def transformer():
    layer = torch.nn.TransformerEncoderLayer(d_model=256, nhead=4, dim_feedforward=1024, batch_first=True)
    model = torch.nn.TransformerEncoder(layer, num_layers=4, enable_nested_tensor=False)
    return model, torch.randn(4, 96, 256)


def gru():
    return torch.nn.GRU(input_size=128, hidden_size=256, num_layers=2, batch_first=True), torch.randn(8, 64, 128)


MODELS = {
    "resnet18": lambda: vision("resnet18", 4),
    "mobilenet_v2": lambda: vision("mobilenet_v2", 4),
    "squeezenet": lambda: vision("squeezenet1_1", 4),
    "transformer": transformer,
    "gru": gru,
}


def capture(name, out_dir):
    torch.manual_seed(0)
    model, x = MODELS[name]()
    model.eval()
    with torch.no_grad():
        for _ in range(2):
            model(x)
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True,
                     schedule=schedule(wait=0, warmup=1, active=2, repeat=1)) as prof:
            for _ in range(3):
                model(x)
                prof.step()
    events = []
    stack = list(prof.profiler.kineto_results.experimental_event_tree())
    while stack:
        node = stack.pop()
        stack.extend(node.children)
        us = node.start_time_ns / 1000.0
        if node.name == "[memory]":
            f = node.extra_fields
            cpu = f.device.type == "cpu"
            events.append({"name": "[memory]", "ph": "i", "s": "t", "pid": 1, "tid": 1, "ts": us,
                           "args": {"Device Type": 0 if cpu else 1, "Device Id": -1 if cpu else f.device.index,
                                    "Addr": f.ptr, "Bytes": f.alloc_size, "Total Allocated": f.total_allocated}})
        elif node.name.startswith("ProfilerStep#"):
            events.append({"name": node.name, "ph": "X", "cat": "user_annotation", "pid": 1, "tid": 1, "ts": us,
                           "dur": node.duration_time_ns / 1000.0})
    events.sort(key=lambda e: e["ts"])
    path = os.path.join(out_dir, f"{name}_infer.json.gz")
    with gzip.open(path, "wt") as out:
        json.dump({"captureInfo": {"workload": f"{name}_infer", "torch": torch.__version__, "threads": 1},
                   "traceEvents": events}, out)
    print(path)


if __name__ == "__main__":
    torch.set_num_threads(1)
    out = sys.argv[1] if len(sys.argv) > 1 else "."
    os.makedirs(out, exist_ok=True)
    for model_name in sys.argv[2:] or list(MODELS):
        capture(model_name, out)
