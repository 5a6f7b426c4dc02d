"""k-best and posterior decoding on numpy arrays: `semicrf.kbest`, `semicrf.posterior_decode`.

Both take the potentials as the other functions of `semicrf` do (keyword arguments named as
in the JSON interchange format, one float dtype) and run with the GIL released.
"""

from __future__ import annotations

from typing import NamedTuple, Optional, Tuple

import numpy as np

from . import _native
from ._numpy import Budget, Segments, _kwargs, _problem_doc

__all__ = ["KBest", "kbest", "posterior_decode"]


class KBest(NamedTuple):
    """The k best segmentations of every sequence, best first, as padded arrays."""

    #: `(B, k)` float64: the scores, descending; `-inf` past `counts[b]`.
    scores: np.ndarray
    #: `(B, k, T, 3)` int64 rows `(start, duration, label)` in order (`T` the padded length,
    #: the most segments a segmentation can have); rows past `num_segments[b, n]` are -1.
    segments: np.ndarray
    #: `(B, k)` int64: the number of segments of each listed segmentation (0 past `counts`).
    num_segments: np.ndarray
    #: `(B,)` int64: how many segmentations are listed (fewer than k where fewer have a
    #: finite score; 0 for a sequence with none).
    counts: np.ndarray


@_problem_doc
def kbest(
    scores=None,
    lengths=None,
    max_duration: Optional[int] = None,
    *,
    k: int,
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
) -> KBest:
    """The `k` highest-scoring distinct segmentations of every sequence, best first (see
    `KBest`); fewer where fewer have a finite score.

    Ties (exactly equal scores) compare the segments from the last one backwards: the
    smaller label, then the smaller duration; so the first of each list is the `viterbi`
    decoding. Runs on the CPU engines (exact, scan, streaming), which hold up to
    `(L + 1)·C·k` entries of 16 bytes per sequence, and with `device="cuda"` on the CUDA
    streaming engine (`k` up to 1024; `16·T·C·k` bytes per sequence on the device), whose
    lists are the CPU engines', scores and ties included.

    >>> import numpy as np, semicrf
    >>> scores = np.array([[[1.0, 0.0], [0.0, 2.0]]])
    >>> best = semicrf.kbest(scores, [2], 2, k=3)
    >>> best.scores.tolist(), best.counts.tolist()
    ([[3.0, 2.0, 2.0]], [3])
    >>> best.segments[0, 0, : best.num_segments[0, 0]].tolist()
    [[0, 1, 0], [1, 1, 1]]
    """
    floats = dict(transition=transition, duration=duration, start=start, end=end,
                  begin_boundary=begin_boundary, end_boundary=end_boundary, edges=edges)
    kw = _kwargs(scores, lengths, max_duration, backend, device, memory_budget, floats)
    return KBest(*_native.kbest(k=k, **kw))


@_problem_doc
def posterior_decode(
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
    """The posterior decoding of every sequence: `(scores (B,), segments)`, the segmentation
    that maximises the expected number of correctly labelled positions under the posterior,
    each score that expectation; `segments[b]` a list of `(start, duration, label)`.

    One backward pass (the position marginals) and one Viterbi pass of a derived problem
    whose position scores are the marginals and whose other potentials keep only what is
    forbidden (-inf); on any device. Raises ValueError when some log Z is -inf.
    """
    floats = dict(transition=transition, duration=duration, start=start, end=end,
                  begin_boundary=begin_boundary, end_boundary=end_boundary, edges=edges)
    return _native.posterior_decode(
        **_kwargs(scores, lengths, max_duration, backend, device, memory_budget, floats)
    )
