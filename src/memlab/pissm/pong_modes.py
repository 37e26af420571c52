"""Mode analysis on Pong (Fig. 4 / Fig. 9, App. H.1): what the sampled modes of a trained pi-SSM say about the true
switching dynamics, and the oracle that separates learning the modes' dynamics from learning to select them.

``true_eigenvalues`` / ``smallest_eigenvalues`` (1 in free flight, -1 on a bounce's axis), ``mode_statistics``
(App. H.1's uniqueness and persistence, agreement with the true modes), ``oracle_selection`` (the true step maps
fixed, only q(z | x) trained) and ``SwitchingRule`` / ``rule_scores`` (the true step maps with a hand-coded
switching rule, and with free flight everywhere). Our choices (the paper has no oracle): docs/studies/pissm.md,
"Mode analysis on Pong".
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from memlab.pissm import metrics
from memlab.pissm.data import Dataset, Split
from memlab.pissm.data.pong import step_maps
from memlab.pissm.model import PiSSM, PiSSMConfig
from memlab.pissm.runs import chunked_train, estimator_options, full_mask, predict_jit
from memlab.pissm.train import TrainConfig, train_in_chunks

__all__ = ["SwitchingRule", "mode_statistics", "most_bounces", "oracle_model", "oracle_selection", "rule_scores",
           "selection_accuracy", "smallest_eigenvalues", "true_eigenvalues"]


def true_eigenvalues(events: np.ndarray) -> np.ndarray:
    """(T, 2) the two smallest eigenvalues of the true step map's linear part: -1 per bounced axis, else 1.
    events (T, 4) bool: the wall hits of ``data.pong`` (left, right, bottom, top)."""
    bounced_x = events[:, 0] | events[:, 1]
    bounced_y = events[:, 2] | events[:, 3]
    return np.sort(np.stack([np.where(bounced_x, -1.0, 1.0), np.where(bounced_y, -1.0, 1.0)], -1), axis=-1)


def smallest_eigenvalues(A: np.ndarray) -> np.ndarray:
    """(..., 2) the two eigenvalues of smallest real part of each A (..., M, M)."""
    eig = np.linalg.eigvals(A)
    order = np.argsort(eig.real, axis=-1)
    return np.take_along_axis(eig, order, -1)[..., :2]


def most_bounces(split: Split) -> int:
    """The index of a sequence of ``split`` with the most wall hits (the trajectory Fig. 9 shows)."""
    return int(np.argmax(np.asarray(split.events).any(-1).sum(-1)))


def mode_statistics(A: np.ndarray, modes: np.ndarray, split: Split) -> dict:
    """App. H.1's mode properties of sampled modes (B, T) of a model with step matrices A (K, M, M) on a Pong
    ``split`` (its true modes z and wall hits ``events``). Returns modes_in_use, persistence, agreement,
    dominant_share, eigenvalue_at_bounces / eigenvalue_elsewhere (mean smallest real part of the sampled A_z:
    truth -1 / 1), reflecting_at_bounces / reflecting_elsewhere (share of those steps whose sampled A_z reflects, i.e.
    has an eigenvalue of negative real part: truth 1 / 0), reflecting_next_to_bounces (share of wall hits where it
    does at the hit or at the step after: a reflection chosen one step late) and ``shares`` (K,) of the sampled steps
    per mode."""
    K = A.shape[0]
    true_modes = np.asarray(split.z)
    bounce = np.asarray(split.events).any(-1)  # a wall hit between t-1 and t: z_t's A_z must flip a velocity
    smallest = smallest_eigenvalues(A[modes])[..., 0].real
    reflecting = smallest < 0
    reflecting_next = np.concatenate([reflecting[:, 1:], np.zeros_like(reflecting[:, :1])], axis=1)
    shares = np.bincount(modes.ravel(), minlength=K) / modes.size
    return {
        "modes_in_use": metrics.modes_in_use(modes, K),
        "persistence": metrics.mode_persistence(modes, true_modes),
        "agreement": metrics.mode_agreement(modes, true_modes),
        "dominant_share": float(shares.max()),
        "eigenvalue_at_bounces": float(smallest[bounce].mean()),  # truth: -1
        "eigenvalue_elsewhere": float(smallest[~bounce].mean()),  # truth: 1
        "reflecting_at_bounces": float(reflecting[bounce].mean()),  # truth: 1
        "reflecting_elsewhere": float(reflecting[~bounce].mean()),  # truth: 0
        "reflecting_next_to_bounces": float((reflecting | reflecting_next)[bounce].mean()),
        "shares": [float(s) for s in shares],
    }


def oracle_model(data: Dataset, key, mode_sampling: str = "prior", process_var: float = 1e-4) -> PiSSM:
    """A pi-SSM(LG) whose K = 5 modes are Pong's true step maps (A_z, b_z; C the true observation map), with the
    generator's prior variances (``TRUE_PRIOR_VAR``) around the centre of the box at rest."""
    A, b = step_maps()
    config = PiSSMConfig(4, 2, len(A), gain="exact", mode_sampling=mode_sampling, process_var=process_var,
                         initial_var=0.1)
    model = PiSSM(config, R=np.asarray(data.R), C=np.asarray(data.C), key=key,
                  initial_mean=np.array([0.5, 0.0, 0.5, 0.0]))
    leaves = (A, b, np.log(TRUE_PRIOR_VAR))
    return eqx.tree_at(lambda m: (m.A, m.b, m.initial_log_var), model,
                       tuple(jnp.asarray(x, model.A.dtype) for x in leaves))


def oracle_selection(data: Dataset, epochs: int, batch_size: int, key, estimator: str = "reinforce") -> dict:
    """Train q(z | x) (and Q, the prior) of ``oracle_model`` for ``epochs`` by ``estimator`` (``runs.ESTIMATORS``)
    with A, b, C fixed throughout, then sample one path per test sequence. Returns at_hits (share of wall hits where
    the sampled mode is that wall's reflection), in_flight (share of the other steps with free flight), test_ll,
    val_ll (per epoch), failed."""
    key_model, key_train, key_test = jax.random.split(key, 3)
    objective, sampling = estimator_options(estimator)
    config = TrainConfig(epochs=epochs, batch_size=batch_size, warmup_epochs=0, fixed_params=("A", "b", "C"),
                         stability="none", objective=objective)
    train, val, test = data.train, data.validation, data.test
    result = train_in_chunks(chunked_train(config), epochs, key_train, oracle_model(data, key_model, sampling),
                             train.y, full_mask(train), val.y, full_mask(val))
    return {**_selection_scores(result.model, test, key_test), "val_ll": np.asarray(result.val_ll).tolist(),
            "failed": bool(result.failed)}


# the generator's start (data.pong): position uniform in the box (variance 1/12), velocity speed U(0.03, 0.07) at a
# uniform heading (variance E[s^2] / 2 per axis)
_VELOCITY_VAR = (0.03**2 + 0.03 * 0.07 + 0.07**2) / 6
TRUE_PRIOR_VAR = np.array([1 / 12, _VELOCITY_VAR, 1 / 12, _VELOCITY_VAR])
RULE_PROCESS_VARS = (1e-6, 1e-5, 1e-4, 1e-3)  # the untrained rules' Q = q I: each takes its best on validation


class SwitchingRule(eqx.Module):
    """A hand-coded q(z | x) for ``oracle_model``'s modes (0 free flight, w = 1..4 a hit of ``WALLS[w - 1]``): the
    reflection of the wall that the free flight p + v from x = [p_x, v_x, p_y, v_y] would cross (x first), else
    free flight; log-probability 0 for that mode and ``-margin`` for the others (so a sample rarely disagrees).
    ``free_flight_only``: free flight everywhere."""

    margin: float = eqx.field(static=True, default=20.0)
    free_flight_only: bool = eqx.field(static=True, default=False)

    def __call__(self, x: jax.Array) -> jax.Array:
        p, v = x[jnp.array([0, 2])], x[jnp.array([1, 3])]
        moved = p + v
        wall = jnp.where(moved[0] < 0, 1, jnp.where(moved[0] > 1, 2, jnp.where(moved[1] < 0, 3,
                                                                                  jnp.where(moved[1] > 1, 4, 0))))
        wall = 0 if self.free_flight_only else wall
        return jnp.where(jnp.arange(5) == wall, 0.0, -self.margin).astype(x.dtype)


def rule_scores(data: Dataset, key, free_flight_only: bool = False, mode_sampling: str = "prior") -> dict:
    """``SwitchingRule`` in ``oracle_model`` (no training) with the process noise Q = q I of ``RULE_PROCESS_VARS``
    that scores best on the validation split, scored on the test split like ``oracle_selection``: at_hits,
    in_flight, test_ll, process_var."""
    key_model, key_val, key_test = jax.random.split(key, 3)
    rule = SwitchingRule(free_flight_only=free_flight_only)
    models = [eqx.tree_at(lambda m: m.mode_net, oracle_model(data, key_model, mode_sampling, q), rule)
              for q in RULE_PROCESS_VARS]
    validation = [_selection_scores(m, data.validation, key_val)["test_ll"] for m in models]
    best = int(np.argmax(validation))
    return {**_selection_scores(models[best], data.test, key_test), "process_var": RULE_PROCESS_VARS[best]}


def _selection_scores(model, test: Split, key) -> dict:
    p = predict_jit(model, test.y, full_mask(test), key, 1)
    at_hits, in_flight = selection_accuracy(np.asarray(p.modes[0]), np.asarray(test.events))
    return {"at_hits": at_hits, "in_flight": in_flight,
            "test_ll": float(jnp.mean(metrics.predictive_log_likelihood(p.log_likelihoods, full_mask(test))))}


def selection_accuracy(modes: np.ndarray, events: np.ndarray) -> tuple[float, float]:
    """How often sampled oracle modes (B, T) (0 free flight, w = 1..4 a hit of ``WALLS[w - 1]``, the order of
    ``step_maps``) are the true step map, given the wall hits ``events`` (B, T, 4) bool: (share of the steps with a
    wall hit whose mode is that wall's reflection, share of the other steps whose mode is free flight)."""
    wall = np.where(events.any(-1), 1 + np.argmax(events, -1), 0)
    return float(np.mean(modes[wall > 0] == wall[wall > 0])), float(np.mean(modes[wall == 0] == 0))
