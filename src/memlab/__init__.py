"""memlab: sequence models as memory, measured against the optimal inference algorithm."""

import warnings as _warnings

import jax as _jax

__version__ = "0.1.0"

# pyproject.toml excludes it; a forced install still gets this warning (tests/test_backend.py shows the bug)
if _jax.__version__ == "0.10.2":
    _warnings.warn("jax 0.10.2 miscompiles vmapped matrix-vector products on the CPU (jax-ml/jax#39103): memlab's "
                   "pi-SSM filters and other batched results are wrong with it; install jax 0.10.1",
                   RuntimeWarning, stacklevel=2)
