"""The numpy API against an f64 brute-force oracle written here from the model's definition
(crates/semicrf-core/src/model.md): every segmentation of tiny problems enumerated with
plain Python floats; gradients against central finite differences of the oracle's log Z."""

import itertools
import math

import numpy as np
import pytest

import semicrf

NEG = float("-inf")
STRUCTURED = ["exact", "scan", "streaming"]
EDGE = ["exact", "scan"]


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


def lse(xs):
    xs = list(xs)
    m = max(xs, default=NEG)
    return NEG if m == NEG else m + math.log(sum(math.exp(x - m) for x in xs))


def score(p, b, segs, first=lse):
    """Model §2 (structured) or §3 (edges: the first segment sums over the virtual start's
    sources with `first`: log-sum-exp, or max in the max semiring of Viterbi)."""
    if "edges" in p:
        e = p["edges"]
        s0, d0, c0 = segs[0]
        tot = first(float(e[b, 0, d0 - 1, c0, i]) for i in range(e.shape[-1]))
        for (s, d, c), prev in zip(segs[1:], segs[:-1]):
            tot += float(e[b, s, d - 1, c, prev[2]])
        return tot
    tot = 0.0
    for n, (s, d, c) in enumerate(segs):
        tot += sum(float(p["scores"][b, t, c]) for t in range(s, s + d))
        if "duration" in p:
            tot += float(p["duration"][d - 1, c])
        if "begin_boundary" in p:
            tot += float(p["begin_boundary"][b, s, c])
        if "end_boundary" in p:
            tot += float(p["end_boundary"][b, s + d - 1, c])
        if n == 0 and "start" in p:
            tot += float(p["start"][c])
        if n > 0 and "transition" in p:
            tr, prev = p["transition"], segs[n - 1][2]
            tot += float(tr[prev, c] if tr.ndim == 2 else tr[d - 1, prev, c])
    if "end" in p:
        tot += float(p["end"][segs[-1][2]])
    return tot


def dims(p):
    if "edges" in p:
        _, t, k, c, _ = p["edges"].shape
    else:
        (_, t, c), k = p["scores"].shape, p["max_duration"]
    return t, k, c


def oracle(p, b):
    t, k, c = dims(p)
    segs = list(tilings(p["lengths"][b], k, c))
    sc = [score(p, b, s) for s in segs]
    z = lse(sc)
    best = max(score(p, b, s, first=max) for s in segs)
    pos, bnd = np.zeros((t, c)), np.zeros(t)
    ent = 0.0
    for s, v in zip(segs, sc):
        w = math.exp(v - z) if v > NEG else 0.0
        if w > 0:
            ent -= w * (v - z)
        for st, d, lab in s:
            bnd[st] += w
            pos[st : st + d, lab] += w
    return dict(log_z=z, best=best, segs=segs, scores=sc, position=pos, boundary=bnd, entropy=ent)


def oracle_log_z(p):
    return np.array([oracle(p, b)["log_z"] for b in range(len(p["lengths"]))])


# ---------------------------------------------------------------- problems


def problem(rng, dtype=np.float64, b=2, t=5, c=2, k=3, lengths=(5, 3), tk=False, full=True):
    p = dict(scores=rng.normal(size=(b, t, c)), lengths=list(lengths), max_duration=k)
    if full:
        p["transition"] = rng.normal(size=(k, c, c) if tk else (c, c))
        p["duration"] = rng.normal(size=(k, c))
        p["start"] = rng.normal(size=c)
        p["end"] = rng.normal(size=c)
        p["begin_boundary"] = rng.normal(size=(b, t, c))
        p["end_boundary"] = rng.normal(size=(b, t, c))
    return cast(p, dtype)


def edge_problem(rng, dtype=np.float64, b=2, t=4, c=2, k=2, lengths=(4, 3)):
    return cast(dict(edges=rng.normal(size=(b, t, k, c, c)), lengths=list(lengths)), dtype)


def cast(p, dtype):
    return {n: (v.astype(dtype) if isinstance(v, np.ndarray) else v) for n, v in p.items()}


def as64(p):
    return cast(p, np.float64)


FLOATS = ["scores", "transition", "duration", "start", "end", "begin_boundary", "end_boundary", "edges"]


# ---------------------------------------------------------------- tests


@pytest.mark.parametrize("backend", STRUCTURED)
@pytest.mark.parametrize("tk", [False, True])
def test_log_z_entropy_viterbi_and_marginals_match_the_oracle(rng, backend, tk):
    p = problem(rng, tk=tk)
    want = [oracle(p, b) for b in range(2)]
    z = semicrf.log_partition(**p, backend=backend)
    assert z.dtype == np.float64 and z.shape == (2,)
    np.testing.assert_allclose(z, [w["log_z"] for w in want], rtol=0, atol=1e-10)
    h = semicrf.entropy(**p, backend=backend)
    np.testing.assert_allclose(h, [w["entropy"] for w in want], rtol=0, atol=1e-10)
    best, segs = semicrf.viterbi(**p, backend=backend)
    for b, w in enumerate(want):
        assert best[b] == pytest.approx(w["best"], abs=1e-10)
        assert score(p, b, segs[b]) == pytest.approx(w["best"], abs=1e-10)
        assert all(isinstance(x, int) for seg in segs[b] for x in seg)
    m = semicrf.marginals(**p, backend=backend)
    assert isinstance(m, semicrf.Marginals) and m.edges is None
    for b, w in enumerate(want):
        np.testing.assert_allclose(m.position[b], w["position"], rtol=0, atol=1e-10)
        np.testing.assert_allclose(m.boundary[b], w["boundary"], rtol=0, atol=1e-10)
    np.testing.assert_allclose(m.log_z, z, rtol=0, atol=1e-12)


@pytest.mark.parametrize("backend", STRUCTURED)
def test_float32_inputs_give_the_oracle_within_float32_rounding(rng, backend):
    p = problem(rng, dtype=np.float32)
    z = semicrf.log_partition(**p, backend=backend)
    np.testing.assert_allclose(z, oracle_log_z(as64(p)), rtol=0, atol=1e-4)
    m = semicrf.marginals(**p, backend=backend)
    np.testing.assert_allclose(m.position[0], oracle(as64(p), 0)["position"], atol=1e-4)


@pytest.mark.parametrize("backend", EDGE)
def test_edge_input_matches_the_oracle(rng, backend):
    p = edge_problem(rng)
    want = [oracle(p, b) for b in range(2)]
    np.testing.assert_allclose(
        semicrf.log_partition(**p, backend=backend), [w["log_z"] for w in want], atol=1e-10
    )
    best, segs = semicrf.viterbi(**p, backend=backend)
    for b, w in enumerate(want):
        assert best[b] == pytest.approx(w["best"], abs=1e-10)
        assert score(p, b, segs[b], first=max) == pytest.approx(w["best"], abs=1e-10)
    m = semicrf.marginals(**p, backend=backend)
    assert m.edges is not None and m.edges.shape == p["edges"].shape
    for b, w in enumerate(want):
        np.testing.assert_allclose(m.position[b], w["position"], atol=1e-10)
        np.testing.assert_allclose(m.boundary[b], w["boundary"], atol=1e-10)


def finite_differences(p, f, h=1e-5):
    """Central differences of f(p) (a scalar) for every floating input of p."""
    out = {}
    for name in FLOATS:
        if name not in p:
            continue
        g = np.zeros_like(p[name])
        for idx in np.ndindex(*p[name].shape):
            q = {n: (v.copy() if isinstance(v, np.ndarray) else v) for n, v in p.items()}
            q[name][idx] += h
            up = f(q)
            q[name][idx] -= 2 * h
            g[idx] = (up - f(q)) / (2 * h)
        out[name] = g
    return out


@pytest.mark.parametrize("backend", STRUCTURED)
@pytest.mark.parametrize("tk", [False, True])
def test_backward_gives_the_gradients_of_the_oracles_log_z(rng, backend, tk):
    p = problem(rng, c=2, t=4, lengths=(4, 3), tk=tk)
    up = np.array([0.7, -1.3])
    out = semicrf.backward(**p, upstream=up, backend=backend)
    np.testing.assert_allclose(out["log_z"], oracle_log_z(p), atol=1e-10)
    fd = finite_differences(p, lambda q: float(up @ oracle_log_z(q)))
    assert set(fd) <= set(out)
    for name, g in fd.items():
        assert out[name].shape == p[name].shape, name
        np.testing.assert_allclose(out[name], g, rtol=0, atol=1e-7, err_msg=name)
    assert "edges" not in out and "nll" not in out


def test_backward_leaves_out_inputs_not_given(rng):
    p = problem(rng, full=False)
    out = semicrf.backward(**p)
    assert set(out) == {"log_z", "scores", "boundary"}


@pytest.mark.parametrize("backend", EDGE)
def test_edge_gradients_match_finite_differences(rng, backend):
    p = edge_problem(rng, t=3, lengths=(3, 2))
    out = semicrf.backward(**p, backend=backend)
    fd = finite_differences(p, lambda q: float(oracle_log_z(q).sum()))
    np.testing.assert_allclose(out["edges"], fd["edges"], atol=1e-7)


def oracle_nll(p, gold):
    return np.array([oracle(p, b)["log_z"] - score(p, b, g) for b, g in enumerate(gold)])


@pytest.mark.parametrize("backend", STRUCTURED)
def test_nll_and_its_gradients_match_the_oracle(rng, backend):
    p = problem(rng, c=2, t=4, lengths=(4, 3), tk=True)
    gold = [[(0, 2, 1), (2, 1, 0), (3, 1, 1)], [(0, 1, 0), (1, 2, 0)]]
    want = oracle_nll(p, gold)
    np.testing.assert_allclose(semicrf.nll(**p, gold=gold, backend=backend), want, atol=1e-10)
    assert (want > 0).all()
    up = np.array([1.5, 0.25])
    out = semicrf.backward(**p, gold=gold, upstream=up, backend=backend)
    np.testing.assert_allclose(out["nll"], want, atol=1e-10)
    fd = finite_differences(p, lambda q: float(up @ oracle_nll(q, gold)))
    for name, g in fd.items():
        np.testing.assert_allclose(out[name], g, rtol=0, atol=1e-7, err_msg=name)


def test_gold_labels_per_position_are_segments_with_runs_split_at_k(rng):
    p = problem(rng, c=2, t=5, k=2, lengths=(5, 3))
    labels = np.array([[1, 1, 1, 0, 0], [0, 1, 1, 9, 9]])  # beyond the length: not read
    # Run of three 1s with K = 2: split into (0, 2) and (2, 1).
    gold = [[(0, 2, 1), (2, 1, 1), (3, 2, 0)], [(0, 1, 0), (1, 2, 1)]]
    np.testing.assert_allclose(
        semicrf.nll(**p, gold=labels), semicrf.nll(**p, gold=gold), rtol=0, atol=0
    )
    np.testing.assert_allclose(semicrf.nll(**p, gold=labels), oracle_nll(p, gold), atol=1e-10)


def test_edge_nll_gradient_matches_finite_differences(rng):
    p = edge_problem(rng, t=3, lengths=(3, 2))
    gold = [[(0, 1, 1), (1, 2, 0)], [(0, 2, 1)]]
    out = semicrf.backward(**p, gold=gold)
    np.testing.assert_allclose(out["nll"], oracle_nll(p, gold), atol=1e-10)
    fd = finite_differences(p, lambda q: float(oracle_nll(q, gold).sum()))
    np.testing.assert_allclose(out["edges"], fd["edges"], atol=1e-7)


def test_minus_infinity_forbids_and_log_z_of_nothing_is_minus_infinity(rng):
    p = problem(rng, full=False)
    p["scores"][0, :, 1] = NEG  # label 1 forbidden in sequence 0
    m = semicrf.marginals(**p)
    np.testing.assert_allclose(m.position[0, :, 1], 0.0, atol=0)
    np.testing.assert_allclose(m.position[0], oracle(p, 0)["position"], atol=1e-10)
    p["scores"][1] = NEG
    z = semicrf.log_partition(**p)
    assert z[1] == NEG and np.isfinite(z[0])
    best, segs = semicrf.viterbi(**p)
    assert best[1] == NEG and segs[1] == []


def test_non_contiguous_inputs_give_the_same_results(rng):
    p = problem(rng)
    q = dict(p)
    q["scores"] = np.asfortranarray(p["scores"])
    wide = np.zeros((2, 5, 4))
    wide[:, :, ::2] = p["begin_boundary"]
    q["begin_boundary"] = wide[:, :, ::2]
    assert not q["begin_boundary"].flags.c_contiguous
    a, b = semicrf.backward(**p), semicrf.backward(**q)
    for n in a:
        np.testing.assert_array_equal(a[n], b[n])


def test_array_likes_and_integer_arrays_for_lengths(rng):
    p = problem(rng, full=False)
    z = semicrf.log_partition(
        scores=p["scores"].tolist(), lengths=np.array([5, 3], dtype=np.int32), max_duration=3
    )
    np.testing.assert_array_equal(z, semicrf.log_partition(**p))


def test_select_names_the_engine_and_why(rng):
    p = problem(rng)
    s = semicrf.select(**p)
    assert isinstance(s, semicrf.Selection)
    assert (s.device, s.algorithm) == ("cpu", "streaming") and s.required > 0 and s.reason
    assert semicrf.select(**p, backend="exact").algorithm == "exact"
    e = semicrf.select(**edge_problem(rng), op="log_partition")
    assert e.algorithm in ("exact", "scan")


@pytest.mark.parametrize(
    "text,bytes_",
    [("2GiB", 2 << 30), ("512 MiB", 512 << 20), ("1.5GB", 1_500_000_000), ("100", 100),
     ("3kib", 3072), (4096, 4096)],
)
def test_memory_budgets_parse(text, bytes_):
    assert semicrf.parse_memory_budget(text) == bytes_


def test_a_memory_budget_string_reaches_the_selector(rng):
    p = problem(rng)
    big = semicrf.select(**p, memory_budget="1GiB")
    assert "1.0 GiB" in big.reason
    with pytest.raises(MemoryError):
        semicrf.select(**p, memory_budget="16B")


def test_calls_from_threads_agree(rng):
    from concurrent.futures import ThreadPoolExecutor

    p = problem(rng, t=40, lengths=(40, 33), c=4, k=6)
    want = semicrf.log_partition(**p)
    with ThreadPoolExecutor(4) as ex:
        got = list(ex.map(lambda _: semicrf.log_partition(**p), range(8)))
    for g in got:
        np.testing.assert_array_equal(g, want)


def test_the_oracle_enumerates_every_segmentation_once():
    for length, k, c in itertools.product(range(1, 6), range(1, 4), range(1, 4)):
        segs = list(tilings(length, k, c))
        n = [1] + [0] * length
        for t in range(1, length + 1):
            n[t] = c * sum(n[t - d] for d in range(1, min(k, t) + 1))
        assert len(set(segs)) == len(segs) == n[length]


def test_the_gil_is_released_while_computing(rng):
    import threading
    import time

    t = 100
    while True:  # a problem that takes at least 0.25 s here
        p = problem(rng, b=4, t=t, c=8, k=12, lengths=(t,) * 4, full=False)
        t0 = time.perf_counter()
        semicrf.log_partition(**p, backend="exact")
        alone = time.perf_counter() - t0
        if alone >= 0.25 or t >= 100_000:
            break
        t *= 2
    done = threading.Event()
    worker = threading.Thread(
        target=lambda: (semicrf.log_partition(**p, backend="exact"), done.set())
    )
    stamps = []
    worker.start()
    while not done.is_set():
        stamps.append(time.perf_counter())
        time.sleep(0.001)
    worker.join()
    gaps = np.diff(stamps)
    # Holding the GIL would stop this loop for the whole call.
    assert len(stamps) > 10 and gaps.max() < alone / 2, (len(stamps), gaps.max(), alone)
