"""Shared fixtures of the Python package's tests."""

import os

import numpy as np
import pytest


@pytest.fixture
def rng():
    """A seeded generator: every test sees the same numbers on every run."""
    return np.random.default_rng(20261126)


def pytest_report_header(config):
    try:
        import semicrf
    except ImportError as e:  # the suite then fails at collection with the reason
        return f"semicrf: not importable ({e})"
    ok, why = semicrf.cuda_available()
    gpu = "CUDA available" if ok else f"no CUDA ({why})"
    need = os.environ.get("SEMICRF_REQUIRE_GPU") == "1"
    return f"semicrf {semicrf.__version__} from {os.path.dirname(semicrf.__file__)}; {gpu}" + (
        "; SEMICRF_REQUIRE_GPU=1" if need else ""
    )
