"""Data sets of the pi-SSM study (section 7, App. G): Pong, Lorenz, Navier-Stokes and the NCLT loader.

Every generator or loader returns a ``Dataset`` (``splits.py``): train / validation / test ``Split`` records of
arrays (observations y, ground-truth states x kept for evaluation, ground-truth modes z where they exist) and the
observation matrix C and noise covariance R with y = C x + r.
"""

from memlab.pissm.data.lorenz import LORENZ_LAYOUT, generate_lorenz, integrate_lorenz, lorenz_transition_matrix
from memlab.pissm.data.navier_stokes import (
    NAVIER_STOKES_LAYOUT,
    NAVIER_STOKES_QUICK_LAYOUT,
    generate_navier_stokes,
    simulate_flow,
    simulate_navier_stokes,
)
from memlab.pissm.data.nclt import NCLT_LAYOUT, NCLTDataMissingError, load_nclt
from memlab.pissm.data.pong import PONG_LAYOUT, generate_pong, simulate_pong
from memlab.pissm.data.splits import Dataset, Split, SplitLayout

__all__ = [
    "Dataset",
    "LORENZ_LAYOUT",
    "NAVIER_STOKES_LAYOUT",
    "NAVIER_STOKES_QUICK_LAYOUT",
    "NCLTDataMissingError",
    "NCLT_LAYOUT",
    "PONG_LAYOUT",
    "Split",
    "SplitLayout",
    "generate_lorenz",
    "generate_navier_stokes",
    "generate_pong",
    "integrate_lorenz",
    "load_nclt",
    "lorenz_transition_matrix",
    "simulate_flow",
    "simulate_navier_stokes",
    "simulate_pong",
]
