"""Pong: a ball bouncing in a four-walled box, the switching-dynamics data set of section 7 ("Pong"), Fig. 4, 9.

State x_t = [p_x, v_x, p_y, v_y] (the ordering of eq. (204)), y_t = C x_t + r_t observing the position; the true mode
z_t is the velocity-sign quadrant (App. H.1's four modes). The paper states 5k sequences x 80 steps, random start,
elastic reflections and noisy positions; our choices, each a documented default:

- the unit box and a point ball, one time unit per step, speeds in ``SPEED_RANGE`` box widths per step;
- observation noise ``NOISE_STD`` (the paper gives none); exact reflection inside a step;
- splits of ``PONG_LAYOUT``, each drawn with its own key.

Each choice with its reason: docs/studies/pissm.md, "Pong".
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from memlab.checks import check_int, check_real
from memlab.pissm.data.splits import Dataset, Split, SplitLayout

PONG_LAYOUT = SplitLayout(train=(4000, 80), validation=(500, 80), test=(500, 80))
SPEED_RANGE = (0.03, 0.07)
NOISE_STD = 0.05
WALLS = ("left", "right", "bottom", "top")
OBSERVATION_MATRIX = np.array([[1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 1.0, 0.0]])


def reflect_step(position: Array, velocity: Array) -> tuple[Array, Array, Array, Array]:
    """One step of the true dynamics in the unit box, for arrays (..., 2) with |velocity| < 1 per axis.

    Returns the new position and velocity and the hits ``below`` (crossed 0) and ``above`` (crossed 1), (..., 2)
    bool per axis. The overshoot is mirrored back and the normal component of the velocity is negated.
    """
    moved = position + velocity
    below, above = moved < 0, moved > 1
    position = jnp.where(below, -moved, jnp.where(above, 2 - moved, moved))
    velocity = jnp.where(below | above, -velocity, velocity)
    return position, velocity, below, above


def step_maps() -> tuple[np.ndarray, np.ndarray]:
    """The true dynamics as a switching affine system on x = [p_x, v_x, p_y, v_y]: x_t = A_w x_{t-1} + b_w.

    Returns A (5, 4, 4), b (5, 4): w = 0 free flight (p' = p + v), w = 1..4 a hit of wall ``WALLS[w - 1]``: on
    that axis p' = -(p + v) (wall at 0) or 2 - (p + v) (wall at 1) and v' = -v. Exact for steps with at most one
    wall hit (a corner hit composes two). The oracle of ``pissm.pong-modes`` and the eigenvalues of Fig. 9.
    """
    free, hit = np.array([[1.0, 1.0], [0.0, 1.0]]), np.array([[-1.0, -1.0], [0.0, -1.0]])
    A = np.zeros((5, 4, 4))
    b = np.zeros((5, 4))
    for w in range(5):
        axis = (w - 1) // 2 if w else -1  # 0: x, 1: y
        for k in (0, 1):
            A[w, 2 * k:2 * k + 2, 2 * k:2 * k + 2] = hit if k == axis else free
    b[2, 0] = b[4, 2] = 2.0  # right wall (x = 1), top wall (y = 1)
    return A, b


def pong_mode(velocity: Array) -> Array:
    """Velocity-sign quadrant (..., 2) -> (...) int32: 0 right-up, 1 right-down, 2 left-up, 3 left-down."""
    return (2 * (velocity[..., 0] < 0) + (velocity[..., 1] < 0)).astype(jnp.int32)


def _check(num_sequences, num_steps, speed_range, noise_std) -> tuple[float, float, float]:
    for name, n in (("num_sequences", num_sequences), ("num_steps", num_steps)):
        check_int(name, n)
    lo, hi = (float(s) for s in speed_range)
    if not 0 < lo <= hi < 1:
        raise ValueError(f"speed_range must satisfy 0 < low <= high < 1 (box widths per step), got {speed_range}")
    return lo, hi, check_real("noise_std", noise_std, 0)


def simulate_pong(
    key: Array, num_sequences: int, num_steps: int, speed_range=SPEED_RANGE, noise_std: float = NOISE_STD
) -> Split:
    """``num_sequences`` independent balls for ``num_steps`` steps (step 0 is the random start).

    Returns a ``Split``: t (B, T) = 0..T-1; y (B, T, 2); x (B, T, 4) = [p_x, v_x, p_y, v_y]; z (B, T) int32
    quadrant mode; events (B, T, 4) bool wall hits (``WALLS`` order). Vectorised over sequences, scan over time.
    """
    lo, hi, noise_std = _check(num_sequences, num_steps, speed_range, noise_std)
    return _simulate(key, int(num_sequences), int(num_steps), lo, hi, noise_std)


@functools.partial(jax.jit, static_argnames=("num_sequences", "num_steps"))
def _simulate(key, num_sequences, num_steps, speed_low, speed_high, noise_std) -> Split:
    dtype = jnp.result_type(float)
    k_position, k_heading, k_speed, k_noise = jax.random.split(key, 4)
    position = jax.random.uniform(k_position, (num_sequences, 2), dtype)
    heading = jax.random.uniform(k_heading, (num_sequences,), dtype, 0.0, 2 * jnp.pi)
    speed = jax.random.uniform(k_speed, (num_sequences,), dtype, speed_low, speed_high)
    velocity = speed[:, None] * jnp.stack([jnp.cos(heading), jnp.sin(heading)], axis=-1)

    def step(carry, _):
        p, v, below, above = reflect_step(*carry)
        return (p, v), (p, v, jnp.concatenate([below[:, :1], above[:, :1], below[:, 1:], above[:, 1:]], axis=-1))

    _, (p, v, hits) = jax.lax.scan(step, (position, velocity), None, length=num_steps - 1)
    p = jnp.concatenate([position[None], p], axis=0).swapaxes(0, 1)  # (B, T, 2)
    v = jnp.concatenate([velocity[None], v], axis=0).swapaxes(0, 1)
    hits = jnp.concatenate([jnp.zeros((1, num_sequences, 4), bool), hits], axis=0).swapaxes(0, 1)
    x = jnp.stack([p[..., 0], v[..., 0], p[..., 1], v[..., 1]], axis=-1)
    y = p + noise_std * jax.random.normal(k_noise, p.shape, dtype)
    t = jnp.broadcast_to(jnp.arange(num_steps, dtype=dtype), (num_sequences, num_steps))
    return Split(t=t, y=y, x=x, z=pong_mode(v), events=hits)


def generate_pong(
    key: Array, layout: SplitLayout = PONG_LAYOUT, speed_range=SPEED_RANGE, noise_std: float = NOISE_STD
) -> Dataset:
    """The Pong data set: each split from ``simulate_pong`` with key ``fold_in(key, i)``, i = 0, 1, 2.

    C (2, 4) picks the positions out of x; R = noise_std^2 I (2, 2).
    """
    layout.check()
    splits = [
        simulate_pong(jax.random.fold_in(key, i), n, T, speed_range, noise_std) for i, (n, T) in enumerate(layout)
    ]
    dtype = jnp.result_type(float)
    return Dataset(*splits, C=jnp.asarray(OBSERVATION_MATRIX, dtype), R=noise_std**2 * jnp.eye(2, dtype=dtype))
