"""SemiMarkovCRFHead: flash-semicrf 0.2.0's names, semicrf's model, padded decodings."""

import inspect

import pytest

torch = pytest.importorskip("torch")

import semicrf.torch as st  # noqa: E402
from test_torch_oracle import as_numpy, brute_force, device_or_skip, structured_score  # noqa: E402


@pytest.fixture(params=["cpu", "cuda"])
def device(request):
    return device_or_skip(pytest, torch, request.param)


# flash_semicrf.SemiMarkovCRFHead 0.2.0: constructor and method parameters, in order.
FLASH_API = {
    "__init__": [
        "num_classes",
        "max_duration",
        "hidden_dim",
        "init_scale",
        "duration_distribution",
        "edge_memory_threshold",
        "num_warps",
    ],
    "forward": ["hidden_states", "lengths", "use_triton", "backend"],
    "compute_loss": ["hidden_states", "lengths", "labels", "use_triton", "backend", "reduction"],
    "decode": ["hidden_states", "lengths", "use_triton", "backend"],
    "decode_with_traceback": [
        "hidden_states",
        "lengths",
        "max_traceback_length",
        "use_triton",
        "backend",
    ],
    "parameter_penalty": ["p"],
}


def test_the_constructor_and_methods_take_flash_semicrfs_parameters():
    for method, names in FLASH_API.items():
        params = list(inspect.signature(getattr(st.SemiMarkovCRFHead, method)).parameters)
        assert params[1:] == names, method


def head_and_inputs(device, b=3, t=6, c=3, k=3, hidden=None, seed=0):
    torch.manual_seed(seed)
    head = st.SemiMarkovCRFHead(num_classes=c, max_duration=k, hidden_dim=hidden).double()
    with torch.no_grad():
        head.start.normal_()
        head.end.normal_()
    head = head.to(device)
    x = torch.randn(b, t, hidden or c, dtype=torch.float64, device=device)
    lengths = torch.tensor([t] + [max(1, t - 2 - i) for i in range(b - 1)], device=device)
    return head, x, lengths


def test_the_loss_is_the_nll_of_the_labelled_runs_cut_at_max_duration(device):
    head, x, lengths = head_and_inputs(device)
    labels = torch.tensor(
        [[2, 2, 2, 2, 0, 1], [1, 1, 0, 0, 0, 0], [0, 1, 0, 1, 0, 1]], device=device
    )
    loss = head.compute_loss(x, lengths, labels, reduction="none")
    assert loss.shape == (3,) and (loss >= 0).all()
    p = {
        "scores": x,
        "transition": head.transition,
        "duration": head.duration_bias,
        "start": head.start,
        "end": head.end,
    }
    q = as_numpy(p, lengths, 3)
    gold = [
        [(0, 3, 2), (3, 1, 2), (4, 1, 0), (5, 1, 1)],
        [(0, 2, 1), (2, 2, 0)],
        [(0, 1, 0), (1, 1, 1), (2, 1, 0)],
    ]
    for i in range(3):
        expect = brute_force(q, i)["log_z"] - structured_score(q, i, gold[i])
        assert abs(loss[i].item() - expect) < 1e-10 * max(1.0, abs(expect))
    mean = head.compute_loss(x, lengths, labels)
    total = head.compute_loss(x, lengths, labels, reduction="sum")
    torch.testing.assert_close(mean * 3, total)
    out = head(x, lengths)
    torch.testing.assert_close(
        out["partition"],
        st.log_partition(x, lengths, 3, head.transition, head.duration_bias, head.start, head.end),
    )


def test_decoding_gives_padded_tensors_whose_score_is_the_viterbi_score(device):
    head, x, lengths = head_and_inputs(device, b=4, t=7, c=3, k=4)
    res = head.decode_with_traceback(x, lengths)
    b, t = x.shape[:2]
    assert res.segments.dim() == 3 and res.segments.shape[0] == b and res.segments.shape[2] == 3
    assert res.counts.shape == (b,) and res.labels.shape == (b, t)
    assert res.segments.device == x.device
    for i in range(b):
        n = int(res.counts[i])
        assert int(res.segments[i, :n, 1].sum()) == int(lengths[i])
        assert (res.labels[i, int(lengths[i]) :] == -1).all()
    gold = st.gold_score(
        x, lengths, 4, head.transition, head.duration_bias, head.start, head.end, gold=res.segments
    )
    torch.testing.assert_close(gold, res.scores, atol=1e-10, rtol=1e-12)
    torch.testing.assert_close(head.decode(x, lengths), res.scores)
    q = as_numpy(
        {
            "scores": x,
            "transition": head.transition,
            "duration": head.duration_bias,
            "start": head.start,
            "end": head.end,
        },
        lengths,
        4,
    )
    for i in range(b):
        assert abs(res.scores[i].item() - brute_force(q, i)["viterbi"]) < 1e-10


def test_gradients_reach_the_projection_and_every_parameter(device):
    head, x, lengths = head_and_inputs(device, b=2, t=5, c=3, k=2, hidden=4)
    labels = torch.tensor([[0, 0, 1, 2, 2], [1, 1, 1, 0, 0]], device=device)
    x.requires_grad_(True)
    assert torch.autograd.gradcheck(
        lambda h: head.compute_loss(h, lengths, labels, reduction="none"), (x,), eps=1e-6, atol=1e-7
    )
    head.compute_loss(x, lengths, labels).backward()
    for name, param in head.named_parameters():
        assert param.grad is not None and torch.isfinite(param.grad).all(), name


@pytest.mark.parametrize(
    "dist", ["learned", "geometric", "negative_binomial", "poisson", "uniform"]
)
def test_every_duration_distribution_gives_a_k_by_c_score(dist):
    head = st.SemiMarkovCRFHead(num_classes=3, max_duration=200, duration_distribution=dist)
    bias = head.duration_bias
    assert bias.shape == (200, 3) and torch.isfinite(bias).all()
    if dist in ("geometric", "negative_binomial"):
        # normalised distributions over 1, 2, ...: the mass of 1..200 is (almost) 1
        torch.testing.assert_close(
            bias.double().exp().sum(0), torch.ones(3, dtype=torch.float64), atol=1e-6, rtol=0
        )


def test_a_few_steps_of_training_reduce_the_loss():
    torch.manual_seed(0)
    head = st.SemiMarkovCRFHead(num_classes=3, max_duration=4, hidden_dim=5)
    x = torch.randn(4, 12, 5)
    lengths = torch.tensor([12, 10, 7, 12])
    labels = (torch.arange(12) // 4 % 3).repeat(4, 1)
    opt = torch.optim.Adam(head.parameters(), lr=0.05)
    losses = []
    for _ in range(30):
        opt.zero_grad()
        loss = head.compute_loss(x, lengths, labels)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]


def test_bad_inputs_raise_value_errors():
    head = st.SemiMarkovCRFHead(num_classes=3, max_duration=4)
    lengths = torch.tensor([5, 5])
    with pytest.raises(ValueError, match="hidden_states"):
        head(torch.randn(2, 5, 4), lengths)
    with pytest.raises(ValueError, match="hidden_states"):
        head(torch.randn(5, 3), lengths)
    with pytest.raises(ValueError, match="gold"):
        head.compute_loss(torch.randn(2, 5, 3), lengths, torch.full((2, 5), 3))
    with pytest.raises(ValueError, match="reduction"):
        head.compute_loss(
            torch.randn(2, 5, 3), lengths, torch.zeros(2, 5, dtype=torch.long), reduction="max"
        )
    with pytest.raises(ValueError, match="backend"):
        head(torch.randn(2, 5, 3), lengths, backend="binary_tree_sharded")
    with pytest.raises(ValueError, match="duration_distribution"):
        st.SemiMarkovCRFHead(num_classes=3, max_duration=4, duration_distribution="zipf")


def test_the_state_dict_keeps_flash_semicrfs_keys_plus_start_and_end():
    head = st.SemiMarkovCRFHead(num_classes=3, max_duration=4, hidden_dim=8)
    assert set(head.state_dict()) == {
        "transition",
        "start",
        "end",
        "duration_dist.duration_bias",
        "projection.weight",
        "projection.bias",
    }
