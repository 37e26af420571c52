"""The recall-predict task (Definition 3.1) and its synthetic instance of App. A.1 (the data of Kawata & Suzuki 2026).

A context is the balanced mixture nu = (1/I) sum_i delta_{v_i} (x) mu_i of I tagged content measures; the query
q = v_{i*} names one component and the target depends on nu only through mu_{i*}. App. A.1: Mercer basis e_j and
eigenvalues lambda_j = exp(-j^alpha) on [0, 1], Gaussian coefficients, the density clamped at 0 and renormalised on a
32-point grid, Y = q_1 sum_j lambda_j (Z_j^{(i*)})^2 + xi with sigma = 0.01.

Choices the paper leaves open or implicit:

- ``target="linear"``: a well-posed target L(mu) = int h dmu of the recalled measure itself (not in the paper);
- the factor q_1 for tags of dimension d_1 > 1; ``query_dependent=False`` for Theorem 6.1 case 2;
- a density that vanishes on the whole grid gives the uniform pmf (``degenerate_fraction`` counts them);
- ``check_tags`` checks what the proof uses of Assumption 5.4 (its I <= d_1 bound only with ``strict=True``).

Why the linear target, and what A.1's target leaves implicit: docs/studies/recall.md, "The task".
"""

from __future__ import annotations

import dataclasses
import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from memlab.checks import check_choice, check_int, check_real

A1_TAGS = np.array([[1.0], [-1.0]])  # App. A.1: v_1 = +-1, v_2 = -v_1
TARGETS = ("a1", "linear")


def check_tags(tags, strict: bool = False) -> np.ndarray:
    """Validate a tag system (I, d_1) against Assumption 5.4; returns it as a float array.

    Unit norm and pairwise <v_i, v_j> <= 0 are always required (they make the query-tag inner product
    separate the queried component, Lemma C.4); ``strict`` also requires I <= d_1.
    """
    tags = np.asarray(tags, dtype=float)
    if tags.ndim != 2 or tags.shape[0] < 1 or tags.shape[1] < 1:
        raise ValueError(f"tags must be an (I, d_1) array with I, d_1 >= 1; got shape {tags.shape}")
    norms = np.linalg.norm(tags, axis=1)
    if not np.allclose(norms, 1.0, atol=1e-6):
        raise ValueError(f"tags must lie on the unit sphere (Assumption 5.4); norms are {np.round(norms, 6).tolist()}")
    gram = tags @ tags.T
    off = gram[~np.eye(len(tags), dtype=bool)]
    if off.size and off.max() > 1e-9:
        i, j = np.argwhere((gram > 1e-9) & ~np.eye(len(tags), dtype=bool))[0]
        raise ValueError(f"tags {i} and {j} have inner product {gram[i, j]:.3g} > 0; Assumption 5.4 needs <= 0")
    if strict and tags.shape[0] > tags.shape[1]:
        raise ValueError(f"Assumption 5.4 needs I <= d_1; got I = {tags.shape[0]}, d_1 = {tags.shape[1]}")
    return tags


def orthogonal_tags(num_tags: int, tag_dim: int) -> np.ndarray:
    """I orthonormal tags e_1..e_I in R^{d_1} (satisfy Assumption 5.4 with I <= d_1)."""
    if not 1 <= num_tags <= tag_dim:
        raise ValueError(f"orthogonal tags need 1 <= I <= d_1; got I = {num_tags}, d_1 = {tag_dim}")
    return np.eye(tag_dim)[:num_tags]


@dataclasses.dataclass(frozen=True)
class RecallTask:
    """Sizes and constants of one recall-predict task (defaults: App. A.1 with alpha = 1)."""

    alpha: float = 1.0
    context_length: int = 5000  # T: i.i.d. context tokens per example
    num_coeffs: int = 16  # M: Mercer coordinates j = 0..M-1
    grid_size: int = 32  # points of the content grid
    noise_std: float = 0.01  # sigma of the label noise
    tags: tuple = ((1.0,), (-1.0,))  # (I, d_1); A.1 default
    query_dependent: bool = True
    target: str = "a1"  # "a1": q_1 sum_j lambda_j Z_j^2 (App. A.1); "linear": q_1 int h dmu (module doc)

    def __post_init__(self):
        check_choice("target", self.target, TARGETS)
        check_real("alpha (Assumption 5.1)", self.alpha, 0.0, open_low=True)
        for name, low in (("context_length", 1), ("num_coeffs", 2), ("grid_size", 2)):
            check_int(name, getattr(self, name), low)
        check_real("noise_std", self.noise_std, 0.0)
        check_tags(self.tags)

    @property
    def tag_array(self) -> np.ndarray:
        return np.asarray(self.tags, dtype=float)

    @property
    def grid(self) -> np.ndarray:
        """The content grid (G,) on [0, 1]."""
        return np.linspace(0.0, 1.0, self.grid_size)

    @property
    def eigenvalues(self) -> np.ndarray:
        """lambda_j = exp(-j^alpha), j = 0..M-1 (lambda_0 = 1 multiplies Z_0 = 0)."""
        return np.exp(-(np.arange(self.num_coeffs, dtype=float) ** self.alpha))

    @property
    def basis(self) -> np.ndarray:
        """e_j on the grid, (M, G): e_0 = 1, e_j = sqrt(2) sin(pi j x), exactly 0 where j x is an integer.

        Floating point gives sin(pi j) ~ 1e-16 at x = 1; there a density that is <= 0 everywhere else would keep
        a tiny positive residue and renormalise to a point mass at x = 1 instead of the uniform mass function.
        """
        j, i = np.arange(self.num_coeffs)[:, None], np.arange(self.grid_size)[None, :]
        node = (j * i) % (self.grid_size - 1) == 0  # x_i = i / (G - 1): j x_i is an integer
        return np.where(j == 0, 1.0, np.where(node, 0.0, np.sqrt(2.0) * np.sin(np.pi * j * self.grid[None, :])))


class Batch(NamedTuple):
    """n examples of a recall-predict task (leading axis n everywhere).

    context_tags (n, T, d_1), context_content (n, T): the i.i.d. context tokens X_t = (V_t, Z_t);
    query (n, d_1) = v_{i*}; queried (n,) int = i*; y (n,) noisy target; y_clean (n,) = F_*(nu, q);
    pmf (n, I, G) the content mass functions; coeffs (n, I, M) the Gaussian coefficients Z.
    """

    context_tags: Array
    context_content: Array
    query: Array
    queried: Array
    y: Array
    y_clean: Array
    pmf: Array
    coeffs: Array


def sample_coeffs(key: Array, num: int, task: RecallTask) -> Array:
    """num Gaussian coefficient vectors Z (num, M) with the constant coordinate Z_0 = 0 (App. A.1)."""
    return jax.random.normal(key, (num, task.num_coeffs)).at[:, 0].set(0.0)


def _xp(x):
    """NumPy for NumPy arrays (float64 references, ``band.py``), jax.numpy otherwise."""
    return np if isinstance(x, np.ndarray) else jnp


def _eigenvalues(task: RecallTask, eigenvalues, like) -> Array:
    """lambda_j as the dtype of ``like``: ``task.eigenvalues``, or the same numbers passed in (traced in ``sample``)."""
    return _xp(like).asarray(task.eigenvalues if eigenvalues is None else eigenvalues).astype(like.dtype)


def unnormalised_density(coeffs: Array, task: RecallTask, eigenvalues: Array | None = None) -> Array:
    """mu~ = sum_j lambda_j Z_j e_j on the grid: coeffs (..., M) -> (..., G), before the clamp.
    ``eigenvalues`` (M,) replaces ``task.eigenvalues`` (the sampler passes them as an argument). NumPy in, NumPy
    out (float64 stays float64)."""
    lam = _eigenvalues(task, eigenvalues, coeffs)
    return (coeffs * lam) @ _xp(coeffs).asarray(task.basis, coeffs.dtype)


def content_pmf(coeffs: Array, task: RecallTask, eigenvalues: Array | None = None) -> Array:
    """Clamp-and-renormalise (App. A.1): coeffs (..., M) with Z_0 ignored -> mass function (..., G)."""
    xp = _xp(coeffs)
    density = xp.maximum(unnormalised_density(coeffs, task, eigenvalues), 0.0)
    total = density.sum(-1, keepdims=True)
    uniform = xp.full_like(density, 1.0 / task.grid_size)
    return xp.where(total > 0, density / xp.where(total > 0, total, 1.0), uniform)


def linear_weights(task: RecallTask, eigenvalues: Array | None = None, like=None) -> Array:
    """h = sum_{j>=1} lambda_j e_j on the grid (G,): the linear target is L(mu) = sum_x pmf(x) h(x). float64 NumPy,
    or the array type and dtype of ``like``."""
    like = np.zeros(0) if like is None else like
    lam = _eigenvalues(task, eigenvalues, like)
    return lam[1:] @ _xp(like).asarray(task.basis[1:], like.dtype)


def target(coeffs: Array, pmf: Array, query: Array, task: RecallTask, eigenvalues: Array | None = None) -> Array:
    """F_*(nu, q) from the recalled coefficients (..., M) and mass function (..., G); query (..., d_1).

    A.1: q_1 sum_j lambda_j Z_j^2 (App. A.1); ``linear``: q_1 sum_x pmf(x) h(x) (module doc); q_1 -> 1 when the
    task is query-independent."""
    if task.target == "a1":
        value = (_eigenvalues(task, eigenvalues, coeffs) * coeffs**2).sum(-1)
    else:
        value = pmf @ linear_weights(task, eigenvalues, pmf)
    return query[..., 0] * value if task.query_dependent else value


def sample(key: Array, n: int, task: RecallTask) -> Batch:
    """n i.i.d. examples (nu, q, Y) of ``task``. Different keys give independent sets.

    Jitted per n and per task up to alpha: alpha enters only through the eigenvalues, which are passed as an
    argument, so every alpha of a sweep shares one compiled sampler (the same numbers as with constants).
    """
    n = check_int("number of examples n", n)
    return _sample(key, n, dataclasses.replace(task, alpha=1.0), task.eigenvalues)


@functools.partial(jax.jit, static_argnums=(1, 2))
def _sample(key: Array, n: int, shape: RecallTask, eigenvalues: Array) -> Batch:
    """``shape``: the task with alpha = 1 (its alpha is unused; ``eigenvalues`` carry it)."""
    return jax.vmap(lambda k: _sample_one(k, shape, eigenvalues))(jax.random.split(key, n))


def _sample_one(key: Array, task: RecallTask, eigenvalues: Array) -> Batch:
    tags = jnp.asarray(task.tag_array, jnp.float32)
    num_tags = tags.shape[0]
    k_z, k_q, k_x, k_noise = jax.random.split(key, 4)
    coeffs = sample_coeffs(k_z, num_tags, task)
    pmf = content_pmf(coeffs, task, eigenvalues)
    queried = jax.random.randint(k_q, (), 0, num_tags)
    query = tags[queried]
    context_tags, context_content = sample_context(k_x, pmf, tags, task.context_length, task)
    y_clean = target(coeffs[queried], pmf[queried], query, task, eigenvalues)
    y = y_clean + task.noise_std * jax.random.normal(k_noise, ())
    return Batch(context_tags, context_content, query, queried, y, y_clean, pmf, coeffs)


def sample_context(key: Array, pmf: Array, tags: Array, length: int, task: RecallTask) -> tuple[Array, Array]:
    """``length`` i.i.d. tokens X_t = (V_t, Z_t) ~ nu = (1/I) sum_i delta_{v_i} (x) mu_i (Def. 3.1, section 4.1);
    returns tags (T, d_1), content (T,).

    pmf (I, G) the content mass functions on ``task.grid``, tags (I, d_1). ``length`` must be static under jit.
    """
    k_comp, k_x = jax.random.split(key)
    component = jax.random.randint(k_comp, (length,), 0, tags.shape[0])  # balanced mixture
    cell = jax.random.categorical(k_x, jnp.log(pmf[component]))  # grid index drawn from mu_component
    return tags[component], jnp.asarray(task.grid, jnp.float32)[cell]


def degenerate_fraction(key: Array, task: RecallTask, num: int = 100_000) -> float:
    """Fraction of content measures whose clamped density is zero on the whole grid (then taken uniform)."""
    density = unnormalised_density(sample_coeffs(key, num, task), task)
    return float(jnp.mean(jnp.all(density <= 0, axis=-1)))


def query_factor_moments(task: RecallTask) -> tuple[float, float]:
    """(E[g], E[g^2]) of the query factor g = q_1 (query-dependent) or 1 over a uniform i*."""
    g = task.tag_array[:, 0] if task.query_dependent else np.ones(1)
    return float(g.mean()), float((g**2).mean())


def sample_coeffs64(num: int, task: RecallTask, seed: int) -> np.ndarray:
    """``num`` float64 coefficient vectors Z (num, M), Z_0 = 0, from NumPy generator ``seed`` (the references)."""
    Z = np.random.default_rng(seed).standard_normal((check_int("num_draws", num), task.num_coeffs))
    Z[:, 0] = 0.0
    return Z


def scale_floor_mse(task: RecallTask, num_draws: int = 1_000_000, seed: int = 0) -> float:
    """A lower bound on the risk of ANY predictor of Y from the query and the exact recalled mass function.

    A.1 target: the mass function is clamp-and-renormalise of sum_j lambda_j Z_j e_j, unchanged when Z is scaled by
    c > 0, so it is a function of the direction u = Z / |Z| alone. For Z ~ N(0, I_{M-1}), |Z|^2 ~ chi^2_{M-1} is
    independent of u and S = |Z|^2 s(u), s(u) = sum_j lambda_j u_j^2, so the Bayes risk given (u, q) is
    E[g^2] Var(chi^2_{M-1}) E[s(u)^2] + sigma^2 = E[g^2] 2 (M-1) E[s(u)^2] + sigma^2, with E[s(u)^2] by float64
    Monte Carlo (``num_draws`` directions, NumPy generator ``seed``). Knowing less than u (a clamped, gridded,
    sampled measure) can only raise the risk. g = q_1 (query-dependent) or 1, as in ``baseline_mse``.

    ``linear`` target: Y - xi is a function of the measure, so the floor is sigma^2, attained.
    """
    check_int("num_draws", num_draws)
    if task.target == "linear":
        return task.noise_std**2
    k = task.num_coeffs - 1
    Z2 = np.random.default_rng(seed).standard_normal((num_draws, k)) ** 2
    s = (Z2 / Z2.sum(1, keepdims=True)) @ task.eigenvalues[1:]
    return float(query_factor_moments(task)[1] * 2 * k * np.mean(s**2) + task.noise_std**2)


def value_moments(task: RecallTask, num_draws: int = 1_000_000, seed: int = 0) -> tuple[float, float]:
    """(E[F], Var(F)) of the recalled value F, Y = g(q) F + xi.

    A.1: F = S = sum_{j>=1} lambda_j Z_j^2, exact chi-square moments (sum_j lambda_j, 2 sum_j lambda_j^2).
    ``linear``: F = L(mu), through the clamp no closed form: float64 Monte Carlo over ``num_draws`` measures
    (NumPy generator ``seed``); its relative standard error is about 1 / sqrt(num_draws). Cached per content law.
    """
    return _value_moments(dataclasses.replace(task, context_length=1, noise_std=0.0, tags=((1.0,),)), num_draws, seed)


@functools.cache
def _value_moments(task: RecallTask, num_draws: int, seed: int) -> tuple[float, float]:
    lam = task.eigenvalues[1:]
    if task.target == "a1":
        return float(lam.sum()), float(2.0 * (lam**2).sum())
    values = content_pmf(sample_coeffs64(num_draws, task, seed), task) @ linear_weights(task)
    return float(values.mean()), float(values.var())


def baseline_predictions(batch: Batch, task: RecallTask) -> dict[str, Array]:
    """The two reference predictors of ``baseline_mse`` on the examples of ``batch``, (n,) each: ``mean`` = E[Y] and
    ``tag_only`` = E[Y | q] = g(q) E[F], g(q) = q_1 (query-dependent) or 1."""
    mean_f = value_moments(task)[0]
    gq = batch.query[:, 0] if task.query_dependent else jnp.ones_like(batch.y)
    return {"mean": jnp.full_like(batch.y, query_factor_moments(task)[0] * mean_f), "tag_only": gq * mean_f}


def baseline_mse(task: RecallTask) -> dict[str, float]:
    """Risks of two reference predictors (label noise included), from the distribution of the recalled value F.

    With Y = g F + xi, g = q_1 (query-dependent) or 1, F the recalled value (``value_moments``):

    * ``mean``: predict E[Y] (a constant); risk Var(g F) + sigma^2. With the A.1 tags E[Y] = 0.
    * ``tag_only``: predict E[Y | q] = g E[F], the best a model can do from the query alone, without
      recalling the content; risk E[g^2] Var(F) + sigma^2.

    Exact for the A.1 target (chi-square moments), float64 Monte Carlo for ``linear``; i* is uniform.
    """
    mean_f, var_f = value_moments(task)
    mean_g, mean_g2 = query_factor_moments(task)
    noise = task.noise_std**2
    mean = mean_g2 * (var_f + mean_f**2) - (mean_g * mean_f) ** 2 + noise
    return {"mean": float(mean), "tag_only": float(mean_g2 * var_f + noise)}
