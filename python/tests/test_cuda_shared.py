"""On CUDA tensors the shared parameters (transition, duration, start, end) go to the engine
as device arrays and their gradients come back in tensors torch allocated: the same log Z and
gradients, bit for bit, as with the same parameters passed as host arrays (the native
module's other form), ten steps that repeat bit for bit, the CPU engine's errors for bad
parameters, and a step that makes no copy of them. Skipped without a GPU (a failure under
SEMICRF_REQUIRE_GPU=1)."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import semicrf.torch as st  # noqa: E402
from semicrf import _native  # noqa: E402
from semicrf._torch_problem import SHARED, current_stream  # noqa: E402
from test_torch_oracle import device_or_skip, random_problem  # noqa: E402

ALL = ("transition", "duration", "start", "end", "begin_boundary", "end_boundary")


def _native_backward(p, lengths, k, dtype, shared_on_device, queued=False):
    """One `cuda_backward` on the tensors of `p` (on the GPU, of `dtype`), the shared
    parameters as (address, shape) pairs or as host float64 arrays, `queued` or not: every
    result as bits (log Z as returned on the host too, but queued, which returns nothing)."""
    b, t, c = p["scores"].shape
    new = p["scores"].new_empty
    out = {"scores": new((b, t, c)), "log_z": new((b,)), "boundary": new((b, t))}
    kw = dict(
        scores=p["scores"].data_ptr(),
        shape=(b, t, c),
        dtype=str(dtype).replace("torch.", ""),
        lengths=np.asarray(lengths, dtype=np.int64),
        max_duration=k,
        stream=current_stream(0),
        device=0,
        upstream=np.linspace(-1.0, 2.0, b),
        out_scores=out["scores"].data_ptr(),
        out_log_z=out["log_z"].data_ptr(),
        out_boundary=out["boundary"].data_ptr(),
        queued=queued,
    )
    for name in ("begin_boundary", "end_boundary"):
        if name in p:
            out[name] = new((b, t, c))
            kw[name] = p[name].data_ptr()
            kw["out_" + name] = out[name].data_ptr()
    for name in SHARED:
        if name in p:
            if shared_on_device:
                kw[name] = (p[name].data_ptr(), tuple(p[name].shape))
                out[name] = new(tuple(p[name].shape))
                kw["out_" + name] = out[name].data_ptr()
            else:
                kw[name] = p[name].detach().cpu().double().numpy()
    ret = _native.cuda_backward(**kw)
    torch.cuda.synchronize()
    if not shared_on_device:
        flat = torch.from_numpy(np.asarray(ret["shared"]))
        at = 0
        for name in SHARED:
            if name in p:
                n = p[name].numel()
                # As the engine rounds them for its device outputs: once, from float64.
                out[name] = flat[at : at + n].view(p[name].shape).to(dtype)
                at += n
    bits = {k: v.detach().cpu().double().numpy().view(np.int64) for k, v in out.items()}
    if queued:
        assert dict(ret) == {}
    else:
        host_z = torch.from_numpy(np.asarray(ret["log_z"]))
        bits["returned log_z"] = host_z.numpy().view(np.int64)
    return bits


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("transition_3d", [False, True])
def test_shared_parameters_on_the_device_equal_host_ones_bitwise(dtype, transition_3d):
    dev = device_or_skip(pytest, torch, "cuda")
    p, lengths = random_problem(torch, 4, 50, 5, 6, seed=12, with_=ALL, transition_3d=transition_3d)
    p = {k: v.to(dev, dtype) for k, v in p.items()}
    host = _native_backward(p, lengths.tolist(), 6, dtype, shared_on_device=False)
    on = _native_backward(p, lengths.tolist(), 6, dtype, shared_on_device=True)
    assert host.keys() == on.keys()
    for name in host:
        assert np.array_equal(host[name], on[name]), name
    # Queued: the same bits in every output, ten times.
    for _ in range(10):
        q = _native_backward(p, lengths.tolist(), 6, dtype, shared_on_device=True, queued=True)
        assert q.keys() == on.keys() - {"returned log_z"}
        for name in q:
            assert np.array_equal(q[name], on[name]), name


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_ten_training_steps_give_the_same_bits(dtype):
    dev = device_or_skip(pytest, torch, "cuda")
    p, lengths = random_problem(torch, 6, 80, 4, 7, seed=3, with_=ALL)
    first = None
    for _ in range(10):
        x = {k: v.to(dev, dtype).requires_grad_() for k, v in p.items()}
        z = st.log_partition(**x, lengths=lengths, max_duration=7)
        (z * torch.linspace(0.5, 1.5, 6, device=dev, dtype=dtype)).sum().backward()
        got = [z.detach()] + [x[k].grad for k in sorted(x)]
        got = [g.cpu().double().numpy().view(np.int64) for g in got]
        if first is None:
            first = got
        for a, b in zip(first, got):
            assert np.array_equal(a, b)
    # And the CPU engine's values, within its f64 agreement (a check the test can fail).
    x = {k: v.to(torch.float64).requires_grad_() for k, v in p.items()}
    z = st.log_partition(**x, lengths=lengths, max_duration=7)
    if dtype == torch.float64:
        np.testing.assert_allclose(first[0].view(np.float64), z.detach().numpy(), rtol=1e-10)


@pytest.mark.parametrize("name", ["transition", "duration", "start", "end"])
def test_bad_shared_parameters_raise_the_cpu_engines_errors(name):
    dev = device_or_skip(pytest, torch, "cuda")
    p, lengths = random_problem(torch, 2, 20, 3, 4, seed=8, with_=ALL)
    p[name].view(-1)[1] = float("nan")
    errors = []
    for d in ("cpu", dev):
        with pytest.raises(ValueError) as e:
            st.log_partition(**{k: v.to(d) for k, v in p.items()}, lengths=lengths, max_duration=4)
        errors.append(str(e.value))
    assert errors[0] == errors[1] and name in errors[0]
    # A parameter on another device than the scores, and one of a wrong shape.
    q = {k: v.to(dev) for k, v in p.items()}
    q[name] = p[name].clone()
    with pytest.raises(ValueError, match=f"{name}: on cpu"):
        st.log_partition(**q, lengths=lengths, max_duration=4)
    q[name] = torch.zeros(5, 5, 5, device=dev, dtype=torch.float64)
    with pytest.raises(ValueError, match=f"{name}: expected shape"):
        st.log_partition(**q, lengths=lengths, max_duration=4)
