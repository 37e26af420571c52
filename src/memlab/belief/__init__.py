"""The belief study (paper: linear-recurrent-memory-pomdp.md): which filter a linear recurrent memory carries out.

The library (``__all__`` below is what other code may import): the HMMs and RingWorld, the exact filter (the LOF,
eq. (7)) as fast engines (``lof``, ``log_belief``, ``lof_parallel``) and as their plain references
(``lof_reference``, ``log_belief_reference``), each returning a ``FilterResult`` (logits, marginal
log-likelihood), the exact linear filters of Theorem 4.4, the ALF of eq. (24) / (46), Deep ALF, and the agents'
memories. The experiments live in ``experiments/``; no library module imports them.
Module by module: docs/studies/belief.md.
"""

from memlab.belief.alf import (
    ALF,
    DELTA_SCHEDULES,
    alf_backbone,
    alf_filter,
    alf_initial_logits,
    alf_step,
    alf_update,
    delta_is_valid,
    delta_label,
    delta_schedule,
)
from memlab.belief.deep_alf import INITIALISATIONS, DeepALF, circulant_eigensystem
from memlab.belief.exact_linear import (
    ExactLinearFilter,
    ExactLinearFilterControlled,
    LinearFilterOutput,
    construction_is_exact,
    exact_linear_filter,
    exact_linear_filter_controlled,
    make_exact_linear_filter,
    make_exact_linear_filter_controlled,
)
from memlab.belief.examples import EXAMPLE1_BAD_E, EXAMPLE1_E, EXAMPLE1_P, SWAP, example_filters, two_state_example
from memlab.belief.fast_filters import lof, lof_parallel, log_belief
from memlab.belief.filters import LOF, FilterResult, bayes_decode, lof_reference, lof_step, log_belief_reference
from memlab.belief.hmm import HMM, ControlledHMM, Trajectory, sample
from memlab.belief.memories import ALF_DELTA, LogitFilterMemory
from memlab.belief.metrics import LogitAgreement, logit_agreement, merge_agreement, switch_lags, trend
from memlab.belief.montecarlo import ErrorCurves, decoding_error, error_curves
from memlab.belief.random_models import random_columns, random_deterministic, random_permutation, simulate_observations
from memlab.belief.ringworld import (
    RingWorld,
    RingWorldParams,
    RingWorldState,
    beacon_emissions,
    episode_inputs,
    optimal_policy,
    optimal_return,
    qmdp_returns,
    random_policy,
    random_return,
    ring_diagonalisation,
    ring_permutations,
    ring_rewards,
    ring_transitions,
    rollout,
)
from memlab.belief.runs import MEMORIES, load_agent, make_memory, play, ringworld_for, train_agent
from memlab.belief.structure import (
    DeterministicDecomposition,
    NearlyDeterministic,
    ObservabilityReport,
    check_observability,
    check_observability_controlled,
    decompose_deterministic,
    is_deterministic,
    is_permutation,
    permutation_order,
    split_nearly_deterministic,
    stacked_emission,
    successors,
)
from memlab.belief.theory import (
    check_assumption_5_6,
    delta_upper_bound,
    gamma_set,
    irregular_jump_bound,
    kl_drift,
    lambda_is_valid,
    log_mgf,
    logit_bound_W,
    q_min,
    xi,
    xi_of,
    xi_pair,
)
from memlab.logspace import normalize_logits  # the log-belief of eq. (8); shared numerics, re-exported

__all__ = [
    # hmm
    "HMM", "ControlledHMM", "Trajectory", "sample",
    # examples, random_models
    "SWAP", "EXAMPLE1_P", "EXAMPLE1_E", "EXAMPLE1_BAD_E", "two_state_example", "example_filters",
    "random_deterministic", "random_permutation", "random_columns", "simulate_observations",
    # structure
    "is_deterministic", "is_permutation", "successors", "permutation_order", "DeterministicDecomposition",
    "decompose_deterministic", "NearlyDeterministic", "split_nearly_deterministic", "stacked_emission",
    "ObservabilityReport", "check_observability", "check_observability_controlled",
    # filters: the fast engines, their plain references, the step and the result
    "FilterResult", "LOF", "lof", "lof_step", "lof_parallel", "log_belief", "lof_reference", "log_belief_reference",
    "normalize_logits", "bayes_decode",
    # exact_linear
    "LinearFilterOutput", "ExactLinearFilter", "ExactLinearFilterControlled", "make_exact_linear_filter",
    "make_exact_linear_filter_controlled", "exact_linear_filter", "exact_linear_filter_controlled",
    "construction_is_exact",
    # alf
    "ALF", "DELTA_SCHEDULES", "alf_filter", "alf_step", "alf_update", "alf_backbone", "alf_initial_logits",
    "delta_schedule", "delta_label", "delta_is_valid",
    # theory
    "check_assumption_5_6", "log_mgf", "gamma_set", "kl_drift", "xi_pair", "xi_of", "xi", "logit_bound_W",
    "delta_upper_bound", "lambda_is_valid", "q_min", "irregular_jump_bound",
    # montecarlo, metrics
    "ErrorCurves", "error_curves", "decoding_error", "trend", "switch_lags", "LogitAgreement", "logit_agreement",
    "merge_agreement",
    # ringworld
    "RingWorld", "RingWorldParams", "RingWorldState", "ring_permutations", "ring_transitions", "beacon_emissions",
    "ring_rewards", "ring_diagonalisation", "episode_inputs", "optimal_policy", "optimal_return", "random_return",
    "qmdp_returns", "random_policy", "rollout",
    # memories, deep_alf, agents
    "ALF_DELTA", "LogitFilterMemory", "DeepALF", "INITIALISATIONS", "circulant_eigensystem", "MEMORIES", "make_memory",
    "ringworld_for", "train_agent", "load_agent", "play",
]
