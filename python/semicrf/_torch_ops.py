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

Eager calls (not under torch.compile) take the same steps through a
`torch.autograd.Function` instead of the operator: the dispatcher's wrapping of a Python
custom operator (argument trees, default filling, zero-filled gradients for the unused
outputs) costs more than the engine itself on small problems. The gradient of a sum of the
log partitions arrives expanded from one value (stride 0): the weighting then reads no value
on the host.
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
    # The CPU engines return float64 arrays; on CUDA every gradient is in the problem's
    # dtype, written so by the engine into tensors torch allocated (the shared ones rounded
    # once from the engine's float64 sums).
    if device.type == "cuda":
        return compute
    return torch.float64


def _as(t: Tensor, device: torch.device, dtype: torch.dtype) -> Tensor:
    """`t` on `device` in `dtype` (itself when it already is: `.to` costs a dispatch)."""
    return t if t.device == device and t.dtype == dtype else t.to(device, dtype)


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
    placeholders: bool = True,
) -> List[Optional[Tensor]]:
    """log Z, then the gradients of Σ_b upstream[b] log Z_b (upstream None: all ones) in
    `FLOAT_NAMES` order; for inputs not given (or without `with_grad`), an empty tensor
    where `placeholders` (an operator returns tensors only), else None."""
    call = Call(inputs, lengths, max_duration, backend, memory_budget)

    def missing():
        return _empty(call.device) if placeholders else None

    if not with_grad:
        return [call.log_partition()] + [missing() for _ in FLOAT_NAMES]
    out = call.backward(upstream)
    grads = []
    for name in FLOAT_NAMES:
        g = out.get(name)
        if inputs.get(name) is None or g is None:
            grads.append(missing())
        elif call.cuda:  # on the device already, in the problem's dtype
            grads.append(g)
        else:
            grads.append(_as(g, call.device, _grad_dtype(name, call.device, call.dtype)))
    if call.cuda:
        return [out["log_z"]] + grads
    return [_as(out["log_z"], call.device, call.dtype)] + grads


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

    def rerun(host: np.ndarray) -> List[Tensor]:
        out = _run(inputs, lengths, max_duration, backend, memory_budget, True, host)
        return [g.clone() if g.numel() == 0 else g for g in out[1:]]

    grads = _weigh(inputs, counts, upstream, rerun)
    return [c.clone() if g is None else g for g, c in zip(grads, counts)]


def _weigh(inputs: dict, counts, upstream: Tensor, rerun) -> List[Optional[Tensor]]:
    """The gradients of Σ_b upstream[b] log Z_b, in `FLOAT_NAMES` order (None where no
    count was kept), from the `counts` (the gradients of Σ_b log Z_b); `rerun(host)` runs
    the engine again with `host` as its upstream, for a `upstream` whose values differ
    while a shared input was given (its counts are summed over the sequences)."""
    one = None
    if upstream.dim() == 1 and upstream.numel() and upstream.stride(0) == 0:
        # Expanded from one value (the gradient of a sum): every g_b is the same.
        one = upstream.detach().select(0, 0)
    else:
        host = upstream.detach().to("cpu", torch.float64)
        shared = any(inputs.get(name) is not None for name in SHARED)
        if shared and host.numel() and not bool((host == host[0]).all()):
            return rerun(host.contiguous().numpy())
    kept = [
        c is not None and c.numel() != 0 and inputs.get(name) is not None
        for name, c in zip(FLOAT_NAMES, counts)
    ]
    if one is not None:
        return _times(counts, kept, one)
    grads: List[Optional[Tensor]] = []
    for name, c, k in zip(FLOAT_NAMES, counts, kept):
        if not k:
            grads.append(None)
        elif name in SHARED:
            grads.append(c * host[0].item())
        else:
            g = upstream.detach().to(c.device, c.dtype)
            grads.append(c * g.reshape((-1,) + (1,) * (c.dim() - 1)))
    return grads


def _times(counts, kept, one: Tensor) -> List[Optional[Tensor]]:
    """`c * one` for each count `c` kept (None for the others), `one` a 0-d tensor: the
    product keeps c's dtype. Counts of `one`'s dtype and device are multiplied in one
    `_foreach_mul` (one kernel on CUDA, the same products as `c * one`)."""
    grads: List[Optional[Tensor]] = [None] * len(counts)
    same = [
        i
        for i, c in enumerate(counts)
        if kept[i] and c.dtype == one.dtype and c.device == one.device
    ]
    if len(same) > 1:
        for i, g in zip(same, torch._foreach_mul([counts[i] for i in same], one)):
            grads[i] = g
    for i, c in enumerate(counts):
        if kept[i] and grads[i] is None:
            grads[i] = c * one
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


class _Eager(torch.autograd.Function):
    """`semicrf::log_partition` with its autograd, for eager calls (see the module's docs)."""

    @staticmethod
    def forward(ctx, lengths, max_duration, backend, budget, *floats):
        inputs = _inputs(floats)
        out = _run(inputs, lengths, max_duration, backend, budget, True, None, False)
        ctx.counts = out[1:]
        ctx.args = (lengths, max_duration, backend, budget)
        ctx.save_for_backward(*floats)
        return out[0]

    @staticmethod
    def backward(ctx, g):
        floats = ctx.saved_tensors
        inputs = _inputs(floats)
        needs = ctx.needs_input_grad[4:]
        if not any(needs):
            return (None,) * (4 + _N)

        def rerun(host: np.ndarray) -> List[Optional[Tensor]]:
            return _run(inputs, *ctx.args, True, host, False)[1:]

        grads = _weigh(inputs, ctx.counts, g, rerun)
        result = [
            None
            if not need or t is None or grad is None
            else grad
            if grad.dtype == t.dtype
            else grad.to(t.dtype)
            for need, t, grad in zip(needs, floats, grads)
        ]
        return (None, None, None, None, *result)


def log_partition(
    inputs: dict, lengths: Tensor, max_duration: int, backend: str, memory_budget
) -> Tensor:
    """log Z `(B,)`, differentiable with respect to every floating input that was given."""
    args = [inputs.get(name) for name in FLOAT_NAMES]
    with_grad = torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in args)
    budget = None if memory_budget is None else str(memory_budget)
    if torch.compiler.is_compiling():
        return log_partition_op(*args, lengths, max_duration, backend, budget, with_grad)[0]
    if with_grad:
        return _Eager.apply(lengths, max_duration, backend, budget, *args)
    return _run(_inputs(args), lengths, max_duration, backend, budget, False, None, False)[0]
