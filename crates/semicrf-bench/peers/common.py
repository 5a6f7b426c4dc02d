"""Shared helpers of the peer harness: loading a problem written by `export_problem`,
timing, agreement errors and result files.

A problem file is the interchange JSON of the model page, section 10
(crates/semicrf-core/src/model.md): `scores` (B, T, C), `transition` (C, C), `duration` (K, C),
`start` (C), `lengths`, `max_duration`; values are f32 inputs widened exactly to f64. Peers run
in f64 on those values.

Convention (the model page, section 3): both peers start a sequence from a *virtual start*: the
first segment pays `transition[i, c]` summed (log-sum-exp) over every source label `i`. Our problems
carry `start[c] = logsumexp_i transition[i, c]` (rounded to f32), which is the same model up
to that rounding (a relative difference of ~1e-7 in log Z at most).
"""

import argparse
import json
import os
import statistics
import time

import torch


def load_problem(path):
    with open(path) as f:
        p = json.load(f)
    dd = torch.float64
    scores = torch.tensor(p["scores"], dtype=dd)
    transition = torch.tensor(p["transition"], dtype=dd)
    duration = torch.tensor(p["duration"], dtype=dd)
    lengths = torch.tensor(p["lengths"], dtype=torch.long)
    return {
        "scores": scores,
        "transition": transition,
        "duration": duration,
        "lengths": lengths,
        "K": int(p["max_duration"]),
    }


def setup(repeats, warmup):
    """The command line every peer script takes, with its defaults for `--repeats` and
    `--warmup`; sets torch's thread count. Returns (args, problem, our results)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--problem", required=True)
    ap.add_argument("--ours", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--repeats", type=int, default=repeats)
    ap.add_argument("--warmup", type=int, default=warmup)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--skip-backward", action="store_true")
    ap.add_argument("--device", default="cpu", help="cpu, or cuda for the peer's GPU kernels")
    ap.add_argument("--dtype", default="float64", choices=["float32", "float64"])
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    return a, load_problem(a.problem), load_ours(a.ours)


def load_ours(path):
    with open(path) as f:
        return json.load(f)


def timed(fn, repeats, warmup, device="cpu"):
    """Runs fn warmup times untimed, then repeats times; returns (last result, runs in ms).
    On a GPU each run is timed from a synchronised start to a synchronised end, so it counts
    all the kernels the call launched."""
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    out = None
    for _ in range(warmup):
        out = fn()
    sync()
    runs = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        sync()
        runs.append((time.perf_counter() - t0) * 1e3)
    return out, runs


def max_abs(a, b):
    a = torch.as_tensor(a, dtype=torch.float64).reshape(-1)
    b = torch.as_tensor(b, dtype=torch.float64).reshape(-1)
    return float((a - b).abs().max())


def log_z_errors(theirs, ours):
    """Max absolute error and max error relative to max(1, |log Z|)."""
    t = torch.as_tensor(theirs).detach().cpu().to(torch.float64).reshape(-1)
    o = torch.as_tensor(ours, dtype=torch.float64).reshape(-1)
    abs_err = (t - o).abs()
    rel = abs_err / torch.clamp(o.abs(), min=1.0)
    return float(abs_err.max()), float(rel.max())


class Result:
    """A result file written after every phase, so a run killed by a timeout keeps what it
    finished."""

    def __init__(self, path, **fields):
        self.path = path
        self.doc = dict(fields)
        self.doc["status"] = "running"
        self.doc["started_utc"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        self.doc["loadavg_1min_at_start"] = os.getloadavg()[0]
        self.save()

    def set(self, **fields):
        self.doc.update(fields)
        self.doc["loadavg_1min_last"] = os.getloadavg()[0]
        self.save()

    def save(self):
        os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(self.doc, f, indent=1)
            f.write("\n")
        os.replace(tmp, self.path)


def median(xs):
    return statistics.median(xs) if xs else None


def position_marginals_from_cum_grad(grad_cum):
    """d/d scores[t] of a function of cum[u] = sum_{s<u} scores[s]: sum over u > t."""
    g = grad_cum[:, 1:, :]
    return torch.flip(torch.cumsum(torch.flip(g, [1]), 1), [1])


def guarded(main):
    """Runs main(), recording an exception (out of memory, say) in the result file."""
    import sys

    out = sys.argv[sys.argv.index("--out") + 1] if "--out" in sys.argv else None
    try:
        return main()
    except Exception as e:  # noqa: BLE001
        if out:
            doc = json.load(open(out)) if os.path.exists(out) else {}
            phase = "backward" if "forward_ms" in doc else "forward"
            doc["status"] = f"error during {phase}: {type(e).__name__}: {str(e)[:300]}"
            json.dump(doc, open(out, "w"), indent=1)
        print(f"error: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
