"""Gold segmentations as padded tensors, and their scores computed with torch operations.

A segmentation batch is `segments (B, S, 3)` of `(start, duration, label)` rows, in order,
padded with rows of -1 after `counts[b]` segments, plus `counts (B,)`. Labels per position
`(B, T)` convert to it (a run of one label longer than `K` becomes segments of at most `K`
positions, the last one shorter) and back (-1 past each length).

The gold score follows the model's formula (crates/semicrf-core/src/model.md §2, and §3 for
edges) with gathers in float64, so torch differentiates it: the gradient of an NLL is the
engine's expected counts minus the gold's counts.
"""

from __future__ import annotations

from typing import Tuple

import torch
from torch import Tensor

_INTS = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8)


def segments_from_labels(
    labels: Tensor, lengths: Tensor, max_duration: int
) -> Tuple[Tensor, Tensor]:
    """Labels per position `(B, T)` → `(segments (B, S, 3), counts (B,))`, on labels' device.

    Only `labels[b, :lengths[b]]` is read. Runs of one label are segments, cut every
    `max_duration` positions.
    """
    b, t = labels.shape
    device = labels.device
    lengths = lengths.to(device)
    pos = torch.arange(t, device=device)
    valid = pos.unsqueeze(0) < lengths.unsqueeze(1)
    change = torch.ones_like(labels, dtype=torch.bool)
    change[:, 1:] = labels[:, 1:] != labels[:, :-1]
    run_start = torch.where(change, pos.unsqueeze(0), torch.zeros_like(pos).unsqueeze(0))
    run_start = torch.cummax(run_start, dim=1).values
    new = (((pos.unsqueeze(0) - run_start) % max_duration) == 0) & valid
    counts = new.sum(dim=1)
    s_max = int(counts.max()) if b else 0
    rows, cols = new.nonzero(as_tuple=True)
    index = (new.cumsum(dim=1) - 1)[rows, cols]
    starts = torch.full((b, s_max), -1, dtype=torch.int64, device=device)
    starts[rows, index] = cols
    seg = torch.full((b, s_max, 3), -1, dtype=torch.int64, device=device)
    seg[rows, index, 0] = cols
    seg[rows, index, 2] = labels[rows, cols].to(torch.int64)
    following = torch.cat([starts[:, 1:], starts.new_full((b, 1), -1)], dim=1)
    following = torch.where(following >= 0, following, lengths.unsqueeze(1).to(torch.int64))
    seg[..., 1] = torch.where(starts >= 0, following - starts, -1)
    return seg, counts


def labels_from_segments(segments: Tensor, counts: Tensor, t_max: int) -> Tensor:
    """`(segments (B, S, 3), counts (B,))` → labels per position `(B, T)`, -1 past the end."""
    b, s_max, _ = segments.shape
    device = segments.device
    out = torch.full((b, t_max), -1, dtype=torch.int64, device=device)
    if s_max == 0:
        return out
    mask = torch.arange(s_max, device=device).unsqueeze(0) < counts.to(device).unsqueeze(1)
    dur = torch.where(mask, segments[..., 1], 0).clamp(min=0)
    seg_of_pos = torch.repeat_interleave(torch.arange(b * s_max, device=device), dur.reshape(-1))
    total = dur.sum(dim=1)
    pos = torch.arange(t_max, device=device).unsqueeze(0)
    filled = pos < total.unsqueeze(1)
    flat_labels = segments[..., 2].reshape(-1)
    out[filled] = flat_labels[seg_of_pos]
    return out


def _padded(gold, device) -> Tuple[Tensor, Tensor]:
    """A list (per sequence) of lists of (start, duration, label) → padded tensors."""
    counts = [len(g) for g in gold]
    s_max = max(counts, default=0)
    flat = [x for g in gold for triple in g for x in triple]
    if len(flat) != 3 * sum(counts):
        for b, g in enumerate(gold):
            for i, triple in enumerate(g):
                if len(triple) != 3:
                    raise ValueError(
                        f"gold[{b}][{i}]: expected (start, duration, label), got {triple}"
                    )
    seg = torch.full((len(gold), s_max, 3), -1, dtype=torch.int64)
    counts_t = torch.tensor(counts, dtype=torch.int64)
    mask = torch.arange(s_max).unsqueeze(0) < counts_t.unsqueeze(1)
    seg[mask] = torch.tensor(flat, dtype=torch.int64).reshape(-1, 3)
    return seg.to(device), counts_t.to(device)


def normalize(
    gold, lengths: Tensor, max_duration: int, num_labels: int, batch: int, t_max: int, device
) -> Tuple[Tensor, Tensor]:
    """Any accepted gold form → checked `(labels (B, T), starts (B, T))` on `device`: the
    label of every position (-1 past each length) and whether a segment starts there.

    Accepted: labels per position `(B, T)` (integer tensor), padded segments `(B, S, 3)`
    (integer tensor, rows of -1 after the last segment), or a list of `(start, duration,
    label)` lists. Raises ValueError naming the sequence for anything else or a
    segmentation that does not tile `[0, lengths[b])` with durations in `1..=K` and labels
    in `0..C`.
    """
    host_lengths = lengths
    lengths = lengths.to(device)
    if isinstance(gold, Tensor):
        if gold.dtype not in _INTS:
            raise TypeError(f"gold: expected an integer tensor, got {gold.dtype}")
        if gold.device != device and gold.device.type != "cpu":
            raise ValueError(f"gold: on {gold.device}, but the potentials are on {device}")
        gold = gold.to(device, torch.int64)
        if gold.dim() == 2:
            if gold.shape[0] != batch:
                raise ValueError(f"gold: expected {batch} rows of labels, got {gold.shape[0]}")
            if gold.shape[1] < int(host_lengths.max()):
                raise ValueError(
                    f"gold: labels for {gold.shape[1]} positions, "
                    f"but a length is {int(host_lengths.max())}"
                )
            gold = gold[:, :t_max]
            valid = torch.arange(gold.shape[1], device=device).unsqueeze(0) < lengths.unsqueeze(1)
            bad = valid & ((gold < 0) | (gold >= num_labels))
            if bool(bad.any()):
                b, t = (int(v) for v in bad.nonzero()[0])
                raise ValueError(
                    f"gold[{b}, {t}] = {int(gold[b, t])} is not a label in 0..{num_labels}"
                )
            labels = torch.where(valid, gold, -1)
            return labels, _starts_from_labels(labels, lengths, max_duration)
        if gold.dim() != 3 or gold.shape[-1] != 3:
            raise ValueError(
                f"gold: expected labels (B, T) or segments (B, S, 3), got shape {tuple(gold.shape)}"
            )
        seg = gold
        counts = (seg != -1).any(dim=-1).sum(dim=1)
    elif isinstance(gold, (list, tuple)):
        seg, counts = _padded(gold, device)
    else:
        raise TypeError(
            f"gold: expected a tensor or a list of segment lists, got {type(gold).__name__}"
        )
    _check_tiling(seg, counts, lengths, max_duration, num_labels, batch)
    return labels_from_segments(seg, counts, t_max), _starts_from_segments(seg, counts, t_max)


def _starts_from_labels(labels: Tensor, lengths: Tensor, k: int) -> Tensor:
    """Where a segment starts: a change of label, or every `k` positions within a run."""
    b, t = labels.shape
    pos = torch.arange(t, device=labels.device).unsqueeze(0)
    change = torch.ones_like(labels, dtype=torch.bool)
    change[:, 1:] = labels[:, 1:] != labels[:, :-1]
    run_start = torch.cummax(torch.where(change, pos, 0), dim=1).values
    return (((pos - run_start) % k) == 0) & (pos < lengths.unsqueeze(1))


def _starts_from_segments(seg: Tensor, counts: Tensor, t_max: int) -> Tensor:
    b, s_max, _ = seg.shape
    mask = torch.arange(s_max, device=seg.device).unsqueeze(0) < counts.unsqueeze(1)
    starts = torch.zeros((b, t_max + 1), dtype=torch.bool, device=seg.device)
    starts.scatter_(1, torch.where(mask, seg[..., 0], t_max), True)
    return starts[:, :t_max]


def _check_tiling(seg, counts, lengths, k, c, batch) -> None:
    if seg.shape[0] != batch:
        raise ValueError(
            f"gold: {seg.shape[0]} segmentations given, expected one per sequence (B = {batch})"
        )
    s_max = seg.shape[1]
    idx = torch.arange(s_max, device=seg.device).unsqueeze(0)
    mask = idx < counts.unsqueeze(1)
    start, dur, lab = seg[..., 0], seg[..., 1], seg[..., 2]
    expected_start = torch.cumsum(torch.where(mask, dur, 0), dim=1) - torch.where(mask, dur, 0)
    problems = [
        (mask & (start != expected_start), "segment {i} starts at {s}, expected {e}"),
        (mask & ((dur < 1) | (dur > k)), "segment {i} has duration {d}, outside 1..={k}"),
        (mask & ((lab < 0) | (lab >= c)), "segment {i} has label {lab}, outside 0..{c}"),
        (~mask & (seg != -1).any(dim=-1), "row {i} after the last segment is not (-1, -1, -1)"),
    ]
    for bad, text in problems:
        hit = bad.nonzero()
        if hit.numel():
            b, i = int(hit[0, 0]), int(hit[0, 1])
            s, d, lab = (int(x) for x in seg[b, i])
            e = int(expected_start[b, i])
            raise ValueError(f"gold[{b}]: " + text.format(i=i, s=s, e=e, d=d, lab=lab, k=k, c=c))
    total = torch.where(mask, dur, 0).sum(dim=1)
    bad = (total != lengths).nonzero()
    if bad.numel():
        b = int(bad[0, 0])
        raise ValueError(
            f"gold[{b}]: the segments cover {int(total[b])} positions, "
            f"but the length is {int(lengths[b])}"
        )
    if bool((counts == 0).any()):
        b = int((counts == 0).nonzero()[0, 0])
        raise ValueError(f"gold[{b}]: no segments")


def _masked_sum(values: Tensor, mask: Tensor) -> Tensor:
    return torch.where(mask, values, torch.zeros_like(values)).sum(dim=1)


def gold_score(inputs: dict, labels: Tensor, starts: Tensor, lengths: Tensor) -> Tensor:
    """The score of each gold segmentation `(B,)`, float64, differentiable; the segmentation
    given by the label of every position and where its segments start (`normalize`)."""
    device = labels.device
    b, t_max = labels.shape
    pos = torch.arange(t_max, device=device).unsqueeze(0)
    lengths = lengths.to(device).unsqueeze(1)
    valid = pos < lengths
    lab = labels.clamp(min=0)
    following = torch.cat([starts[:, 1:], torch.ones_like(starts[:, :1])], dim=1)
    ends = valid & (following | (pos == lengths - 1))
    seg_start = torch.cummax(torch.where(starts, pos, 0), dim=1).values
    dur_at_end = pos - seg_start + 1
    end_at = torch.where(ends, pos, t_max).flip(1).cummin(dim=1).values.flip(1)
    dur_at_start = (end_at - pos + 1).clamp(min=1)
    prev = torch.cat([lab[:, :1], lab[:, :-1]], dim=1)
    later = starts & (pos > 0)
    rows = torch.arange(b, device=device).unsqueeze(1).expand(b, t_max)
    if inputs.get("edges") is not None:
        e = inputs["edges"].double()
        k = e.shape[2]
        d0 = dur_at_start[:, 0].clamp(max=k) - 1
        first = e[torch.arange(b, device=device), 0, d0, lab[:, 0]]  # (B, C) over sources
        dead = torch.isneginf(first).all(dim=1, keepdim=True)
        first = torch.logsumexp(torch.where(dead, torch.zeros_like(first), first), dim=1)
        first = torch.where(dead.squeeze(1), torch.full_like(first, float("-inf")), first)
        rest = e[rows, pos.expand(b, t_max), dur_at_start.clamp(max=k) - 1, lab, prev]
        return first + _masked_sum(rest, later)
    total = _masked_sum(inputs["scores"].double().gather(2, lab.unsqueeze(-1)).squeeze(-1), valid)
    dur = inputs.get("duration")
    if dur is not None:
        k = dur.shape[0]
        total = total + _masked_sum(dur.double()[dur_at_end.clamp(max=k) - 1, lab], ends)
    for name, where in (("begin_boundary", starts), ("end_boundary", ends)):
        if inputs.get(name) is not None:
            v = inputs[name].double().gather(2, lab.unsqueeze(-1)).squeeze(-1)
            total = total + _masked_sum(v, where)
    tr = inputs.get("transition")
    if tr is not None:
        tr = tr.double()
        if tr.dim() == 2:
            v = tr[prev, lab]
        else:
            v = tr[dur_at_start.clamp(max=tr.shape[0]) - 1, prev, lab]
        total = total + _masked_sum(v, later)
    if inputs.get("start") is not None:
        total = total + inputs["start"].double()[lab[:, 0]]
    if inputs.get("end") is not None:
        last = lab.gather(1, (lengths - 1).clamp(min=0)).squeeze(1)
        total = total + inputs["end"].double()[last]
    return total


def padded_decodings(scores, segments, t_max: int, device) -> Tuple[Tensor, Tensor, Tensor]:
    """Native decodings (lists of `(start, duration, label)`) → `(segments, counts, labels)`."""
    seg, counts = _padded(segments, "cpu")
    labels = labels_from_segments(seg, counts, t_max)
    return seg.to(device), counts.to(device), labels.to(device)
