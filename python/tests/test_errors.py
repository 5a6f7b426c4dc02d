"""Bad input raises the documented Python exceptions with the library's messages; nothing
crashes the interpreter and no NaN comes back."""

import numpy as np
import pytest

import semicrf
from semicrf import _native


def base(rng, dtype=np.float64):
    return dict(
        scores=rng.normal(size=(2, 5, 3)).astype(dtype),
        lengths=[5, 3],
        max_duration=3,
        transition=rng.normal(size=(3, 3)).astype(dtype),
    )


def test_a_nan_is_a_value_error_naming_the_tensor_and_index(rng):
    p = base(rng)
    p["scores"][1, 2, 0] = np.nan
    with pytest.raises(ValueError, match=r"`scores` holds NaN at index \[1, 2, 0\]"):
        semicrf.log_partition(**p)
    p = base(rng)
    p["transition"][0, 1] = np.inf
    with pytest.raises(ValueError, match=r"`transition` holds inf at index \[0, 1\]"):
        semicrf.backward(**p)


def test_wrong_shapes_and_lengths_are_value_errors(rng):
    p = base(rng)
    p["transition"] = np.zeros((3, 2))
    with pytest.raises(ValueError, match="`transition`"):
        semicrf.log_partition(**p)
    p = base(rng)
    p["lengths"] = [5, 6]
    with pytest.raises(ValueError, match=r"`lengths\[1\]` = 6 is out of range 1..=5"):
        semicrf.log_partition(**p)
    p["lengths"] = [5, -1]
    with pytest.raises(ValueError, match=r"`lengths\[1\]` = -1 is negative"):
        semicrf.log_partition(**p)
    p["lengths"] = [5]
    with pytest.raises(ValueError, match="`lengths` has 1 entries"):
        semicrf.log_partition(**p)
    p = base(rng)
    p["max_duration"] = 0
    with pytest.raises(ValueError, match="maximum duration"):
        semicrf.log_partition(**p)


def test_dtypes_mixed_or_not_floating_are_type_errors(rng):
    p = base(rng)
    p["transition"] = p["transition"].astype(np.float32)
    with pytest.raises(TypeError, match="one dtype: `scores` is float64 but `transition` is float32"):
        semicrf.log_partition(**p)
    p = base(rng)
    p["scores"] = p["scores"].astype(np.float16)
    with pytest.raises(TypeError, match="float16"):
        semicrf.log_partition(**p)
    p = base(rng)
    p["scores"] = np.zeros((2, 5, 3), dtype=np.int64)
    with pytest.raises(TypeError, match="int64"):
        semicrf.log_partition(**p)
    with pytest.raises(TypeError, match="numpy array"):
        _native.log_partition(scores=[[[0.0]]], lengths=[1], max_duration=1)


def test_missing_or_unknown_arguments_are_type_errors(rng):
    p = base(rng)
    del p["max_duration"]
    with pytest.raises(TypeError, match="max_duration"):
        semicrf.log_partition(**p)
    with pytest.raises(TypeError, match="unexpected keyword argument `scorez`"):
        _native.log_partition(scorez=p["scores"], lengths=[5, 3], max_duration=3)
    with pytest.raises(TypeError, match="lengths"):
        _native.log_partition(scores=p["scores"], max_duration=3)


def test_structured_and_edge_input_are_exclusive(rng):
    p = base(rng)
    with pytest.raises(ValueError, match="not both"):
        semicrf.log_partition(**p, edges=np.zeros((2, 5, 3, 3, 3)))
    with pytest.raises(ValueError, match="no potentials"):
        semicrf.log_partition(lengths=[1], max_duration=1)
    with pytest.raises(ValueError, match="`transition` is for structured input"):
        semicrf.log_partition(edges=np.zeros((2, 5, 3, 3, 3)), lengths=[5, 3],
                              transition=np.zeros((3, 3)))
    with pytest.raises(ValueError, match="max_duration = 2 but `edges` has K = 3"):
        semicrf.log_partition(edges=np.zeros((2, 5, 3, 3, 3)), lengths=[5, 3], max_duration=2)


def test_an_unsupported_request_is_a_value_error(rng):
    with pytest.raises(ValueError, match="streaming"):
        semicrf.log_partition(
            edges=np.zeros((2, 5, 3, 3, 3)), lengths=[5, 3], backend="streaming"
        )


def test_the_memory_budget_is_a_memory_error(rng):
    with pytest.raises(MemoryError, match="memory budget of 64 bytes"):
        semicrf.log_partition(**base(rng), memory_budget=64)
    with pytest.raises(MemoryError):
        semicrf.marginals(**base(rng), memory_budget="0.01KiB")
    with pytest.raises(ValueError, match="unknown unit"):
        semicrf.log_partition(**base(rng), memory_budget="2 GiBs")
    with pytest.raises(ValueError, match="out of range"):
        semicrf.log_partition(**base(rng), memory_budget=-1)
    with pytest.raises(TypeError, match="memory_budget"):
        semicrf.log_partition(**base(rng), memory_budget=2.5)


def test_unknown_backends_and_devices(rng):
    with pytest.raises(RuntimeError, match="fast"):
        semicrf.log_partition(**base(rng), backend="fast")
    with pytest.raises(ValueError, match="device \"gpu\""):
        semicrf.log_partition(**base(rng), device="gpu")


cuda_ok, cuda_why = semicrf.cuda_available()
no_gpu = pytest.mark.skipif(cuda_ok, reason="a CUDA device is available here")


@no_gpu
def test_cuda_without_a_gpu_is_a_runtime_error_with_the_reason(rng):
    assert cuda_why
    with pytest.raises(RuntimeError, match="cuda"):
        semicrf.log_partition(**base(rng), device="cuda")
    with pytest.raises(RuntimeError, match="cuda"):
        semicrf.viterbi(**base(rng), device="cuda:1")


@no_gpu
def test_device_entries_without_a_gpu_raise_before_touching_any_address():
    # Addresses that would crash if read: the call must stop at the driver check.
    kw = dict(scores=8, shape=(1, 4, 2), dtype="float32", lengths=[4], max_duration=2,
              stream=0, device=0)
    for f in (_native.cuda_log_partition, _native.cuda_entropy, _native.cuda_viterbi):
        with pytest.raises(RuntimeError, match="unavailable"):
            f(**kw)
    with pytest.raises(RuntimeError, match="unavailable"):
        _native.cuda_backward(upstream=[1.0], out_scores=16, **kw)


def test_device_entries_check_their_arguments():
    kw = dict(shape=(1, 4, 2), lengths=[4], max_duration=2, stream=0, device=0)
    with pytest.raises(ValueError, match="null device address"):
        _native.cuda_log_partition(scores=0, dtype="float32", **kw)
    with pytest.raises(TypeError, match="float16"):
        _native.cuda_log_partition(scores=8, dtype="float16", **kw)
    with pytest.raises(TypeError, match="`transition` must be a host numpy float64 array"):
        _native.cuda_log_partition(scores=8, dtype="float32",
                                   transition=np.zeros((2, 2), np.float32), **kw)
    with pytest.raises(TypeError, match="or a \\(device address, shape\\) pair"):
        _native.cuda_log_partition(scores=8, dtype="float32", start=[1.0, 2.0], **kw)
    with pytest.raises(ValueError, match="`out_start` is given without `start`"):
        _native.cuda_backward(scores=8, dtype="float32", upstream=[1.0], out_scores=16,
                              out_start=32, **kw)
    with pytest.raises(ValueError, match="`out_begin_boundary` must be a device buffer"):
        _native.cuda_backward(scores=8, dtype="float32", upstream=[1.0], out_scores=16,
                              begin_boundary=24, **kw)
    # Queued, nothing comes back on the host: every result needs a device output.
    with pytest.raises(ValueError, match="log Z needs `out_log_z`"):
        _native.cuda_backward(scores=8, dtype="float32", upstream=[1.0], out_scores=16,
                              queued=True, **kw)
    with pytest.raises(ValueError, match="`start` needs `out_start`"):
        _native.cuda_backward(scores=8, dtype="float32", upstream=[1.0], out_scores=16,
                              out_log_z=24, start=(40, (2,)), queued=True, **kw)


def test_infeasible_problems_and_bad_gold(rng):
    p = base(rng)
    p["scores"][1] = -np.inf
    with pytest.raises(ValueError, match="sequence 1 has no segmentation with a finite score"):
        semicrf.marginals(**p)
    with pytest.raises(ValueError, match="sequence 1"):
        semicrf.backward(**p)
    p = base(rng)
    with pytest.raises(ValueError, match="segmentation of sequence 0"):
        semicrf.nll(**p, gold=[[(0, 2, 0)], [(0, 3, 1)]])  # does not tile length 5
    with pytest.raises(ValueError, match="2 gold segmentations|expected one per sequence"):
        semicrf.nll(**p, gold=[[(0, 3, 0), (3, 2, 1)]])
    with pytest.raises(ValueError, match="negative"):
        semicrf.nll(**p, gold=np.array([[0, 0, 0, -1, 0], [0, 0, 0, 0, 0]]))
    with pytest.raises(TypeError, match="gold"):
        semicrf.nll(**p, gold="BIO")
    p["scores"][0, 0, 2] = -np.inf
    gold = [[(0, 1, 2), (1, 3, 0), (4, 1, 1)], [(0, 3, 1)]]
    assert semicrf.nll(**p, gold=gold)[0] == np.inf  # forbidden gold: +inf, not NaN
    with pytest.raises(ValueError, match="sequence 0 has score -inf"):
        semicrf.backward(**p, gold=gold)


def test_bad_upstream_is_a_value_error(rng):
    with pytest.raises(ValueError, match="upstream"):
        semicrf.backward(**base(rng), upstream=[1.0, np.nan])
    with pytest.raises(ValueError, match="upstream"):
        semicrf.backward(**base(rng), upstream=[1.0])


def test_magnitudes_beyond_the_range_are_value_errors_not_nans(rng):
    p = base(rng)
    p["scores"][0, 0, 0] = 1e300
    with pytest.raises(ValueError, match="rescale the potentials"):
        semicrf.backward(**p)


def test_no_result_holds_a_nan(rng):
    p = base(rng)
    p["scores"][:, :, 1:] = -np.inf  # one label left: one segmentation family
    for f in (semicrf.log_partition, semicrf.entropy):
        assert not np.isnan(f(**p)).any()
    out = semicrf.backward(**p)
    assert all(not np.isnan(v).any() for v in out.values())
