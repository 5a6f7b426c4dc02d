"""Gold segmentations: their forms as padded tensors, and their checks.

A segmentation batch is `segments (B, S, 3)` of `(start, duration, label)` rows, in order,
padded with rows of -1 after `counts[b]` segments, plus `counts (B,)`. Labels per position
`(B, T)` convert to it (a run of one label longer than `K` becomes segments of at most `K`
positions, the last one shorter) and back (-1 past each length).

`normalize` turns any accepted form into a checked `Gold` per position (label and offset
within the segment), which `_torch_gold_score` scores.
"""

from __future__ import annotations

from typing import List, NamedTuple, Tuple

import numpy as np
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
    seg = np.full((len(gold), s_max, 3), -1, dtype=np.int64)
    counts_a = np.asarray(counts, dtype=np.int64)
    seg[np.arange(s_max)[None, :] < counts_a[:, None]] = np.asarray(flat, np.int64).reshape(-1, 3)
    return torch.from_numpy(seg).to(device), torch.from_numpy(counts_a).to(device)


class Gold(NamedTuple):
    """A checked gold segmentation per position, on the potentials' device."""

    #: `(B, T)` int64, the label of every position (in `0..C` past each length too).
    labels: Tensor
    #: `(B, T)` bool, the positions within each length.
    valid: Tensor
    #: `(B, T)` int64, each position's offset within its segment (0 where a segment
    #: starts, and past each length).
    offset: Tensor
    #: `(B,)` int64, the lengths.
    lengths: Tensor


def normalize(
    gold, lengths: Tensor, max_duration: int, num_labels: int, batch: int, t_max: int, device
) -> Gold:
    """Any accepted gold form → a checked `Gold` on `device`.

    Accepted: labels per position `(B, T)` (integer tensor), padded segments `(B, S, 3)`
    (integer tensor, rows of -1 after the last segment), or a list of `(start, duration,
    label)` lists. Raises ValueError naming the sequence for anything else or a
    segmentation that does not tile `[0, lengths[b])` with durations in `1..=K` and labels
    in `0..C`.

    `lengths` are on the host. The checks of a tensor on the device end in one reduction
    read once; a list is checked on the host and its result copied to the device at once.
    """
    host_lengths = lengths.to(torch.int64)
    if isinstance(gold, Tensor):
        if gold.dtype not in _INTS:
            raise TypeError(f"gold: expected an integer tensor, got {gold.dtype}")
        if gold.device != device and gold.device.type != "cpu":
            raise ValueError(f"gold: on {gold.device}, but the potentials are on {device}")
        if gold.dim() == 2:
            if gold.shape[0] != batch:
                raise ValueError(f"gold: expected {batch} rows of labels, got {gold.shape[0]}")
            longest = int(host_lengths.numpy().max()) if batch else 0
            if gold.shape[1] < longest:
                raise ValueError(
                    f"gold: labels for {gold.shape[1]} positions, but a length is {longest}"
                )
            gold, lengths = _upload([gold[:, :t_max], host_lengths], device)
            return _from_labels(gold, lengths, max_duration, num_labels, t_max)
        if gold.dim() != 3 or gold.shape[-1] != 3:
            raise ValueError(
                f"gold: expected labels (B, T) or segments (B, S, 3), got shape {tuple(gold.shape)}"
            )
        seg, lengths = _upload([gold, host_lengths], device)
        counts = (seg != -1).any(dim=-1).sum(dim=1)
        _check_tiling(seg, counts, lengths, max_duration, num_labels, batch)
        return _from_segments(seg, counts, lengths, t_max)
    if isinstance(gold, (list, tuple)):
        seg, counts = _padded(gold, "cpu")
        _check_tiling(seg, counts, host_lengths, max_duration, num_labels, batch)
        labels, _, offset, _ = _from_segments(seg, counts, host_lengths, t_max)
        labels, offset, lengths = _upload([labels, offset, host_lengths], device)
        valid = torch.arange(t_max, device=lengths.device) < lengths.unsqueeze(1)
        return Gold(labels, valid, offset, lengths)
    raise TypeError(
        f"gold: expected a tensor or a list of segment lists, got {type(gold).__name__}"
    )


def _upload(tensors, device) -> List[Tensor]:
    """Integer tensors → int64 on `device`; those on the host travel in one copy."""
    tensors = [t if t.dtype == torch.int64 else t.to(torch.int64) for t in tensors]
    away = [i for i, t in enumerate(tensors) if t.device != torch.device(device)]
    if not away:
        return tensors
    flat = torch.cat([tensors[i].reshape(-1) for i in away])
    # From pageable host memory to the device: the copy is staged at once and does not
    # wait for the device's stream.
    flat = flat.to(device, non_blocking=True)
    at = 0
    for i in away:
        n = tensors[i].numel()
        tensors[i] = flat[at : at + n].view(tensors[i].shape)
        at += n
    return tensors


def _from_labels(gold: Tensor, lengths: Tensor, k: int, c: int, t_max: int) -> Gold:
    """Labels per position, checked (one read of the device), and their segments: runs of
    one label cut every `k` positions."""
    t = gold.shape[1]
    pos = torch.arange(t, device=gold.device)
    valid = pos < lengths.unsqueeze(1)
    labels = torch.where(valid, gold, 0)
    bad = labels.clamp(0, c - 1) != labels
    if bool(bad.any()):
        i, j = (int(v) for v in bad.nonzero()[0])
        raise ValueError(f"gold[{i}, {j}] = {int(gold[i, j])} is not a label in 0..{c}")
    # A run starts where the label changes (at position 0 the comparison, with the last
    # label, does not matter: the start is 0 either way).
    run_start = torch.cummax(torch.where(labels != labels.roll(1, 1), pos, 0), dim=1).values
    offset = torch.where(valid, (pos - run_start) % k, 0)
    if t < t_max:
        pad = torch.nn.functional.pad
        labels, valid, offset = (pad(x, (0, t_max - t)) for x in (labels, valid, offset))
    return Gold(labels, valid, offset, lengths)


def _from_segments(seg: Tensor, counts: Tensor, lengths: Tensor, t_max: int) -> Gold:
    """Checked padded segments → `Gold`, without reading the device: each segment's label
    lands at its start and is carried to its end."""
    b, s_max, _ = seg.shape
    device = seg.device
    mask = torch.arange(s_max, device=device).unsqueeze(0) < counts.unsqueeze(1)
    at = torch.where(mask, seg[..., 0], t_max)  # rows past the last: a column dropped below
    label_at = torch.full((b, t_max + 1), -1, dtype=torch.int64, device=device)
    label_at.scatter_(1, at, torch.where(mask, seg[..., 2], -1))
    pos = torch.arange(t_max, device=device)
    label_at = label_at[:, :t_max]
    first = torch.cummax(torch.where(label_at >= 0, pos, 0), dim=1).values
    valid = pos < lengths.unsqueeze(1)
    offset = torch.where(valid, pos - first, 0)
    return Gold(label_at.gather(1, first), valid, offset, lengths)


def _check_tiling(seg, counts, lengths, k, c, batch) -> None:
    """Every check of a padded segmentation folded into one flag, read once; only a failed
    check looks further, for the first problem's message."""
    if seg.shape[0] != batch:
        raise ValueError(
            f"gold: {seg.shape[0]} segmentations given, expected one per sequence (B = {batch})"
        )
    s_max = seg.shape[1]
    mask = torch.arange(s_max, device=seg.device).unsqueeze(0) < counts.unsqueeze(1)
    start, dur, lab = seg.unbind(-1)
    dur_in = torch.where(mask, dur, 0)
    end = torch.cumsum(dur_in, dim=1)
    wrong = torch.where(
        mask,
        (start != end - dur_in) | (dur < 1) | (dur > k) | (lab < 0) | (lab >= c),
        (seg != -1).any(dim=-1),
    )
    if bool((wrong.any(dim=1) | (dur_in.sum(dim=1) != lengths) | (counts == 0)).any()):
        _explain_tiling(seg, counts, lengths, k, c)


def _explain_tiling(seg, counts, lengths, k, c) -> None:
    """Raises ValueError for the first problem of an invalid padded segmentation."""
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
    b = int((counts == 0).nonzero()[0, 0])
    raise ValueError(f"gold[{b}]: no segments")


def padded_decodings(scores, segments, t_max: int, device) -> Tuple[Tensor, Tensor, Tensor]:
    """Native decodings (lists of `(start, duration, label)`) → `(segments, counts, labels)`."""
    seg, counts = _padded(segments, "cpu")
    labels = labels_from_segments(seg, counts, t_max)
    return seg.to(device), counts.to(device), labels.to(device)
