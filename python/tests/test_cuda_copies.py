"""On CUDA tensors a training step copies neither the scores nor any gradient between the host
and the device: the torch profiler's trace lists every host<->device copy of the step, and none
may be as large as the smallest position-wise tensor. Skipped without a GPU (a failure under
SEMICRF_REQUIRE_GPU=1)."""

import json

import pytest

torch = pytest.importorskip("torch")

import semicrf.torch as st  # noqa: E402
from test_torch_oracle import device_or_skip  # noqa: E402


def host_device_copies(fn, tmp_path):
    """The sizes in bytes of the host<->device copies that fn() makes."""
    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=acts) as prof:
        fn()
        torch.cuda.synchronize()
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    events = json.loads(path.read_text())["traceEvents"]
    copies = [
        e
        for e in events
        if e.get("cat") == "gpu_memcpy" and ("HtoD" in e["name"] or "DtoH" in e["name"])
    ]
    assert all("bytes" in e.get("args", {}) for e in copies), "the trace gives no copy sizes"
    return [e["args"]["bytes"] for e in copies]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_a_step_copies_no_scores_or_gradients(dtype, tmp_path):
    dev = device_or_skip(pytest, torch, "cuda")
    b, t, c, k = 8, 512, 6, 16
    g = torch.Generator(device="cpu").manual_seed(3)
    scores = torch.randn(b, t, c, generator=g, dtype=dtype).to(dev).requires_grad_()
    boundary = torch.randn(b, t, c, generator=g, dtype=dtype).to(dev).requires_grad_()
    tr = torch.randn(c, c, generator=g, dtype=dtype).to(dev).requires_grad_()
    lengths = torch.full((b,), t, device=dev)

    def step():
        st.log_partition(
            scores=scores, lengths=lengths, max_duration=k, transition=tr, begin_boundary=boundary
        ).sum().backward()

    step()  # the first call compiles kernels and loads modules
    sizes = host_device_copies(step, tmp_path)
    smallest = b * t * c * scores.element_size()
    assert scores.grad is not None and boundary.grad is not None
    assert max(sizes, default=0) < smallest, (
        f"a host<->device copy of {max(sizes)} bytes (a (B, T, C) tensor is {smallest})"
    )
