"""semicrf.torch against the f64 brute-force oracle, autograd against finite differences,
and its contract: devices, dtypes, errors, determinism, torch.compile.

Every test runs on the CPU and, where torch and the engine see a GPU, on CUDA (skipped with
the reason otherwise; SEMICRF_REQUIRE_GPU=1 turns the skip into a failure)."""

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import semicrf.torch as st  # noqa: E402
from test_torch_oracle import (  # noqa: E402
    OPTIONAL,
    as_numpy,
    brute_force,
    device_or_skip,
    random_problem,
    structured_score,
)

TOL = 1e-10


@pytest.fixture(params=["cpu", "cuda"])
def device(request):
    return device_or_skip(pytest, torch, request.param)


def on(p, device, requires_grad=False):
    return {k: v.detach().to(device).clone().requires_grad_(requires_grad) for k, v in p.items()}


CASES = [
    # (B, T, C, K, optional inputs, 3-D transition)
    (2, 5, 3, 3, OPTIONAL, False),
    (3, 4, 2, 2, ("transition", "duration"), False),
    (1, 1, 2, 3, OPTIONAL, False),  # T = 1
    (2, 5, 2, 1, ("transition",), False),  # K = 1: a linear-chain CRF
    (2, 4, 1, 4, ("duration", "start", "end"), False),  # C = 1, K = T
    (2, 3, 3, 5, OPTIONAL, False),  # K > T
    (2, 4, 3, 2, ("transition", "duration", "start"), True),  # (K, C, C) transition
]


@pytest.mark.parametrize("case", CASES)
def test_log_z_marginals_and_viterbi_match_brute_force(device, case):
    b, t, c, k, with_, t3 = case
    if device.type == "cuda" and t3:
        pytest.skip("the CUDA engine takes a (C, C) transition")
    p, lengths = random_problem(
        torch, b, t, c, k, seed=b * 100 + t * 10 + c, with_=with_, transition_3d=t3
    )
    q = as_numpy(p, lengths, k)
    x = on(p, device)
    log_z = st.log_partition(**x, lengths=lengths, max_duration=k)
    m = st.marginals(**x, lengths=lengths, max_duration=k)
    best = st.viterbi(**x, lengths=lengths, max_duration=k)
    assert log_z.device == device and log_z.dtype == torch.float64
    assert best.segments.device == device and best.labels.shape == (b, t)
    for i in range(b):
        o = brute_force(q, i)
        assert abs(log_z[i].item() - o["log_z"]) <= TOL * max(1.0, abs(o["log_z"]))
        assert abs(m.log_z[i].item() - o["log_z"]) <= TOL * max(1.0, abs(o["log_z"]))
        np.testing.assert_allclose(m.position[i].cpu().numpy(), o["position"], atol=TOL)
        np.testing.assert_allclose(m.boundary[i].cpu().numpy(), o["boundary"], atol=TOL)
        assert abs(best.scores[i].item() - o["viterbi"]) <= TOL * max(1.0, abs(o["viterbi"]))
        n = int(best.counts[i])
        segs = [tuple(int(v) for v in row) for row in best.segments[i, :n].cpu()]
        assert abs(structured_score(q, i, segs) - o["viterbi"]) <= TOL * max(1.0, abs(o["viterbi"]))
        assert (best.segments[i, n:] == -1).all()
        expect = [-1] * t
        for s, d, lab in segs:
            expect[s : s + d] = [lab] * d
        assert best.labels[i].tolist() == expect


def test_edge_form_matches_brute_force_on_the_cpu():
    b, t, k, c = 2, 4, 3, 2
    g = torch.Generator().manual_seed(7)
    edges = torch.randn(b, t, k, c, c, generator=g, dtype=torch.float64)
    lengths = torch.tensor([4, 3])
    q = {"edges": edges.numpy(), "lengths": lengths.numpy()}
    log_z = st.log_partition(edges=edges, lengths=lengths)
    m = st.marginals(edges=edges, lengths=lengths)
    best = st.viterbi(edges=edges, lengths=lengths)
    for i in range(b):
        o = brute_force(q, i, edges=True)
        assert abs(log_z[i].item() - o["log_z"]) <= TOL * max(1.0, abs(o["log_z"]))
        np.testing.assert_allclose(m.position[i].numpy(), o["position"], atol=TOL)
        assert abs(best.scores[i].item() - o["viterbi"]) <= TOL * max(1.0, abs(o["viterbi"]))
    assert m.edges.shape == edges.shape


def _gradcheck(fn, inputs):
    assert torch.autograd.gradcheck(fn, inputs, eps=1e-6, atol=1e-7, rtol=1e-6)


@pytest.mark.parametrize("name", ("scores",) + OPTIONAL)
def test_log_partition_gradients_match_finite_differences(device, name):
    p, lengths = random_problem(torch, 3, 5, 3, 3, seed=11)
    x = on(p, device)
    x[name].requires_grad_(True)

    def fn(v):
        return st.log_partition(**{**x, name: v}, lengths=lengths, max_duration=3)

    _gradcheck(fn, (x[name],))


def test_three_dimensional_transition_gradients_match_finite_differences():
    p, lengths = random_problem(torch, 2, 4, 2, 3, seed=12, transition_3d=True)
    tr = p.pop("transition").requires_grad_(True)
    _gradcheck(
        lambda v: st.log_partition(**p, transition=v, lengths=lengths, max_duration=3), (tr,)
    )


def test_edge_gradients_match_finite_differences():
    g = torch.Generator().manual_seed(13)
    edges = torch.randn(2, 4, 2, 2, 2, generator=g, dtype=torch.float64, requires_grad=True)
    lengths = torch.tensor([4, 2])
    _gradcheck(lambda e: st.log_partition(edges=e, lengths=lengths), (edges,))
    gold = [[(0, 2, 1), (2, 2, 0)], [(0, 1, 0), (1, 1, 1)]]
    _gradcheck(lambda e: st.nll(edges=e, lengths=lengths, gold=gold), (edges,))


@pytest.mark.parametrize("name", ("scores",) + OPTIONAL)
def test_nll_gradients_match_finite_differences(device, name):
    p, lengths = random_problem(torch, 2, 5, 3, 3, seed=21)
    x = on(p, device)
    x[name].requires_grad_(True)
    labels = torch.tensor([[0, 0, 2, 1, 1], [1, 1, 1, 1, 0]], device=device)

    def fn(v):
        return st.nll(**{**x, name: v}, lengths=lengths, max_duration=3, gold=labels)

    _gradcheck(fn, (x[name],))


def test_nll_is_log_z_minus_the_gold_score_and_never_negative(device):
    p, lengths = random_problem(torch, 3, 5, 2, 2, seed=31)
    q = as_numpy(p, lengths, 2)
    x = on(p, device)
    labels = torch.tensor([[0, 0, 0, 1, 1], [1, 0, 1, 0, 0], [1, 1, 1, 1, 1]], device=device)
    loss = st.nll(**x, lengths=lengths, max_duration=2, gold=labels)
    seg, counts = st.segments_from_labels(labels, lengths, 2)
    # runs longer than K = 2 are cut: [0,0,0] -> (0,2,0), (2,1,0)
    assert seg[0, :3].tolist() == [[0, 2, 0], [2, 1, 0], [3, 2, 1]]
    for i in range(3):
        n = int(counts[i])
        segs = [tuple(int(v) for v in row) for row in seg[i, :n].cpu()]
        expect = brute_force(q, i)["log_z"] - structured_score(q, i, segs)
        assert loss[i].item() >= 0
        assert abs(loss[i].item() - expect) <= TOL * max(1.0, abs(expect))
    # The three forms of gold agree.
    as_list = [[tuple(int(v) for v in row) for row in seg[i, : int(counts[i])]] for i in range(3)]
    for gold in (seg, as_list):
        other = st.nll(**x, lengths=lengths, max_duration=2, gold=gold)
        assert torch.equal(other, loss)


def test_the_viterbi_segmentation_scores_the_viterbi_score_and_beats_its_relabelling(device):
    p, lengths = random_problem(torch, 4, 12, 4, 5, seed=41, scale=3.0)
    x = on(p, device)
    best = st.viterbi(**x, lengths=lengths, max_duration=5)
    gold = st.gold_score(**x, lengths=lengths, max_duration=5, gold=best.segments)
    np.testing.assert_allclose(gold.cpu().numpy(), best.scores.cpu().numpy(), rtol=1e-12)
    from_labels = st.gold_score(**x, lengths=lengths, max_duration=5, gold=best.labels)
    assert (from_labels <= gold + 1e-9).all()  # labels merge equal neighbours: may differ


def test_ten_runs_give_bitwise_identical_gradients(device):
    p, lengths = random_problem(torch, 4, 40, 5, 6, seed=51)
    grads = []
    for _ in range(10):
        x = on(p, device, requires_grad=True)
        st.nll(
            **x,
            lengths=lengths,
            max_duration=6,
            gold=torch.zeros(4, 40, dtype=torch.long, device=device),
        ).mean().backward()
        grads.append([x[n].grad.cpu() for n in sorted(x)])
    for other in grads[1:]:
        for a, b in zip(grads[0], other):
            assert torch.equal(a, b)


def test_weighted_upstream_matches_per_sequence_gradients(device):
    p, lengths = random_problem(torch, 3, 6, 3, 3, seed=61)
    w = torch.tensor([0.5, -2.0, 3.0], dtype=torch.float64, device=device)
    x = on(p, device, requires_grad=True)
    (st.log_partition(**x, lengths=lengths, max_duration=3) * w).sum().backward()
    for name in ("transition", "duration", "scores"):
        expect = torch.zeros_like(x[name])
        for i in range(3):
            y = on(p, device, requires_grad=True)
            z = st.log_partition(**y, lengths=lengths, max_duration=3)
            (z[i] * w[i]).backward()
            expect += y[name].grad
        torch.testing.assert_close(x[name].grad, expect, atol=1e-12, rtol=1e-12)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_low_precision_inputs_run_as_float32_with_gradients_in_their_dtype(device, dtype):
    p, lengths = random_problem(torch, 2, 8, 3, 4, seed=71)
    x = {k: v.to(device, dtype).requires_grad_(True) for k, v in p.items()}
    log_z = st.log_partition(**x, lengths=lengths, max_duration=4)
    assert log_z.dtype == torch.float32
    log_z.sum().backward()
    ref = {k: v.to(device, dtype).double().requires_grad_(True) for k, v in p.items()}
    st.log_partition(**ref, lengths=lengths, max_duration=4).sum().backward()
    torch.testing.assert_close(
        log_z.double(),
        st.log_partition(
            **{k: v.detach() for k, v in ref.items()}, lengths=lengths, max_duration=4
        ),
        atol=1e-4,
        rtol=1e-5,
    )
    for k in x:
        assert x[k].grad.dtype == dtype
        tol = 1e-2 if dtype in (torch.bfloat16, torch.float16) else 1e-5
        torch.testing.assert_close(x[k].grad.double(), ref[k].grad, atol=tol, rtol=tol)


def test_non_contiguous_inputs_give_the_contiguous_result(device):
    p, lengths = random_problem(torch, 2, 6, 3, 3, seed=81)
    x = on(p, device)
    scores_t = x["scores"].transpose(0, 1).contiguous().transpose(0, 1).requires_grad_(True)
    tr_t = x["transition"].t().contiguous().t().requires_grad_(True)
    assert not scores_t.is_contiguous() and not tr_t.is_contiguous()
    a = st.log_partition(
        **{**x, "scores": scores_t, "transition": tr_t}, lengths=lengths, max_duration=3
    )
    a.sum().backward()
    y = on(p, device, requires_grad=True)
    b = st.log_partition(**y, lengths=lengths, max_duration=3)
    b.sum().backward()
    assert torch.equal(a, b)
    assert torch.equal(scores_t.grad, y["scores"].grad)
    assert torch.equal(tr_t.grad, y["transition"].grad)


def test_forbidden_paths_give_inf_not_nan(device):
    p, lengths = random_problem(torch, 2, 4, 2, 2, seed=91, with_=("transition",))
    x = on(p, device)
    tr = torch.full((2, 2), -math.inf, dtype=torch.float64, device=device)  # one segment only
    lengths = torch.tensor([2, 4])
    z = st.log_partition(scores=x["scores"], transition=tr, lengths=lengths, max_duration=2)
    assert math.isfinite(z[0].item()) and z[1].item() == -math.inf
    gold = [[(0, 1, 0), (1, 1, 1)], [(0, 2, 0), (2, 2, 0)]]
    loss = st.nll(scores=x["scores"], transition=tr, lengths=lengths, max_duration=2, gold=gold)
    assert loss.tolist() == [math.inf, math.inf]
    s = x["scores"].clone().requires_grad_(True)
    with pytest.raises(ValueError, match="(?i)infeasible|finite"):
        st.log_partition(scores=s, transition=tr, lengths=lengths, max_duration=2).sum().backward()


def test_grad_mode_off_computes_the_same_log_z(device):
    p, lengths = random_problem(torch, 2, 6, 3, 3, seed=95)
    x = on(p, device, requires_grad=True)
    with torch.no_grad():
        a = st.log_partition(**x, lengths=lengths, max_duration=3)
    b = st.log_partition(**x, lengths=lengths, max_duration=3)
    torch.testing.assert_close(a, b.detach(), atol=1e-12, rtol=1e-12)
    assert a.grad_fn is None and b.grad_fn is not None


def test_entropy_matches_brute_force(device):
    p, lengths = random_problem(torch, 2, 4, 2, 3, seed=97)
    q = as_numpy(p, lengths, 3)
    h = st.entropy(**on(p, device), lengths=lengths, max_duration=3)
    from test_torch_oracle import segmentations

    for i in range(2):
        segs = list(segmentations(int(lengths[i]), 3, 2))
        sc = np.array([structured_score(q, i, s) for s in segs])
        pr = np.exp(sc - brute_force(q, i)["log_z"])
        assert abs(h[i].item() + float((pr * np.log(pr)).sum())) < 1e-10


# -- errors -----------------------------------------------------------------------------------


def test_bad_tensors_raise_value_errors_naming_them():
    p, lengths = random_problem(torch, 2, 5, 3, 3, seed=1)
    cases = [
        ({**p, "transition": torch.zeros(4, 4, dtype=torch.float64)}, "transition"),
        ({**p, "duration": torch.zeros(2, 3, dtype=torch.float64)}, "duration"),
        ({**p, "begin_boundary": torch.zeros(2, 4, 3, dtype=torch.float64)}, "begin_boundary"),
        ({**p, "start": torch.zeros(3, device="meta", dtype=torch.float64)}, "start"),
        ({**p, "scores": p["scores"][0]}, "scores"),
    ]
    for kw, name in cases:
        with pytest.raises(ValueError, match=name):
            st.log_partition(**kw, lengths=lengths, max_duration=3)
    with pytest.raises(ValueError, match="lengths"):
        st.log_partition(**p, lengths=torch.tensor([5, 6]), max_duration=3)
    with pytest.raises(ValueError, match="lengths"):
        st.log_partition(**p, lengths=torch.tensor([5]), max_duration=3)
    with pytest.raises(TypeError, match="transition"):
        st.log_partition(
            **{**p, "transition": torch.zeros(3, 3, dtype=torch.long)},
            lengths=lengths,
            max_duration=3,
        )
    with pytest.raises(ValueError, match="either"):
        st.log_partition(lengths=lengths, max_duration=3)


def test_non_finite_potentials_are_rejected_by_name():
    p, lengths = random_problem(torch, 2, 5, 3, 3, seed=2)
    bad = p["duration"].clone()
    bad[1, 2] = float("nan")
    with pytest.raises(ValueError, match="duration"):
        st.log_partition(**{**p, "duration": bad}, lengths=lengths, max_duration=3)
    bad = p["scores"].clone()
    bad[0, 1, 1] = float("inf")
    with pytest.raises(ValueError, match="scores"):
        st.nll(
            **{**p, "scores": bad},
            lengths=lengths,
            max_duration=3,
            gold=torch.zeros(2, 5, dtype=torch.long),
        )


def test_bad_gold_segmentations_raise_value_errors():
    p, lengths = random_problem(torch, 2, 5, 3, 3, seed=3, lengths=[5, 3])
    bad_golds = [
        ([[(0, 5, 0)], [(0, 3, 1)]], "duration"),  # 5 > K
        ([[(0, 2, 0), (3, 3, 0)], [(0, 3, 1)]], "starts at"),  # a gap
        ([[(0, 2, 0), (2, 3, 7)], [(0, 3, 1)]], "label"),
        ([[(0, 2, 0), (2, 2, 0)], [(0, 3, 1)]], "cover"),  # 4 of 5 positions
        (torch.full((2, 5), 3), "label"),
        ([[(0, 2, 0), (2, 3, 0)]], "one per sequence"),
    ]
    for gold, text in bad_golds:
        with pytest.raises(ValueError, match=text):
            st.nll(**p, lengths=lengths, max_duration=3, gold=gold)


def test_budget_and_backend_errors_map_to_python_exceptions():
    p, lengths = random_problem(torch, 2, 5, 3, 3, seed=4)
    with pytest.raises(MemoryError):
        st.log_partition(**p, lengths=lengths, max_duration=3, memory_budget=16)
    with pytest.raises((RuntimeError, ValueError)):
        st.log_partition(**p, lengths=lengths, max_duration=3, backend="fast")
    with pytest.raises(ValueError, match="edges"):
        st.log_partition(
            **p,
            lengths=lengths,
            max_duration=3,
            backend="streaming",
            edges=torch.zeros(2, 5, 3, 3, 3, dtype=torch.float64),
        )


def test_select_names_the_engine():
    p, lengths = random_problem(torch, 2, 50, 3, 5, seed=5)
    sel = st.select(**p, lengths=lengths, max_duration=5)
    assert sel.device == "cpu" and sel.algorithm in ("exact", "scan", "streaming")
    assert sel.reason


# -- torch.compile ----------------------------------------------------------------------------


def test_the_operator_passes_torch_library_opcheck():
    from semicrf._torch_ops import log_partition_op

    p, lengths = random_problem(torch, 2, 5, 3, 3, seed=6)
    args = [
        p["scores"].requires_grad_(True),
        p["transition"],
        p["duration"],
        p["start"],
        p["end"],
        p["begin_boundary"],
        p["end_boundary"],
        None,
        lengths,
        3,
        "auto",
        None,
        True,
    ]
    torch.library.opcheck(
        log_partition_op,
        args,
        test_utils=("test_schema", "test_faketensor", "test_aot_dispatch_dynamic"),
    )


def test_compiled_training_step_gives_the_eager_gradients():
    p, lengths = random_problem(torch, 2, 6, 3, 3, seed=8)
    labels = torch.tensor([[0, 0, 1, 1, 2, 2], [1, 1, 1, 0, 0, 0]])

    def step(scores, transition):
        return st.nll(
            scores=scores * 2.0, transition=transition, lengths=lengths, max_duration=3, gold=labels
        ).sum()

    eager = {k: p[k].clone().requires_grad_(True) for k in ("scores", "transition")}
    step(**eager).backward()
    compiled = {k: p[k].clone().requires_grad_(True) for k in ("scores", "transition")}
    torch.compile(step, backend="aot_eager")(**compiled).backward()
    for k in eager:
        torch.testing.assert_close(compiled[k].grad, eager[k].grad, atol=1e-12, rtol=1e-12)


# -- the device path's glue, emulated on the CPU ------------------------------------------------


def _view(address, shape, dtype):
    """A numpy view of `shape` elements of `dtype` at a CPU address (the emulated device)."""
    import ctypes

    ct = ctypes.c_float if dtype == "float32" else ctypes.c_double
    n = int(np.prod(shape))
    return np.ctypeslib.as_array((ct * n).from_address(address)).reshape(shape)


_DEVICE_CALLS = []


def _host_problem(kw):
    import semicrf

    _DEVICE_CALLS.append(kw["scores"])
    shape, dtype = kw["shape"], kw["dtype"]
    p = {"scores": _view(kw["scores"], shape, dtype).astype(np.float64)}
    for name in ("begin_boundary", "end_boundary"):
        if kw.get(name) is not None:
            p[name] = _view(kw[name], shape, dtype).astype(np.float64)
    for name in ("transition", "duration", "start", "end"):
        if kw.get(name) is not None:
            # (device address, shape) pairs of the problem's dtype, as the contract says
            at, dims = kw[name]
            assert isinstance(at, int) and isinstance(dims, tuple)
            p[name] = _view(at, dims, dtype).astype(np.float64)
    assert isinstance(kw["stream"], int) and isinstance(kw["device"], int)
    p.update(lengths=np.asarray(kw["lengths"]), max_duration=kw["max_duration"])
    return semicrf._native, p


def _fake_cuda_backward(**kw):
    native, p = _host_problem(kw)
    out = native.backward(upstream=kw["upstream"], **p)
    b, t, _ = kw["shape"]
    _view(kw["out_scores"], kw["shape"], kw["dtype"])[...] = out["scores"]
    for name in ("begin_boundary", "end_boundary"):
        if name in p:
            _view(kw["out_" + name], kw["shape"], kw["dtype"])[...] = out[name]
    if kw.get("out_boundary") is not None:
        _view(kw["out_boundary"], (b, t), kw["dtype"])[...] = out["boundary"]
    if kw.get("out_log_z") is not None:
        _view(kw["out_log_z"], (b,), kw["dtype"])[...] = out["log_z"]
    shared = []
    for k in ("transition", "duration", "start", "end"):
        if k in p:
            if kw.get("out_" + k) is not None:
                _view(kw["out_" + k], p[k].shape, kw["dtype"])[...] = out[k]
            else:
                shared.append(out[k].reshape(-1))
    return {"log_z": out["log_z"], "shared": np.concatenate(shared) if shared else np.zeros(0)}


def test_the_device_path_fills_the_buffers_torch_allocated(monkeypatch):
    """The CUDA entries, emulated with host memory: the torch layer passes addresses, shapes,
    the shared parameters' addresses and shapes and output buffers (the shared gradients'
    included) as python/NATIVE.md says, and its results equal the CPU path's."""
    import semicrf._torch_problem as tp

    native = tp._native
    monkeypatch.setattr(native, "cuda_backward", _fake_cuda_backward, raising=False)
    monkeypatch.setattr(
        native,
        "cuda_log_partition",
        lambda **kw: (lambda n, p: n.log_partition(**p))(*_host_problem(kw)),
        raising=False,
    )
    monkeypatch.setattr(
        native,
        "cuda_viterbi",
        lambda **kw: (lambda n, p: n.viterbi(**p))(*_host_problem(kw)),
        raising=False,
    )
    p, lengths = random_problem(torch, 3, 6, 3, 3, seed=99)
    labels = torch.tensor([[0, 0, 1, 1, 2, 2], [1, 1, 1, 0, 0, 0], [2, 0, 1, 2, 0, 1]])
    weights = torch.tensor([1.0, -0.5, 2.0], dtype=torch.float64)

    def run():
        x = on(p, "cpu", requires_grad=True)
        loss = st.nll(**x, lengths=lengths, max_duration=3, gold=labels)
        (loss * weights).sum().backward()
        z = st.log_partition(
            **{k: v.detach() for k, v in x.items()}, lengths=lengths, max_duration=3
        )
        m = st.marginals(**x, lengths=lengths, max_duration=3)
        v = st.viterbi(**x, lengths=lengths, max_duration=3)
        return [loss, z, m.position, m.boundary, v.scores, v.segments] + [
            x[k].grad for k in sorted(x)
        ]

    expected = run()
    monkeypatch.setattr(tp, "DEVICE_TYPES", ("cpu",))
    monkeypatch.setattr(tp, "current_stream", lambda index: 0)
    monkeypatch.setattr(tp.Call, "on_device", lambda self, fn, kw: fn(**kw))
    del _DEVICE_CALLS[:]
    got = run()
    assert (
        len(_DEVICE_CALLS) >= 5
    )  # nll (forward-backward, weighted again), log Z, marginals, viterbi
    for a, b in zip(got, expected):
        torch.testing.assert_close(a, b, atol=1e-12, rtol=1e-12)


def test_lengths_come_to_the_host_without_the_shared_parameters(device, monkeypatch):
    """CPU lengths are used as they are (int64: the very tensor), device lengths in one copy;
    nothing else comes to the host."""
    import semicrf._torch_problem as tp

    if device.type == "cpu":
        monkeypatch.setattr(tp, "DEVICE_TYPES", ("cpu",))
    p, lengths = random_problem(torch, 3, 6, 3, 3, seed=4)
    x = {k: v.to(device).float() for k, v in p.items()}
    cpu = lengths.to(torch.int64)
    _, host, _ = tp.check(dict(x), cpu, 3)
    assert host is cpu
    _, host, _ = tp.check(dict(x), lengths.to(device, torch.int32), 3)
    assert host.device.type == "cpu" and host.dtype == torch.int64
    assert torch.equal(host, cpu) and not host.__dict__


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.float64])
def test_the_device_path_passes_contiguous_inputs_of_the_problems_dtype(dtype, monkeypatch):
    import semicrf._torch_problem as tp

    monkeypatch.setattr(tp, "DEVICE_TYPES", ("cpu",))
    monkeypatch.setattr(tp, "current_stream", lambda index: 0)
    p, lengths = random_problem(torch, 3, 6, 3, 3, seed=6)
    wide = torch.cat([p["scores"], p["scores"]], dim=2).to(dtype)
    inputs = {"scores": wide[:, :, ::2], "begin_boundary": p["begin_boundary"].to(dtype)}
    assert not inputs["scores"].is_contiguous()
    inputs, host, k = tp.check(inputs, lengths, 3)
    call = tp.Call(inputs, host, k)
    kw, keep = call.device_kwargs()
    assert kw["dtype"] == ("float64" if dtype == torch.float64 else "float32")
    for name in ("scores", "begin_boundary"):
        got = _view(kw[name], kw["shape"], kw["dtype"])
        want = inputs[name].to(call.dtype).numpy()
        assert np.array_equal(got, want)
    assert list(kw["lengths"]) == lengths.tolist() and kw["lengths"].dtype == np.int64
