"""`semicrf.kbest` and `semicrf.posterior_decode` (numpy and torch) against a brute-force
oracle written here from the model's definition (crates/semicrf-core/src/model.md §2, §7):
every segmentation of tiny problems enumerated and scored with plain Python floats."""

import math

import numpy as np
import pytest

import semicrf

NEG = float("-inf")
STRUCTURED = ["auto", "exact", "scan", "streaming"]


# ---------------------------------------------------------------- the oracle


def tilings(length, k, c):
    """Every segmentation of [0, length): tuples of (start, duration, label)."""
    if length == 0:
        yield ()
        return
    for d in range(1, min(k, length) + 1):
        for lab in range(c):
            for rest in tilings(length - d, k, c):
                yield ((0, d, lab),) + tuple((s + d, dd, cc) for s, dd, cc in rest)


def score(p, b, segs):
    """Model §2 (structured), or §3 with the maximum over the virtual start's sources."""
    if "edges" in p:
        e = p["edges"]
        _, d0, c0 = segs[0]
        tot = max(float(e[b, 0, d0 - 1, c0, i]) for i in range(e.shape[-1]))
        for (s, d, c), prev in zip(segs[1:], segs[:-1]):
            tot += float(e[b, s, d - 1, c, prev[2]])
        return tot
    tot = float(p["start"][segs[0][2]]) if "start" in p else 0.0
    for n, (s, d, c) in enumerate(segs):
        tot += sum(float(p["scores"][b, t, c]) for t in range(s, s + d))
        if "duration" in p:
            tot += float(p["duration"][d - 1, c])
        if "begin_boundary" in p:
            tot += float(p["begin_boundary"][b, s, c])
        if "end_boundary" in p:
            tot += float(p["end_boundary"][b, s + d - 1, c])
        if n > 0 and "transition" in p:
            tr, prev = p["transition"], segs[n - 1][2]
            tot += float(tr[prev, c] if tr.ndim == 2 else tr[d - 1, prev, c])
    if "end" in p:
        tot += float(p["end"][segs[-1][2]])
    return tot


def dims(p):
    if "edges" in p:
        _, t, k, c, _ = p["edges"].shape
        return t, k, c
    return p["scores"].shape[1], p["max_duration"], p["scores"].shape[2]


def ranked(p, b):
    """Every segmentation of finite score, best first; ties compared from the last segment
    backwards, the smaller label, then the smaller duration."""
    _, k, c = dims(p)
    segs = [(score(p, b, s), s) for s in tilings(p["lengths"][b], k, c)]
    segs = [x for x in segs if x[0] > NEG]
    return sorted(segs, key=lambda x: (-x[0], [(lab, d) for _, d, lab in reversed(x[1])]))


def posterior(p, b):
    """Position marginals and the largest expected number of correct positions."""
    t, k, c = dims(p)
    segs = [(score_lse(p, b, s), score(p, b, s), s) for s in tilings(p["lengths"][b], k, c)]
    m = max(x[0] for x in segs)
    z = m + math.log(sum(math.exp(x[0] - m) for x in segs if x[0] > NEG))
    pos = np.zeros((t, c))
    for w, _, s in segs:
        for st, d, lab in s:
            pos[st : st + d, lab] += math.exp(w - z) if w > NEG else 0.0
    best = max(expected(pos, s) for _, v, s in segs if v > NEG)
    return pos, best


def score_lse(p, b, segs):
    if "edges" not in p:
        return score(p, b, segs)
    e = p["edges"]
    _, d0, c0 = segs[0]
    xs = [float(e[b, 0, d0 - 1, c0, i]) for i in range(e.shape[-1])]
    m = max(xs)
    tot = NEG if m == NEG else m + math.log(sum(math.exp(x - m) for x in xs))
    for (s, d, c), prev in zip(segs[1:], segs[:-1]):
        tot += float(e[b, s, d - 1, c, prev[2]])
    return tot


def expected(pos, segs):
    return sum(pos[t, lab] for s, d, lab in segs for t in range(s, s + d))


# ---------------------------------------------------------------- problems


def problem(rng, integers=False, tk=False):
    b, t, c, k = 2, 5, 2, 3
    draw = (lambda *s: rng.integers(-2, 3, size=s).astype(np.float64)) if integers else (
        lambda *s: rng.normal(size=s)
    )
    p = dict(scores=draw(b, t, c), lengths=[5, 3], max_duration=k)
    p["transition"] = draw(k, c, c) if tk else draw(c, c)
    p["transition"][..., 1, 0] = NEG  # forbid 1 -> 0
    p["duration"] = draw(k, c)
    p["start"] = draw(c)
    p["end"] = draw(c)
    p["begin_boundary"] = draw(b, t, c)
    p["end_boundary"] = draw(b, t, c)
    return p


def edge_problem(rng, integers=False):
    shape = (2, 4, 2, 2, 2)
    e = rng.integers(-2, 3, size=shape).astype(np.float64) if integers else rng.normal(size=shape)
    e[rng.random(size=shape) < 0.2] = NEG
    return dict(edges=e, lengths=[4, 3])


def check_lists(p, out, k):
    t = dims(p)[0]
    assert out.scores.shape == (2, k) and out.segments.shape == (2, k, t, 3)
    for b in range(2):
        want = ranked(p, b)[:k]
        assert out.counts[b] == len(want)
        for n, (s, segs) in enumerate(want):
            assert out.scores[b, n] == pytest.approx(s, abs=1e-10)
            m = out.num_segments[b, n]
            assert [tuple(r) for r in out.segments[b, n, :m].tolist()] == list(segs)
            assert (out.segments[b, n, m:] == -1).all()
        assert (out.scores[b, len(want) :] == NEG).all()


# ---------------------------------------------------------------- numpy


@pytest.mark.parametrize("backend", STRUCTURED)
@pytest.mark.parametrize("integers", [False, True])
@pytest.mark.parametrize("tk", [False, True])
def test_kbest_lists_equal_brute_force(rng, backend, integers, tk):
    p = problem(rng, integers, tk)
    most = max(len(ranked(p, b)) for b in range(2))
    for k in (1, 2, 5, most + 3):
        check_lists(p, semicrf.kbest(**p, k=k, backend=backend), k)


@pytest.mark.parametrize("backend", ["exact", "scan"])
@pytest.mark.parametrize("integers", [False, True])
def test_kbest_of_edge_potentials_equals_brute_force(rng, backend, integers):
    p = edge_problem(rng, integers)
    for k in (1, 3, 100):
        check_lists(p, semicrf.kbest(**p, k=k, backend=backend), k)


def test_the_first_of_each_list_is_the_viterbi_decoding(rng):
    p = problem(rng)
    best, segs = semicrf.viterbi(**p)
    out = semicrf.kbest(**p, k=1)
    np.testing.assert_allclose(out.scores[:, 0], best, rtol=1e-12)
    for b in range(2):
        m = out.num_segments[b, 0]
        assert [tuple(r) for r in out.segments[b, 0, :m].tolist()] == list(segs[b])


@pytest.mark.parametrize("backend", STRUCTURED)
def test_posterior_decoding_maximises_the_expected_correct_positions(rng, backend):
    for tk in (False, True):
        p = problem(rng, tk=tk)
        scores, segs = semicrf.posterior_decode(**p, backend=backend)
        for b in range(2):
            pos, best = posterior(p, b)
            assert expected(pos, segs[b]) == pytest.approx(best, abs=1e-10)
            assert scores[b] == pytest.approx(best, abs=1e-10)


@pytest.mark.parametrize("backend", ["exact", "scan"])
def test_posterior_decoding_of_edge_potentials(rng, backend):
    p = edge_problem(rng)
    _, segs = semicrf.posterior_decode(**p, backend=backend)
    for b in range(2):
        pos, best = posterior(p, b)
        assert expected(pos, segs[b]) == pytest.approx(best, abs=1e-10)


def test_kbest_and_posterior_errors(rng):
    p = problem(rng)
    with pytest.raises(TypeError, match="k"):
        semicrf.kbest(**p)
    with pytest.raises(ValueError, match="negative"):
        semicrf.kbest(**p, k=-1)
    with pytest.raises(ValueError):
        semicrf.kbest(**edge_problem(rng), k=2, backend="streaming")
    inf = dict(p, scores=np.full_like(p["scores"], NEG))
    with pytest.raises(ValueError, match="-inf|infeasible"):
        semicrf.posterior_decode(**inf)
    out = semicrf.kbest(**inf, k=2)
    assert out.counts.tolist() == [0, 0] and (out.scores == NEG).all()


# ---------------------------------------------------------------- torch


def test_torch_kbest_and_posterior_equal_numpy(rng):
    torch = pytest.importorskip("torch")
    import semicrf.torch as st

    p = problem(rng, integers=True)
    tensors = {n: torch.from_numpy(v) for n, v in p.items() if isinstance(v, np.ndarray)}
    out = st.kbest(lengths=torch.tensor(p["lengths"]), max_duration=3, k=4, **tensors)
    want = semicrf.kbest(**p, k=4)
    assert out.segments.shape == (2, 4, 5, 3) and out.segments.dtype == torch.int64
    for got, w in zip(out, want):
        np.testing.assert_array_equal(got.numpy(), w)
    check_lists(p, type(want)(*(x.numpy() for x in out)), 4)
    post = st.posterior_decode(lengths=p["lengths"], max_duration=3, **tensors)
    scores, segs = semicrf.posterior_decode(**p)
    np.testing.assert_allclose(post.scores.numpy(), scores, rtol=1e-12)
    for b in range(2):
        n = int(post.counts[b])
        assert [tuple(r) for r in post.segments[b, :n].tolist()] == list(segs[b])


def test_torch_posterior_decode_on_cuda_equals_the_cpu():
    torch = pytest.importorskip("torch")
    import semicrf.torch as st

    ok, why = semicrf.cuda_available()
    if not ok or not torch.cuda.is_available():
        pytest.skip(f"no CUDA: {why}")
    rng = np.random.default_rng(3)
    p = problem(rng)
    tensors = {n: torch.from_numpy(v).cuda() for n, v in p.items() if isinstance(v, np.ndarray)}
    post = st.posterior_decode(lengths=p["lengths"], max_duration=3, **tensors)
    for b in range(2):
        pos, best = posterior(p, b)
        n = int(post.counts[b])
        segs = [tuple(r) for r in post.segments[b, :n].tolist()]
        assert expected(pos, segs) == pytest.approx(best, abs=1e-9)
    best = st.kbest(lengths=p["lengths"], max_duration=3, k=2, **tensors)
    assert best.scores.device.type == "cuda"


@pytest.mark.parametrize("tk", [False, True])
def test_kbest_on_cuda_equals_brute_force_and_the_cpu_engines(tk):
    torch = pytest.importorskip("torch")
    import semicrf.torch as st

    ok, why = semicrf.cuda_available()
    if not ok or not torch.cuda.is_available():
        pytest.skip(f"no CUDA: {why}")
    rng = np.random.default_rng(5)
    p = problem(rng, integers=True, tk=tk)  # exact ties, ordered by the rule
    for k in (1, 2, 7, 500):
        got = semicrf.kbest(**p, k=k, device="cuda")
        want = semicrf.kbest(**p, k=k, backend="streaming")
        np.testing.assert_array_equal(got.scores, want.scores)
        np.testing.assert_array_equal(got.segments, want.segments)
        np.testing.assert_array_equal(got.counts, want.counts)
        for b in range(2):
            every = sorted(
                (x for y in tilings(p["lengths"][b], 3, 2) if (x := score(p, b, y)) > NEG),
                reverse=True,
            )
            n = int(got.counts[b])
            assert n == min(k, len(every))
            np.testing.assert_allclose(got.scores[b, :n], every[:n], rtol=0, atol=1e-9)
    tensors = {n: torch.from_numpy(v).cuda() for n, v in p.items() if isinstance(v, np.ndarray)}
    best = st.kbest(lengths=p["lengths"], max_duration=3, k=7, **tensors)
    want = semicrf.kbest(**p, k=7)
    assert best.scores.device.type == "cuda"
    np.testing.assert_array_equal(best.scores.cpu().numpy(), want.scores)
    np.testing.assert_array_equal(best.segments.cpu().numpy(), want.segments)
