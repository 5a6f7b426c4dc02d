"""`SemiMarkovCRFHead`: a semi-CRF output layer with flash-semicrf 0.2.0's names.

Constructor and methods are those of `flash_semicrf.SemiMarkovCRFHead` (num_classes,
max_duration, hidden_dim; forward, compute_loss, decode, decode_with_traceback), so that a
model switches by changing its import. The model follows semicrf's conventions where the
two differ (docs/python.md lists them side by side): learnable `start` and `end` scores and
no transition into the first segment, a duration `d` always scored by `duration[d - 1]`, runs
of one label longer than `max_duration` cut into segments of at most `max_duration`
positions, no centring of the scores (the engines sum in float64), and decodings as padded
tensors.
"""

from __future__ import annotations

import math
from typing import Optional, Union

import torch
from torch import Tensor, nn

from . import _torch_api as st

_BACKENDS = {"auto": "auto", "streaming": "streaming", "exact": "exact", "scan": "scan"}


class LearnedDuration(nn.Module):
    """A free `(K, C)` duration score (the default)."""

    def __init__(self, max_duration: int, num_classes: int, init_std: float = 0.1):
        super().__init__()
        self.duration_bias = nn.Parameter(torch.randn(max_duration, num_classes) * init_std)

    def forward(self) -> Tensor:
        return self.duration_bias


class GeometricDuration(nn.Module):
    """`log P(d) = log p + (d - 1) log(1 - p)` per label, `p = sigmoid(logit_p)`."""

    def __init__(
        self, max_duration: int, num_classes: int, init_logit: float = 0.0, learn_rate: bool = True
    ):
        super().__init__()
        self.max_duration = max_duration
        logit = torch.full((num_classes,), float(init_logit))
        if learn_rate:
            self.logit_p = nn.Parameter(logit)
        else:
            self.register_buffer("logit_p", logit)

    def forward(self) -> Tensor:
        d = torch.arange(self.max_duration, device=self.logit_p.device, dtype=self.logit_p.dtype)
        log_p = nn.functional.logsigmoid(self.logit_p)
        log_q = nn.functional.logsigmoid(-self.logit_p)
        return log_p.unsqueeze(0) + d.unsqueeze(1) * log_q.unsqueeze(0)


class NegativeBinomialDuration(nn.Module):
    """`log P(d) = log C(d + r - 2, d - 1) + r log p + (d - 1) log(1 - p)` per label."""

    def __init__(
        self,
        max_duration: int,
        num_classes: int,
        init_logit: float = 0.0,
        init_log_r: float = 0.0,
        learn_rate: bool = True,
        learn_shape: bool = True,
    ):
        super().__init__()
        self.max_duration = max_duration
        for name, value, learn in (
            ("logit_p", init_logit, learn_rate),
            ("log_r", init_log_r, learn_shape),
        ):
            t = torch.full((num_classes,), float(value))
            if learn:
                setattr(self, name, nn.Parameter(t))
            else:
                self.register_buffer(name, t)

    def forward(self) -> Tensor:
        r = torch.exp(self.log_r).unsqueeze(0)
        d = torch.arange(1, self.max_duration + 1, device=r.device, dtype=r.dtype).unsqueeze(1)
        log_binom = torch.lgamma(d + r - 1) - torch.lgamma(r) - torch.lgamma(d)
        log_p = nn.functional.logsigmoid(self.logit_p).unsqueeze(0)
        log_q = nn.functional.logsigmoid(-self.logit_p).unsqueeze(0)
        return log_binom + r * log_p + (d - 1) * log_q


class PoissonDuration(nn.Module):
    """`log P(d) = d log λ - log d! - λ` per label, `λ = exp(log_lambda)`."""

    def __init__(
        self,
        max_duration: int,
        num_classes: int,
        init_log_lambda: float = 1.0,
        learn_rate: bool = True,
    ):
        super().__init__()
        self.max_duration = max_duration
        t = torch.full((num_classes,), float(init_log_lambda))
        if learn_rate:
            self.log_lambda = nn.Parameter(t)
        else:
            self.register_buffer("log_lambda", t)

    def forward(self) -> Tensor:
        lam = self.log_lambda.unsqueeze(0)
        d = torch.arange(1, self.max_duration + 1, device=lam.device, dtype=lam.dtype).unsqueeze(1)
        return d * lam - torch.lgamma(d + 1) - torch.exp(lam)


class UniformDuration(nn.Module):
    """No duration preference: zeros."""

    def __init__(self, max_duration: int, num_classes: int):
        super().__init__()
        self.register_buffer("_zeros", torch.zeros(max_duration, num_classes))

    def forward(self) -> Tensor:
        return self._zeros


_DURATIONS = {
    "learned": LearnedDuration,
    "geometric": GeometricDuration,
    "negative_binomial": NegativeBinomialDuration,
    "negbin": NegativeBinomialDuration,
    "poisson": PoissonDuration,
    "uniform": UniformDuration,
}


class SemiMarkovCRFHead(nn.Module):
    """A semi-Markov CRF output layer over per-position scores.

    Args:
        num_classes: the number of labels `C`.
        max_duration: the longest segment `K` (inclusive).
        hidden_dim: if given, a linear projection from `hidden_dim` features to `C` scores.
        init_scale: standard deviation of the initial transition (and learned duration) scores.
        duration_distribution: None or "learned" (a free `(K, C)` score), "geometric",
            "negative_binomial" ("negbin"), "poisson", "uniform", or any module whose call
            returns a `(K, C)` tensor.
        edge_memory_threshold: the memory budget in bytes of one engine call (flash-semicrf
            used it to choose between its exact and streaming code).
        num_warps: accepted for compatibility; unused.

    Parameters: `transition (C, C)` (`[from, to]`), `start (C)`, `end (C)`, the duration
    module's, and `projection` when `hidden_dim` is given.
    """

    def __init__(
        self,
        num_classes: int,
        max_duration: int,
        hidden_dim: Optional[int] = None,
        init_scale: float = 0.1,
        duration_distribution: Union[str, nn.Module, None] = None,
        edge_memory_threshold: float = 8e9,
        num_warps: int = 4,
    ):
        super().__init__()
        if num_classes < 1 or max_duration < 1:
            raise ValueError(
                "num_classes and max_duration must be at least 1, "
                f"got {num_classes} and {max_duration}"
            )
        self.num_classes = num_classes
        self.max_duration = max_duration
        self.edge_memory_threshold = edge_memory_threshold
        self.num_warps = num_warps
        self.transition = nn.Parameter(torch.randn(num_classes, num_classes) * init_scale)
        self.start = nn.Parameter(torch.zeros(num_classes))
        self.end = nn.Parameter(torch.zeros(num_classes))
        if duration_distribution is None or duration_distribution == "learned":
            self.duration_dist = LearnedDuration(max_duration, num_classes, init_std=init_scale)
        elif isinstance(duration_distribution, nn.Module):
            self.duration_dist = duration_distribution
        elif duration_distribution in _DURATIONS:
            self.duration_dist = _DURATIONS[duration_distribution](max_duration, num_classes)
        else:
            raise ValueError(
                f"duration_distribution: unknown {duration_distribution!r}; one of "
                f"{', '.join(sorted(_DURATIONS))}, or a module returning a (K, C) tensor"
            )
        self.projection = nn.Linear(hidden_dim, num_classes) if hidden_dim is not None else None

    @property
    def duration_bias(self) -> Tensor:
        """The `(K, C)` duration scores: `duration_bias[d - 1, c]` scores duration `d`."""
        return self.duration_dist()

    def _scores(self, hidden_states: Tensor, lengths: Tensor) -> Tensor:
        if not isinstance(hidden_states, Tensor) or hidden_states.dim() != 3:
            shape = getattr(hidden_states, "shape", None)
            raise ValueError(f"hidden_states: expected a (batch, T, features) tensor, got {shape}")
        scores = self.projection(hidden_states) if self.projection is not None else hidden_states
        if scores.shape[-1] != self.num_classes:
            raise ValueError(
                f"hidden_states: {scores.shape[-1]} scores per position, expected "
                f"num_classes = {self.num_classes} (or give hidden_dim for a projection)"
            )
        return scores

    def _potentials(self, hidden_states: Tensor, lengths: Tensor) -> dict:
        return dict(
            scores=self._scores(hidden_states, lengths),
            lengths=lengths,
            max_duration=self.max_duration,
            transition=self.transition,
            duration=self.duration_bias,
            start=self.start,
            end=self.end,
        )

    def _engine(self, backend: str) -> dict:
        if backend not in _BACKENDS:
            raise ValueError(f"backend: unknown {backend!r}; one of {', '.join(_BACKENDS)}")
        budget = self.edge_memory_threshold
        if budget is None or math.isinf(budget):
            budget = None
        return dict(
            backend=_BACKENDS[backend], memory_budget=None if budget is None else int(budget)
        )

    def forward(
        self, hidden_states: Tensor, lengths: Tensor, use_triton: bool = True, backend: str = "auto"
    ) -> dict:
        """log Z of every sequence: `{"partition": (B,), "scores": (B, T, C)}`, where
        `scores` are the per-position scores after the projection. `use_triton` is
        accepted for compatibility (the engine follows the tensors' device)."""
        p = self._potentials(hidden_states, lengths)
        partition = st.log_partition(**p, **self._engine(backend))
        return {"partition": partition, "scores": p["scores"]}

    def compute_loss(
        self,
        hidden_states: Tensor,
        lengths: Tensor,
        labels: Tensor,
        use_triton: bool = True,
        backend: str = "auto",
        reduction: str = "mean",
    ) -> Tensor:
        """The NLL of the labelled segmentation, `log Z - score(gold) >= 0`.

        `labels (B, T)` gives the label of every position; runs of one label are the
        segments (a run longer than `max_duration` is cut into segments of at most
        `max_duration` positions). `reduction`: "mean", "sum" or "none" (`(B,)`).
        """
        if reduction not in ("mean", "sum", "none"):
            raise ValueError(f"reduction: expected 'mean', 'sum' or 'none', got {reduction!r}")
        p = self._potentials(hidden_states, lengths)
        loss = st.nll(**p, gold=labels, **self._engine(backend))
        if reduction == "mean":
            return loss.mean()
        if reduction == "sum":
            return loss.sum()
        return loss

    def parameter_penalty(self, p: float = 2.0) -> Tensor:
        """`‖transition‖_p^p + ‖duration_bias‖_p^p` (finite entries only)."""
        total = self.transition.new_zeros(())
        for t in (self.transition, self.duration_bias):
            t = torch.where(torch.isfinite(t), t, torch.zeros_like(t))
            total = total + t.norm(p=p).pow(p)
        return total

    @torch.no_grad()
    def decode(
        self, hidden_states: Tensor, lengths: Tensor, use_triton: bool = True, backend: str = "auto"
    ) -> Tensor:
        """The Viterbi score of every sequence, `(B,)`."""
        return self.decode_with_traceback(hidden_states, lengths, backend=backend).scores

    @torch.no_grad()
    def decode_with_traceback(
        self,
        hidden_states: Tensor,
        lengths: Tensor,
        max_traceback_length: int = 10000,
        use_triton: bool = True,
        backend: str = "auto",
    ) -> st.Viterbi:
        """The best segmentation of every sequence as padded tensors: a `Viterbi` with
        `scores (B,)`, `segments (B, S, 3)` rows `(start, duration, label)` padded with -1,
        `counts (B,)` and `labels (B, T)` (-1 past each length). Every sequence is traced
        back (the engines keep `O(T·C)` back-pointers); `max_traceback_length` is accepted
        for compatibility."""
        p = self._potentials(hidden_states, lengths)
        return st.viterbi(**p, **self._engine(backend))

    @torch.no_grad()
    def marginals(
        self, hidden_states: Tensor, lengths: Tensor, backend: str = "auto"
    ) -> st.Marginals:
        """Position `(B, T, C)` and boundary `(B, T)` marginals of the posterior."""
        p = self._potentials(hidden_states, lengths)
        return st.marginals(**p, **self._engine(backend))

    def extra_repr(self) -> str:
        parts = [f"num_classes={self.num_classes}", f"max_duration={self.max_duration}"]
        if self.projection is not None:
            parts.append(f"hidden_dim={self.projection.in_features}")
        parts.append(f"duration_dist={self.duration_dist.__class__.__name__}")
        return ", ".join(parts)
