"""torch-struct 0.5's `SemiMarkov.logpartition` on a problem written by `export_problem`.

    python run_torch_struct.py --problem P.json --ours O.json --out results/torch_struct_S1.json \
        [--repeats 3] [--warmup 0] [--threads 2]

torch-struct takes edge potentials `(B, N-1, K', C, C)` = `(B, T, K+1, C, C)`, destination
label first, with duration index 0 unused (its durations are 1..K'-1 = 1..K). We build
`edge[b, s, d, j, i] = sum_{t=s}^{s+d-1} scores[b, t, j] + duration[d-1, j] + transition[i, j]`
for `s + d <= T` and a large negative finite value (-1e9) elsewhere (a `-inf` gives NaN
gradients in its log semiring). Its first segment follows a virtual start (every source `i`
with weight one), as flash-semicrf's. PyPI's 0.5 only ships the binary-tree algorithm:
`O(T·K²·C²)` memory per log-step, very slow beyond S1. Times the forward under
`torch.no_grad()` and forward+backward (autograd on the edges), f64; compares log Z and the
position marginals (summed from the edge marginals) with ours.
"""

import sys

import torch

import common

MASK = -1e9


def edges_of(p):
    s, tr, du = p["scores"], p["transition"], p["duration"]
    B, T, C = s.shape
    K = p["K"]
    cum = torch.zeros(B, T + 1, C, dtype=torch.float64)
    cum[:, 1:, :] = torch.cumsum(s, dim=1)
    e = torch.full((B, T, K + 1, C, C), MASK, dtype=torch.float64)
    for d in range(1, K + 1):
        if d > T:
            break
        seg = cum[:, d:, :] - cum[:, : T + 1 - d, :] + du[d - 1]  # (B, T+1-d, C) starts 0..T-d
        e[:, : T + 1 - d, d, :, :] = seg.unsqueeze(-1) + tr.t().unsqueeze(0).unsqueeze(0)
    return e


def position_marginals(m, K):
    """(B, T, K+1, C, C) edge marginals -> (B, T, C) P(position t has label c)."""
    B, T = m.shape[:2]
    seg = m.sum(-1)  # (B, T, K+1, C): segment (s, d, j)
    pos = torch.zeros(B, T, seg.shape[-1], dtype=torch.float64)
    for d in range(1, K + 1):
        for o in range(min(d, T)):
            pos[:, o:, :] += seg[:, : T - o, d, :]
    return pos


def main():
    a, p, ours = common.setup(repeats=3, warmup=0)

    from torch_struct import LogSemiring, SemiMarkov

    B, T, C = p["scores"].shape
    K = p["K"]
    edges = edges_of(p)
    lengths = torch.full((B,), T + 1, dtype=torch.long)  # its N = T + 1 boundaries
    try:
        from importlib.metadata import version

        ver = version("torch-struct")
    except Exception:  # noqa: BLE001
        ver = "unknown"
    res = common.Result(
        a.out,
        peer="torch-struct",
        version=ver,
        implementation="SemiMarkov(LogSemiring).logpartition (binary tree), f64",
        torch=torch.__version__,
        threads=a.threads,
        shape_id=ours["shape_id"],
        shape=[B, T, K, C],
        repeats=a.repeats,
        warmup=a.warmup,
    )
    model = SemiMarkov(LogSemiring)

    def fwd():
        with torch.no_grad():
            e = edges.clone()
            v, _ = model.logpartition(e, lengths=lengths)
            return v.detach().reshape(-1)

    log_z, runs = common.timed(fwd, a.repeats, a.warmup)
    abs_err, rel_err = common.log_z_errors(log_z, ours["log_z"])
    res.set(
        forward_ms=common.median(runs),
        forward_runs_ms=runs,
        log_z=log_z.tolist(),
        log_z_max_abs_err=abs_err,
        log_z_max_rel_err=rel_err,
        status="forward done",
    )
    print(f"torch-struct forward: {common.median(runs):.1f} ms, |dlogZ| {abs_err:.2e}", flush=True)
    if a.skip_backward:
        res.set(status="ok")
        return

    def fwd_bwd():
        e = edges.clone().requires_grad_(True)
        v, _ = model.logpartition(e, lengths=lengths)
        v.sum().backward()
        return e.grad

    g, runs = common.timed(fwd_bwd, a.repeats, a.warmup)
    fields = dict(backward_ms=common.median(runs), backward_runs_ms=runs, status="ok")
    if ours.get("grad_scores") is not None:
        fields["grad_scores_max_abs_err"] = common.max_abs(
            position_marginals(g, K), ours["grad_scores"]
        )
    res.set(**fields)
    print(
        f"torch-struct forward+backward: {common.median(runs):.1f} ms, "
        f"|dgrad scores| {fields.get('grad_scores_max_abs_err', float('nan')):.2e}",
        flush=True,
    )


if __name__ == "__main__":
    sys.exit(common.guarded(main))
