"""Navier-Stokes generator: the solver against exact solutions and invariants, the tracers against exact and SciPy
trajectories, the pressure against the Taylor-Green closed form and the advective-form Poisson equation, the
Gaussian random field against its spectrum, and the data set's noise, splits and input checks.

Exact references on the unit torus (K = 2 pi k):
- any field whose modes share one |K| has u . grad omega = 0, so it decays as exp(-nu |K|^2 t) and is steady
  for nu = 0 (Taylor-Green, shear and oblique modes);
- with a uniform mean flow U the same field is carried along: omega(x, t) = exp(-nu |K|^2 t) omega_0(x - U t),
  which fixes the sign of the advection term;
- forcing f = A sin(K y) from rest gives omega = A (1 - exp(-nu K^2 t)) / (nu K^2) sin(K y);
- Taylor-Green u = (sin 2 pi x cos 2 pi y, -cos 2 pi x sin 2 pi y) has p = (cos 4 pi x + cos 4 pi y) / 4.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest
from scipy.integrate import solve_ivp

from memlab.pissm.data.navier_stokes import (
    NOISE_STD,
    OBSERVATION_MATRIX,
    gaussian_random_vorticity,
    generate_navier_stokes,
    pressure_field,
    simulate_flow,
    simulate_navier_stokes,
    velocity_field,
    vorticity_spectrum,
)
from memlab.pissm.data.splits import SplitLayout

TWO_PI = 2 * np.pi
# every small-grid run shares one compilation: 16 x 16 grid, 4 tracers, 9 samples, 100 solver steps per sample
SMALL = {"num_steps": 9, "substeps": 100}
FOUR = np.array([[0.1, 0.2], [0.6, 0.3], [0.45, 0.9], [0.8, 0.77]])


def grid(n):
    x = np.arange(n) / n
    return np.meshgrid(x, x, indexing="ij")  # X varies along axis 0


def spectral_velocity(omega):
    """Independent NumPy (u, v) of a grid vorticity via full fft2: psi = omega / |K|^2, u = psi_y, v = -psi_x."""
    n = omega.shape[0]
    k = TWO_PI * np.fft.fftfreq(n, 1.0 / n)
    kx, ky = k[:, None], k[None, :]
    k2 = kx**2 + ky**2
    psi = np.fft.fft2(omega) / np.where(k2 > 0, k2, 1.0) * (k2 > 0)
    return np.fft.ifft2(1j * ky * psi).real, np.fft.ifft2(-1j * kx * psi).real, kx, ky


def dft_at(field, points):
    """Trigonometric interpolant of a band-limited grid field at points (P, 2), by a direct sum over all modes."""
    n = field.shape[0]
    k = np.fft.fftfreq(n, 1.0 / n)
    phase = np.exp(2j * np.pi * (points[:, 0, None, None] * k[:, None] + points[:, 1, None, None] * k[None, :]))
    return (phase * np.fft.fft2(field)).sum(axis=(1, 2)).real / n**2


def mode(n, kind):
    x, y = grid(n)
    fields = {
        "taylor-green": (4 * np.pi * np.sin(TWO_PI * x) * np.sin(TWO_PI * y), TWO_PI**2 * 2),
        "shear": (np.cos(TWO_PI * 3 * y), TWO_PI**2 * 9),
        "oblique": (np.sin(TWO_PI * (2 * x + y)) + 0.5 * np.cos(TWO_PI * (x - 2 * y)), TWO_PI**2 * 5),
    }
    return fields[kind]


@pytest.mark.parametrize("kind", ["taylor-green", "shear", "oblique"])
def test_single_shell_decays_exactly_and_galilean_translation(x64, kind):
    n, nu, dt_obs = 16, 0.02, 0.25
    omega0, k2 = mode(n, kind)
    t = dt_obs * np.arange(SMALL["num_steps"])
    rec = simulate_flow(omega0, FOUR, delta_t=dt_obs, viscosity=nu, **SMALL)
    expected = np.exp(-nu * k2 * t)[:, None, None] * omega0
    np.testing.assert_allclose(np.asarray(rec.vorticity), expected, atol=1e-12 * np.abs(omega0).max())
    # a mean flow U carries the decaying field along: exercises the advection term and its sign (RK4 error ~1e-9)
    U = np.array([0.3, -0.45])
    rec = simulate_flow(omega0, FOUR, delta_t=dt_obs, viscosity=nu, mean_flow=U, **SMALL)
    x, y = grid(n)
    shifted = {"taylor-green": lambda a, b: 4 * np.pi * np.sin(TWO_PI * a) * np.sin(TWO_PI * b),
               "shear": lambda a, b: np.cos(TWO_PI * 3 * b),
               "oblique": lambda a, b: np.sin(TWO_PI * (2 * a + b)) + 0.5 * np.cos(TWO_PI * (a - 2 * b))}[kind]
    for i, ti in enumerate(t):
        ref = np.exp(-nu * k2 * ti) * shifted(x - U[0] * ti, y - U[1] * ti)
        np.testing.assert_allclose(np.asarray(rec.vorticity[i]), ref, atol=1e-8 * np.abs(omega0).max())


def test_forcing_from_rest_matches_the_closed_form(x64):
    n, nu, amp, k = 16, 0.05, 0.7, 2
    x, y = grid(n)
    shape = np.sin(TWO_PI * k * y)
    t = 0.1 * np.arange(SMALL["num_steps"])
    rec = simulate_flow(np.zeros((n, n)), FOUR, delta_t=0.1, viscosity=nu, forcing=amp * shape, **SMALL)
    decay = nu * (TWO_PI * k) ** 2
    expected = (amp * (1 - np.exp(-decay * t)) / decay)[:, None, None] * shape
    np.testing.assert_allclose(np.asarray(rec.vorticity), expected, atol=1e-10)  # IF-RK4 error ~(nu K^2 dt)^4


# the 32 x 32 runs share one compilation too
MEDIUM = {"num_steps": 5, "substeps": 100}
SEVEN = np.random.default_rng(2).uniform(size=(7, 2))


def invariants(omega):
    u, v, _, _ = spectral_velocity(omega)
    return 0.5 * np.mean(u**2 + v**2), 0.5 * np.mean(omega**2)


def test_euler_conserves_energy_and_enstrophy_while_the_flow_changes(x64):
    n = 32
    omega0 = np.array(gaussian_random_vorticity(jax.random.key(5), n))
    omega0 *= 0.5 / np.sqrt(2 * invariants(omega0)[0])  # rms speed 0.5 domain widths per time unit
    rec = simulate_flow(omega0, SEVEN, delta_t=0.25, viscosity=0.0, **MEDIUM)
    omega = np.asarray(rec.vorticity)
    e, z = np.array([invariants(w) for w in omega]).T
    # the truncated system conserves both exactly; what is left is RK4's O(dt^4) error (dt = 1/400: ~1e-10, ~1e-8)
    np.testing.assert_allclose(e, e[0], rtol=1e-9)
    np.testing.assert_allclose(z, z[0], rtol=1e-7)
    # nonlinear evolution really happened (a frozen field would conserve both trivially)
    assert np.linalg.norm(omega[-1] - omega[0]) > 0.3 * np.linalg.norm(omega[0])
    # viscosity dissipates: energy and enstrophy strictly decrease
    visc = np.asarray(simulate_flow(omega0, SEVEN, delta_t=0.25, viscosity=1e-2, **MEDIUM).vorticity)
    e_v, z_v = np.array([invariants(w) for w in visc]).T
    assert np.all(np.diff(e_v) < 0) and np.all(np.diff(z_v) < 0)


def test_velocity_is_divergence_free_with_the_right_curl_and_tracers_see_it(x64):
    n = 32
    omega0 = np.asarray(gaussian_random_vorticity(jax.random.key(1), n))
    rec = simulate_flow(omega0, SEVEN, delta_t=0.5, viscosity=1e-3, **MEDIUM)
    for i in range(MEDIUM["num_steps"]):
        omega = np.asarray(rec.vorticity[i])
        u, v = np.asarray(velocity_field(omega))
        ru, rv, kx, ky = spectral_velocity(omega)
        np.testing.assert_allclose(u, ru, atol=1e-12)
        np.testing.assert_allclose(v, rv, atol=1e-12)
        div = np.fft.ifft2(1j * kx * np.fft.fft2(u) + 1j * ky * np.fft.fft2(v)).real
        curl = np.fft.ifft2(1j * kx * np.fft.fft2(v) - 1j * ky * np.fft.fft2(u)).real
        assert np.abs(div).max() < 1e-12 * np.abs(curl).max()
        np.testing.assert_allclose(curl, omega, atol=1e-11)  # omega is zero-mean and band-limited
        # the recorded tracer state is the field (and pressure) at the tracer: direct DFT sums
        state = np.asarray(rec.state[i])
        pts = state[:, 2:4]
        np.testing.assert_allclose(state[:, 0], dft_at(u, pts), atol=1e-12)
        np.testing.assert_allclose(state[:, 1], dft_at(v, pts), atol=1e-12)
        np.testing.assert_allclose(state[:, 4], dft_at(np.asarray(pressure_field(omega)), pts), atol=1e-12)


def test_pressure_taylor_green_and_poisson_equation(x64):
    n = 16
    x, y = grid(n)
    omega, _ = mode(n, "taylor-green")
    p = np.asarray(pressure_field(omega))
    np.testing.assert_allclose(p, (np.cos(2 * TWO_PI * x) + np.cos(2 * TWO_PI * y)) / 4, atol=1e-13)
    np.testing.assert_allclose(np.asarray(pressure_field(omega, density=3.0)), 3 * p, atol=1e-13)
    # random field: lap p = -div((u . grad) u) on the retained modes, from the advective form in NumPy
    omega = np.asarray(gaussian_random_vorticity(jax.random.key(3), n))
    keep = np.abs(np.fft.fftfreq(n, 1.0 / n)) < n / 3
    keep = keep[:, None] & keep[None, :]
    omega = np.fft.ifft2(np.fft.fft2(omega) * keep).real
    u, v, kx, ky = spectral_velocity(omega)

    def d(f, k):
        return np.fft.ifft2(1j * k * np.fft.fft2(f)).real

    adv_u, adv_v = u * d(u, kx) + v * d(u, ky), u * d(v, kx) + v * d(v, ky)
    div_adv = np.fft.fft2(d(adv_u, kx) + d(adv_v, ky)) * keep
    lap_p = -(kx**2 + ky**2) * np.fft.fft2(np.asarray(pressure_field(omega)))
    np.testing.assert_allclose(lap_p, -div_adv, atol=1e-10 * np.abs(div_adv).max())


def test_tracers_in_uniform_flow_move_by_u_t_mod_1(x64):
    U = np.array([0.37, -0.61])
    p0, steps, dt_obs = FOUR, SMALL["num_steps"], 0.5
    rec = simulate_flow(np.zeros((16, 16)), p0, delta_t=dt_obs, viscosity=0.01, mean_flow=U, **SMALL)
    state = np.asarray(rec.state)
    unfolded = p0[None] + dt_obs * np.arange(steps)[:, None, None] * U
    gap = state[..., 2:4] - np.mod(unfolded, 1.0)
    np.testing.assert_allclose(gap - np.round(gap), 0.0, atol=1e-12)  # equal on the circle
    assert state[..., 2:4].min() >= 0 and state[..., 2:4].max() < 1
    np.testing.assert_allclose(state[..., :2], np.broadcast_to(U, state[..., :2].shape), atol=1e-14)
    np.testing.assert_allclose(state[..., 4], 0.0, atol=1e-14)
    # seam events: the unfolded path crossed an integer in that direction (U_x > 0: right seam; U_y < 0: bottom)
    cell = np.floor(unfolded)
    events = np.asarray(rec.events)
    assert not events[0].any()
    np.testing.assert_array_equal(events[1:, :, 1], cell[1:, :, 0] > cell[:-1, :, 0])
    np.testing.assert_array_equal(events[1:, :, 2], cell[1:, :, 1] < cell[:-1, :, 1])
    assert not events[..., [0, 3]].any() and events.sum() > 10


def test_tracers_follow_taylor_green_streamlines_like_scipy(x64):
    n = 16
    omega, _ = mode(n, "taylor-green")  # steady solution of Euler (nu = 0)
    p0, steps, dt_obs = FOUR, SMALL["num_steps"], 0.25
    state = np.asarray(simulate_flow(omega, p0, delta_t=dt_obs, viscosity=0.0, **SMALL).state)

    def rhs(_, z):
        x, y = z.reshape(2, -1)
        return np.concatenate([np.sin(TWO_PI * x) * np.cos(TWO_PI * y), -np.cos(TWO_PI * x) * np.sin(TWO_PI * y)])

    t = dt_obs * np.arange(steps)
    sol = solve_ivp(rhs, (0, t[-1]), p0.T.ravel(), method="DOP853", rtol=1e-12, atol=1e-13, t_eval=t)
    ref = np.mod(sol.y.reshape(2, len(p0), steps).transpose(2, 1, 0), 1.0)
    gap = state[..., 2:4] - ref
    np.testing.assert_allclose(gap - np.round(gap), 0.0, atol=1e-8)
    psi = np.sin(TWO_PI * state[..., 2]) * np.sin(TWO_PI * state[..., 3])
    np.testing.assert_allclose(psi, np.broadcast_to(psi[:1], psi.shape), atol=1e-8)
    moved = state[-1, :, 2:4] - state[0, :, 2:4]
    assert np.abs(moved - np.round(moved)).max() > 0.1


def test_random_vorticity_has_the_fno_spectrum():
    n, samples = 16, 1000
    keys = jax.random.split(jax.random.key(6), samples)
    omega = np.asarray(jax.vmap(gaussian_random_vorticity, (0, None))(keys, n), np.float64)
    power = (np.abs(np.fft.fft2(omega)) ** 2).mean(0) / n**4
    lam = vorticity_spectrum(n)
    assert np.abs(power[0, 0]) < 1e-10 * lam.max()
    np.testing.assert_allclose(power.ravel()[1:] / lam.ravel()[1:], 1.0, atol=0.25)  # ~5 sigma of the mean
    np.testing.assert_allclose(omega.var(axis=0).mean(), lam.sum(), rtol=0.05)


# one small configuration, compiled once per split shape
OPTIONS = {"grid": 16, "substeps": 8, "burn_in": 1.0, "particles_per_field": 10}
LAYOUT = SplitLayout(train=(20, 40), validation=(20, 40), test=(20, 40))  # 2 flows of 10 tracers per split


@pytest.fixture(scope="module")
def data():
    return generate_navier_stokes(jax.random.key(0), LAYOUT, **OPTIONS)


def test_dataset_shapes_torus_and_consistent_state(data):
    for split, (n, length) in zip(data[:3], LAYOUT):
        assert split.x.shape == (n, length, 5) and split.y.shape == (n, length, 2) and split.z is None
        assert split.events.shape == (n, length, 4) and split.events.dtype == bool
        np.testing.assert_allclose(np.asarray(split.t[0]), 0.5 * np.arange(length), rtol=1e-6)
        assert np.asarray(split.events).sum() > 5  # tracers do cross the seams
        x = np.asarray(split.x, np.float64)
        assert x[..., 2:4].min() >= 0 and x[..., 2:4].max() < 1 and np.all(np.isfinite(x))
        # displacement between samples ~ delta_t times the mean of the end-point velocities (trapezoid)
        step = np.diff(x[..., 2:4], axis=1)
        wrapped = step - np.round(step)
        trapezoid = 0.25 * (x[:, 1:, :2] + x[:, :-1, :2])
        assert np.abs(wrapped - trapezoid).max() < 0.1 * np.abs(wrapped).max()
        # jumps of the recorded position are exactly the seam events
        jumped = np.abs(step) > 0.5
        ev = np.asarray(split.events)[:, 1:]
        np.testing.assert_array_equal(jumped, np.stack([ev[..., :2].any(-1), ev[..., 2:].any(-1)], -1))
    np.testing.assert_array_equal(np.asarray(data.C), OBSERVATION_MATRIX)
    np.testing.assert_allclose(np.asarray(data.R), NOISE_STD**2 * np.eye(2), rtol=1e-6)


def test_splits_disjoint_reproducible_and_independent(data):
    starts = np.concatenate([np.asarray(s.x[:, 0]) for s in data[:3]])
    assert np.unique(starts, axis=0).shape[0] == starts.shape[0]
    same = generate_navier_stokes(jax.random.key(0), LAYOUT, **OPTIONS)
    for a, b in zip(jax.tree.leaves(data), jax.tree.leaves(same)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    other = generate_navier_stokes(jax.random.key(1), LAYOUT, **OPTIONS)
    for a, b in zip(data[:3], other[:3]):
        assert not np.allclose(np.asarray(a.y), np.asarray(b.y))
    # a split's own key: a different-sized training set (15 tracers: still 2 flows, no new compilation) leaves
    # validation and test unchanged
    resized = generate_navier_stokes(jax.random.key(0), LAYOUT._replace(train=(15, 40)), **OPTIONS)
    np.testing.assert_array_equal(np.asarray(resized.train.y), np.asarray(data.train.y[:15]))
    np.testing.assert_array_equal(np.asarray(resized.test.y), np.asarray(data.test.y))


def test_observation_noise_has_the_stated_covariance(data):
    r = np.concatenate([np.asarray(s.y - s.x[..., 2:4], np.float64).reshape(-1, 2) for s in data[:3]])
    n, std = r.shape[0], NOISE_STD
    cov = np.cov(r, rowvar=False)
    assert np.all(np.abs(r.mean(0)) < 5 * std / np.sqrt(n))
    np.testing.assert_allclose(np.diag(cov), std**2, rtol=5 * np.sqrt(2 / n))
    assert abs(cov[0, 1]) < 5 * std**2 / np.sqrt(n)


def test_unstable_time_step_is_reported():
    # same compiled shapes as the fixture (burn-in 10 / (5 / 8) = 16 solver steps, as 1 / (0.5 / 8)): dt = 0.625
    with pytest.raises(ValueError, match="unstable"):
        simulate_navier_stokes(jax.random.key(0), 20, 40, **(OPTIONS | {"delta_t": 5.0, "burn_in": 10.0,
                                                                          "forcing_amplitude": 1e3}))


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"grid": 15}, "grid"),
        ({"grid": 4}, "grid"),
        ({"viscosity": -1e-3}, "viscosity"),
        ({"delta_t": 0.0}, "delta_t"),
        ({"substeps": 0}, "substeps"),
        ({"burn_in": float("nan")}, "burn_in"),
        ({"noise_std": -0.1}, "noise_std"),
        ({"forcing_amplitude": float("inf")}, "forcing_amplitude"),
        ({"particles_per_field": 0}, "particles_per_field"),
        ({"num_steps": 0}, "num_steps"),
        ({"num_sequences": 2.0}, "num_sequences"),
    ],
)
def test_bad_generator_input_is_rejected(kwargs, match):
    args = {"num_sequences": 4, "num_steps": 3, "burn_in": 0.0, "grid": 8} | kwargs
    with pytest.raises(ValueError, match=match):
        simulate_navier_stokes(jax.random.key(0), **args)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"vorticity": np.zeros((8, 9))}, "grid"),
        ({"vorticity": np.full((8, 8), np.nan)}, "vorticity"),
        ({"positions": np.zeros((3,))}, "positions"),
        ({"positions": np.array([[0.5, 1.0]])}, "positions"),
        ({"forcing": np.zeros((4, 4))}, "forcing"),
        ({"mean_flow": (1.0, 2.0, 3.0)}, "mean_flow"),
        ({"density": 0.0}, "density"),
    ],
)
def test_bad_flow_input_is_rejected(kwargs, match):
    args = {"vorticity": np.zeros((8, 8)), "positions": np.zeros((1, 2)), "num_steps": 2} | kwargs
    with pytest.raises(ValueError, match=match):
        simulate_flow(**args)


def test_bad_layout_is_rejected():
    with pytest.raises(ValueError, match="layout.validation"):
        generate_navier_stokes(jax.random.key(0), SplitLayout((2, 5), (0, 5), (1, 5)))


@pytest.mark.slow
def test_paper_size_data_set():
    from memlab.pissm.data.navier_stokes import NAVIER_STOKES_LAYOUT

    d = generate_navier_stokes(jax.random.key(0), NAVIER_STOKES_LAYOUT)
    assert sum(s.x.shape[0] for s in d[:3]) == 10_000
    for split, (n, length) in zip(d[:3], NAVIER_STOKES_LAYOUT):
        x = np.asarray(split.x)
        assert x.shape == (n, length, 5) and np.all(np.isfinite(x))
        assert x[..., 2:4].min() >= 0 and x[..., 2:4].max() < 1
