"""The functional numpy API: `semicrf.log_partition`, `viterbi`, `marginals`, `entropy`,
`nll`, `select` and `backward`.

Every function takes the potentials as keyword arguments named as in the JSON interchange
format (`scores`, `lengths`, `max_duration`, `transition`, `duration`, `start`, `end`,
`begin_boundary`, `end_boundary`, or `edges` for the edge form) and the configuration
(`backend`, `device`, `memory_budget`). The floating inputs must share one dtype, float32 or
float64 (`TypeError` otherwise); array-likes are converted with `np.asarray` and
non-contiguous arrays made C-contiguous once. Results are float64. The computation runs
with the GIL released.

Errors: `ValueError` for bad input (the message names the tensor and the index),
`MemoryError` when no algorithm fits the memory budget, `RuntimeError` for an unavailable
backend or device (e.g. `device="cuda"` on a machine without a GPU).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from . import _native

_FLOATS = (
    "scores",
    "edges",
    "transition",
    "duration",
    "start",
    "end",
    "begin_boundary",
    "end_boundary",
)

Budget = Union[int, str, None]
Segments = List[List[Tuple[int, int, int]]]


@dataclass(frozen=True)
class Marginals:
    """Posterior marginals of a batch, from one forward-backward pass (float64)."""

    #: `(B,)`: log Z of every sequence.
    log_z: np.ndarray
    #: `(B, T, C)`: P(position t lies in a segment of label c); rows sum to 1 for t < L_b,
    #: 0 beyond the length.
    position: np.ndarray
    #: `(B, T)`: P(a segment starts at t); 1 at t = 0, 0 beyond the length.
    boundary: np.ndarray
    #: `(B, T, K, C, C)`: the edge marginals, for edge input only (else None).
    edges: Optional[np.ndarray] = None


@dataclass(frozen=True)
class Selection:
    """The engine that would run a request, and why (`select`)."""

    #: `"cpu"` or `"cuda:N"`.
    device: str
    #: `"exact"`, `"scan"` or `"streaming"`.
    algorithm: str
    #: The working memory it plans, in bytes.
    required: int
    #: Why it was chosen.
    reason: str


def _array(name: str, value: Any) -> np.ndarray:
    a = np.asarray(value)
    if a.dtype.kind != "f":
        raise TypeError(
            f"`{name}` has dtype {a.dtype}: the potentials must be float32 or float64"
        )
    if not a.flags.c_contiguous:
        a = np.ascontiguousarray(a)
    return a


def _kwargs(
    scores: Any,
    lengths: Any,
    max_duration: Optional[int],
    backend: str,
    device: str,
    memory_budget: Budget,
    floats: Dict[str, Any],
) -> Dict[str, Any]:
    if lengths is None:
        raise TypeError("missing argument `lengths`")
    kw: Dict[str, Any] = {
        "backend": backend,
        "device": device,
        "memory_budget": memory_budget,
        "max_duration": max_duration,
    }
    lengths = np.asarray(lengths)
    if lengths.ndim != 1 or lengths.dtype.kind not in "iu":
        raise TypeError("`lengths` must be a 1-D sequence of integers")
    kw["lengths"] = lengths.tolist()
    given = dict(floats, scores=scores)
    for name in _FLOATS:
        if given.get(name) is not None:
            kw[name] = _array(name, given[name])
    return kw


def _problem_doc(f):
    f.__doc__ = (f.__doc__ or "") + _PROBLEM_DOC
    return f


_PROBLEM_DOC = """
    Potentials (keyword arguments, one float dtype):
        scores: (B, T, C) emission scores (structured form), or
        edges: (B, T, K, C, C) edge potentials, destination label first (edge form);
        lengths: (B,) integers in 1..=T;
        max_duration: K (required with `scores`);
        transition: (C, C) or (K, C, C); duration: (K, C); start, end: (C,);
        begin_boundary, end_boundary: (B, T, C).
    Configuration: backend ("auto", "exact", "scan", "streaming"), device ("cpu", "cuda",
    "cuda:N"), memory_budget (bytes, or a string such as "2GiB"; default 2 GiB).
"""


@_problem_doc
def log_partition(
    scores=None,
    lengths=None,
    max_duration: Optional[int] = None,
    *,
    transition=None,
    duration=None,
    start=None,
    end=None,
    begin_boundary=None,
    end_boundary=None,
    edges=None,
    partial_labels=None,
    backend: str = "auto",
    device: str = "cpu",
    memory_budget: Budget = None,
) -> np.ndarray:
    """log Z of every sequence, `(B,)`; -inf where no segmentation has a finite score.
    With `partial_labels` `(B, T)` (a label or -1 per position): log Z over the segmentations
    that agree with them (-inf where none has a finite score)."""
    floats = dict(transition=transition, duration=duration, start=start, end=end,
                  begin_boundary=begin_boundary, end_boundary=end_boundary, edges=edges)
    kw = _kwargs(scores, lengths, max_duration, backend, device, memory_budget, floats)
    if partial_labels is not None:
        from ._sample import labels_list

        return _native.log_partition_partial(partial_labels=labels_list(partial_labels), **kw)
    return _native.log_partition(**kw)


@_problem_doc
def entropy(
    scores=None,
    lengths=None,
    max_duration: Optional[int] = None,
    *,
    transition=None,
    duration=None,
    start=None,
    end=None,
    begin_boundary=None,
    end_boundary=None,
    edges=None,
    backend: str = "auto",
    device: str = "cpu",
    memory_budget: Budget = None,
) -> np.ndarray:
    """The Shannon entropy (nats) of the posterior over segmentations, `(B,)`."""
    floats = dict(transition=transition, duration=duration, start=start, end=end,
                  begin_boundary=begin_boundary, end_boundary=end_boundary, edges=edges)
    return _native.entropy(
        **_kwargs(scores, lengths, max_duration, backend, device, memory_budget, floats)
    )


@_problem_doc
def viterbi(
    scores=None,
    lengths=None,
    max_duration: Optional[int] = None,
    *,
    transition=None,
    duration=None,
    start=None,
    end=None,
    begin_boundary=None,
    end_boundary=None,
    edges=None,
    backend: str = "auto",
    device: str = "cpu",
    memory_budget: Budget = None,
) -> Tuple[np.ndarray, Segments]:
    """The best segmentation of every sequence: `(scores (B,), segments)`, `segments[b]` a
    list of `(start, duration, label)`. Ties prefer the smaller duration, then the smaller
    previous label; a sequence without a finite segmentation gets -inf and no segments."""
    floats = dict(transition=transition, duration=duration, start=start, end=end,
                  begin_boundary=begin_boundary, end_boundary=end_boundary, edges=edges)
    return _native.viterbi(
        **_kwargs(scores, lengths, max_duration, backend, device, memory_budget, floats)
    )


@_problem_doc
def marginals(
    scores=None,
    lengths=None,
    max_duration: Optional[int] = None,
    *,
    transition=None,
    duration=None,
    start=None,
    end=None,
    begin_boundary=None,
    end_boundary=None,
    edges=None,
    backend: str = "auto",
    device: str = "cpu",
    memory_budget: Budget = None,
) -> Marginals:
    """Position marginals `(B, T, C)`, boundary marginals `(B, T)` and log Z (and, for edge
    input, the edge marginals `(B, T, K, C, C)`), from one forward-backward pass.
    `ValueError` when some sequence has no finite segmentation."""
    floats = dict(transition=transition, duration=duration, start=start, end=end,
                  begin_boundary=begin_boundary, end_boundary=end_boundary, edges=edges)
    d = _native.marginals(
        **_kwargs(scores, lengths, max_duration, backend, device, memory_budget, floats)
    )
    return Marginals(d["log_z"], d["position"], d["boundary"], d["edges"])


@_problem_doc
def nll(
    scores=None,
    lengths=None,
    max_duration: Optional[int] = None,
    *,
    gold=None,
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
    memory_budget: Budget = None,
) -> np.ndarray:
    """The negative log-likelihood `log Z_b - score(gold_b)`, `(B,)`: never negative, +inf
    where the gold segmentation is forbidden. `gold`: an integer array `(B, T)` of labels
    (runs longer than K are split), or one list of `(start, duration, label)` per sequence.
    Instead of `gold`, `partial_labels` `(B, T)` (a label or -1 per position): the partial
    NLL `log Z_b - log Z_partial_b`, +inf where no agreeing segmentation is finite."""
    floats = dict(transition=transition, duration=duration, start=start, end=end,
                  begin_boundary=begin_boundary, end_boundary=end_boundary, edges=edges)
    if (gold is None) == (partial_labels is None):
        raise TypeError("nll: give exactly one of `gold` and `partial_labels`")
    if partial_labels is not None:
        from ._sample import labels_list

        return _native.partial_nll(
            partial_labels=labels_list(partial_labels),
            **_kwargs(scores, lengths, max_duration, backend, device, memory_budget, floats),
        )
    return _native.nll(
        gold=_gold(gold),
        **_kwargs(scores, lengths, max_duration, backend, device, memory_budget, floats),
    )


@_problem_doc
def select(
    scores=None,
    lengths=None,
    max_duration: Optional[int] = None,
    *,
    op: str = "backward",
    transition=None,
    duration=None,
    start=None,
    end=None,
    begin_boundary=None,
    end_boundary=None,
    edges=None,
    backend: str = "auto",
    device: str = "cpu",
    memory_budget: Budget = None,
) -> Selection:
    """The engine that would run `op` ("backward" (also for marginals and nll),
    "log_partition", "entropy", "viterbi") on this problem, and why, without running it.
    `MemoryError` when none fits the budget."""
    floats = dict(transition=transition, duration=duration, start=start, end=end,
                  begin_boundary=begin_boundary, end_boundary=end_boundary, edges=edges)
    d = _native.select(
        op=op, **_kwargs(scores, lengths, max_duration, backend, device, memory_budget, floats)
    )
    return Selection(d["device"], d["algorithm"], int(d["required"]), d["reason"])


@_problem_doc
def backward(
    scores=None,
    lengths=None,
    max_duration: Optional[int] = None,
    *,
    upstream=None,
    gold=None,
    transition=None,
    duration=None,
    start=None,
    end=None,
    begin_boundary=None,
    end_boundary=None,
    edges=None,
    backend: str = "auto",
    device: str = "cpu",
    memory_budget: Budget = None,
) -> Dict[str, np.ndarray]:
    """log Z and the gradients of `sum_b upstream[b] * log Z_b` (with `gold`: of
    `sum_b upstream[b] * NLL_b`) with respect to every floating input given.

    Returns a dict: `log_z (B,)`, `nll (B,)` (with `gold`), `boundary (B, T)` (boundary
    marginals, not weighted), and one float64 gradient per floating input given, under the
    input's name and of its shape. `upstream` defaults to ones."""
    floats = dict(transition=transition, duration=duration, start=start, end=end,
                  begin_boundary=begin_boundary, end_boundary=end_boundary, edges=edges)
    kw = _kwargs(scores, lengths, max_duration, backend, device, memory_budget, floats)
    if upstream is not None:
        kw["upstream"] = np.asarray(upstream, dtype=np.float64).tolist()
    if gold is not None:
        kw["gold"] = _gold(gold)
    return dict(_native.backward(**kw))


def _gold(gold: Any) -> Any:
    if isinstance(gold, np.ndarray):
        if gold.dtype.kind not in "iu":
            raise TypeError(f"`gold` labels must be integers, not {gold.dtype}")
        return gold.tolist()
    return gold


__all__: Sequence[str] = (
    "Marginals",
    "Selection",
    "backward",
    "entropy",
    "log_partition",
    "marginals",
    "nll",
    "select",
    "viterbi",
)
