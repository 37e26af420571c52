"""Navier-Stokes particle data set of section 7 ("Navier-Stokes") and App. G.4.

Fluid: eq. (205) in vorticity form on the unit torus, pseudo-spectral on an n x n grid with the 2/3 rule, viscosity
by an integrating factor and advection and forcing by RK4 (IF-RK4). Particles: passive tracers integrated with the
same RK4 stages, u(X) by spectral interpolation. State per tracer x_t = [u_t, v_t, x_t, y_t, p_t] (App. G.4),
y_t = C x_t + r_t with C of eq. (207).

Choices the paper leaves open:

- forcing: FNO's vorticity forcing (``FORCING_AMPLITUDE``), not an unspecified buoyancy; viscosity 1e-3 (``VISCOSITY``);
- initial vorticity: FNO's Gaussian random field, spun up for ``BURN_IN`` time units before tracers are placed;
- pressure: the physical (Galerkin) pressure, not eq. (206)'s projection step, which is zero for a spectral solver;
- tracers move by RK4 at the solver step; (u_t, v_t) is the velocity at the tracer (Lagrangian);
- grid ``GRID``, sampling ``DELTA_T`` with ``SUBSTEPS`` solver steps, noise ``NOISE_STD``, splits of
  ``NAVIER_STOKES_LAYOUT`` with ``PARTICLES_PER_FIELD`` tracers per flow.

The solver, the tracers and each choice with its reason: docs/studies/pissm.md, "Navier-Stokes".
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from memlab.checks import check_int, check_real
from memlab.pissm.data.splits import Dataset, Split, SplitLayout

NAVIER_STOKES_LAYOUT = SplitLayout(train=(8000, 100), validation=(1000, 100), test=(1000, 100))
NAVIER_STOKES_QUICK_LAYOUT = SplitLayout(train=(400, 50), validation=(50, 50), test=(50, 50))
GRID = 64
VISCOSITY = 1e-3
DENSITY = 1.0
FORCING_AMPLITUDE = 0.1
DELTA_T = 0.5
SUBSTEPS = 16
BURN_IN = 10.0
NOISE_STD = 0.03
PARTICLES_PER_FIELD = 50
SEAMS = ("left", "right", "bottom", "top")
STATE_NAMES = ("u", "v", "x", "y", "p")
OBSERVATION_MATRIX = np.array([[0.0, 0.0, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 1.0, 0.0]])  # eq. (207)


class _Spectrum(NamedTuple):
    """Angular wavenumbers of the rfft2 layout (n, n // 2 + 1) and the 2/3-rule mask; NumPy constants."""

    kx: np.ndarray  # (n, 1) 2 pi k_x
    ky: np.ndarray  # (1, m) 2 pi k_y
    k2: np.ndarray  # (n, m) |2 pi k|^2
    inv_k2: np.ndarray  # (n, m) 1 / |2 pi k|^2, 0 at k = 0 (zero-mean inverse Laplacian)
    mask: np.ndarray  # (n, m) bool, retained modes
    ix: np.ndarray  # (n,) integer k_x
    iy: np.ndarray  # (m,) integer k_y


def _spectrum(n: int) -> _Spectrum:
    """In the current default float dtype: NumPy float64 constants would not mix with float32 traced arrays."""
    return _spectrum_in(n, np.dtype(jnp.result_type(float)))


@functools.lru_cache(maxsize=8)
def _spectrum_in(n: int, dtype: np.dtype) -> _Spectrum:
    ix, iy = np.fft.fftfreq(n, 1.0 / n), np.fft.rfftfreq(n, 1.0 / n)
    kx, ky = 2 * np.pi * ix[:, None], 2 * np.pi * iy[None, :]
    k2 = kx**2 + ky**2
    inv_k2 = np.where(k2 > 0, 1.0 / np.where(k2 > 0, k2, 1.0), 0.0)
    mask = (np.abs(ix)[:, None] < n / 3) & (np.abs(iy)[None, :] < n / 3)
    return _Spectrum(*(a.astype(dtype) for a in (kx, ky, k2, inv_k2)), mask, ix.astype(dtype), iy.astype(dtype))


def _check_grid(n) -> int:
    if not isinstance(n, (int, np.integer)) or isinstance(n, bool) or n < 8 or n % 2:
        raise ValueError(f"grid must be an even int >= 8, got {n!r}")
    return int(n)


def _fft(field: Array) -> Array:
    return jnp.fft.rfft2(field, axes=(-2, -1))


def _ifft(coeffs: Array, n: int) -> Array:
    return jnp.fft.irfft2(coeffs, s=(n, n), axes=(-2, -1))


def _velocity_hat(omega_hat: Array, spec: _Spectrum) -> Array:
    """(n, m) vorticity coefficients -> (2, n, m) coefficients of (u, v) = (psi_y, -psi_x), psi = -lap^{-1} omega."""
    psi = omega_hat * spec.inv_k2
    return jnp.stack([1j * spec.ky * psi, -1j * spec.kx * psi])


def _interpolate(coeffs: Array, positions: Array, spec: _Spectrum) -> Array:
    """Trigonometric interpolant of real fields with rfft2 coefficients (..., n, m) at positions (P, 2) -> (P, ...).

    Exact for fields without a Nyquist component (all fields here are 2/3-truncated).
    """
    n = spec.ix.shape[0]
    phase_x = jnp.exp(2j * jnp.pi * positions[:, :1] * spec.ix[None, :])  # (P, n)
    weight = np.where(spec.iy > 0, 2.0, 1.0).astype(spec.iy.dtype)  # the rfft half-plane stands for k_y and -k_y
    phase_y = jnp.exp(2j * jnp.pi * positions[:, 1:] * spec.iy[None, :]) * weight  # (P, m)
    return jnp.einsum("pa,...ab,pb->p...", phase_x, coeffs, phase_y).real / n**2


def _tendency(omega_hat, positions, forcing_hat, mean_flow, spec):
    """Right-hand side without viscosity: d omega_hat / dt = -P(u . grad omega) + f_hat, and dX/dt = u(X) + U."""
    n = spec.ix.shape[0]
    velocity_hat = _velocity_hat(omega_hat, spec)
    velocity = _ifft(velocity_hat, n) + mean_flow[:, None, None]
    gradient = _ifft(jnp.stack([1j * spec.kx * omega_hat, 1j * spec.ky * omega_hat]), n)
    advection = jnp.sum(velocity * gradient, axis=0)
    d_omega = jnp.where(spec.mask, -_fft(advection), 0) + forcing_hat
    return d_omega, _interpolate(velocity_hat, positions, spec) + mean_flow


def _wrap(positions: Array) -> Array:
    wrapped = jnp.mod(positions, 1.0)
    return jnp.where(wrapped >= 1.0, 0.0, wrapped)  # float rounding can give mod(-tiny, 1) == 1


def _if_rk4_step(omega_hat, positions, dt, viscosity, forcing_hat, mean_flow, spec):
    """One IF-RK4 step of (omega_hat, X); returns them and the seams crossed (P, 4) in ``SEAMS`` order."""
    full, half = jnp.exp(-viscosity * spec.k2 * dt), jnp.exp(-viscosity * spec.k2 * dt / 2)
    rhs = functools.partial(_tendency, forcing_hat=forcing_hat, mean_flow=mean_flow, spec=spec)
    a, ka = rhs(omega_hat, positions)
    b, kb = rhs(half * (omega_hat + dt / 2 * a), positions + dt / 2 * ka)
    c, kc = rhs(half * omega_hat + dt / 2 * b, positions + dt / 2 * kb)
    d, kd = rhs(full * omega_hat + dt * half * c, positions + dt * kc)
    omega_hat = full * omega_hat + dt / 6 * (full * a + 2 * half * (b + c) + d)
    moved = positions + dt / 6 * (ka + 2 * kb + 2 * kc + kd)
    below, above = moved < 0, moved >= 1
    crossed = jnp.stack([below[:, 0], above[:, 0], below[:, 1], above[:, 1]], axis=-1)
    return omega_hat, _wrap(moved), crossed


def _pressure_hat(omega_hat: Array, density, spec: _Spectrum) -> Array:
    """Zero-mean p with -lap p = rho (u_x^2 + 2 u_y v_x + v_y^2), projected on the retained modes."""
    n = spec.ix.shape[0]
    u_hat, v_hat = _velocity_hat(omega_hat, spec)
    ux, uy, vx, vy = _ifft(jnp.stack([1j * spec.kx * u_hat, 1j * spec.ky * u_hat,
                                      1j * spec.kx * v_hat, 1j * spec.ky * v_hat]), n)
    source = ux**2 + 2 * uy * vx + vy**2
    return density * jnp.where(spec.mask, _fft(source), 0) * spec.inv_k2


def _observe(omega_hat, positions, density, mean_flow, spec) -> Array:
    """State (P, 5) = [u, v, x, y, p] of each tracer."""
    coeffs = jnp.concatenate([_velocity_hat(omega_hat, spec), _pressure_hat(omega_hat, density, spec)[None]])
    values = _interpolate(coeffs, positions, spec)  # (P, 3)
    return jnp.concatenate([values[:, :2] + mean_flow, positions, values[:, 2:]], axis=-1)


def _grid_field(vorticity) -> tuple[Array, _Spectrum]:
    omega = jnp.asarray(vorticity, jnp.result_type(float))
    if omega.ndim != 2 or omega.shape[0] != omega.shape[1]:
        raise ValueError(f"vorticity must be a square grid (n, n), got shape {omega.shape}")
    spec = _spectrum(_check_grid(omega.shape[0]))
    return jnp.where(spec.mask, _fft(omega), 0), spec


@jax.jit
def _velocity_grid(omega):
    omega_hat, spec = _grid_field(omega)
    return _ifft(_velocity_hat(omega_hat, spec), spec.ix.shape[0])


@jax.jit
def _pressure_grid(omega, density):
    omega_hat, spec = _grid_field(omega)
    return _ifft(_pressure_hat(omega_hat, density, spec), spec.ix.shape[0])


def velocity_field(vorticity: Array) -> Array:
    """Grid vorticity (n, n) -> velocity (2, n, n) = (u, v) of the zero-mean, 2/3-truncated field."""
    _grid_field(vorticity)  # shape checks before tracing
    return _velocity_grid(jnp.asarray(vorticity, jnp.result_type(float)))


def pressure_field(vorticity: Array, density: float = DENSITY) -> Array:
    """Grid vorticity (n, n) -> zero-mean pressure (n, n) with -lap p = rho (u_x^2 + 2 u_y v_x + v_y^2)."""
    _grid_field(vorticity)
    density = check_real("density", density, 0, open_low=True)
    return _pressure_grid(jnp.asarray(vorticity, jnp.result_type(float)), density)


class FlowRecord(NamedTuple):
    """One flow with P tracers sampled at T observation times.

    ``state`` (T, P, 5) [u, v, x, y, p] per tracer; ``events`` (T, P, 4) bool seams crossed since the previous
    sample (``SEAMS`` order; none at step 0); ``vorticity`` (T, n, n) grid vorticity, or None.
    """

    state: Array
    events: Array
    vorticity: Array | None


@functools.partial(jax.jit, static_argnames=("num_steps", "substeps", "keep_vorticity"))
def _run(omega, positions, forcing, mean_flow, dt, viscosity, density, num_steps, substeps, keep_vorticity):
    spec = _spectrum(omega.shape[-1])
    omega_hat = jnp.where(spec.mask, _fft(omega), 0)
    forcing_hat = jnp.where(spec.mask, _fft(forcing), 0)
    step = functools.partial(
        _if_rk4_step, dt=dt, viscosity=viscosity, forcing_hat=forcing_hat, mean_flow=mean_flow, spec=spec
    )

    def record(w, p, events):
        out = (_observe(w, p, density, mean_flow, spec), events)
        return out + ((_ifft(w, omega.shape[-1]),) if keep_vorticity else ())

    def sample(carry, _):
        def substep(_, c):
            w, p, events = c
            w, p, crossed = step(w, p)
            return w, p, events | crossed

        w, p, events = jax.lax.fori_loop(0, substeps, substep, carry + (jnp.zeros(positions.shape[:1] + (4,), bool),))
        return (w, p), record(w, p, events)

    first = record(omega_hat, positions, jnp.zeros(positions.shape[:1] + (4,), bool))
    _, rest = jax.lax.scan(sample, (omega_hat, positions), None, length=num_steps - 1)
    out = [jnp.concatenate([a[None], b], axis=0) for a, b in zip(first, rest)]
    return FlowRecord(out[0], out[1], out[2] if keep_vorticity else None)


def _concrete(a) -> bool:
    """False for traced arrays (under vmap or jit), whose values cannot be checked."""
    return not isinstance(a, jax.core.Tracer)


def simulate_flow(
    vorticity: Array,
    positions: Array,
    num_steps: int,
    *,
    delta_t: float = DELTA_T,
    substeps: int = SUBSTEPS,
    viscosity: float = VISCOSITY,
    forcing: Array | None = None,
    mean_flow=(0.0, 0.0),
    density: float = DENSITY,
    keep_vorticity: bool = True,
) -> FlowRecord:
    """Integrate one flow and its tracers: samples at t = k delta_t, k = 0..num_steps-1, solver step
    delta_t / substeps.

    ``vorticity`` (n, n) initial grid vorticity (its mean and the 2/3-truncated modes are dropped); ``positions``
    (P, 2) initial tracer positions in [0, 1)^2; ``forcing`` (n, n) vorticity source f (None: zero; ``fno_forcing``
    gives the data set's); ``mean_flow`` the uniform velocity U. Unbatched: vmap over flows (array values are
    checked only outside vmap / jit).
    """
    omega = jnp.asarray(vorticity, jnp.result_type(float))
    if omega.ndim != 2 or omega.shape[0] != omega.shape[1]:
        raise ValueError(f"vorticity must be a square grid (n, n), got shape {omega.shape}")
    n = _check_grid(omega.shape[0])
    positions = jnp.asarray(positions, omega.dtype)
    if positions.ndim != 2 or positions.shape[1] != 2:
        raise ValueError(f"positions must have shape (P, 2), got {positions.shape}")
    if _concrete(positions) and not (bool(jnp.all(positions >= 0)) and bool(jnp.all(positions < 1))):
        raise ValueError("positions must lie in the torus [0, 1)^2")
    forcing = jnp.zeros_like(omega) if forcing is None else jnp.asarray(forcing, omega.dtype)
    if forcing.shape != (n, n):
        raise ValueError(f"forcing must have the grid's shape {(n, n)}, got {forcing.shape}")
    mean_flow = jnp.asarray(mean_flow, omega.dtype)
    if mean_flow.shape != (2,):
        raise ValueError(f"mean_flow must be a pair (U, V), got shape {mean_flow.shape}")
    for name, a in (("vorticity", omega), ("forcing", forcing), ("mean_flow", mean_flow)):
        if _concrete(a) and not bool(jnp.all(jnp.isfinite(a))):
            raise ValueError(f"{name} must be finite")
    num_steps, substeps = check_int("num_steps", num_steps), check_int("substeps", substeps)
    delta_t = check_real("delta_t", delta_t, 0, open_low=True)
    viscosity = check_real("viscosity", viscosity, 0)
    density = check_real("density", density, 0, open_low=True)
    return _run(omega, positions, forcing, mean_flow, delta_t / substeps, viscosity, density, num_steps, substeps,
                bool(keep_vorticity))


def fno_forcing(n: int, amplitude: float = FORCING_AMPLITUDE) -> Array:
    """The vorticity source amplitude (sin 2 pi (x + y) + cos 2 pi (x + y)) on the n x n grid, (n, n)."""
    x = jnp.arange(_check_grid(n), dtype=jnp.result_type(float)) / n
    s = x[:, None] + x[None, :]
    return amplitude * (jnp.sin(2 * jnp.pi * s) + jnp.cos(2 * jnp.pi * s))


def vorticity_spectrum(n: int, alpha: float = 2.5, tau: float = 7.0) -> np.ndarray:
    """Eigenvalues sigma^2 (|2 pi k|^2 + tau^2)^{-alpha} of the FNO covariance, sigma = tau^{alpha - 1}, on the full
    fft2 layout (n, n), with the k = 0 entry zero (zero-mean field)."""
    k = np.fft.fftfreq(n, 1.0 / n)
    k2 = (2 * np.pi) ** 2 * (k[:, None] ** 2 + k[None, :] ** 2)
    lam = tau ** (2 * (alpha - 1)) * (k2 + tau**2) ** (-alpha)
    lam[0, 0] = 0.0
    return lam


@functools.partial(jax.jit, static_argnames="n")
def gaussian_random_vorticity(key: Array, n: int = GRID) -> Array:
    """One zero-mean Gaussian random field (n, n) with covariance ``vorticity_spectrum(n)``:
    omega(x) = Re sum_k sqrt(lambda_k) (a_k + i b_k) exp(2 pi i k . x), a, b iid N(0, 1)."""
    n = _check_grid(n)
    dtype = jnp.result_type(float)
    noise = jax.random.normal(key, (2, n, n), dtype)
    coeffs = jnp.sqrt(jnp.asarray(vorticity_spectrum(n), dtype)) * (noise[0] + 1j * noise[1])
    return (n * n * jnp.fft.ifft2(coeffs)).real


@functools.partial(
    jax.jit, static_argnames=("num_fields", "particles_per_field", "num_steps", "substeps", "burn_in_steps", "grid")
)
def _simulate(key, num_fields, particles_per_field, num_steps, substeps, burn_in_steps, grid, delta_t, viscosity,
              amplitude, noise_std):
    dtype = jnp.result_type(float)
    k_field, k_position, k_noise = jax.random.split(key, 3)
    omega = jax.vmap(gaussian_random_vorticity, (0, None))(jax.random.split(k_field, num_fields), grid)
    forcing, mean_flow = fno_forcing(grid, amplitude), jnp.zeros(2, dtype)
    flow = functools.partial(_run, forcing=forcing, mean_flow=mean_flow, dt=delta_t / substeps, viscosity=viscosity,
                             density=DENSITY)
    if burn_in_steps:
        spin_up = functools.partial(flow, num_steps=2, substeps=burn_in_steps, keep_vorticity=True)
        omega = jax.vmap(spin_up)(omega, jnp.zeros((num_fields, 0, 2), dtype)).vorticity[:, -1]
    positions = jax.random.uniform(k_position, (num_fields, particles_per_field, 2), dtype)
    record = jax.vmap(functools.partial(flow, num_steps=num_steps, substeps=substeps, keep_vorticity=False))(
        omega, positions
    )
    # (F, T, P, ...) -> (F * P, T, ...): tracer p of flow f is sequence f * P + p
    state = record.state.swapaxes(1, 2).reshape((-1, num_steps, 5))
    events = record.events.swapaxes(1, 2).reshape((-1, num_steps, 4))
    y = state[..., 2:4] + noise_std * jax.random.normal(k_noise, state[..., 2:4].shape, dtype)
    t = jnp.broadcast_to(jnp.arange(num_steps, dtype=dtype) * delta_t, state.shape[:2])
    return Split(t=t, y=y, x=state, z=None, events=events)


def simulate_navier_stokes(
    key: Array,
    num_sequences: int,
    num_steps: int,
    *,
    grid: int = GRID,
    viscosity: float = VISCOSITY,
    delta_t: float = DELTA_T,
    substeps: int = SUBSTEPS,
    burn_in: float = BURN_IN,
    forcing_amplitude: float = FORCING_AMPLITUDE,
    noise_std: float = NOISE_STD,
    particles_per_field: int = PARTICLES_PER_FIELD,
) -> Split:
    """``num_sequences`` tracer trajectories of ``num_steps`` samples, delta_t apart, from
    ceil(num_sequences / particles_per_field) independent forced flows (vmapped), each spun up for ``burn_in``
    time units (rounded to whole solver steps) before its tracers are placed uniformly at random.

    Returns a ``Split``: t (B, T) = k delta_t; y (B, T, 2) noisy positions; x (B, T, 5) = [u, v, x, y, p];
    z None; events (B, T, 4) bool seam crossings (``SEAMS`` order).
    """
    num_sequences, num_steps = check_int("num_sequences", num_sequences), check_int("num_steps", num_steps)
    per_field = check_int("particles_per_field", particles_per_field)
    grid, substeps = _check_grid(grid), check_int("substeps", substeps)
    viscosity = check_real("viscosity", viscosity, 0)
    delta_t = check_real("delta_t", delta_t, 0, open_low=True)
    burn_in = check_real("burn_in", burn_in, 0)
    noise_std = check_real("noise_std", noise_std, 0)
    amplitude = check_real("forcing_amplitude", forcing_amplitude)
    num_fields = -(-num_sequences // per_field)
    burn_in_steps = round(burn_in / (delta_t / substeps))
    split = _simulate(key, num_fields, per_field, num_steps, substeps, burn_in_steps, grid, delta_t, viscosity,
                      amplitude, noise_std)
    if not bool(jnp.all(jnp.isfinite(split.x))):
        raise ValueError(f"the flow went unstable at dt = delta_t / substeps = {delta_t / substeps}: raise substeps")
    return jax.tree.map(lambda a: a[:num_sequences], split)


def generate_navier_stokes(key: Array, layout: SplitLayout = NAVIER_STOKES_LAYOUT, **options) -> Dataset:
    """The Navier-Stokes data set: each split from ``simulate_navier_stokes(fold_in(key, i), n, T, **options)``,
    i = 0, 1, 2 (its own flows). C (2, 5) of eq. (207); R = noise_std^2 I (2, 2).
    ``NAVIER_STOKES_LAYOUT`` is the paper's 10k trajectories; ``NAVIER_STOKES_QUICK_LAYOUT`` a small one.
    """
    layout.check()
    splits = [
        simulate_navier_stokes(jax.random.fold_in(key, i), n, T, **options) for i, (n, T) in enumerate(layout)
    ]
    dtype = jnp.result_type(float)
    noise_std = options.get("noise_std", NOISE_STD)
    return Dataset(*splits, C=jnp.asarray(OBSERVATION_MATRIX, dtype), R=noise_std**2 * jnp.eye(2, dtype=dtype))
