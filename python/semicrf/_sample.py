"""Posterior samples and partially labelled sequences: `semicrf.sample`, the `partial_labels=`
arguments of `log_partition` and `nll` (numpy and `semicrf.torch`), and `semicrf.torch.sample`.

A partial annotation `partial_labels` `(B, T)` gives each position a label index or -1
(unknown); entries past a sequence's length are ignored. A segmentation agrees with it when
every annotated position lies in a segment of its label. `log Z_partial` is log Z over the
agreeing segmentations (-inf where none has a finite score) and the partial NLL
`log Z - log Z_partial` (+inf there; a backward pass through such a sequence raises
ValueError: its gradients are undefined). See the model page, sections 12 and 13.
"""

from __future__ import annotations

from typing import Any, List, NamedTuple, Optional, Tuple

import numpy as np

from . import _native

Segmentation = List[Tuple[int, int, int]]


def labels_list(partial_labels: Any) -> list:
    """`partial_labels` as nested lists of ints for the native module (integer dtypes only)."""
    a = np.asarray(partial_labels)
    if a.dtype.kind not in "iu":
        raise TypeError(f"`partial_labels` must be integers, not {a.dtype}")
    if a.ndim != 2:
        raise ValueError(f"`partial_labels` must be a (B, T) array, got shape {a.shape}")
    return a.tolist()


def check_n(n: Any) -> int:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
        raise TypeError(f"`n` must be a non-negative int, got {n!r}")
    return int(n)


def sample(
    scores=None,
    lengths=None,
    max_duration: Optional[int] = None,
    *,
    n: int,
    seed: int = 0,
    partial_labels=None,
    transition=None,
    duration=None,
    start=None,
    end=None,
    begin_boundary=None,
    end_boundary=None,
    edges=None,
    backend: str = "auto",
    device: str = "cpu",
    memory_budget=None,
) -> List[List[Segmentation]]:
    """`n` exact, independent samples per sequence from the posterior over segmentations
    (forward filtering, backward sampling): `samples[b][i]`, a list of
    `(start, duration, label)`. With `partial_labels` `(B, T)` (a label or -1 per position),
    from the posterior restricted to the segmentations that agree with them.

    Reproducible: the same `seed` gives the same samples on any number of threads (sample `i`
    of sequence `b` has its own generator, keyed by `(seed, b, i)`). The CPU engines sample,
    and so does `device="cuda"` (the CUDA streaming engine: the same samples as the CPU
    streaming engine's for the same seed, except where rounding decides between two choices);
    a sequence without a finite segmentation raises ValueError.

    >>> import numpy as np, semicrf
    >>> s = semicrf.sample(np.zeros((1, 3, 2)), [3], 3, n=2, seed=1)
    >>> len(s[0]), sum(d for _, d, _ in s[0][0])
    (2, 3)
    """
    from ._numpy import _kwargs

    floats = dict(transition=transition, duration=duration, start=start, end=end,
                  begin_boundary=begin_boundary, end_boundary=end_boundary, edges=edges)
    kw = _kwargs(scores, lengths, max_duration, backend, device, memory_budget, floats)
    if partial_labels is not None:
        kw["partial_labels"] = labels_list(partial_labels)
    return _native.sample(n=check_n(n), seed=int(seed), **kw)


# -- torch ----------------------------------------------------------------------------------


class Samples(NamedTuple):
    """Posterior samples as padded tensors, on the input's device."""

    #: `(B, n, S, 3)` int64: rows `(start, duration, label)` of sample `i` of sequence `b`,
    #: in order; rows past `counts[b, i]` are -1.
    segments: Any
    #: `(B, n)` int64: the number of segments of each sample.
    counts: Any


def padded_samples(samples: List[List[Segmentation]], n: int, device) -> Samples:
    """Native samples (per sequence, `n` lists of triples) as padded tensors."""
    import torch

    b = len(samples)
    counts = np.zeros((b, n), dtype=np.int64)
    for i, per in enumerate(samples):
        for j, y in enumerate(per):
            counts[i, j] = len(y)
    s_max = int(counts.max(initial=0))
    seg = np.full((b, n, s_max, 3), -1, dtype=np.int64)
    for i, per in enumerate(samples):
        for j, y in enumerate(per):
            if y:
                seg[i, j, : len(y)] = np.asarray(y, dtype=np.int64)
    return Samples(torch.from_numpy(seg).to(device), torch.from_numpy(counts).to(device))


def restrict_torch(inputs: dict, lengths, partial_labels) -> dict:
    """The inputs of the problem restricted to the segmentations that agree with
    `partial_labels`: `-inf` scores at every annotated position for every other label (or
    `-inf` edges for every segment covering such a position). Differentiable: the kept
    entries pass their gradient through, the replaced ones get none."""
    import torch

    main = inputs["scores"] if inputs.get("scores") is not None else inputs["edges"]
    b, t, c = main.shape[0], main.shape[1], main.shape[-1]
    labels = torch.as_tensor(partial_labels, device=main.device)
    if labels.dtype.is_floating_point or labels.dtype == torch.bool:
        raise TypeError(f"partial_labels: must be integers, not {labels.dtype}")
    if tuple(labels.shape) != (b, t):
        raise ValueError(
            f"partial_labels: shape {tuple(labels.shape)}, expected (B, T) = {(b, t)}"
        )
    labels = labels.long()
    within = torch.arange(t, device=main.device)[None, :] < lengths.to(main.device)[:, None]
    bad = within & ((labels < -1) | (labels >= c))
    if bool(bad.any()):
        bi, ti = (int(x) for x in bad.nonzero()[0])
        raise ValueError(
            f"partial_labels: sequence {bi}, position {ti}: {int(labels[bi, ti])} is "
            f"neither -1 (unknown) nor a label in 0..{c}"
        )
    labelled = within & (labels >= 0)
    cols = torch.arange(c, device=main.device)
    # (B, T, C): label c is forbidden at t.
    forbidden = labelled[..., None] & (labels[..., None] != cols)
    out = dict(inputs)
    if inputs.get("scores") is not None:
        s = inputs["scores"]
        out["scores"] = torch.where(forbidden, torch.full_like(s, float("-inf")), s)
    else:
        e = inputs["edges"]
        k = e.shape[2]
        # cs[b, u, c]: forbidden positions of label c before u; a segment [s, s + d) covers
        # one when cs[s + d] - cs[s] > 0.
        cs = torch.zeros(b, t + 1, c, dtype=torch.long, device=e.device)
        cs[:, 1:] = torch.cumsum(forbidden.long(), dim=1)
        starts = torch.arange(t, device=e.device)
        ends = (starts[:, None] + torch.arange(1, k + 1, device=e.device)[None, :]).clamp(max=t)
        covered = cs[:, ends] - cs[:, starts][:, :, None]  # (B, T, K, C)
        mask = (covered > 0)[..., None].expand(e.shape)
        out["edges"] = torch.where(mask, torch.full_like(e, float("-inf")), e)
    return out


def partial_nll_torch(log_z, log_z_partial):
    """`log Z - log Z_partial`, +inf where `log Z_partial = -inf`."""
    import torch

    return torch.where(
        torch.isneginf(log_z_partial), float("inf"), log_z - log_z_partial
    )


__all__ = ["Samples", "sample"]



def torch_sample(
    scores=None,
    lengths=None,
    max_duration: Optional[int] = None,
    transition=None,
    duration=None,
    start=None,
    end=None,
    begin_boundary=None,
    end_boundary=None,
    *,
    n: int,
    seed: int = 0,
    partial_labels=None,
    edges=None,
    backend: str = "auto",
    memory_budget=None,
) -> Samples:
    """`n` exact, independent samples per sequence from the posterior over segmentations,
    as padded tensors on the input's device (`Samples`: `segments (B, n, S, 3)` rows
    `(start, duration, label)`, -1 past `counts (B, n)`). With `partial_labels` `(B, T)`,
    from the posterior restricted to the agreeing segmentations. Not differentiable.

    CUDA tensors (structured input) run on the tensors' GPU, the CUDA streaming engine (the
    inputs pass through the host; the samples are those of the CPU streaming engine for the
    same seed, except where rounding decides between two choices); CPU tensors and edge input
    on the CPU engines. The same `seed` gives the same samples on any number of threads.
    ValueError for a sequence without a finite segmentation.

    >>> import torch, semicrf.torch as st
    >>> s = st.sample(torch.zeros(2, 5, 3), torch.tensor([5, 3]), 2, n=4, seed=0)
    >>> s.segments.shape[:2], s.counts.shape
    (torch.Size([2, 4]), torch.Size([2, 4]))
    """
    import torch

    from ._torch_api import _problem
    from ._torch_problem import Call

    inputs, lengths, k = _problem(
        scores,
        lengths,
        max_duration,
        edges,
        transition=transition,
        duration=duration,
        start=start,
        end=end,
        begin_boundary=begin_boundary,
        end_boundary=end_boundary,
    )
    main = scores if scores is not None else edges
    host = {name: (None if t is None else t.detach().cpu()) for name, t in inputs.items()}
    kw = Call(host, lengths.cpu(), k, backend, memory_budget).host_kwargs()
    if main.is_cuda and edges is None:
        kw["device"] = f"cuda:{main.device.index or 0}"
    if partial_labels is not None:
        kw["partial_labels"] = labels_list(torch.as_tensor(partial_labels).cpu().numpy())
    with torch.no_grad():
        samples = _native.sample(n=check_n(n), seed=int(seed), **kw)
    return padded_samples(samples, check_n(n), main.device)
