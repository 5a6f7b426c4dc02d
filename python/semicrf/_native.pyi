"""Type stub of the native module `semicrf._native` (contract: python/NATIVE.md).

The host functions take the problem as keyword arguments: `scores` or `edges`, `lengths`,
`max_duration`, `transition`, `duration`, `start`, `end`, `begin_boundary`, `end_boundary`
(C-contiguous or not, float32 or float64, one dtype), and `backend`, `device`,
`memory_budget`.
"""

from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import numpy.typing as npt

__version__: str

F64 = npt.NDArray[np.float64]
#: A shared parameter of a `cuda_*` call: a host float64 array, or (device address, shape).
Shared = Union[F64, Tuple[int, Tuple[int, ...]]]
Segments = List[List[Tuple[int, int, int]]]
Budget = Union[int, str, None]

def log_partition(**problem: Any) -> F64: ...
def entropy(**problem: Any) -> F64: ...
def viterbi(**problem: Any) -> Tuple[F64, Segments]: ...
def kbest(*, k: int, **problem: Any) -> Tuple[F64, Any, Any, Any]: ...
def posterior_decode(**problem: Any) -> Tuple[F64, Segments]: ...
def marginals(**problem: Any) -> Dict[str, Optional[F64]]: ...
def nll(*, gold: Any, **problem: Any) -> F64: ...
def select(*, op: str = "backward", **problem: Any) -> Dict[str, Union[str, int]]: ...
def backward(
    *, upstream: Optional[Sequence[float]] = None, gold: Any = None, **problem: Any
) -> Dict[str, F64]: ...
def parse_memory_budget(value: Union[int, str]) -> int: ...
def sample(
    *, n: int, seed: int = 0, partial_labels: Any = None, **problem: Any
) -> List[Segments]: ...
def log_partition_partial(*, partial_labels: Any, **problem: Any) -> F64: ...
def partial_nll(*, partial_labels: Any, **problem: Any) -> F64: ...
def cuda_available(device: int = 0) -> Tuple[bool, str]: ...
def cuda_log_partition(
    *,
    scores: int,
    shape: Tuple[int, int, int],
    dtype: str,
    lengths: Sequence[int],
    max_duration: int,
    stream: int,
    device: int,
    transition: Optional[Shared] = None,
    duration: Optional[Shared] = None,
    start: Optional[Shared] = None,
    end: Optional[Shared] = None,
    begin_boundary: Optional[int] = None,
    end_boundary: Optional[int] = None,
) -> F64: ...
def cuda_entropy(
    *,
    scores: int,
    shape: Tuple[int, int, int],
    dtype: str,
    lengths: Sequence[int],
    max_duration: int,
    stream: int,
    device: int,
    transition: Optional[Shared] = None,
    duration: Optional[Shared] = None,
    start: Optional[Shared] = None,
    end: Optional[Shared] = None,
    begin_boundary: Optional[int] = None,
    end_boundary: Optional[int] = None,
) -> F64: ...
def cuda_viterbi(
    *,
    scores: int,
    shape: Tuple[int, int, int],
    dtype: str,
    lengths: Sequence[int],
    max_duration: int,
    stream: int,
    device: int,
    transition: Optional[Shared] = None,
    duration: Optional[Shared] = None,
    start: Optional[Shared] = None,
    end: Optional[Shared] = None,
    begin_boundary: Optional[int] = None,
    end_boundary: Optional[int] = None,
) -> Tuple[F64, Segments]: ...
def cuda_backward(
    *,
    scores: int,
    shape: Tuple[int, int, int],
    dtype: str,
    lengths: Sequence[int],
    max_duration: int,
    stream: int,
    device: int,
    upstream: Sequence[float],
    out_scores: int,
    transition: Optional[Shared] = None,
    duration: Optional[Shared] = None,
    start: Optional[Shared] = None,
    end: Optional[Shared] = None,
    begin_boundary: Optional[int] = None,
    end_boundary: Optional[int] = None,
    out_begin_boundary: Optional[int] = None,
    out_end_boundary: Optional[int] = None,
    out_boundary: Optional[int] = None,
    out_log_z: Optional[int] = None,
    out_transition: Optional[int] = None,
    out_duration: Optional[int] = None,
    out_start: Optional[int] = None,
    out_end: Optional[int] = None,
    queued: bool = False,
) -> Dict[str, F64]: ...
