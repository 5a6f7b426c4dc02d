"""Semi-Markov conditional random fields (semi-CRFs) from Python.

The functions here take numpy arrays (the JSON interchange format's names as keyword
arguments) and run the Rust library `semicrf` with the GIL released; `semicrf.torch`
offers the same on PyTorch tensors with autograd, on the CPU and on CUDA devices.

>>> import numpy as np, semicrf
>>> scores = np.zeros((1, 3, 2))
>>> z = semicrf.log_partition(scores=scores, lengths=[3], max_duration=3)
>>> round(float(z[0]), 6) == round(float(np.log(18)), 6)   # 18 segmentations, all scored 0
True
"""

from ._kbest import KBest, kbest, posterior_decode
from ._native import __version__, cuda_available, parse_memory_budget
from ._numpy import (
    Marginals,
    Selection,
    backward,
    entropy,
    log_partition,
    marginals,
    nll,
    select,
    viterbi,
)
from ._sample import sample

__all__ = [
    "KBest",
    "kbest",
    "posterior_decode",
    "Marginals",
    "Selection",
    "__version__",
    "backward",
    "cuda_available",
    "entropy",
    "log_partition",
    "marginals",
    "nll",
    "parse_memory_budget",
    "sample",
    "select",
    "viterbi",
]
