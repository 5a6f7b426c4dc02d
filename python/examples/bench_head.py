"""Forward+backward of one training step of the head from Python, at the canonical shapes of
the performance notes (S1-S7): semicrf's head against flash-semicrf 0.2.0's (when installed;
its Triton kernels, `backend="streaming"`) on the same inputs, and the bare
`semicrf.torch.log_partition` call. Prints the median of `--runs` steps (CUDA events on a
GPU), and the host<->device copies one step of ours makes, from the torch profiler: none of
them may be as large as the scores.

    python bench_head.py                 # CUDA if available, else the CPU
    python bench_head.py --shapes S1 S4 --runs 31
"""

import argparse
import json
import os
import statistics
import tempfile
import time

import torch

import semicrf.torch as st

SHAPES = {  # (B, T, K, C)
    "S1": (32, 64, 7, 9),
    "S2": (16, 256, 15, 8),
    "S3": (8, 1024, 31, 8),
    "S4": (4, 4096, 63, 8),
    "S5": (1, 16384, 127, 4),
    "S6": (64, 1000, 100, 24),
    "S7": (4, 4450, 200, 6),
}
ap = argparse.ArgumentParser()
ap.add_argument("--shapes", nargs="*", default=list(SHAPES))
ap.add_argument("--runs", type=int, default=21)
ap.add_argument("--flash-runs", type=int, default=3, help="runs of flash-semicrf's slower head")
ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
args = ap.parse_args()
dev = torch.device(args.device)


def timed(fn, runs=None, warm=2):
    """The median time of fn() in ms over `runs` (default --runs) runs, after `warm` warm-up runs."""
    out = []
    for i in range((runs or args.runs) + warm):
        if dev.type == "cuda":
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            b.synchronize()
            ms = a.elapsed_time(b)
        else:
            t = time.perf_counter()
            fn()
            ms = (time.perf_counter() - t) * 1e3
        if i >= warm:
            out.append(ms)
    return statistics.median(out)


def copies(fn):
    """The sizes in bytes of the host<->device copies fn() makes, from the profiler's trace."""
    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=acts) as prof:
        fn()
        torch.cuda.synchronize(dev)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "trace.json")
        prof.export_chrome_trace(path)
        events = json.load(open(path))["traceEvents"]
    return [
        e.get("args", {}).get("bytes", -1)
        for e in events
        if e.get("cat") == "gpu_memcpy" and ("HtoD" in e["name"] or "DtoH" in e["name"])
    ]


for name in args.shapes:
    b, t, k, c = SHAPES[name]
    torch.manual_seed(0)
    hidden = torch.randn(b, t, c, device=dev, requires_grad=True)
    lengths = torch.full((b,), t, device=dev)
    labels = (torch.arange(t, device=dev) // max(1, k // 2) % c).repeat(b, 1)
    ours = st.SemiMarkovCRFHead(num_classes=c, max_duration=k).to(dev)

    def step_ours():
        ours.compute_loss(hidden, lengths, labels).backward()

    tr, dur = ours.transition, ours.duration_bias

    def step_bare():
        st.log_partition(hidden, lengths, k, tr, dur).sum().backward()

    row = f"{name} (B, T, K, C) = {(b, t, k, c)}: ours {timed(step_ours):.3f} ms"
    row += f", log_partition alone {timed(step_bare):.3f} ms"
    try:
        from flash_semicrf import SemiMarkovCRFHead as FlashHead

        flash = FlashHead(num_classes=c, max_duration=k).to(dev)
        with torch.no_grad():
            flash.transition.copy_(ours.transition)

        def step_flash():
            # Its Triton kernels: backend="auto" picks the exact PyTorch backend (edge tensor
            # materialised) whenever that tensor is under 8 GB, much slower at these shapes.
            flash.compute_loss(hidden, lengths, labels, backend="streaming").backward()

        f = timed(step_flash, args.flash_runs, warm=1)
        row += f", flash-semicrf {f:.3f} ms ({f / timed(step_ours):.0f}x)"
    except ImportError:
        row += ", flash-semicrf not installed"
    if dev.type == "cuda":
        sizes = copies(step_ours)
        row += (
            f"; host<->device copies in one step: {len(sizes)}, largest {max(sizes, default=0)} B"
        )
        row += f" (scores: {b * t * c * 4} B)"
    print(row, flush=True)
