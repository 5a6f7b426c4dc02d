"""Posterior samples and partial labels from Python, against the brute-force oracle of
test_numpy (every segmentation of tiny problems enumerated with plain floats): the samples'
distribution (chi-square at a fixed seed), reproducibility, log Z over the agreeing
segmentations, and the torch partial NLL's gradients against finite differences."""

import collections
import math

import numpy as np
import pytest

import semicrf
from test_numpy import NEG, STRUCTURED, lse, problem, score, tilings

torch = pytest.importorskip("torch")
import semicrf.torch as st  # noqa: E402


def agrees(segs, labels):
    return all(labels[t] < 0 or labels[t] == c for s, d, c in segs for t in range(s, s + d))


def posterior(p, b, labels=None):
    """{segmentation: probability} over the agreeing segmentations of finite score."""
    _, k, c = p["scores"].shape[1], p["max_duration"], p["scores"].shape[-1]
    segs = [s for s in tilings(p["lengths"][b], k, c) if labels is None or agrees(s, labels)]
    sc = [score(p, b, s) for s in segs]
    z = lse(sc)
    return z, {s: math.exp(v - z) for s, v in zip(segs, sc) if v > NEG}


def chi_square(post, drawn):
    """Pearson's statistic (bins of expected count < 5 pooled) and its degrees of freedom."""
    n = len(drawn)
    counts = collections.Counter(tuple(map(tuple, y)) for y in drawn)
    assert set(counts) <= set(post), "a sample outside the posterior's support"
    stat, bins, pe, po = 0.0, 0, 0.0, 0.0
    for y, q in post.items():
        e, o = q * n, counts.get(y, 0)
        if e < 5:
            pe, po = pe + e, po + o
        else:
            stat, bins = stat + (o - e) ** 2 / e, bins + 1
    if pe > 0:
        stat, bins = stat + (po - pe) ** 2 / pe, bins + 1
    return stat, max(bins - 1, 1)


def limit(df):
    """The chi-square quantile at upper tail 1e-4 (Wilson-Hilferty)."""
    a = 2.0 / (9.0 * df)
    return df * (1.0 - a + 3.719 * math.sqrt(a)) ** 3


def floats(p):
    return {k: v for k, v in p.items() if k not in ("lengths", "max_duration")}


@pytest.mark.parametrize("backend", STRUCTURED)
def test_samples_follow_the_posterior(rng, backend):
    p = problem(rng)
    labels = np.array([[-1, 1, -1, -1, -1], [0, -1, -1, -1, -1]])
    n = 20000
    plain = semicrf.sample(**p, n=n, seed=5, backend=backend)
    part = semicrf.sample(**p, n=n, seed=5, backend=backend, partial_labels=labels)
    for b in range(2):
        for drawn, lab in ((plain[b], None), (part[b], labels[b])):
            _, post = posterior(p, b, lab)
            stat, df = chi_square(post, drawn)
            assert stat < limit(df), (backend, b, lab, stat, df)


def test_samples_are_reproducible_and_valid(rng):
    p = problem(rng, t=8, lengths=(8, 5))
    a = semicrf.sample(**p, n=30, seed=11)
    assert a == semicrf.sample(**p, n=30, seed=11, backend="exact")
    assert a != semicrf.sample(**p, n=30, seed=12)
    assert [len(x) for x in a] == [30, 30]
    for b, per in enumerate(a):
        for y in per:
            assert sum(d for _, d, _ in y) == p["lengths"][b]
            assert all(1 <= d <= 3 for _, d, _ in y)
    assert semicrf.sample(**p, n=0) == [[], []]
    with pytest.raises(TypeError):
        semicrf.sample(**p, n=-1)


def test_sampling_an_infeasible_sequence_raises(rng):
    p = problem(rng, full=False)
    p["scores"][1, 0, :] = NEG
    with pytest.raises(ValueError, match="sequence 1"):
        semicrf.sample(**p, n=2)


@pytest.mark.parametrize("backend", STRUCTURED)
def test_log_partition_and_nll_with_partial_labels_match_brute_force(rng, backend):
    p = problem(rng, tk=True)
    labels = np.array([[-1, 1, 0, -1, -1], [1, -1, -1, 7, 7]])  # past the length: ignored
    got = semicrf.log_partition(**p, partial_labels=labels, backend=backend)
    want = [posterior(p, b, labels[b])[0] for b in range(2)]
    np.testing.assert_allclose(got, want, rtol=1e-10)
    nll = semicrf.nll(**p, partial_labels=labels, backend=backend)
    np.testing.assert_allclose(nll, semicrf.log_partition(**p) - np.array(want), rtol=1e-10)
    with pytest.raises(ValueError, match="position 1"):
        semicrf.log_partition(**p, partial_labels=[[-1, 2, 0, 0, 0], [0, 0, 0, 0, 0]])
    with pytest.raises(TypeError):
        semicrf.nll(**p)


def test_an_annotation_nothing_agrees_with_is_minus_inf(rng):
    p = problem(rng, k=1, full=False)
    p["scores"][0, 2, 1] = NEG
    labels = np.array([[-1, -1, 1, -1, -1], [-1] * 5])
    z = semicrf.log_partition(**p, partial_labels=labels)
    assert z[0] == NEG and np.isfinite(z[1])
    nll = semicrf.nll(**p, partial_labels=labels)
    assert nll[0] == math.inf and nll[1] == 0.0


def test_torch_partial_nll_gradients_match_finite_differences(rng):
    p = problem(rng)
    labels = torch.tensor([[-1, 1, 0, -1, -1], [1, -1, -1, -1, -1]])
    lengths = torch.tensor(p["lengths"])
    names = list(floats(p))
    base = {k: torch.tensor(v, dtype=torch.float64) for k, v in floats(p).items()}
    up = torch.tensor([1.0, -0.5], dtype=torch.float64)

    def f(ts):
        kw = dict(ts)
        scores = kw.pop("scores")
        out = st.nll(scores, lengths, 3, partial_labels=labels, **kw)
        return (out * up).sum()

    leaves = {k: v.clone().requires_grad_(True) for k, v in base.items()}
    f(leaves).backward()
    h = 1e-5
    for name in names:
        flat = base[name].reshape(-1)
        for i in range(flat.numel()):
            plus = {k: v.clone() for k, v in base.items()}
            minus = {k: v.clone() for k, v in base.items()}
            plus[name].reshape(-1)[i] += h
            minus[name].reshape(-1)[i] -= h
            fd = (f(plus) - f(minus)).item() / (2 * h)
            g = leaves[name].grad.reshape(-1)[i].item()
            assert abs(g - fd) < 2e-7, (name, i, g, fd)
    # log_partition with partial_labels is the agreeing log Z, differentiable too.
    rest = {k: v for k, v in leaves.items() if k != "scores"}
    zp = st.log_partition(leaves["scores"], lengths, 3, partial_labels=labels, **rest)
    want = [posterior(p, b, labels[b].tolist())[0] for b in range(2)]
    np.testing.assert_allclose(zp.detach().numpy(), want, rtol=1e-10)


def test_torch_partial_labels_on_edges_match_the_structured_form(rng):
    p = problem(rng, full=False)
    scores = torch.tensor(p["scores"])
    lengths = torch.tensor(p["lengths"])
    labels = torch.tensor([[-1, 1, 0, -1, -1], [1, -1, -1, -1, -1]])
    k, (b, t, c) = 3, scores.shape
    # Edges of the same model: the segment's content; the first segment on source 0 only.
    edges = torch.full((b, t, k, c, c), NEG, dtype=torch.float64)
    for s in range(t):
        for d in range(1, k + 1):
            if s + d <= t:
                content = scores[:, s : s + d].sum(1)  # (B, C)
                src = slice(0, 1) if s == 0 else slice(None)
                edges[:, s, d - 1, :, src] = content[:, :, None]
    got = st.log_partition(edges=edges, lengths=lengths, partial_labels=labels)
    want = st.log_partition(scores, lengths, k, partial_labels=labels)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-10)


def test_torch_samples_are_padded_tensors_with_counts(rng):
    p = problem(rng)
    scores = torch.tensor(p["scores"])
    lengths = torch.tensor(p["lengths"])
    s = st.sample(scores, lengths, 3, n=50, seed=3)
    assert s.segments.dtype == torch.int64 and s.counts.shape == (2, 50)
    ref = semicrf.sample(scores=p["scores"], lengths=p["lengths"], max_duration=3, n=50, seed=3)
    for b in range(2):
        for i in range(50):
            n = int(s.counts[b, i])
            assert s.segments[b, i, :n].tolist() == [list(x) for x in ref[b][i]]
            assert (s.segments[b, i, n:] == -1).all()


def cuda_or_skip():
    ok, why = semicrf.cuda_available()
    if not ok or not torch.cuda.is_available():
        pytest.skip(f"no CUDA: {why}")


@pytest.mark.parametrize("tk", [False, True])
def test_cuda_samples_follow_the_posterior_and_are_the_cpu_streaming_engines(rng, tk):
    cuda_or_skip()
    p = problem(rng, tk=tk)
    labels = np.array([[-1, 1, -1, -1, -1], [0, -1, -1, -1, -1]])
    n = 20000
    plain = semicrf.sample(**p, n=n, seed=5, device="cuda")
    part = semicrf.sample(**p, n=n, seed=5, device="cuda", partial_labels=labels)
    for b in range(2):
        for drawn, lab in ((plain[b], None), (part[b], labels[b])):
            _, post = posterior(p, b, lab)
            stat, df = chi_square(post, drawn)
            assert stat < limit(df), (tk, b, lab, stat, df)
    # The same draws as the CPU streaming engine's for the same seed (a uniform within
    # rounding of a boundary between two choices is the only way they can differ: about
    # 1e-15 a draw).
    small = semicrf.sample(**p, n=200, seed=9, device="cuda")
    assert small == semicrf.sample(**p, n=200, seed=9, backend="streaming")
    tensors = {n: torch.from_numpy(v).cuda() for n, v in floats(p).items()}
    s = st.sample(lengths=torch.tensor(p["lengths"]), max_duration=3, n=200, seed=9, **tensors)
    assert s.segments.device.type == "cuda"
    for b in range(2):
        for i in range(200):
            m = int(s.counts[b, i])
            assert s.segments[b, i, :m].tolist() == [list(x) for x in small[b][i]]
