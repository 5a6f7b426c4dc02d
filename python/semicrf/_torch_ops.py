"""The differentiable log partition as one opaque PyTorch operator, `semicrf::log_partition`.

Registered with `torch.library.custom_op` and `register_autograd`, so eager autograd and
`torch.compile` both see a single call into the engine.

When a gradient will be asked (grad mode on and some input requires it) the forward pass
runs the engine's forward-backward at once, with upstream 1 for every sequence, and keeps
the gradients (expected counts): a training step costs one engine call. The backward pass
then weights them by the upstream gradient `g`: the per-sequence tensors row by row, the
shared parameters (summed over the batch by the engine) by `g_0` when every `g_b` is the
same (a sum or a mean of the losses). For any other `g` with a shared parameter given,
the engine runs again with `g` as its upstream. That choice depends on the values of `g`,
so it is made inside a second opaque operator, `semicrf::log_partition_backward`: the
backward graph that torch.compile traces holds no data-dependent branch.
"""

from typing import List, Optional

import numpy as np
import torch
from torch import Tensor

from ._torch_problem import FLOAT_NAMES, PER_POSITION, SHARED, Call, compute_dtype

_N = len(FLOAT_NAMES)


def _inputs(args) -> dict:
    return dict(zip(FLOAT_NAMES, args))


def _grad_dtype(name: str, device: torch.device, compute: torch.dtype) -> torch.dtype:
    # The CPU engines return float64 arrays; the CUDA entry writes the (B, T, C) gradients
    # in the problem's dtype and returns the shared ones as float64.
    if device.type == "cuda" and name in PER_POSITION:
        return compute
    return torch.float64


def _empty(device) -> Tensor:
    return torch.empty((0,), dtype=torch.float64, device=device)


def _run(
    inputs: dict,
    lengths: Tensor,
    max_duration: int,
    backend: str,
    memory_budget: Optional[str],
    with_grad: bool,
    upstream: Optional[np.ndarray],
) -> List[Tensor]:
    call = Call(inputs, lengths, max_duration, backend, memory_budget)
    if not with_grad:
        return [call.log_partition()] + [_empty(call.device) for _ in FLOAT_NAMES]
    out = call.backward(upstream)
    grads = []
    for name in FLOAT_NAMES:
        g = out.get(name)
        if inputs.get(name) is None or g is None:
            grads.append(_empty(call.device))
        else:
            grads.append(g.to(call.device, _grad_dtype(name, call.device, call.dtype)))
    return [out["log_z"].to(call.device, call.dtype)] + grads


def _fake(inputs: dict, lengths: Tensor, with_grad: bool) -> List[Tensor]:
    main = inputs["scores"] if inputs.get("scores") is not None else inputs["edges"]
    compute = compute_dtype(list(inputs.values()))
    out = [main.new_empty((main.shape[0],), dtype=compute)]
    for name in FLOAT_NAMES:
        t = inputs.get(name)
        if t is None or not with_grad:
            out.append(main.new_empty((0,), dtype=torch.float64))
        else:
            out.append(t.new_empty(t.shape, dtype=_grad_dtype(name, main.device, compute)))
    return out


@torch.library.custom_op("semicrf::log_partition", mutates_args=())
def log_partition_op(
    scores: Optional[Tensor],
    transition: Optional[Tensor],
    duration: Optional[Tensor],
    start: Optional[Tensor],
    end: Optional[Tensor],
    begin_boundary: Optional[Tensor],
    end_boundary: Optional[Tensor],
    edges: Optional[Tensor],
    lengths: Tensor,
    max_duration: int,
    backend: str,
    memory_budget: Optional[str],
    with_grad: bool,
) -> List[Tensor]:
    """log Z `(B,)`, then (when `with_grad`) the gradients of Σ_b log Z_b, one per floating
    input in `FLOAT_NAMES` order (empty for inputs not given)."""
    inputs = _inputs(
        (scores, transition, duration, start, end, begin_boundary, end_boundary, edges)
    )
    return _run(inputs, lengths, max_duration, backend, memory_budget, with_grad, None)


@log_partition_op.register_fake
def _(
    scores,
    transition,
    duration,
    start,
    end,
    begin_boundary,
    end_boundary,
    edges,
    lengths,
    max_duration,
    backend,
    memory_budget,
    with_grad,
):
    inputs = _inputs(
        (scores, transition, duration, start, end, begin_boundary, end_boundary, edges)
    )
    return _fake(inputs, lengths, with_grad)


@torch.library.custom_op("semicrf::log_partition_backward", mutates_args=())
def log_partition_backward_op(
    scores: Optional[Tensor],
    transition: Optional[Tensor],
    duration: Optional[Tensor],
    start: Optional[Tensor],
    end: Optional[Tensor],
    begin_boundary: Optional[Tensor],
    end_boundary: Optional[Tensor],
    edges: Optional[Tensor],
    lengths: Tensor,
    max_duration: int,
    backend: str,
    memory_budget: Optional[str],
    upstream: Tensor,
    counts: List[Tensor],
) -> List[Tensor]:
    """The gradients of Σ_b upstream[b] log Z_b, in `FLOAT_NAMES` order (empty for inputs
    not given), from the expected `counts` the forward pass kept; the engine runs again only
    when `upstream` is not the same for every sequence and a shared input was given."""
    inputs = _inputs(
        (scores, transition, duration, start, end, begin_boundary, end_boundary, edges)
    )
    host = upstream.detach().to("cpu", torch.float64)
    shared = any(inputs.get(name) is not None for name in SHARED)
    if shared and host.numel() and not bool((host == host[0]).all()):
        out = _run(
            inputs, lengths, max_duration, backend, memory_budget, True, host.contiguous().numpy()
        )
        return [g.clone() if g.numel() == 0 else g for g in out[1:]]
    grads = []
    for name, c in zip(FLOAT_NAMES, counts):
        if c.numel() == 0 or inputs.get(name) is None:
            grads.append(c.clone())
        elif name in SHARED:
            grads.append(c * host[0].item())
        else:
            g = upstream.detach().to(c.device, c.dtype)
            grads.append(c * g.reshape((-1,) + (1,) * (c.dim() - 1)))
    return grads


@log_partition_backward_op.register_fake
def _(
    scores,
    transition,
    duration,
    start,
    end,
    begin_boundary,
    end_boundary,
    edges,
    lengths,
    max_duration,
    backend,
    memory_budget,
    upstream,
    counts,
):
    return [torch.empty_like(c) for c in counts]


def _setup_context(ctx, inputs, output):
    floats = inputs[:_N]
    ctx.lengths, ctx.max_duration, ctx.backend, ctx.budget, ctx.with_grad = inputs[_N:]
    ctx.save_for_backward(*floats, *output[1:])
    ctx.input_dtypes = [None if t is None else t.dtype for t in floats]


def _backward(ctx, grads):
    g = grads[0]
    saved = ctx.saved_tensors
    floats, counts = saved[:_N], saved[_N:]
    needs = ctx.needs_input_grad[:_N]
    result: List[Optional[Tensor]] = [None] * (len(ctx.needs_input_grad))
    if g is None or not any(needs):
        return tuple(result)
    if not ctx.with_grad:
        raise RuntimeError(
            "semicrf: the log partition was computed without gradients (grad mode was off "
            "or no input required grad); compute it again with grad enabled"
        )
    weighted = log_partition_backward_op(
        *floats, ctx.lengths, ctx.max_duration, ctx.backend, ctx.budget, g, list(counts)
    )
    for i, need in enumerate(needs):
        if need and floats[i] is not None:
            result[i] = weighted[i].to(ctx.input_dtypes[i])
    return tuple(result)


log_partition_op.register_autograd(_backward, setup_context=_setup_context)


def log_partition(
    inputs: dict, lengths: Tensor, max_duration: int, backend: str, memory_budget
) -> Tensor:
    """log Z `(B,)`, differentiable with respect to every floating input that was given."""
    args = [inputs.get(name) for name in FLOAT_NAMES]
    with_grad = torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in args)
    budget = None if memory_budget is None else str(memory_budget)
    out = log_partition_op(*args, lengths, max_duration, backend, budget, with_grad)
    return out[0]
