#!/usr/bin/env bash
# The Python package's CI, run from the repository root (`bash python/ci.sh`; .ci/run calls
# it): formatting, lints and docs of the PyO3 crate (its own manifest: python/ is not a
# member of the Rust workspace), then `pip install ./python` (maturin, the pyproject's build
# backend) and the pytest suite (numpy, and torch on the CPU).
#
# Uses the Python found as $PYTHON (default python3) and installs into it what the tests
# need, from the package registry: numpy, pytest, torch, torch-struct 0.5.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3}
started=$(date +%s)
step() { printf '\n== python: %s (%ss)\n' "$1" "$(($(date +%s) - started))"; }

step "versions"
$PY --version
$PY -m pip --version

step "cargo fmt --check (python/)"
cargo fmt --manifest-path python/Cargo.toml --check

step "cargo clippy -D warnings (python/)"
cargo clippy --manifest-path python/Cargo.toml --all-targets -- -D warnings

step "cargo doc -D warnings (python/)"
RUSTDOCFLAGS="-D warnings" cargo doc --manifest-path python/Cargo.toml --no-deps

step "test dependencies"
$PY -m pip install -q --disable-pip-version-check "numpy>=1.21" "pytest>=7" torch "torch-struct==0.5"

step "pip install ./python"
$PY -m pip install --disable-pip-version-check --force-reinstall --no-deps ./python

step "pytest python/tests"
# From the repository root: `semicrf` is the installed package (python/ is not on the path).
$PY -c "import semicrf, sys; print('semicrf', semicrf.__version__, 'from', semicrf.__file__)"
$PY -m pytest python/tests -q

step "done"
