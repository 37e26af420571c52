"""What every sequence model of the pi-SSM study returns for one sequence: the record the training loop, the
metrics and the experiments consume, so pi-SSM, its LG ablations and the direct-RNN baselines are
interchangeable.

A model is an ``equinox.Module`` with ``__call__(y (T, N), mask (T,) bool, key) -> Predictions``: one unbatched
sequence, the caller vmaps over sequences and Monte-Carlo samples. ``mask[t]`` is False where y_t is missing
(its value is then ignored, NaN allowed); a missing step contributes log-likelihood 0 and the model predicts
through it (App. H.1, eq. 208-209).

Training maximises sum_t log q(y_t | y_{1:t-1}) (section 6). Models with a sampled discrete latent (pi-SSM's
z_t) also return ``score_log_probs``, the log-probability of the sampled z_t under the distribution it was drawn
from (differentiable in the mode network only), and ``sampled_log_likelihoods``, the log-density of y_t under
the sampled z_t: REINFORCE's score and reward (eq. 9); models without one return zeros and None.
"""

from __future__ import annotations

from typing import NamedTuple

from jax import Array


class Predictions(NamedTuple):
    """One sequence of T steps with N-dimensional observations.

    ``log_likelihoods`` (T,): log q(y_t | y_{1:t-1}) of the observed y_t, 0 at missing steps (for pi-SSM with
    z_t summed out: what evaluation scores).
    ``obs_means`` (T, N), ``obs_covs`` (T, N, N): the one-step predictive distribution of y_t given y_{1:t-1}
    (Gaussian; for pi-SSM conditional on the sampled z_t and x_{t-1}).
    ``filtered_obs`` (T, N): the model's estimate of the noise-free observation C x_t given y_{1:t} (its filtered
    position); at missing steps the prediction from y_{1:t-1}, i.e. the imputation.
    ``score_log_probs`` (T,): log-probability of the sampled mode under its sampling distribution (REINFORCE),
    zeros without modes.
    ``modes`` (T,) int32 sampled mode per step, or None. ``mode_probs`` (T, K) filtered mode posterior
    q(z_t | y_{1:t}) (eq. 6), or None.
    ``means`` (T, M), ``covariances`` (T, M, M): filtered latent moments where the model has a latent state, else None.
    ``sampled_log_likelihoods`` (T,): log q(y_t | y_{1:t-1}, z_t) of the sampled mode (0 at missing steps), or None.
    """

    log_likelihoods: Array
    obs_means: Array
    obs_covs: Array
    filtered_obs: Array
    score_log_probs: Array
    modes: Array | None = None
    mode_probs: Array | None = None
    means: Array | None = None
    covariances: Array | None = None
    sampled_log_likelihoods: Array | None = None

    @property
    def rewards(self) -> Array:
        """REINFORCE's reward per step (eq. 9): the sampled mode's log-likelihoods, or ``log_likelihoods`` for a
        model without modes."""
        return self.log_likelihoods if self.sampled_log_likelihoods is None else self.sampled_log_likelihoods
