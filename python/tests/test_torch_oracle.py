"""An f64 brute-force oracle for the torch tests: every segmentation enumerated.

Written from the model's definition (crates/semicrf-core/src/model.md, sections 2 and 3)
with plain Python floats, independent of every engine. Tiny problems only. The checks that
it agrees with the engines live in test_torch.py; here it is checked against counting.
"""

import itertools
import math

NEG_INF = float("-inf")


def segmentations(length, max_duration, num_labels):
    """Every tiling of [0, length) by segments (start, duration, label), durations 1..=K."""
    if length == 0:
        yield ()
        return
    for d in range(1, min(max_duration, length) + 1):
        for rest in segmentations(length - d, max_duration, num_labels):
            for c in range(num_labels):
                shifted = tuple((s + d, dd, cc) for (s, dd, cc) in rest)
                yield ((0, d, c),) + shifted


def logsumexp(values):
    values = list(values)
    m = max(values, default=NEG_INF)
    if m == NEG_INF:
        return NEG_INF
    return m + math.log(sum(math.exp(v - m) for v in values))


def _get(t, *idx):
    return 0.0 if t is None else float(t[idx])


def structured_score(p, b, segs):
    """The score of one segmentation of sequence b (model §2); p holds numpy f64 arrays."""
    total = 0.0
    for i, (s, d, c) in enumerate(segs):
        total += float(p["scores"][b, s : s + d, c].sum())
        total += _get(p.get("duration"), d - 1, c)
        total += _get(p.get("begin_boundary"), b, s, c)
        total += _get(p.get("end_boundary"), b, s + d - 1, c)
        if i == 0:
            total += _get(p.get("start"), c)
        else:
            tr = p.get("transition")
            prev = segs[i - 1][2]
            if tr is not None:
                total += float(tr[prev, c] if tr.ndim == 2 else tr[d - 1, prev, c])
    total += _get(p.get("end"), segs[-1][2])
    return total


def edge_score(edges, b, segs, first=logsumexp):
    """The score of one segmentation in edge form (model §3: the virtual start, whose
    sources are summed by log-sum-exp, or maxed for Viterbi with `first=max`)."""
    s0, d0, c0 = segs[0]
    total = first(float(edges[b, 0, d0 - 1, c0, i]) for i in range(edges.shape[-1]))
    for (s, d, c), (_, _, prev) in zip(segs[1:], segs[:-1]):
        total += float(edges[b, s, d - 1, c, prev])
    return total


def brute_force(p, b, edges=False):
    """log Z, Viterbi score and segmentation, position and boundary marginals of sequence b."""
    length = int(p["lengths"][b])
    if edges:
        _, t_max, k, c, _ = p["edges"].shape
        score = lambda segs: edge_score(p["edges"], b, segs)  # noqa: E731
    else:
        _, t_max, c = p["scores"].shape
        k = p["max_duration"]
        score = lambda segs: structured_score(p, b, segs)  # noqa: E731
    all_segs = list(segmentations(length, k, c))
    scores = [score(s) for s in all_segs]
    log_z = logsumexp(scores)
    if edges:
        scores_max = [edge_score(p["edges"], b, s, first=max) for s in all_segs]
    else:
        scores_max = scores
    best = max(range(len(all_segs)), key=lambda i: scores_max[i])
    position = [[0.0] * c for _ in range(t_max)]
    boundary = [0.0] * t_max
    if log_z > NEG_INF:
        for segs, sc in zip(all_segs, scores):
            w = math.exp(sc - log_z) if sc > NEG_INF else 0.0
            for s, d, lab in segs:
                boundary[s] += w
                for t in range(s, s + d):
                    position[t][lab] += w
    return {
        "log_z": log_z,
        "viterbi": scores_max[best],
        "segments": list(all_segs[best]),
        "position": position,
        "boundary": boundary,
    }


def count_segmentations(length, max_duration, num_labels):
    n = [1] + [0] * length
    for t in range(1, length + 1):
        n[t] = num_labels * sum(n[t - d] for d in range(1, min(max_duration, t) + 1))
    return n[length]


def test_the_enumeration_counts_every_segmentation_once():
    for length, k, c in itertools.product(range(1, 6), range(1, 4), range(1, 4)):
        segs = list(segmentations(length, k, c))
        assert len(segs) == len(set(segs)) == count_segmentations(length, k, c)
        for tiling in segs:
            assert sum(d for _, d, _ in tiling) == length


# -- problems and devices shared by the torch tests ------------------------------------------

OPTIONAL = ("transition", "duration", "start", "end", "begin_boundary", "end_boundary")


def random_problem(
    torch, b, t, c, k, seed, with_=OPTIONAL, transition_3d=False, scale=1.0, lengths=None
):
    """Random f64 potentials (CPU tensors) of the given shape; `with_` names the optional
    inputs to include."""
    g = torch.Generator().manual_seed(seed)

    def r(*shape):
        return torch.randn(*shape, generator=g, dtype=torch.float64) * scale

    p = {"scores": r(b, t, c)}
    if "transition" in with_:
        p["transition"] = r(k, c, c) if transition_3d else r(c, c)
    if "duration" in with_:
        p["duration"] = r(k, c)
    for name in ("start", "end"):
        if name in with_:
            p[name] = r(c)
    for name in ("begin_boundary", "end_boundary"):
        if name in with_:
            p[name] = r(b, t, c)
    if lengths is None:
        lengths = [t] + [int(x) for x in torch.randint(1, t + 1, (b - 1,), generator=g)]
    return p, torch.tensor(lengths)


def as_numpy(p, lengths, k):
    q = {name: v.detach().cpu().double().numpy() for name, v in p.items()}
    q["lengths"] = lengths.cpu().numpy()
    q["max_duration"] = k
    return q


def device_or_skip(pytest, torch, name):
    """The torch device for a test; CUDA skips with its reason unless SEMICRF_REQUIRE_GPU=1."""
    import os

    if name == "cpu":
        return torch.device("cpu")
    import semicrf

    reason = None
    if not torch.cuda.is_available():
        reason = "torch sees no CUDA device"
    else:
        ok, why = semicrf.cuda_available(0)
        if not ok:
            reason = f"semicrf's CUDA engine is unavailable: {why}"
    if reason is not None:
        if os.environ.get("SEMICRF_REQUIRE_GPU") == "1":
            pytest.fail(f"SEMICRF_REQUIRE_GPU=1 but {reason}")
        pytest.skip(reason)
    return torch.device("cuda:0")
