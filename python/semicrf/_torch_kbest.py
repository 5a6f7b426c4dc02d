"""k-best and posterior decoding on tensors: `semicrf.torch.kbest`, `posterior_decode`."""

from __future__ import annotations

from typing import NamedTuple, Optional

import numpy as np
import torch
from torch import Tensor

from . import _native
from . import _torch_gold as gold_mod
from ._torch_api import Viterbi, _problem
from ._torch_problem import FLOAT_NAMES, Call

__all__ = ["KBest", "kbest", "posterior_decode"]


class KBest(NamedTuple):
    """The k best segmentations of every sequence, best first, as padded tensors on the
    input's device (shapes depend on the inputs' shapes and `k` only)."""

    #: `(B, k)` the scores, descending; `-inf` past `counts[b]`.
    scores: Tensor
    #: `(B, k, T, 3)` int64 rows `(start, duration, label)` in order; rows past
    #: `num_segments[b, n]` are -1.
    segments: Tensor
    #: `(B, k)` int64: the number of segments of each listed segmentation (0 past `counts`).
    num_segments: Tensor
    #: `(B,)` int64: how many segmentations are listed (fewer than k where fewer have a
    #: finite score).
    counts: Tensor


@torch.no_grad()
def kbest(
    scores: Optional[Tensor] = None,
    lengths=None,
    max_duration: Optional[int] = None,
    transition: Optional[Tensor] = None,
    duration: Optional[Tensor] = None,
    start: Optional[Tensor] = None,
    end: Optional[Tensor] = None,
    begin_boundary: Optional[Tensor] = None,
    end_boundary: Optional[Tensor] = None,
    *,
    k: int,
    edges: Optional[Tensor] = None,
    backend: str = "auto",
    memory_budget=None,
) -> KBest:
    """The `k` highest-scoring distinct segmentations of every sequence (see `KBest`).

    Ties (exactly equal scores) compare the segments from the last one backwards, the
    smaller label, then the smaller duration, so the first of each list is `viterbi`'s.
    CUDA tensors (structured input) run on the tensors' GPU, the CUDA streaming engine
    (`k` up to 1024; the inputs pass through the host, as the lists come back through it);
    CPU tensors and edge input on the CPU engines. The lists are the same on every engine.
    """
    inputs, lengths, kk = _problem(
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
    device = (scores if scores is not None else edges).device
    host = {n: (t.detach().cpu() if t is not None else None) for n, t in inputs.items()}
    call = Call(host, lengths, kk, backend, memory_budget)
    kw = call.host_kwargs()
    if device.type == "cuda" and edges is None:
        kw["device"] = f"cuda:{device.index or 0}"
    s, seg, lens, counts = _native.kbest(k=k, **kw)
    return KBest(
        torch.from_numpy(np.asarray(s)).to(device, call.dtype),
        torch.from_numpy(np.asarray(seg)).to(device),
        torch.from_numpy(np.asarray(lens)).to(device),
        torch.from_numpy(np.asarray(counts)).to(device),
    )


@torch.no_grad()
def posterior_decode(
    scores: Optional[Tensor] = None,
    lengths=None,
    max_duration: Optional[int] = None,
    transition: Optional[Tensor] = None,
    duration: Optional[Tensor] = None,
    start: Optional[Tensor] = None,
    end: Optional[Tensor] = None,
    begin_boundary: Optional[Tensor] = None,
    end_boundary: Optional[Tensor] = None,
    *,
    edges: Optional[Tensor] = None,
    backend: str = "auto",
    memory_budget=None,
) -> Viterbi:
    """The posterior decoding of every sequence, as padded tensors (see `Viterbi`): the
    segmentation that maximises the expected number of correctly labelled positions, each
    score that expectation (float64).

    One backward pass for the position marginals and one Viterbi pass of the derived problem
    (position scores the marginals, every other potential 0 or -inf where it forbids), on
    the tensors' device. Raises ValueError when some log Z is -inf.
    """
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
    call = Call(inputs, lengths, k, backend, memory_budget)
    main = scores if scores is not None else edges
    if not call.cuda:
        best, segments = _native.posterior_decode(**call.host_kwargs())
    else:
        derived = _derived(inputs, call.marginals()["position"])
        best, segments = Call(derived, lengths, k, backend, memory_budget).viterbi()
    seg, counts, labels = gold_mod.padded_decodings(best, segments, main.shape[1], call.device)
    out = torch.from_numpy(np.asarray(best)).to(call.device, torch.float64)
    return Viterbi(out, seg, counts, labels)


def _derived(inputs, position: Tensor) -> dict:
    """The derived problem of posterior decoding (structured input), in float64: position
    scores the marginals (-inf kept), every other potential 0 where finite, -inf kept."""
    ninf = float("-inf")
    out = {}
    for name in FLOAT_NAMES:
        t = inputs.get(name)
        if t is None:
            continue
        t = t.detach().to(torch.float64)
        forbidden = t == ninf
        if name == "scores":
            value = position.to(torch.float64)
        else:
            value = torch.zeros_like(t)
        out[name] = torch.where(forbidden, torch.full_like(t, ninf), value)
    return out
