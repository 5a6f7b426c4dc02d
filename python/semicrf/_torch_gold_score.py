"""The score of a gold segmentation (crates/semicrf-core/src/model.md §2, and §3 for edges),
differentiable, from a checked `Gold` (`_torch_gold.normalize`).

Structured potentials are scored by one autograd node, `GoldScore`: its forward pass
gathers every term the segmentation uses and sums each sequence's terms in float64; its
backward pass writes the gradients directly (the gradient of a gold score is the gold's
counts). Per-position inputs (`scores`, `begin_boundary`, `end_boundary`) get `g_b` where
sequence b's gold uses the entry and 0 elsewhere; the shared ones (`duration`,
`transition`, `start`, `end`) get `Σ_b g_b · count_b`, the counts integers summed per
sequence, so that the float sums never depend on the order of atomic additions: the
gradients are bitwise identical from run to run on every device.

Every shared term sits at the last position of its segment, where the segment's duration
(offset + 1), start (position - offset) and the previous segment's label (the label just
before the start) are known; `start` and `end` are read once per sequence.

Edge potentials take the generic path: torch differentiates gathers (edges run on the CPU
engines only).
"""

from __future__ import annotations

import torch
from torch import Tensor

from ._torch_gold import Gold

#: Inputs with a row per position, `(B, T, C)`, in the order `GoldScore` takes them.
PER_POSITION = ("scores", "begin_boundary", "end_boundary")
#: Inputs shared by the batch, in the order `GoldScore` takes them and lays them out.
SHARED = ("duration", "transition", "start", "end")


def gold_score(inputs: dict, gold: Gold) -> Tensor:
    """The score of each gold segmentation `(B,)`, float64, differentiable."""
    if inputs.get("edges") is not None:
        return _edge_score(inputs["edges"], gold)
    per_position = [inputs.get(n) for n in PER_POSITION]
    shared = [inputs.get(n) for n in SHARED]
    at, masks, index = _plan(gold, per_position, shared)
    return GoldScore.apply(at, index, *masks, *per_position, *shared)


def _plan(gold: Gold, per_position: list, shared: list) -> tuple:
    """Where the gold's terms are: `at (B, T, 1)` the label of every position, the mask
    `(B, T, 1)` of the positions each per-position input is read at (None for an absent
    input), and for the shared inputs `index (B, M, 1)` into their concatenation
    (`SHARED` order, each flattened) followed by one zero, at which every unused slot
    points (None without shared inputs)."""
    labels, valid, offset, lengths = gold
    ends = None
    if per_position[2] is not None or shared[0] is not None or shared[1] is not None:
        # The last position of a segment: the next one starts a segment or is past the
        # length, where the offset is 0 (as at position 0, which the roll brings last).
        ends = valid & (offset.roll(-1, 1) == 0)
    starts = valid & (offset == 0) if per_position[1] is not None else None
    masks = [
        None if x is None else m.unsqueeze(-1) for x, m in zip(per_position, (valid, starts, ends))
    ]
    index = None
    if any(t is not None for t in shared):
        index = _shared_index(labels, offset, lengths, ends, shared).unsqueeze(-1)
    return labels.unsqueeze(-1), masks, index


def _shared_index(labels, offset, lengths, ends, shared) -> Tensor:
    """`(B, M)` slots of the shared inputs' concatenation: the duration and transition of
    each segment at its last position, `start` and `end` once per sequence."""
    duration, transition, start, end = shared
    c = _first(shared).shape[-1]  # every shared input ends with the labels' axis
    size = sum(t.numel() for t in shared if t is not None)
    cells, at = [], 0
    if duration is not None:
        cells.append(torch.add(labels, offset, alpha=c))  # duration comes first: at 0
        at += duration.numel()
    # `start` right after a (C, C) `transition` is its row C: the first segment's.
    fold_start = transition is not None and transition.dim() == 2 and start is not None
    if transition is not None:
        first = torch.arange(labels.shape[1], device=labels.device) - offset
        before = torch.nn.functional.pad(labels[:, :-1], (1, 0), value=c)  # C before 0
        cell = (labels + at).add_(before.gather(1, first), alpha=c)
        if transition.dim() == 3:
            cell.add_(offset, alpha=c * c)
        if not fold_start:
            cell = torch.where(first > 0, cell, size)
        cells.append(cell)
        at += transition.numel()
    columns = []
    if cells:
        cells = torch.stack(cells, dim=2) if len(cells) > 1 else cells[0].unsqueeze(2)
        columns.append(torch.where(ends.unsqueeze(2), cells, size).flatten(1))
    if start is not None:
        if not fold_start:
            columns.append(labels[:, :1] + at)
        at += start.numel()
    if end is not None:
        columns.append(labels.gather(1, lengths.unsqueeze(1) - 1) + at)
    return torch.cat(columns, dim=1) if len(columns) > 1 else columns[0]


def _first(tensors):
    return next(t for t in tensors if t is not None)


class GoldScore(torch.autograd.Function):
    """`(at, index, masks..., scores, begin_boundary, end_boundary, duration, transition,
    start, end) → (B,)` float64: the sum of every term a gold segmentation uses (`_plan`);
    absent inputs are None."""

    @staticmethod
    def forward(ctx, at, index, valid, starts, ends, *inputs):
        per_position, shared = inputs[:3], inputs[3:]
        terms = []
        present = [t for t in shared if t is not None]
        if present:
            flat = torch.cat([t.reshape(-1) for t in present] + [present[0].new_zeros(1)])
            terms.append(flat.take(index))
        for x, mask in zip(per_position, (valid, starts, ends)):
            if x is not None:
                terms.append(torch.where(mask, x.gather(2, at), 0))
        total = torch.cat(terms, dim=1) if len(terms) > 1 else terms[0]
        ctx.save_for_backward(at, index, valid, starts, ends)
        ctx.meta = [None if t is None else (t.shape, t.dtype) for t in inputs]
        return total.sum(dim=(1, 2), dtype=torch.float64)

    @staticmethod
    def backward(ctx, grad):
        at, index, valid, starts, ends = ctx.saved_tensors
        meta = ctx.meta
        needs = ctx.needs_input_grad[5:]
        out: list = [None] * len(meta)
        g = grad.reshape(-1, 1, 1)
        for i, mask in enumerate((valid, starts, ends)):
            if needs[i]:
                # g_b at each read position's label (one per position: no two writes meet).
                shape, dtype = meta[i]
                used = torch.where(mask, g.to(dtype), 0)
                out[i] = torch.zeros(shape, dtype=dtype, device=g.device).scatter_(2, at, used)
        if any(needs[3:]):
            # Integer counts per sequence (exact in any order of addition), then one
            # float64 sum over the batch: Σ_b g_b count_b, only where count_b > 0.
            shared = [(i, m) for i, m in enumerate(meta[3:], 3) if m is not None]
            sizes = [m[0].numel() for _, m in shared]
            counts = index.new_zeros((g.shape[0], sum(sizes) + 1, 1), dtype=torch.int32)
            counts.scatter_add_(1, index, torch.ones_like(index, dtype=torch.int32))
            weighted = torch.where(counts > 0, counts * g, 0).sum(dim=0)
            dtypes = {m[1] for _, m in shared}
            if len(dtypes) == 1:
                weighted = weighted.to(dtypes.pop())
            for (i, (shape, dtype)), part in zip(shared, weighted.split(sizes + [1])):
                if needs[i]:
                    part = part.view(shape)
                    out[i] = part if part.dtype == dtype else part.to(dtype)
        return (None, None, None, None, None, *out)


def _edge_score(edges: Tensor, gold: Gold) -> Tensor:
    """The gold score of edge potentials `(B, T, K, C, C)`: each segment's edge from the
    previous segment's label, the first one's from the virtual start (log-sum-exp over the
    sources). Torch differentiates the gathers."""
    labels, valid, offset, _ = gold
    e = edges.double()
    b, t_max, k = e.shape[:3]
    ends = valid & (offset.roll(-1, 1) == 0)
    first = torch.arange(t_max, device=labels.device) - offset
    previous = labels.gather(1, (first - 1).clamp(min=0))
    rows = torch.arange(b, device=labels.device)
    d0 = (valid & (first == 0)).sum(dim=1) - 1  # the first segment's duration - 1
    head = e[rows, 0, d0, labels[:, 0]]  # (B, C) over the sources
    dead = torch.isneginf(head).all(dim=1, keepdim=True)
    head = torch.logsumexp(torch.where(dead, torch.zeros_like(head), head), dim=1)
    head = torch.where(dead.squeeze(1), torch.full_like(head, float("-inf")), head)
    rest = e[rows.unsqueeze(1), first, offset.clamp(max=k - 1), labels, previous]
    later = ends & (first > 0)
    return head + torch.where(later, rest, torch.zeros_like(rest)).sum(dim=1)
