"""The pi-SSM study (paper: pi-ssm-hybrid-state-space.md): hybrid state-space inference with a learned,
Kalman-style gain, against the Kalman filter, particle filters and SLDS-type baselines.

The library (``__all__`` below is what other code may import): the data sets, the Predictions interface, the exact
Kalman filter (the core module ``memlab.kalman``, re-exported here) and particle filters, pi-SSM (eq. 7: its config
and its gain variants), the LG variant, the baselines, training (eq. 8-9), metrics and the Pong mode analysis. The
experiments live in ``experiments/``; nothing outside them imports them. Module by module: docs/studies/pissm.md.
"""

from memlab.kalman import KalmanFiltered, kalman_filter, sample_lgssm
from memlab.pissm.baselines import DirectRNN, LGBaseline, ObservationOnly
from memlab.pissm.data import Dataset, Split, SplitLayout
from memlab.pissm.gain import ExactGain, PaperGain, WhitenedGain
from memlab.pissm.gain_fit import fit_readout_to_exact_gain
from memlab.pissm.lg import LGFiltered, LGVariant
from memlab.pissm.metrics import (
    gaussian_log_density,
    imputation_mask,
    mode_agreement,
    mode_persistence,
    modes_in_use,
    position_mse,
    predictive_log_likelihood,
    to_db,
)
from memlab.pissm.model import PiSSM, PiSSMConfig, roundoff_floor
from memlab.pissm.particle import ParticleFiltered, bootstrap_particle_filter
from memlab.pissm.pong_modes import (
    SwitchingRule,
    mode_statistics,
    most_bounces,
    oracle_model,
    oracle_selection,
    rule_scores,
    selection_accuracy,
    smallest_eigenvalues,
    true_eigenvalues,
)
from memlab.pissm.predictions import Predictions
from memlab.pissm.reference import gaussian_prior_particle_filter, lorenz_particle_filter, pong_particle_filter
from memlab.pissm.runs import (
    DATASETS,
    ESTIMATORS,
    LAYOUTS,
    MODELS,
    estimator_options,
    evaluate,
    fit,
    load_dataset,
    make_model,
    mean_scores,
    model_bytes,
    model_from_bytes,
    particle_reference,
    particle_scores,
    score,
)
from memlab.pissm.train import TrainConfig, TrainResult, make_train, predict_batch, two_optimiser_update

__all__ = [
    "DATASETS",
    "ESTIMATORS",
    "LAYOUTS",
    "MODELS",
    "Dataset",
    "DirectRNN",
    "ExactGain",
    "KalmanFiltered",
    "LGBaseline",
    "LGFiltered",
    "LGVariant",
    "ObservationOnly",
    "PaperGain",
    "ParticleFiltered",
    "PiSSM",
    "PiSSMConfig",
    "Predictions",
    "Split",
    "SplitLayout",
    "SwitchingRule",
    "TrainConfig",
    "TrainResult",
    "WhitenedGain",
    "bootstrap_particle_filter",
    "estimator_options",
    "evaluate",
    "fit",
    "fit_readout_to_exact_gain",
    "gaussian_log_density",
    "gaussian_prior_particle_filter",
    "imputation_mask",
    "kalman_filter",
    "load_dataset",
    "lorenz_particle_filter",
    "make_model",
    "make_train",
    "mean_scores",
    "mode_agreement",
    "mode_persistence",
    "mode_statistics",
    "model_bytes",
    "model_from_bytes",
    "modes_in_use",
    "most_bounces",
    "oracle_model",
    "oracle_selection",
    "particle_reference",
    "particle_scores",
    "pong_particle_filter",
    "position_mse",
    "predict_batch",
    "predictive_log_likelihood",
    "roundoff_floor",
    "rule_scores",
    "sample_lgssm",
    "score",
    "selection_accuracy",
    "smallest_eigenvalues",
    "to_db",
    "true_eigenvalues",
    "two_optimiser_update",
]
