"""A process that used the package and then forks (multiprocessing's `fork` start method,
DataLoader workers) does not hang: the children build their own CPU thread pool.

Each scenario runs in a fresh interpreter under a timeout, so a hang fails the test instead
of stalling the suite."""

import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.skipif(
    not hasattr(os, "fork"), reason="fork() is a POSIX call"
)

PRELUDE = textwrap.dedent(
    """
    import multiprocessing as mp, os, sys
    import numpy as np
    import semicrf

    def work(seed):
        rng = np.random.default_rng(seed)
        s = rng.normal(size=(16, 120, 4))
        # A batch of 16: the CPU engines spread it over the pool's threads.
        z = semicrf.log_partition(scores=s, lengths=[120] * 16, max_duration=6, backend="exact")
        m = semicrf.marginals(scores=s, lengths=[120] * 16, max_duration=6)
        return float(z.sum()) + float(m.boundary.sum())

    before = work(0)  # the parent's pool is up, its threads alive
    """
)

SCENARIOS = {
    "multiprocessing_fork_pool": """
        with mp.get_context("fork").Pool(2) as pool:
            got = pool.map(work, [0, 1, 2, 3])
        assert got[0] == before, (got[0], before)
    """,
    "os_fork": """
        pid = os.fork()
        if pid == 0:
            os._exit(0 if work(0) == before else 3)
        _, status = os.waitpid(pid, 0)
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
    """,
    "fork_of_a_fork": """
        pid = os.fork()
        if pid == 0:
            work(1)
            pid2 = os.fork()
            if pid2 == 0:
                os._exit(0 if work(0) == before else 3)
            _, st = os.waitpid(pid2, 0)
            os._exit(os.WEXITSTATUS(st) if os.WIFEXITED(st) else 4)
        _, status = os.waitpid(pid, 0)
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
    """,
    "parent_still_works_after_its_children": """
        with mp.get_context("fork").Pool(2) as pool:
            pool.map(work, [1, 2])
        assert work(0) == before
    """,
}


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_forked_children_do_not_hang(name):
    code = PRELUDE + textwrap.dedent(SCENARIOS[name]) + "\nprint('done')\n"
    env = dict(os.environ, SEMICRF_NUM_THREADS="4")
    try:
        r = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"{name}: the forked process hung (no result within 120 s)")
    assert r.returncode == 0 and r.stdout.strip().endswith("done"), r.stderr
