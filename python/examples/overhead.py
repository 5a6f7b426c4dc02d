"""Where the host time of one training step of `semicrf.torch.log_partition` goes: the step

    semicrf.torch.log_partition(h, lengths, K, transition, duration).sum().backward()

at the canonical shapes (S1-S7), `h` `(B, T, C)` float32, `lengths` a CPU tensor (the fast
path: nothing to copy) or with `--lengths device` on the GPU (one small copy to the host).
The package's stages are timed by wrapping them (the time spent inside each, by the host's
clock, median over the steps, µs): the input checks (`check`, with the lengths' copy to the
host where they are on the device), `Call()`, the engine's arguments (`device_kwargs`, or
`host_kwargs` on the CPU: the device addresses of every tensor, the shared parameters'
included), the native call (which reads the shared parameters back with its input checks'
one copy and writes their gradients into tensors torch allocated), the rest of
`Call.backward` (the output buffers), the `.sum()`, the `.backward()` and, inside it,
`_Eager.backward` and `_weigh`.

Scores, transition and duration are drawn as `device_times` draws them (uniform in [-1, 1];
`--values randn` for normal scores): which kernels run depends on the values' range. On a
GPU the native call is then replayed alone with the same arguments (`--replays` times, inside
one step, so the buffers are alive): its wall-clock time, to set against the Rust API's
`device_times` (crates/semicrf-bench/src/bin/device_times.rs); the whole step by CUDA
events; and the steps back to back, as a training loop runs them (no wait between steps),
by CUDA events over the loop (the median of `--loops` loops): the time a step takes there,
to set against `device_times`' loop of `backward_into_queued` calls. Floors of the same machine: a trivial `torch.autograd.Function` forward + sum +
backward, and `x.sum().backward()`.

    python overhead.py                  # CUDA if available, else the CPU
    python overhead.py --shapes S1 S3 --steps 51
    python overhead.py --lengths device # lengths on the GPU: one small copy per step
"""

import argparse
import statistics
import time
from collections import defaultdict

import torch

import semicrf.torch as st
from semicrf import _native, _torch_api, _torch_ops, _torch_problem

SHAPES = {  # (B, T, K, C), as bench_head.py
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
ap.add_argument("--steps", type=int, default=31)
ap.add_argument("--replays", type=int, default=21, help="replays of the native call alone")
ap.add_argument("--loops", type=int, default=5, help="loops of --steps steps back to back")
ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
ap.add_argument(
    "--lengths",
    choices=["cpu", "device"],
    default="cpu",
    help="where the lengths are: a CPU tensor (no copy) or on the device (one small copy)",
)
ap.add_argument(
    "--values",
    choices=["uniform", "randn"],
    default="uniform",
    help="uniform: scores, transition and duration in [-1, 1], as device_times draws them "
    "(the kernels that run depend on the values' range); randn: as bench_head.py's step",
)
args = ap.parse_args()
dev = torch.device(args.device)
cuda = dev.type == "cuda"

spent = defaultdict(int)  # ns per stage in the current step
replay = {"on": False, "ns": []}


def sync():
    if cuda:
        torch.cuda.synchronize(dev)


def timed(stage, fn, native=False):
    def wrapper(*a, **kw):
        t = time.perf_counter_ns()
        try:
            return fn(*a, **kw)
        finally:
            spent[stage] += time.perf_counter_ns() - t
            if native and replay["on"]:
                replay["on"] = False
                for _ in range(args.replays):
                    sync()
                    t = time.perf_counter_ns()
                    fn(*a, **kw)
                    replay["ns"].append(time.perf_counter_ns() - t)

    return wrapper


def wrap_method(cls, name, stage):
    if hasattr(cls, name):
        f = getattr(cls, name)
        if isinstance(cls.__dict__.get(name), staticmethod):
            setattr(cls, name, staticmethod(timed(stage, f)))
        else:
            setattr(cls, name, timed(stage, f))


_torch_api.check = timed("check", _torch_api.check)
Call = _torch_problem.Call
wrap_method(Call, "__init__", "Call()")
wrap_method(Call, "device_kwargs", "engine arguments")
wrap_method(Call, "host_kwargs", "engine arguments")
wrap_method(Call, "backward", "Call.backward")
for name in ("cuda_backward", "backward"):
    setattr(_native, name, timed("native call", getattr(_native, name), native=True))
wrap_method(_torch_ops._Eager, "forward", "_Eager.forward")
wrap_method(_torch_ops._Eager, "backward", "_Eager.backward")
_torch_ops._weigh = timed("_weigh", _torch_ops._weigh)

ROWS = [
    ("check", "check (device lengths' copy to the host included)"),
    ("Call()", "Call()"),
    ("engine arguments", "device_kwargs / host_kwargs"),
    ("native call", "native call"),
    ("outputs", "rest of Call.backward (output buffers)"),
    ("log_partition", "log_partition(...) whole"),
    ("sum", ".sum()"),
    ("backward", ".backward() whole"),
    ("_Eager.backward", "  _Eager.backward"),
    ("_weigh", "    _weigh"),
    ("host", "step on the host (to .backward()'s return)"),
    ("wall", "step to the device's end (host clock)"),
]


def floors():
    class Trivial(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.sum(-1)

        @staticmethod
        def backward(ctx, g):
            return g.unsqueeze(-1).expand(4, 8)

    x = torch.randn(4, 8, device=dev, requires_grad=True)
    out = {}
    for name, fn in (
        ("trivial autograd.Function fwd+sum+bwd", lambda: Trivial.apply(x).sum().backward()),
        ("x.sum().backward()", lambda: x.sum().backward()),
    ):
        ns = []
        for _ in range(args.steps + 3):
            sync()
            t = time.perf_counter_ns()
            fn()
            ns.append(time.perf_counter_ns() - t)
        out[name] = statistics.median(ns[3:]) / 1e3
    return out


print(f"device {dev}" + (f" ({torch.cuda.get_device_name(dev)})" if cuda else ""))
print(f"torch {torch.__version__}; lengths on {args.lengths}; medians of {args.steps} steps, µs")
for name, us in floors().items():
    print(f"  floor: {name}: {us:.0f}")
for name in args.shapes:
    b, t, k, c = SHAPES[name]
    torch.manual_seed(0)
    if args.values == "uniform":
        h, tr, dur = (2 * torch.rand(*s, device=dev) - 1 for s in ((b, t, c), (c, c), (k, c)))
    else:
        h, tr, dur = (torch.randn(*s, device=dev) for s in ((b, t, c), (c, c), (k, c)))
        tr, dur = 0.1 * tr, 0.1 * dur
    for x in (h, tr, dur):
        x.requires_grad_()
    lengths = torch.full((b,), t, device=dev if args.lengths == "device" else "cpu")
    per = defaultdict(list)
    events = []
    for i in range(args.steps + 2):
        spent.clear()
        replay["on"] = cuda and i == args.steps + 1  # replays after the timed steps
        sync()
        if cuda:
            a, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
        t0 = time.perf_counter_ns()
        z = st.log_partition(h, lengths, k, tr, dur)
        t1 = time.perf_counter_ns()
        s = z.sum()
        t2 = time.perf_counter_ns()
        s.backward()
        t3 = time.perf_counter_ns()
        if cuda:
            e.record()
        sync()
        t4 = time.perf_counter_ns()
        h.grad = tr.grad = dur.grad = None
        if i < 2 or i == args.steps + 1:  # warm-up, and the step with the replays
            continue
        if cuda:
            events.append(a.elapsed_time(e) * 1e3)
        st_ = dict(spent)
        st_["outputs"] = (
            st_.get("Call.backward", 0) - st_.get("engine arguments", 0) - st_.get("native call", 0)
        )
        st_.update(log_partition=t1 - t0, sum=t2 - t1, backward=t3 - t2, host=t3 - t0, wall=t4 - t0)
        for key, _ in ROWS:
            per[key].append(st_.get(key, 0) / 1e3)
    print(f"{name} (B, T, K, C) = {(b, t, k, c)}")
    for key, label in ROWS:
        print(f"  {label:<62} {statistics.median(per[key]):9.0f}")
    if cuda:
        # A training loop's pace: the steps back to back, no wait between them (the host
        # prepares the next step while the device runs this one), by CUDA events over all;
        # `--loops` such loops, their median (and range: a busy host shows there).
        loops = []
        for _ in range(args.loops):
            sync()
            a, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            for _ in range(args.steps):
                st.log_partition(h, lengths, k, tr, dur).sum().backward()
                h.grad = tr.grad = dur.grad = None
            e.record()
            sync()
            loops.append(a.elapsed_time(e) * 1e3 / args.steps)
        loop = statistics.median(loops)
        label = f"step in a loop of --steps steps (CUDA events / steps, median of {len(loops)})"
        print(f"  {label:<62} {loop:9.0f}  ({min(loops):.0f}-{max(loops):.0f})")
        print(f"  {'step by CUDA events':<62} {statistics.median(events):9.0f}")
        if replay["ns"]:
            alone = statistics.median(replay["ns"]) / 1e3
            print(f"  {'native call alone, replayed (compare: device_times)':<62} {alone:9.0f}")
        replay["ns"] = []
