"""Tensor problems for `semicrf.torch`: checks, dtypes, and the calls into the native module.

A problem is the set of tensors of the model (crates/semicrf-core/src/model.md §2-3). Here
they are checked (type, device, rank and shape, naming the tensor), made contiguous and cast
to the dtype the engine runs (float32 or float64) once, and handed to `semicrf._native`:
CPU tensors as numpy views of their memory, CUDA tensors as device addresses on torch's
current stream, with outputs allocated by torch. On CUDA only the lengths come to the host
(no copy when they are a CPU tensor, one small copy when they are on the device); the shared
parameters go to the engine as device arrays too, and their gradients are written into
tensors torch allocated.
"""

from __future__ import annotations

import functools
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
from torch import Tensor

from . import _native
from ._numpy import Selection

#: The floating inputs, in the order the custom ops take them.
FLOAT_NAMES: Tuple[str, ...] = (
    "scores",
    "transition",
    "duration",
    "start",
    "end",
    "begin_boundary",
    "end_boundary",
    "edges",
)
#: Inputs shared by the batch: their gradients are summed over the sequences.
SHARED: Tuple[str, ...] = ("transition", "duration", "start", "end")
#: Inputs with a row per position of every sequence, `(B, T, C)`.
PER_POSITION: Tuple[str, ...] = ("scores", "begin_boundary", "end_boundary")

_FLOATS = frozenset((torch.float16, torch.bfloat16, torch.float32, torch.float64))
_INTS = frozenset((torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8))

#: Device types whose tensors go to the `cuda_*` entries (a test emulates one on the CPU).
DEVICE_TYPES: Tuple[str, ...] = ("cuda",)


def compute_dtype(tensors: Sequence[Optional[Tensor]]) -> torch.dtype:
    """float64 if any input is float64, else float32 (float16 and bfloat16 run as float32)."""
    for t in tensors:
        if t is not None and t.dtype == torch.float64:
            return torch.float64
    return torch.float32


def check(
    inputs: Dict[str, Optional[Tensor]],
    lengths,
    max_duration: Optional[int],
    for_engine: bool = True,
) -> Tuple[Dict[str, Optional[Tensor]], Tensor, int]:
    """Checks a problem given as tensors; returns (inputs, lengths as int64 on the host, K).

    Raises ValueError naming the tensor for a wrong device, rank or shape, TypeError for a
    non-tensor or a tensor of a dtype that is not floating (integer for `lengths`).
    The lengths come to the host (the engines take them there): CPU lengths as they are (the
    fast path: no copy, no wait for the device), lengths on the device in one small copy.
    `for_engine` is kept for the callers that run no engine (`gold_score`); the lengths are
    the same either way.
    """
    scores, edges = inputs.get("scores"), inputs.get("edges")
    if (scores is None) == (edges is None):
        raise ValueError("give either scores= (structured potentials) or edges=, not both")
    main_name, main = ("scores", scores) if scores is not None else ("edges", edges)
    device = main.device
    for name in FLOAT_NAMES:
        t = inputs.get(name)
        if t is None:
            continue
        if not isinstance(t, Tensor):
            raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
        if t.dtype not in _FLOATS:
            raise TypeError(f"{name}: expected a floating tensor, got {t.dtype}")
        if t is not main and t.device != device:
            raise ValueError(f"{name}: on {t.device}, but {main_name} is on {device}")
    if main_name == "edges":
        if edges.dim() != 5 or edges.shape[-1] != edges.shape[-2]:
            raise ValueError(f"edges: expected shape (B, T, K, C, C), got {tuple(edges.shape)}")
        batch, t_max, k, c = edges.shape[0], edges.shape[1], edges.shape[2], edges.shape[3]
        if max_duration is not None and max_duration != k:
            raise ValueError(f"max_duration: {max_duration} but edges have K = {k}")
        for name in FLOAT_NAMES[1:7]:
            if inputs.get(name) is not None:
                raise ValueError(f"{name}: edges= carries every potential; give no {name}")
    else:
        if scores.dim() != 3:
            raise ValueError(f"scores: expected shape (B, T, C), got {tuple(scores.shape)}")
        batch, t_max, c = scores.shape
        if isinstance(max_duration, bool) or not isinstance(max_duration, int):
            raise TypeError(f"max_duration: expected an int, got {max_duration!r}")
        if max_duration < 1:
            raise ValueError(f"max_duration: must be at least 1, got {max_duration}")
        k = max_duration
        tr = inputs.get("transition")
        if tr is not None and tr.shape != (c, c) and tr.shape != (k, c, c):
            raise ValueError(
                f"transition: expected shape ({c}, {c}) or ({k}, {c}, {c}), got {tuple(tr.shape)}"
            )
        for name, shape in (
            ("duration", (k, c)),
            ("start", (c,)),
            ("end", (c,)),
            ("begin_boundary", (batch, t_max, c)),
            ("end_boundary", (batch, t_max, c)),
        ):
            t = inputs.get(name)
            if t is not None and t.shape != shape:
                raise ValueError(f"{name}: expected shape {shape}, got {tuple(t.shape)}")
    # (Integer tensors never require grad: nothing to detach.)
    host = _lengths_tensor(lengths, batch, device)
    if host.device.type != "cpu":
        host = host.cpu()
    if host.dtype != torch.int64:
        host = host.to(torch.int64)
    _check_range(host.numpy(), t_max)
    return inputs, host, k


def _lengths_tensor(lengths, batch: int, device: torch.device) -> Tensor:
    """`lengths` as an integer tensor of shape (batch,) on the host or on `device`."""
    if not isinstance(lengths, Tensor):
        try:
            lengths = torch.as_tensor(np.asarray(lengths))
        except (TypeError, ValueError) as e:
            raise TypeError(f"lengths: expected integers, got {lengths!r}") from e
    if lengths.dtype not in _INTS:
        raise TypeError(f"lengths: expected an integer tensor, got {lengths.dtype}")
    if lengths.device.type != "cpu" and lengths.device != device:
        raise ValueError(f"lengths: on {lengths.device}, but the potentials are on {device}")
    if lengths.shape != (batch,):
        raise ValueError(f"lengths: expected shape ({batch},), got {tuple(lengths.shape)}")
    return lengths


def _check_range(a: np.ndarray, t_max: int) -> None:
    # (A batch's few lengths are checked faster as Python integers than by two reductions.)
    v = a.tolist() if a.size <= 256 else None
    if v is not None and (not v or (min(v) >= 1 and max(v) <= t_max)):
        return
    if a.size and (a.min() < 1 or a.max() > t_max):
        b = int(np.flatnonzero((a < 1) | (a > t_max))[0])
        raise ValueError(f"lengths[{b}] = {int(a[b])} is outside 1..={t_max}")


def current_stream(index: int) -> int:
    """torch's current CUDA stream on device `index`, as the driver's handle."""
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is not None:
        return raw(index)
    return torch.cuda.current_stream(index).cuda_stream


def _budget(memory_budget) -> Optional[str]:
    return None if memory_budget is None else str(memory_budget)


def _host(t: Optional[Tensor], dtype: torch.dtype) -> Optional[np.ndarray]:
    """A C-contiguous numpy view of a CPU tensor in `dtype` (a copy only where needed)."""
    if t is None:
        return None
    return t.detach().to(dtype).contiguous().numpy()


@functools.lru_cache(maxsize=32)
def _ones(n: int) -> np.ndarray:
    """A read-only float64 array of `n` ones (the upstream gradient of a plain sum; the
    same array for every call of a training loop)."""
    a = np.ones(n, dtype=np.float64)
    a.setflags(write=False)
    return a


class Call:
    """One problem, ready for the native module on the tensors' device."""

    def __init__(
        self,
        inputs: Dict[str, Optional[Tensor]],
        lengths: Tensor,
        max_duration: int,
        backend: str = "auto",
        memory_budget=None,
    ):
        self.inputs = inputs
        self.lengths = lengths
        self.k = max_duration
        self.backend = backend
        self.budget = _budget(memory_budget)
        main = inputs["scores"] if inputs.get("scores") is not None else inputs["edges"]
        self.device = main.device
        self.dtype = compute_dtype(inputs.values())
        self.cuda = self.device.type in DEVICE_TYPES
        if self.device.type not in ("cpu", "cuda"):
            raise ValueError(f"scores: tensors on {self.device} are not supported (cpu, cuda)")
        if self.cuda and inputs.get("edges") is not None:
            raise ValueError(
                "edges: edge potentials run on the CPU engines only (exact, scan); "
                f"got a tensor on {self.device}"
            )

    # -- host ---------------------------------------------------------------------------

    def host_kwargs(self) -> dict:
        kw = {name: _host(self.inputs.get(name), self.dtype) for name in FLOAT_NAMES}
        kw = {k: v for k, v in kw.items() if v is not None}
        kw["lengths"] = self.lengths.numpy()
        if kw.get("scores") is not None:
            kw["max_duration"] = self.k
        kw["backend"] = self.backend
        kw["device"] = "cpu"
        if self.budget is not None:
            kw["memory_budget"] = self.budget
        return kw

    # -- device -------------------------------------------------------------------------

    def device_kwargs(self) -> Tuple[dict, List[Tensor]]:
        """Arguments of the `cuda_*` functions, and the tensors to keep alive meanwhile."""
        if self.backend not in ("auto", "streaming"):
            raise ValueError(
                f"backend: {self.backend!r} does not run on CUDA (only 'streaming' does)"
            )
        keep: List[Tensor] = []
        dtype, inputs = self.dtype, self.inputs

        def address(t: Tensor) -> int:
            if t.dtype != dtype or not t.is_contiguous():
                # (`.to` with a memory format returns a same-dtype tensor as it is.)
                t = t.detach().to(dtype).contiguous()
                keep.append(t)
            return t.data_ptr()

        scores = inputs["scores"]
        index = self.device.index or 0
        kw = {
            "scores": address(scores),
            "shape": tuple(scores.shape),
            "dtype": "float64" if dtype == torch.float64 else "float32",
            "lengths": self.lengths.numpy(),
            "max_duration": self.k,
            "stream": current_stream(index),
            "device": index,
        }
        for name in ("begin_boundary", "end_boundary"):
            t = inputs.get(name)
            if t is not None:
                kw[name] = address(t)
        for name in SHARED:
            t = inputs.get(name)
            if t is not None:
                # On the device too: the engine reads them back with its checks' words.
                kw[name] = (address(t), tuple(t.shape))
        return kw, keep

    def on_device(self, fn, kw: dict):
        """`fn(**kw)` with torch's current device set to the problem's."""
        index = kw["device"]
        if torch.cuda.current_device() == index:
            return fn(**kw)
        with torch.cuda.device(index):
            return fn(**kw)

    # -- operations ---------------------------------------------------------------------

    def log_partition(self) -> Tensor:
        if self.cuda:
            kw, keep = self.device_kwargs()
            v = self.on_device(_native.cuda_log_partition, kw)
            del keep
        else:
            v = _native.log_partition(**self.host_kwargs())
        return torch.from_numpy(np.asarray(v)).to(self.device, self.dtype)

    def entropy(self) -> Tensor:
        if self.cuda:
            kw, keep = self.device_kwargs()
            v = self.on_device(_native.cuda_entropy, kw)
            del keep
        else:
            v = _native.entropy(**self.host_kwargs())
        return torch.from_numpy(np.asarray(v)).to(self.device, self.dtype)

    def viterbi(self):
        if self.cuda:
            kw, keep = self.device_kwargs()
            scores, segments = self.on_device(_native.cuda_viterbi, kw)
            del keep
        else:
            scores, segments = _native.viterbi(**self.host_kwargs())
        return np.asarray(scores), segments

    def select(self, op: str) -> Selection:
        kw = self.host_kwargs() if not self.cuda else None
        if kw is None:
            # Selection needs no data: plan on the host from zero arrays of the same shapes.
            kw = {}
            for name in FLOAT_NAMES:
                t = self.inputs.get(name)
                if t is not None:
                    kw[name] = np.zeros(tuple(t.shape), dtype=np.float32)
            kw.update(lengths=self.lengths.numpy(), max_duration=self.k, backend=self.backend)
            kw["device"] = f"cuda:{self.device.index or 0}"
            if self.budget is not None:
                kw["memory_budget"] = self.budget
        return Selection(**dict(_native.select(op=op, **kw)))

    def marginals(self) -> dict:
        """log Z, position and boundary marginals (and edge marginals for edges), as
        tensors of the problem's dtype on its device."""
        if self.cuda:
            out = self.backward(None, want_boundary=True)
            out["position"] = out.pop("scores")
        else:
            out = dict(_native.marginals(**self.host_kwargs()))
        return {
            k: torch.from_numpy(np.asarray(v)).to(self.device, self.dtype)
            if not isinstance(v, Tensor)
            else v.to(self.device, self.dtype)
            for k, v in out.items()
            if v is not None and k in ("log_z", "position", "boundary", "edges")
        }

    def backward(self, upstream: Optional[np.ndarray], want_boundary: bool = False) -> dict:
        """log Z, the gradients of Σ_b upstream[b] log Z_b (given inputs only) and, if
        asked, the boundary marginals, all as tensors on the problem's device."""
        if upstream is None:
            upstream = _ones(len(self.lengths))
        if not self.cuda:
            out = _native.backward(upstream=upstream, **self.host_kwargs())
            res = {k: torch.from_numpy(np.asarray(v)) for k, v in out.items() if v is not None}
            if not want_boundary:
                res.pop("boundary", None)
            return res
        kw, keep = self.device_kwargs()
        scores = self.inputs["scores"]
        b, t, c = scores.shape
        new = scores.new_empty
        res = {"scores": new((b, t, c), dtype=self.dtype)}
        kw["out_scores"] = res["scores"].data_ptr()
        for name in ("begin_boundary", "end_boundary"):
            if name in kw:
                res[name] = new((b, t, c), dtype=self.dtype)
                kw["out_" + name] = res[name].data_ptr()
        log_z = new((b,), dtype=self.dtype)
        kw["out_log_z"] = log_z.data_ptr()
        if want_boundary:
            res["boundary"] = new((b, t), dtype=self.dtype)
            kw["out_boundary"] = res["boundary"].data_ptr()
        # The shared parameters' gradients: written by the engine on the device too.
        for name in SHARED:
            p = self.inputs.get(name)
            if p is not None:
                res[name] = new(tuple(p.shape), dtype=self.dtype)
                kw["out_" + name] = res[name].data_ptr()
        kw["upstream"] = upstream
        # Every result goes to a tensor above: the call may return before the device is done
        # (the next work on torch's stream is ordered after it).
        kw["queued"] = True
        self.on_device(_native.cuda_backward, kw)
        del keep
        res["log_z"] = log_z
        return res
