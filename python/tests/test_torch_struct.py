"""semicrf.torch against torch-struct 0.5's `SemiMarkov` (code we did not write), in float64.

torch-struct takes edge potentials `(B, N - 1, K + 1, C, C)`: destination label first, the
duration axis shifted by one (index 0 unused) and lengths counted as `L + 1`; its first
segment follows a virtual start over every source label, as our edge form does (model §3).
Structured potentials are compared through their materialisation into edges (`start` on
source 0 of the first segments, `-inf` on the other sources, `end` on segments ending at L).
"""

import pytest

torch = pytest.importorskip("torch")
torch_struct = pytest.importorskip("torch_struct")

import semicrf.torch as st  # noqa: E402
from test_torch_oracle import device_or_skip, random_problem  # noqa: E402

TOL = 1e-10


@pytest.fixture(params=["cpu", "cuda"])
def device(request):
    return device_or_skip(pytest, torch, request.param)


def theirs(edges):
    """Our `(B, T, K, C, C)` edges in torch-struct's layout `(B, T, K + 1, C, C)`."""
    b, t, _, c, _ = edges.shape
    return torch.cat([torch.zeros(b, t, 1, c, c, dtype=edges.dtype), edges], dim=2)


def materialize(p, lengths, k):
    """Structured potentials → edges, exactly (model §3)."""
    scores = p["scores"]
    b, t, c = scores.shape
    neg = float("-inf")
    e = torch.full((b, t, k, c, c), neg, dtype=torch.float64)
    for bi in range(b):
        length = int(lengths[bi])
        for s in range(length):
            for d in range(1, min(k, length - s) + 1):
                seg = scores[bi, s : s + d].sum(0) + p["duration"][d - 1]
                seg = seg + p["begin_boundary"][bi, s] + p["end_boundary"][bi, s + d - 1]
                if s + d == length:
                    seg = seg + p["end"]
                if s == 0:
                    e[bi, 0, d - 1, :, 0] = seg + p["start"]
                else:
                    e[bi, s, d - 1] = seg.unsqueeze(1) + p["transition"].t()
    return e


@pytest.mark.parametrize("shape", [(2, 6, 3, 3), (3, 5, 2, 1), (2, 4, 4, 5), (1, 8, 3, 4)])
def test_edge_log_z_and_marginals_equal_torch_struct(shape):
    b, t, c, k = shape
    g = torch.Generator().manual_seed(b * 1000 + t * 100 + c * 10 + k)
    edges = torch.randn(b, t, k, c, c, generator=g, dtype=torch.float64)
    lengths = torch.tensor([t] + [max(1, t - 1 - i) for i in range(b - 1)])
    model = torch_struct.SemiMarkov(torch_struct.LogSemiring)
    ref_z = model.sum(theirs(edges), lengths=lengths + 1)
    ref_m = model.marginals(theirs(edges), lengths=lengths + 1)[:, :, 1:]
    ours = st.marginals(edges=edges, lengths=lengths)
    torch.testing.assert_close(st.log_partition(edges=edges, lengths=lengths), ref_z.detach(),
                               atol=0, rtol=TOL)
    torch.testing.assert_close(ours.edges, ref_m.detach(), atol=TOL, rtol=0)
    best = torch_struct.SemiMarkov(torch_struct.MaxSemiring).sum(theirs(edges), lengths=lengths + 1)
    torch.testing.assert_close(st.viterbi(edges=edges, lengths=lengths).scores, best.detach(),
                               atol=0, rtol=TOL)


@pytest.mark.parametrize("shape", [(2, 6, 3, 3), (3, 5, 2, 1), (2, 4, 4, 5)])
def test_structured_log_z_and_viterbi_equal_torch_struct_on_the_materialized_edges(device, shape):
    b, t, c, k = shape
    p, lengths = random_problem(torch, b, t, c, k, seed=sum(shape))
    edges = materialize(p, lengths, k)
    ref_z = torch_struct.SemiMarkov(torch_struct.LogSemiring).sum(theirs(edges), lengths=lengths + 1)
    ref_v = torch_struct.SemiMarkov(torch_struct.MaxSemiring).sum(theirs(edges), lengths=lengths + 1)
    x = {name: v.to(device) for name, v in p.items()}
    z = st.log_partition(**x, lengths=lengths, max_duration=k)
    v = st.viterbi(**x, lengths=lengths, max_duration=k).scores
    torch.testing.assert_close(z.cpu(), ref_z.detach(), atol=0, rtol=TOL)
    torch.testing.assert_close(v.cpu(), ref_v.detach(), atol=0, rtol=TOL)
    # The same edges through our edge form, too.
    torch.testing.assert_close(st.log_partition(edges=edges, lengths=lengths), ref_z.detach(),
                               atol=0, rtol=TOL)
