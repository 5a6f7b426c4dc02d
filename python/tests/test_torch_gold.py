"""The gold score's one autograd node against a straightforward autograd reference (torch
differentiating gathers of every term), on random problems with every optional input, both
transition shapes, -inf potentials, runs longer than K and every form of gold; and its
cost (one autograd node, one read of the checks, on CUDA one wait for the device) and
determinism.

The reference's own formula is checked against the f64 oracle here too, so that agreeing
with it means agreeing with the model."""

import pytest

torch = pytest.importorskip("torch")

import semicrf.torch as st  # noqa: E402
from test_torch_oracle import (  # noqa: E402
    OPTIONAL,
    as_numpy,
    device_or_skip,
    random_problem,
    structured_score,
)


@pytest.fixture(params=["cpu", "cuda"])
def device(request):
    return device_or_skip(pytest, torch, request.param)


# -- the reference: gathers of every term, differentiated by torch ------------------------------


def _masked_sum(values, mask):
    return torch.where(mask, values, torch.zeros_like(values)).sum(dim=1)


def reference_gold_score(inputs, labels, starts, lengths):
    """The score of each gold segmentation `(B,)` in float64, differentiable: `labels (B, T)`
    the label of every position (-1 past each length), `starts (B, T)` where a segment
    starts."""
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


def per_position(segmentations, t_max):
    """Lists of (start, duration, label) → `(labels, starts)` per position, by hand."""
    labels = torch.full((len(segmentations), t_max), -1, dtype=torch.int64)
    starts = torch.zeros((len(segmentations), t_max), dtype=torch.bool)
    for b, segs in enumerate(segmentations):
        for s, d, c in segs:
            labels[b, s : s + d] = c
            starts[b, s] = True
    return labels, starts


# -- random golds ---------------------------------------------------------------------------


def random_labels(g, b, t, c, k):
    """Labels per position with runs of up to 2K + 1 positions (so runs longer than K)."""
    labels = torch.empty((b, t), dtype=torch.int64)
    for i in range(b):
        at = 0
        while at < t:
            n = int(torch.randint(1, 2 * k + 2, (1,), generator=g))
            labels[i, at : at + n] = int(torch.randint(c, (1,), generator=g))
            at += n
    return labels


def runs_cut_at_k(labels, lengths, k):
    """Labels per position → segment lists: runs of one label, cut every k positions."""
    out = []
    for row, n in zip(labels.tolist(), lengths.tolist()):
        segs, s = [], 0
        while s < n:
            d = 1
            while s + d < n and d < k and row[s + d] == row[s]:
                d += 1
            segs.append((s, d, row[s]))
            s += d
        out.append(segs)
    return out


def random_tiling(g, n, c, k):
    """A random segmentation of [0, n): durations 1..=K, neighbours may share a label."""
    segs, s = [], 0
    while s < n:
        d = min(int(torch.randint(1, k + 1, (1,), generator=g)), n - s)
        segs.append((s, d, int(torch.randint(c, (1,), generator=g))))
        s += d
    return segs


def with_forbidden(p, g, share=0.15):
    """Some entries of every potential set to -inf (forbidden)."""
    out = {}
    for name, v in p.items():
        v = v.clone()
        v[torch.rand(v.shape, generator=g, dtype=torch.float64) < share] = float("-inf")
        out[name] = v
    return out


def padded(segmentations):
    s_max = max(len(s) for s in segmentations)
    seg = torch.full((len(segmentations), s_max, 3), -1, dtype=torch.int64)
    for b, segs in enumerate(segmentations):
        if segs:
            seg[b, : len(segs)] = torch.tensor(segs)
    return seg


CASES = [
    # (B, T, C, K, 3-D transition, forbidden entries)
    (5, 17, 3, 4, False, False),
    (5, 17, 3, 4, True, False),
    (4, 12, 4, 3, False, True),
    (4, 12, 4, 3, True, True),
    (3, 9, 2, 1, False, False),  # K = 1
    (3, 6, 1, 2, True, False),  # C = 1
    (2, 1, 3, 3, False, False),  # T = 1
]
SUBSETS = [
    OPTIONAL,
    (),
    ("transition",),  # without start: the first segment has no transition
    ("start", "end", "begin_boundary"),
    ("duration", "end_boundary"),
]


def _grads(fn, x, w):
    y = {k: v.detach().clone().requires_grad_(True) for k, v in x.items()}
    score = fn(y)
    (score * w).sum().backward()
    return score.detach(), {k: v.grad for k, v in y.items()}


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("subset", SUBSETS, ids=lambda s: "+".join(s) or "scores")
def test_gradients_match_the_autograd_reference_for_every_gold_form(device, case, subset):
    b, t, c, k, t3, forbidden = case
    if t3 and "transition" not in subset:
        pytest.skip("no transition")
    seed = b * 1000 + t * 10 + c + 7 * k + len(subset)
    g = torch.Generator().manual_seed(seed)
    p, lengths = random_problem(torch, b, t, c, k, seed=seed, with_=subset, transition_3d=t3)
    if forbidden:
        p = with_forbidden(p, g)
    x = {name: v.to(device) for name, v in p.items()}
    w = torch.randn(b, generator=g, dtype=torch.float64).to(device)
    w[0] = 0.0  # a sequence without gradient
    labels = random_labels(g, b, t, c, k)
    for i, n in enumerate(lengths.tolist()):
        labels[i, n:] = c + 5  # past the length: never read
    from_labels = runs_cut_at_k(labels, lengths, k)
    tilings = [random_tiling(g, int(n), c, k) for n in lengths]
    golds = [
        (labels.to(device), from_labels),
        (padded(from_labels).to(device), from_labels),
        (tilings, tilings),
        (padded(tilings).to(device), tilings),
    ]
    for gold, segmentations in golds:
        ref_labels, ref_starts = per_position(segmentations, t)
        want, want_grad = _grads(
            lambda y: reference_gold_score(
                y, ref_labels.to(device), ref_starts.to(device), lengths
            ),
            x,
            w,
        )
        got, got_grad = _grads(
            lambda y: st.gold_score(**y, lengths=lengths, max_duration=k, gold=gold), x, w
        )
        assert got.dtype == torch.float64
        torch.testing.assert_close(got, want, atol=1e-12, rtol=0)
        for name in x:
            assert got_grad[name].dtype == x[name].dtype
            torch.testing.assert_close(got_grad[name], want_grad[name], atol=1e-12, rtol=0)
        if not forbidden:  # the reference is the model: the oracle agrees
            q = as_numpy(p, lengths, k)
            expect = [structured_score(q, i, segs) for i, segs in enumerate(segmentations)]
            torch.testing.assert_close(
                got.cpu(), torch.tensor(expect, dtype=torch.float64), atol=1e-10, rtol=0
            )


DTYPES = {
    "float32": {},
    "mixed": {"transition": torch.float64, "duration": torch.float16, "end": torch.bfloat16},
}


@pytest.mark.parametrize("mix", list(DTYPES))
def test_narrow_inputs_get_the_references_gradients_in_their_own_dtype(device, mix):
    p, lengths = random_problem(torch, 4, 10, 3, 3, seed=5)
    x = {name: v.to(device, DTYPES[mix].get(name, torch.float32)) for name, v in p.items()}
    g = torch.Generator().manual_seed(5)
    labels = random_labels(g, 4, 10, 3, 3)
    segmentations = runs_cut_at_k(labels, lengths, 3)
    ref_labels, ref_starts = per_position(segmentations, 10)
    w = torch.randn(4, generator=g, dtype=torch.float64).to(device)
    want, want_grad = _grads(
        lambda y: reference_gold_score(y, ref_labels.to(device), ref_starts.to(device), lengths),
        x,
        w,
    )
    got, got_grad = _grads(
        lambda y: st.gold_score(**y, lengths=lengths, max_duration=3, gold=labels.to(device)),
        x,
        w,
    )
    torch.testing.assert_close(got, want, atol=1e-12, rtol=0)
    for name, v in x.items():
        assert got_grad[name].dtype == v.dtype
        # float64 sums rounded once to the input's dtype in both: equal up to that rounding.
        eps = torch.finfo(v.dtype).eps
        torch.testing.assert_close(got_grad[name], want_grad[name], atol=0, rtol=eps)


def test_edge_gradients_match_the_autograd_reference():
    g = torch.Generator().manual_seed(9)
    b, t, k, c = 3, 7, 3, 2
    edges = torch.randn(b, t, k, c, c, generator=g, dtype=torch.float64)
    edges[torch.rand(edges.shape, generator=g) < 0.1] = float("-inf")
    lengths = torch.tensor([7, 5, 2])
    tilings = [random_tiling(g, int(n), c, k) for n in lengths]
    ref_labels, ref_starts = per_position(tilings, t)
    w = torch.randn(b, generator=g, dtype=torch.float64)
    x = {"edges": edges}
    want, want_grad = _grads(
        lambda y: reference_gold_score(y, ref_labels, ref_starts, lengths), x, w
    )
    got, got_grad = _grads(lambda y: st.gold_score(**y, lengths=lengths, gold=tilings), x, w)
    torch.testing.assert_close(got, want, atol=1e-12, rtol=0)
    torch.testing.assert_close(got_grad["edges"], want_grad["edges"], atol=1e-12, rtol=0)


def test_gold_score_gradients_are_bitwise_identical_from_run_to_run(device):
    p, lengths = random_problem(torch, 16, 30, 5, 6, seed=31)
    g = torch.Generator().manual_seed(31)
    labels = random_labels(g, 16, 30, 5, 6).to(device)
    w = torch.randn(16, generator=g, dtype=torch.float64).to(device)
    x = {name: v.to(device) for name, v in p.items()}
    runs = [
        _grads(lambda y: st.gold_score(**y, lengths=lengths, max_duration=6, gold=labels), x, w)
        for _ in range(5)
    ]
    for score, grads in runs[1:]:
        assert torch.equal(score, runs[0][0])
        for name in grads:
            assert torch.equal(grads[name], runs[0][1][name])


# -- cost: one autograd node, one read of the device ---------------------------------------------

_READS = ("aten::_local_scalar_dense", "aten::nonzero")


def _profile(fn):
    fn()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        fn()
    return [e.name for e in prof.events()]


@pytest.mark.parametrize("form", ["labels", "segments", "list"])
def test_the_gold_score_is_one_autograd_node_and_reads_its_checks_once(form):
    p, lengths = random_problem(torch, 8, 20, 4, 5, seed=41)
    x = {name: v.requires_grad_(True) for name, v in p.items()}
    g = torch.Generator().manual_seed(41)
    labels = random_labels(g, 8, 20, 4, 5)
    gold = {
        "labels": labels,
        "segments": padded(runs_cut_at_k(labels, lengths, 5)),
        "list": runs_cut_at_k(labels, lengths, 5),
    }[form]

    def step():
        st.gold_score(**x, lengths=lengths, max_duration=5, gold=gold).sum().backward()

    names = _profile(step)
    # The checks' one flag (on CUDA the one wait for the device; a list is checked on the
    # host before it travels).
    assert sum(names.count(n) for n in _READS) == 1
    nodes = {n.split(": ")[-1] for n in names if n.startswith("autograd::engine::evaluate")}
    assert nodes == {"SumBackward0", "GoldScoreBackward", "torch::autograd::AccumulateGrad"}


@pytest.mark.parametrize("form", ["labels", "segments", "list"])
def test_on_cuda_a_gold_score_step_waits_for_the_device_once(form):
    import warnings

    dev = device_or_skip(pytest, torch, "cuda")
    p, lengths = random_problem(torch, 8, 20, 4, 5, seed=43)
    x = {name: v.to(dev).requires_grad_(True) for name, v in p.items()}
    labels = random_labels(torch.Generator().manual_seed(43), 8, 20, 4, 5)
    gold = {
        "labels": labels.to(dev),
        "segments": padded(runs_cut_at_k(labels, lengths, 5)).to(dev),
        "list": runs_cut_at_k(labels, lengths, 5),
    }[form]

    def step():
        st.gold_score(**x, lengths=lengths, max_duration=5, gold=gold).sum().backward()

    step()
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            step()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    waits = [str(w.message) for w in caught if "synchroniz" in str(w.message)]
    # The checks' one flag; a list is checked on the host and travels without a wait.
    assert len(waits) == (0 if form == "list" else 1), waits
