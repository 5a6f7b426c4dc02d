"""semicrf for PyTorch: the functions of `semicrf` on tensors, with autograd, on CPU and CUDA.

Every function takes the potentials as tensors named as in the interchange format
(`scores, lengths, max_duration, transition, duration, start, end, begin_boundary,
end_boundary`, or `edges=`) and runs on the tensors' device: CPU tensors on the CPU engines
(their memory read in place, the GIL released), CUDA tensors on the CUDA engine, on torch's
current stream, with results in tensors torch allocated. `log_partition` and `nll` are
differentiable with respect to every floating input; `torch.compile` sees each call as one
operator (`semicrf::log_partition`).

dtypes: float32 and float64 run as they are; float16 and bfloat16 inputs run as float32.
Results (log Z, NLL, entropy, marginals) are in the dtype the engine ran (float64 if any
input is float64, else float32); gradients come back in each input's own dtype.

>>> import torch, semicrf.torch as st
>>> scores = torch.randn(2, 6, 3, requires_grad=True)
>>> lengths = torch.tensor([6, 4])
>>> transition = torch.zeros(3, 3, requires_grad=True)
>>> log_z = st.log_partition(scores, lengths, 4, transition=transition)
>>> log_z.sum().backward()          # scores.grad: the position marginals
>>> best = st.viterbi(scores, lengths, 4, transition=transition)
>>> best.segments.shape[-1], best.labels.shape
(3, torch.Size([2, 6]))

`SemiMarkovCRFHead` is a trainable output layer with flash-semicrf's names. The whole API,
with examples, is in docs/python.md.
"""

from ._head import (
    GeometricDuration,
    LearnedDuration,
    NegativeBinomialDuration,
    PoissonDuration,
    SemiMarkovCRFHead,
    UniformDuration,
)
from ._torch_kbest import KBest, kbest, posterior_decode
from ._sample import Samples
from ._sample import torch_sample as sample
from ._torch_api import (
    Marginals,
    Viterbi,
    entropy,
    gold_score,
    labels_from_segments,
    log_partition,
    marginals,
    nll,
    segments_from_labels,
    select,
    viterbi,
)

__all__ = [
    "kbest",
    "posterior_decode",
    "KBest",
    "log_partition",
    "sample",
    "Samples",
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
    "SemiMarkovCRFHead",
    "LearnedDuration",
    "GeometricDuration",
    "NegativeBinomialDuration",
    "PoissonDuration",
    "UniformDuration",
]
