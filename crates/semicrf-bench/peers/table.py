"""Prints the side-by-side table of results/*.json: ours vs flash-semicrf's CPU reference vs
torch-struct 0.5, forward and forward+backward in ms, the peers' time over ours, and how far
their log Z and position marginals are from ours.

    python table.py [--results DIR] [--json OUT]
    python table.py --gpu [--results DIR/gpu]

`--gpu` prints the GPU comparison of `run_gpu.sh` instead: ours on every CPU core, ours on the
GPU and flash-semicrf's Triton kernels, with the ratios that matter (CPU / CUDA, flash / CUDA)
and the peak GPU memory each allocated (ours: the bytes a forward+backward call allocates,
`CudaEngine::measure_memory`; flash-semicrf: `torch.cuda.max_memory_allocated`).
"""

import argparse
import glob
import json
import os
import re

HERE = os.path.dirname(os.path.abspath(__file__))


def load(d, prefix):
    out = {}
    for p in glob.glob(os.path.join(d, f"{prefix}_S*.json")):
        m = re.search(r"_(S\d+)\.json$", p)
        if m:
            with open(p) as f:
                out[m.group(1)] = json.load(f)
    return out


def ms(x):
    if x is None:
        return "—"
    return f"{x:.3g}" if x < 10 else f"{x:,.0f}"


def ratio(a, b):
    return f"{a / b:,.0f}×" if a is not None and b else "—"


def cell(peer, key, ours_ms):
    if peer is None:
        return "not run", "—"
    v = peer.get(key)
    if v is None:
        st = peer.get("status", "")
        if "timeout" in st:
            return f"> {peer['timeout_s']} s", "—"
        m = re.search(r"allocate (\d+) bytes", st)
        if m:
            return f"out of memory (asks {int(m.group(1)) / 1e9:.1f} GB)", "—"
        return ("error" if st.startswith("error") else st or "—"), "—"
    return ms(v), ratio(v, ours_ms)


def gpu_table(d):
    cpu, cuda, flash = load(d, "ours"), load(d, "ours_cuda"), load(d, "flash")
    print(
        "| shape | (B, T, K, C) | CPU fwd | CPU fwd+bwd | CUDA fwd | CUDA fwd+bwd "
        "| CPU / CUDA (fwd+bwd) | flash fwd | flash fwd+bwd | flash / CUDA (fwd+bwd) "
        "| CUDA MB (fwd+bwd) | flash MB (fwd+bwd) | flash max rel ΔlogZ | flash max abs Δ marginals |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|")
    for s in sorted(cuda, key=lambda s: int(s[1:])):
        c, g, f = cpu.get(s, {}), cuda[s], flash.get(s)
        ff, _ = cell(f, "forward_ms", g["forward_ms"])
        fb, fbr = cell(f, "backward_ms", g["backward_ms"])
        def mb(doc):
            v = None if doc is None else doc.get("backward_peak_bytes")
            return "—" if v is None else f"{v / 1e6:.3g}" if v < 1e7 else f"{v / 1e6:,.0f}"

        peak = f"{mb(g)} | {mb(f)}"

        def err(key):
            return "—" if f is None or f.get(key) is None else f"{f[key]:.1e}"

        print(
            f"| {s} | ({', '.join(map(str, g['shape']))}) | {ms(c.get('forward_ms'))} | "
            f"{ms(c.get('backward_ms'))} | {ms(g['forward_ms'])} | {ms(g['backward_ms'])} | "
            f"{c['backward_ms'] / g['backward_ms']:.2f}× | {ff} | {fb} | {fbr} | {peak} | "
            f"{err('log_z_max_rel_err')} | {err('grad_scores_max_abs_err')} |"
            if c
            else f"| {s} | — |"
        )
    threads = next(iter(cpu.values()), {}).get("threads")
    print(
        f"\nms, medians; CPU = our streaming engine on {threads} threads; CUDA = ours, whole "
        "calls (copies in and out included); flash = flash-semicrf 0.2.0 Triton; f32 inputs."
    )


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--results", default=os.path.join(HERE, "results"))
    ap.add_argument("--json")
    ap.add_argument("--gpu", action="store_true")
    a = ap.parse_args()
    if a.gpu:
        d = a.results if a.results != os.path.join(HERE, "results") else os.path.join(HERE, "results", "gpu")
        return gpu_table(d)
    ours, flash, ts = load(a.results, "ours"), load(a.results, "flash"), load(a.results, "torch_struct")
    shapes = sorted(ours, key=lambda s: int(s[1:]))
    print(
        "| shape | (B, T, K, C) | ours fwd | ours fwd+bwd | flash fwd | × | flash fwd+bwd | × "
        "| torch-struct fwd | × | torch-struct fwd+bwd | × | max rel ΔlogZ (flash / ts) "
        "| max abs Δ marginals (flash / ts) |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|")
    rows = []
    for s in shapes:
        o = ours[s]
        f, t = flash.get(s), ts.get(s)
        ff, ffr = cell(f, "forward_ms", o["forward_ms"])
        fb, fbr = cell(f, "backward_ms", o["backward_ms"])
        tf, tfr = cell(t, "forward_ms", o["forward_ms"])
        tb, tbr = cell(t, "backward_ms", o["backward_ms"])

        def err(peer, key):
            return "—" if peer is None or peer.get(key) is None else f"{peer[key]:.1e}"

        print(
            f"| {s} | ({', '.join(map(str, o['shape']))}) | {ms(o['forward_ms'])} | "
            f"{ms(o['backward_ms'])} | {ff} | {ffr} | {fb} | {fbr} | {tf} | {tfr} | {tb} | {tbr} | "
            f"{err(f, 'log_z_max_rel_err')} / {err(t, 'log_z_max_rel_err')} | "
            f"{err(f, 'grad_scores_max_abs_err')} / {err(t, 'grad_scores_max_abs_err')} |"
        )
        rows.append({"shape": s, "ours": o, "flash": f, "torch_struct": t})
    print(
        "\nms, median of runs, 2 threads each; × = peer time / ours. Ours: f32 inputs; "
        "peers: f64 on the same values."
    )
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(rows, fh, indent=1)


if __name__ == "__main__":
    main()
