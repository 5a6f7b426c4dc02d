"""semicrf.torch against torch-struct 0.5's `SemiMarkov` (code we did not write), in float64.

torch-struct takes edge potentials `(B, N - 1, K + 1, C, C)`: destination label first, the
duration axis shifted by one (index 0 unused) and lengths counted as `L + 1`; its first
segment follows a virtual start over every source label, as our edge form does (model §3).
Structured potentials are compared through their materialisation into edges (`start` on
source 0 of the first segments, `-inf` on the other sources, `end` on segments ending at L).

torch-struct is run on one sequence at a time: in a batch of unequal lengths its log Z of
the longer sequences is wrong (its mask is built from the shortest length; the brute-force
oracle agrees with us, see the last test).
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


def per_sequence(semiring, edges, lengths, marginals=False):
    """torch-struct's log Z (or max, or edge marginals in our layout), one sequence at a time."""
    out = []
    for b, length in enumerate(lengths.tolist()):
        e = theirs(edges[b : b + 1, :length]).requires_grad_(marginals)
        model = torch_struct.SemiMarkov(semiring)
        if marginals:
            m = torch.zeros_like(edges[b])
            m[:length] = model.marginals(e, lengths=torch.tensor([length + 1]))[0, :, 1:]
            out.append(m)
        else:
            out.append(model.sum(e, lengths=torch.tensor([length + 1]))[0])
    return torch.stack(out).detach()


def random_edges(b, t, c, k):
    g = torch.Generator().manual_seed(b * 1000 + t * 100 + c * 10 + k)
    edges = torch.randn(b, t, k, c, c, generator=g, dtype=torch.float64)
    return edges, torch.tensor([t] + [max(1, t - 1 - i) for i in range(b - 1)])


@pytest.mark.parametrize("shape", [(2, 6, 3, 3), (3, 5, 2, 1), (2, 4, 4, 5), (1, 8, 3, 4)])
def test_edge_log_z_marginals_and_viterbi_equal_torch_struct(shape):
    edges, lengths = random_edges(*shape)
    ref_z = per_sequence(torch_struct.LogSemiring, edges, lengths)
    ref_m = per_sequence(torch_struct.LogSemiring, edges, lengths, marginals=True)
    ref_v = per_sequence(torch_struct.MaxSemiring, edges, lengths)
    torch.testing.assert_close(
        st.log_partition(edges=edges, lengths=lengths), ref_z, atol=0, rtol=TOL
    )
    torch.testing.assert_close(
        st.marginals(edges=edges, lengths=lengths).edges, ref_m, atol=TOL, rtol=0
    )
    torch.testing.assert_close(
        st.viterbi(edges=edges, lengths=lengths).scores, ref_v, atol=0, rtol=TOL
    )


@pytest.mark.parametrize("shape", [(2, 6, 3, 3), (3, 5, 2, 1), (2, 4, 4, 5)])
def test_structured_log_z_and_viterbi_equal_torch_struct_on_the_materialized_edges(device, shape):
    b, t, c, k = shape
    p, lengths = random_problem(torch, b, t, c, k, seed=sum(shape))
    edges = materialize(p, lengths, k)
    ref_z = per_sequence(torch_struct.LogSemiring, edges, lengths)
    ref_v = per_sequence(torch_struct.MaxSemiring, edges, lengths)
    x = {name: v.to(device) for name, v in p.items()}
    z = st.log_partition(**x, lengths=lengths, max_duration=k)
    v = st.viterbi(**x, lengths=lengths, max_duration=k).scores
    torch.testing.assert_close(z.cpu(), ref_z, atol=0, rtol=TOL)
    torch.testing.assert_close(v.cpu(), ref_v, atol=0, rtol=TOL)
    # The same edges through our edge form, too.
    torch.testing.assert_close(
        st.log_partition(edges=edges, lengths=lengths), ref_z, atol=0, rtol=TOL
    )


def test_in_a_ragged_batch_torch_struct_errs_where_we_agree_with_brute_force():
    from test_torch_oracle import brute_force

    edges, _ = random_edges(2, 6, 3, 3)
    lengths = torch.tensor([6, 4])
    batched = (
        torch_struct.SemiMarkov(torch_struct.LogSemiring)
        .sum(theirs(edges), lengths=lengths + 1)
        .detach()
    )
    ours = st.log_partition(edges=edges, lengths=lengths)
    oracle = [
        brute_force({"edges": edges.numpy(), "lengths": lengths.numpy()}, b, edges=True)
        for b in range(2)
    ]
    for b in range(2):
        assert abs(ours[b].item() - oracle[b]["log_z"]) <= TOL * abs(oracle[b]["log_z"])
    assert abs(batched[0].item() - oracle[0]["log_z"]) > 0.1  # torch-struct 0.5's error
    torch.testing.assert_close(
        per_sequence(torch_struct.LogSemiring, edges, lengths), ours, atol=0, rtol=TOL
    )
