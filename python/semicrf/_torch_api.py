"""The functional API of `semicrf.torch` (see that module)."""

from __future__ import annotations

from typing import NamedTuple, Optional

import torch
from torch import Tensor

from . import _sample
from . import _torch_gold as gold_mod
from . import _torch_ops
from ._numpy import Selection
from ._torch_gold_score import gold_score as _gold_score
from ._torch_problem import Call, check

__all__ = [
    "log_partition",
    "nll",
    "viterbi",
    "marginals",
    "entropy",
    "select",
    "gold_score",
    "segments_from_labels",
    "labels_from_segments",
    "Viterbi",
    "Marginals",
]


class Viterbi(NamedTuple):
    """Best segmentations as padded tensors, on the input's device."""

    #: `(B,)` the best score of each sequence (`-inf` where none is finite).
    scores: Tensor
    #: `(B, S, 3)` int64 rows `(start, duration, label)` in order; rows past `counts[b]` are -1.
    segments: Tensor
    #: `(B,)` int64, the number of segments of each sequence.
    counts: Tensor
    #: `(B, T)` int64, the label of every position; -1 past each length.
    labels: Tensor


class Marginals(NamedTuple):
    """Posterior marginals, on the input's device."""

    #: `(B,)` log Z.
    log_z: Tensor
    #: `(B, T, C)` P(position t lies in a segment of label c); 0 past each length.
    position: Tensor
    #: `(B, T)` P(a segment starts at t); 1 at t = 0, 0 past each length.
    boundary: Tensor
    #: `(B, T, K, C, C)` segment marginals for edge input, else None.
    edges: Optional[Tensor]


def _problem(scores, lengths, max_duration, edges, for_engine=True, **rest):
    inputs = dict(scores=scores, edges=edges, **rest)
    if lengths is None:
        raise TypeError("lengths: required (one length per sequence)")
    return check(inputs, lengths, max_duration, for_engine)


def log_partition(
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
    partial_labels=None,
    backend: str = "auto",
    memory_budget=None,
) -> Tensor:
    """log Z of every sequence, `(B,)`; `-inf` where no segmentation has a finite score.

    Differentiable with respect to every floating input given: the gradient of log Z_b
    is the expected count of each potential (`scores.grad` holds the position marginals).
    A backward pass through a sequence whose log Z is `-inf` raises ValueError. With
    `partial_labels` `(B, T)` (a label or -1 per position): log Z over the segmentations
    that agree with them, differentiable in the same way.
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
    if partial_labels is not None:
        inputs = _sample.restrict_torch(inputs, lengths, partial_labels)
    return _torch_ops.log_partition(inputs, lengths, k, backend, memory_budget)


def nll(
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
    gold=None,
    partial_labels=None,
    edges: Optional[Tensor] = None,
    backend: str = "auto",
    memory_budget=None,
) -> Tensor:
    """The negative log-likelihood `log Z_b - score(gold_b)` of each sequence, `(B,)`.

    Never negative (up to rounding); `+inf` where the gold segmentation uses a forbidden
    (`-inf`) potential. `gold` is labels per position `(B, T)` (runs of one label longer
    than `max_duration` are cut into segments of at most that many positions), padded
    segments `(B, S, 3)` of `(start, duration, label)` rows (rows of -1 after the last, as
    `viterbi` returns them), or a list of `(start, duration, label)` lists. Differentiable:
    the gradient is the expected counts minus the gold's counts.

    Instead of `gold`, `partial_labels` `(B, T)` (a label or -1 per position) gives the
    partial NLL `log Z - log Z_partial` (log Z over the segmentations that agree with them):
    `+inf` where none has a finite score (a backward pass through it raises ValueError);
    differentiable, the gradient being the expected counts minus those under the posterior
    restricted to the agreeing segmentations.
    """
    if (gold is None) == (partial_labels is None):
        raise TypeError("nll: give exactly one of gold= and partial_labels=")
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
    if partial_labels is not None:
        log_z = _torch_ops.log_partition(inputs, lengths, k, backend, memory_budget)
        part = _sample.restrict_torch(inputs, lengths, partial_labels)
        log_zp = _torch_ops.log_partition(part, lengths, k, backend, memory_budget)
        return _sample.partial_nll_torch(log_z, log_zp)
    main = scores if scores is not None else edges
    c = main.shape[-1]
    checked = gold_mod.normalize(gold, lengths, k, c, main.shape[0], main.shape[1], main.device)
    log_z = _torch_ops.log_partition(inputs, lengths, k, backend, memory_budget)
    g = _gold_score(inputs, checked)
    # A forbidden gold (score -inf) gives +inf, and no gradient through either side.
    out = torch.where(torch.isneginf(g), float("inf"), log_z.double() - g)
    return out.to(log_z.dtype)


def gold_score(
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
    gold,
    edges: Optional[Tensor] = None,
) -> Tensor:
    """The score of one given segmentation per sequence, `(B,)` float64, differentiable
    (the same formula as log Z; `gold` as for `nll`)."""
    inputs, lengths, k = _problem(
        scores,
        lengths,
        max_duration,
        edges,
        for_engine=False,
        transition=transition,
        duration=duration,
        start=start,
        end=end,
        begin_boundary=begin_boundary,
        end_boundary=end_boundary,
    )
    main = scores if scores is not None else edges
    checked = gold_mod.normalize(
        gold, lengths, k, main.shape[-1], main.shape[0], main.shape[1], main.device
    )
    return _gold_score(inputs, checked)


@torch.no_grad()
def viterbi(
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
    """The best segmentation of every sequence, as padded tensors (see `Viterbi`).

    Ties break as on every engine: the smaller duration, then the smaller previous label.
    A sequence without a finite segmentation gets score `-inf` and no segments.
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
    best, segments = call.viterbi()
    main = scores if scores is not None else edges
    seg, counts, labels = gold_mod.padded_decodings(best, segments, main.shape[1], call.device)
    out = torch.from_numpy(best).to(call.device, call.dtype)
    return Viterbi(out, seg, counts, labels)


@torch.no_grad()
def marginals(
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
) -> Marginals:
    """Position and boundary marginals (and edge marginals for edge input), from one
    forward-backward pass. Raises ValueError if some log Z is `-inf`."""
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
    m = Call(inputs, lengths, k, backend, memory_budget).marginals()
    return Marginals(m["log_z"], m["position"], m["boundary"], m.get("edges"))


@torch.no_grad()
def entropy(
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
) -> Tensor:
    """The entropy (nats) of the posterior over segmentations of each sequence, `(B,)`.
    Not differentiable. Raises ValueError if some log Z is `-inf`."""
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
    return Call(inputs, lengths, k, backend, memory_budget).entropy()


def select(
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
    op: str = "backward",
) -> Selection:
    """The engine that would run `op` ("backward", "log_partition", "entropy", "viterbi")
    on these tensors, and why: a `semicrf.Selection` (`device`, `algorithm`, `required`
    bytes, `reason`). Runs nothing."""
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
    return Call(inputs, lengths, k, backend, memory_budget).select(op)


def segments_from_labels(labels: Tensor, lengths, max_duration: int):
    """Labels per position `(B, T)` → `(segments (B, S, 3), counts (B,))`: runs of one label,
    cut every `max_duration` positions; rows past `counts[b]` are -1."""
    return gold_mod.segments_from_labels(labels, torch.as_tensor(lengths), max_duration)


def labels_from_segments(segments: Tensor, counts: Tensor, t_max: int) -> Tensor:
    """Padded segments → labels per position `(B, T)`, -1 past each segmentation's end."""
    return gold_mod.labels_from_segments(segments, counts, t_max)
