"""flash-semicrf on a problem written by `export_problem`: its PyTorch CPU reference, or with
`--device cuda` its Triton kernels on the GPU.

    python run_flash.py --problem P.json --ours O.json --out results/flash_S2.json \
        [--repeats 5] [--warmup 1] [--threads 2] [--device cuda --dtype float32]

With `--device cuda` the inputs are moved to the GPU in `--dtype` before timing, each run is
timed between synchronisations, `use_triton=True`, and the peak of
`torch.cuda.max_memory_allocated` over the timed runs is recorded.

Runs `flash_semicrf.streaming.semi_crf_streaming_forward` (on CPU it dispatches to the pure
PyTorch reference, `semi_crf_streaming_forward_pytorch`, and its autograd function), f64, on
`cum_scores` = the f64 prefix sums of our scores (not zero-centred: centring would change the
model), our transition and duration scores. Times the forward under `torch.no_grad()` and
forward+backward (autograd, gradients for cum_scores, transition and duration), median of
`repeats` runs after `warmup` untimed ones; compares log Z, the position marginals (the
gradient with respect to scores) and the duration gradient with ours.
"""

import sys

import torch

import common


def main():
    a, p, ours = common.setup(repeats=5, warmup=1)

    import flash_semicrf
    from flash_semicrf.streaming import semi_crf_streaming_forward

    B, T, C = p["scores"].shape
    K = p["K"]
    dev, dt = a.device, getattr(torch, a.dtype)
    gpu = dev.startswith("cuda")
    cum = torch.zeros(B, T + 1, C, dtype=torch.float64)
    cum[:, 1:, :] = torch.cumsum(p["scores"], dim=1)
    cum = cum.to(dev, dt)
    for key in ("transition", "duration", "lengths"):
        p[key] = p[key].to(dev, dt if key != "lengths" else torch.long)
    res = common.Result(
        a.out,
        peer="flash-semicrf",
        version=getattr(flash_semicrf, "__version__", "unknown"),
        implementation=(
            f"streaming Triton kernels (semi_crf_streaming_forward, use_triton=True) on "
            f"{torch.cuda.get_device_name() if gpu else ''}, {a.dtype}"
            if gpu
            else "streaming PyTorch CPU reference (semi_crf_streaming_forward, use_triton=False), f64"
        ),
        device=dev,
        torch=torch.__version__,
        threads=a.threads,
        shape_id=ours["shape_id"],
        shape=[B, T, K, C],
        repeats=a.repeats,
        warmup=a.warmup,
    )

    def fwd():
        with torch.no_grad():
            return semi_crf_streaming_forward(
                cum, p["transition"], p["duration"], p["lengths"], K, use_triton=gpu
            )

    if gpu:
        torch.cuda.reset_peak_memory_stats()
    log_z, runs = common.timed(fwd, a.repeats, a.warmup, dev)
    if gpu:
        res.set(forward_peak_bytes=torch.cuda.max_memory_allocated())
    abs_err, rel_err = common.log_z_errors(log_z, ours["log_z"])
    res.set(
        forward_ms=common.median(runs),
        forward_runs_ms=runs,
        log_z=log_z.tolist(),
        log_z_max_abs_err=abs_err,
        log_z_max_rel_err=rel_err,
        status="forward done",
    )
    print(f"flash-semicrf forward: {common.median(runs):.1f} ms, |dlogZ| {abs_err:.2e}", flush=True)
    if a.skip_backward:
        res.set(status="ok")
        return

    def fwd_bwd():
        c = cum.clone().requires_grad_(True)
        tr = p["transition"].clone().requires_grad_(True)
        du = p["duration"].clone().requires_grad_(True)
        z = semi_crf_streaming_forward(c, tr, du, p["lengths"], K, use_triton=gpu)
        z.sum().backward()
        return c.grad, du.grad

    if gpu:
        torch.cuda.reset_peak_memory_stats()
    (g_cum, g_dur), runs = common.timed(fwd_bwd, a.repeats, a.warmup, dev)
    fields = dict(backward_ms=common.median(runs), backward_runs_ms=runs, status="ok")
    if gpu:
        fields["backward_peak_bytes"] = torch.cuda.max_memory_allocated()
        g_cum, g_dur = g_cum.double().cpu(), g_dur.double().cpu()
    if ours.get("grad_scores") is not None:
        fields["grad_scores_max_abs_err"] = common.max_abs(
            common.position_marginals_from_cum_grad(g_cum), ours["grad_scores"]
        )
    if ours.get("grad_duration") is not None:
        fields["grad_duration_max_abs_err"] = common.max_abs(g_dur, ours["grad_duration"])
    res.set(**fields)
    print(
        f"flash-semicrf forward+backward: {common.median(runs):.1f} ms, "
        f"|dgrad scores| {fields.get('grad_scores_max_abs_err', float('nan')):.2e}",
        flush=True,
    )


if __name__ == "__main__":
    sys.exit(common.guarded(main))
