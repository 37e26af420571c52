"""The lgssm task family: predict the next observation of a linear-Gaussian state-space model.

Model (paper 3's convention, ``memlab.kalman``): x_0 ~ N(m_0, P_0), x_t = A x_{t-1} + q_t, y_t = C x_t + r_t.
At step t the model has read y_1..y_t and predicts y_{t+1}, scored by squared error. The reference is the Kalman
filter's predictive mean C A m_{t|t}, the mean-square optimal prediction (its expected loss is
tr(C P_{t+1|t} C^T + R)). The trivial predictor is E[y_{t+1} | y_t] = E[y_{t+1}] + Cov(y_{t+1}, y_t) Cov(y_t)^{-1}
(y_t - E[y_t]), exact at every t from the prior moments (a memoryless model that knows t can reach it).
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from memlab.arena.task import Batch, squared_error
from memlab.checks import check_int, check_real
from memlab.kalman import kalman_filter, sample_lgssm

__all__ = ["LGSSMTask", "best_linear_prediction", "random_lgssm"]


class LGSSMTask(eqx.Module):
    """Next-observation prediction: A (M, M), C (D, M), Q (M, M), R (D, D), m0 (M,), P0 (M, M)."""

    A: Array
    C: Array
    Q: Array
    R: Array
    m0: Array
    P0: Array
    name: str = eqx.field(static=True, default="lgssm")

    @property
    def input_size(self) -> int:
        return self.C.shape[0]

    @property
    def output_size(self) -> int:
        return self.C.shape[0]

    def sample(self, key: Array, batch: int, length: int) -> Batch:
        """``batch`` sequences: inputs y_1..y_L (B, L, D), targets y_2..y_{L+1}."""
        check_int("batch", batch)
        check_int("length", length)
        draw = jax.vmap(lambda k: sample_lgssm(k, self.A, self.C, self.Q, self.R, self.m0, self.P0, length + 1)[1])
        ys = draw(jax.random.split(key, batch))
        return Batch(ys[:, :-1], ys[:, 1:], jnp.ones((batch, length), bool))

    def loss(self, outputs: Array, batch: Batch) -> Array:
        return squared_error(outputs, batch.targets)

    def reference(self, batch: Batch) -> Array:
        """C A m_{t|t} (B, L, D): the Kalman filter's prediction of y_{t+1} from y_{1:t}."""
        def predict(ys):
            means = kalman_filter(ys, self.A, self.C, self.Q, self.R, self.m0, self.P0).means  # (L, M)
            return means @ (self.C @ self.A).T

        return jax.vmap(predict)(batch.inputs)

    def trivial(self, batch: Batch) -> Array:
        """E[y_{t+1} | y_t] (B, L, D) from the prior moments of (y_t, y_{t+1}) at every t."""
        A, C, Q, R = self.A, self.C, self.Q, self.R

        def moments(carry, _):
            mean, cov = carry
            mean, cov = A @ mean, A @ cov @ A.T + Q  # of x_t
            return (mean, cov), (mean, cov)

        L = batch.inputs.shape[1]
        _, (mean, cov) = jax.lax.scan(moments, (self.m0, self.P0), None, length=L)
        y_mean = mean @ C.T  # E[y_t] (L, D)
        y_cov = jnp.einsum("dm,tmn,en->tde", C, cov, C) + R  # Cov(y_t)
        cross = jnp.einsum("dm,mk,tkn,en->tde", C, A, cov, C)  # Cov(y_{t+1}, y_t)
        return best_linear_prediction(batch.inputs, y_mean, y_cov, mean @ (C @ A).T, cross)

    def distance(self, outputs: Array, reference: Array) -> Array:
        return squared_error(outputs, reference)


def best_linear_prediction(ys: Array, y_mean: Array, y_cov: Array, next_mean: Array, cross: Array) -> Array:
    """E[y_{t+1}] + Cov(y_{t+1}, y_t) Cov(y_t)^{-1} (y_t - E[y_t]) (B, L, D): the best linear predictor of y_{t+1}
    from y_t (the conditional mean when the pair is jointly Gaussian). ys (B, L, D); y_mean (L, D) E[y_t], y_cov
    (L, D, D) Cov(y_t), next_mean (L, D) E[y_{t+1}], cross (L, D, D) Cov(y_{t+1}, y_t)."""
    gain = jnp.linalg.solve(y_cov, jnp.swapaxes(cross, -1, -2)).swapaxes(-1, -2)  # cross y_cov^{-1}
    return next_mean + jnp.einsum("tde,bte->btd", gain, ys - y_mean)


def random_lgssm(seed: int, latent_size: int, obs_size: int, radius: float = 0.95, noise: float = 0.1) -> LGSSMTask:
    """A stable random model: A = radius * Q_rot (a random orthogonal matrix scaled to spectral radius
    ``radius``), C with N(0, 1 / M) entries, Q = I, R = noise^2 I, x_0 from the stationary law N(0, P_inf)."""
    check_int("latent_size", latent_size)
    check_int("obs_size", obs_size)
    check_real("radius", radius, low=0.0, high=1.0, open_high=True)
    check_real("noise", noise, low=0.0, open_low=True)
    rng = np.random.default_rng(seed)
    rotation, _ = np.linalg.qr(rng.standard_normal((latent_size, latent_size)))
    A = radius * rotation
    C = rng.standard_normal((obs_size, latent_size)) / np.sqrt(latent_size)
    Q = np.eye(latent_size)
    P_inf = np.eye(latent_size) / (1.0 - radius**2)  # A P A^T + Q = P for A = radius * orthogonal
    arrays = (A, C, Q, noise**2 * np.eye(obs_size), np.zeros(latent_size), P_inf)
    return LGSSMTask(*(jnp.asarray(a, jnp.float32) for a in arrays))
