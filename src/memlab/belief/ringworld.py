"""The RingWorld POMDP of section 6.2 / App. E.2.1 as a functional (gymnax-style) JAX environment: backbones
eq. (198) and their diagonalisation eq. (197) / (199), transitions eq. (193)-(194), observations eq. (195), reward
eq. (196); the fully informed DP optimum (the ceiling of Fig. 3) and the random-policy return (the floor).

States 0..11 are the paper's states 1..12; actions 0..3 are CW1, CW2, CCW1, CCW2; T and E in the column convention
of ``belief/hmm.py``. Choices the paper leaves open:

- every action slips and overshoots around its target as CW1 does (the paper prints T for CW1 only);
- the four beacons sit at paper states 1, 4, 7, 10;
- an episode's first observation is NULL (all zeros), so a memory reproduces ``lof_reference`` / ``alf_filter``.

The states, the auto-reset API and the references in full: docs/studies/belief.md, "RingWorld".
"""

from __future__ import annotations

import dataclasses
import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from memlab.belief.deep_alf import circulant_eigensystem
from memlab.belief.filters import lof_step
from memlab.belief.hmm import ControlledHMM
from memlab.checks import check_indices, check_int, check_real, is_concrete
from memlab.logspace import safe_log

NUM_STATES = 12
ACTION_NAMES = ("CW1", "CW2", "CCW1", "CCW2")
ACTION_SHIFTS = (1, 2, -1, -2)  # intended displacement of each action
BEACON_STATES = (0, 3, 6, 9)  # paper states 1, 4, 7, 10
GOAL_STATES = (1, 2)  # paper states 2, 3
TRAP_STATES = (5, 10, 11)  # paper states 6, 11, 12


def _shift(d: int) -> np.ndarray:
    """Permutation matrix (N, N) with column j holding e_{(j + d) mod N}."""
    return np.roll(np.eye(NUM_STATES), d, axis=0)


def ring_permutations() -> np.ndarray:
    """Permutation backbones P(a), shape (A, N, N) = (4, 12, 12), eq. (194) and (198)."""
    P_cw1 = _shift(1)  # p_ij(CW1) = 1 iff i = (j mod N) + 1, eq. (194)
    return np.stack([P_cw1, P_cw1 @ P_cw1, P_cw1.T, P_cw1.T @ P_cw1.T])  # eq. (198)


def ring_transitions(epsilon: float = 0.05) -> np.ndarray:
    """T(a) = (1 - 2 eps) P(a) + eps P(a) (P(CW1) + P(CCW1)), shape (4, 12, 12); eq. (193)-(194) for CW1."""
    eps = check_real("epsilon", epsilon, 0.0, 0.5)
    P = ring_permutations()
    return (1.0 - 2.0 * eps) * P + eps * P @ (P[0] + P[2])


def beacon_emissions() -> np.ndarray:
    """E[i, j] = P(y = u_i | x = j) proportional to exp(cos(theta_j - xi_i)), shape (4, 12), eq. (195)."""
    theta = 2.0 * np.pi * np.arange(NUM_STATES) / NUM_STATES
    xi = theta[list(BEACON_STATES)]
    weights = np.exp(np.cos(theta[None, :] - xi[:, None]))
    return weights / weights.sum(axis=0, keepdims=True)


def ring_rewards(episode_length: int) -> np.ndarray:
    """r(x) = (1{goal} - 1{trap}) / K for the entered state x, shape (12,), eq. (196)."""
    K = check_int("episode_length", episode_length)
    r = np.zeros(NUM_STATES)
    r[list(GOAL_STATES)] = 1.0
    r[list(TRAP_STATES)] = -1.0
    return r / K


def ring_diagonalisation() -> tuple[np.ndarray, np.ndarray]:
    """V (N, N) and the diagonals Lambda(a) (A, N) with P(a) = V diag(Lambda(a)) V^{-1}, eq. (197)-(199).

    V[j, m] = exp(2 pi i j m / N) / sqrt(N) is the unitary inverse-DFT matrix (Gray 2006, Thm 3.1: a circulant
    matrix is U* Psi U with U the DFT matrix), so V^{-1} = V^H. Lambda(CW1)[m] = exp(-2 pi i m / N): N points
    uniformly spaced on the unit circle; Lambda(CW2) = Lambda(CW1)^2, Lambda(CCW1) = Lambda(CW1)^{-1},
    Lambda(CCW2) = Lambda(CW1)^{-2}, eq. (199). complex128.
    """
    return circulant_eigensystem(ring_permutations())


class RingWorldParams(eqx.Module):
    """What the environment samples from: ``T`` (4, 12, 12), ``E`` (4, 12), ``pi0`` (12,), ``P`` (4, 12, 12)
    permutation backbones, ``reward`` (12,) r(x) of the entered state."""

    T: Array
    E: Array
    pi0: Array
    P: Array
    reward: Array

    @property
    def hmm(self) -> ControlledHMM:
        """The action-controlled HMM (T, E, pi0) of eq. (3)-(4), for the filters (``memlab.belief.lof``) and
        ``hmm.sample``."""
        return ControlledHMM(self.T, self.E, self.pi0)


class RingWorldState(eqx.Module):
    """``x`` () int32 true state, ``k`` () int32 steps taken in this episode, ``episode_return`` () float."""

    x: Array
    k: Array
    episode_return: Array


@dataclasses.dataclass(frozen=True)
class RingWorld:
    """Static configuration: ``epsilon`` in [0, 1/2], ``episode_length`` K >= 1, ``fully_observed``."""

    epsilon: float = 0.05
    episode_length: int = 100
    fully_observed: bool = False

    def __post_init__(self):
        check_real("epsilon", self.epsilon, 0.0, 0.5)
        check_int("episode_length", self.episode_length)
        if not isinstance(self.fully_observed, bool):
            raise ValueError(f"fully_observed must be a bool, got {self.fully_observed!r}")

    @property
    def num_actions(self) -> int:
        return len(ACTION_NAMES)

    @property
    def obs_size(self) -> int:
        return NUM_STATES if self.fully_observed else len(BEACON_STATES)

    @property
    def default_params(self) -> RingWorldParams:
        arrays = (ring_transitions(self.epsilon), beacon_emissions(), np.full(NUM_STATES, 1.0 / NUM_STATES),
                  ring_permutations(), ring_rewards(self.episode_length))
        return RingWorldParams(*(jnp.asarray(a) for a in arrays))

    def reset(self, key: Array, params: RingWorldParams) -> tuple[Array, RingWorldState]:
        """x_0 ~ pi0, k = 0; the observation is null (zeros (obs_size,) float32)."""
        return self._reset(key, params)

    def step(self, key: Array, state: RingWorldState, action, params: RingWorldParams):
        """One step with action a_{k} () int in [0, 4): (obs, state, reward, terminated, truncated, info).

        ``info``: ``state`` the true state of the returned obs (x_0 of a new episode after a reset),
        ``next_state`` the state entered by this step, ``next_obs`` its observation (before any reset),
        ``episode_return`` the return so far including this step (the whole return when terminated).
        """
        if np.ndim(action) != 0:
            raise ValueError(f"action must be a scalar (one environment; vmap for batches), got shape "
                             f"{np.shape(action)}")
        if is_concrete(action):
            check_indices("action", action, self.num_actions)
        return self._step(key, state, jnp.asarray(action, jnp.int32), params)

    @functools.partial(jax.jit, static_argnums=0)
    def _reset(self, key, params):
        x0 = jax.random.categorical(key, safe_log(params.pi0)).astype(jnp.int32)
        state = RingWorldState(x0, jnp.int32(0), jnp.zeros((), params.reward.dtype))
        return jnp.zeros(self.obs_size, jnp.float32), state

    @functools.partial(jax.jit, static_argnums=0)
    def _step(self, key, state, action, params):
        key_x, key_y, key_reset = jax.random.split(key, 3)
        x_next = jax.random.categorical(key_x, safe_log(params.T[action][:, state.x])).astype(jnp.int32)
        y = jax.random.categorical(key_y, safe_log(params.E[:, x_next])).astype(jnp.int32)
        obs_next = jax.nn.one_hot(x_next if self.fully_observed else y, self.obs_size, dtype=jnp.float32)
        reward = params.reward[x_next]  # eq. (196): the entered state
        state_next = RingWorldState(x_next, state.k + 1, state.episode_return + reward)
        terminated = state_next.k >= self.episode_length
        obs_reset, state_reset = self._reset(key_reset, params)
        obs, state_out = jax.tree.map(lambda fresh, cont: jnp.where(terminated, fresh, cont),
                                      (obs_reset, state_reset), (obs_next, state_next))
        info = {"state": state_out.x, "next_state": x_next, "next_obs": obs_next,
                "episode_return": state_next.episode_return}
        return obs, state_out, reward, terminated, jnp.zeros((), bool), info


def random_policy(key: Array, state: RingWorldState) -> Array:
    """Uniformly random actions (the floor of the return figures)."""
    return jax.random.randint(key, (), 0, len(ACTION_NAMES))


def rollout(env: RingWorld, params: RingWorldParams, key: Array, num_steps: int, policy=random_policy) -> dict:
    """One environment for ``num_steps`` steps under ``policy(key, state) -> action`` (which may read the true
    state): per step the observation seen (``obs``), the true state ``x`` and step ``k`` behind it, the ``action``
    taken and what ``step`` returned (``reward``, ``terminated``, ``truncated``, ``info_<name>``); arrays
    (num_steps, ...). Jittable and vmappable over keys."""
    key_reset, key_run = jax.random.split(key)

    def body(carry, key):
        obs, state = carry
        key_action, key_step = jax.random.split(key)
        action = policy(key_action, state)
        obs_next, state_next, reward, terminated, truncated, info = env.step(key_step, state, action, params)
        out = dict(obs=obs, x=state.x, k=state.k, action=action, reward=reward, terminated=terminated,
                   truncated=truncated, **{f"info_{name}": value for name, value in info.items()})
        return (obs_next, state_next), out

    return jax.lax.scan(body, env.reset(key_reset, params), jax.random.split(key_run, num_steps))[1]


def episode_inputs(obs, actions, starts, episode: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(ys, actions) of one episode of a single environment's rollout, the inputs of ``lof`` / ``alf_filter``.

    ``obs`` (L, O) the observations the agent saw, ``actions`` (L,) the action it took after each, ``starts`` (L,)
    bool, True where obs is an episode's null first observation. For the ``episode``-th start t0 and the next start
    t1 (or L): ys[k-1] = index of obs[t0 + k] = y_k and actions[k-1] = a_{k-1} = actions[t0 + k - 1] for
    k = 1..t1-t0-1 (y_K itself is never shown to the agent: the environment resets after step K).
    Beacon observations give beacon indices, fully observed ones state indices. Concrete arrays only.
    """
    obs, actions, starts = np.asarray(obs), np.asarray(actions), np.asarray(starts, bool)
    if obs.ndim != 2 or actions.shape != obs.shape[:1] or starts.shape != obs.shape[:1]:
        raise ValueError(f"need obs (L, O), actions (L,), starts (L,); got {obs.shape}, {actions.shape}, "
                         f"{starts.shape}")
    first = np.flatnonzero(starts)
    episode = check_int("episode", episode, low=0)
    if episode >= len(first):
        raise ValueError(f"episode {episode} does not start in this rollout ({len(first)} episode starts)")
    t0 = first[episode]
    t1 = first[episode + 1] if episode + 1 < len(first) else len(obs)
    seen = obs[t0 + 1:t1]
    if np.any(obs[t0] != 0) or np.any(np.sort(seen, axis=-1)[:, :-1] != 0) or np.any(seen.max(axis=-1) != 1):
        raise ValueError("obs must be null (zeros) at an episode start and one-hot elsewhere")
    return seen.argmax(axis=-1).astype(np.int32), actions[t0:t1 - 1].astype(np.int32)


def _backward(env: RingWorld, params: RingWorldParams, combine) -> tuple[np.ndarray, np.ndarray]:
    """V_t(x) for t = 0..K (K+1, N) and Q_t(a, x) (K, A, N): V_K = 0, V_t = combine_a Q_t,
    Q_t(a, x) = sum_x' T(a)[x', x] (r(x') + V_{t+1}(x')). float64."""
    T = np.asarray(params.T, np.float64)
    r = np.asarray(params.reward, np.float64)
    K = env.episode_length
    V = np.zeros((K + 1, T.shape[-1]))
    Q = np.zeros((K, *T.shape[:2]))
    for t in range(K - 1, -1, -1):
        Q[t] = np.einsum("aij,i->aj", T, r + V[t + 1])
        V[t] = combine(Q[t])
    return V, Q


def optimal_policy(env: RingWorld, params: RingWorldParams) -> tuple[np.ndarray, np.ndarray]:
    """Fully informed finite-horizon DP: values V_t(x) (K+1, N) and greedy actions (K, N) int32, indexed by the
    steps already taken t = state.k and the true state x = state.x."""
    V, Q = _backward(env, params, lambda q: q.max(axis=0))
    return V, Q.argmax(axis=1).astype(np.int32)


def optimal_return(env: RingWorld, params: RingWorldParams) -> float:
    """Expected return of the fully informed optimal policy, pi0 . V_0 (the ceiling of the return figures)."""
    V, _ = optimal_policy(env, params)
    return float(np.asarray(params.pi0, np.float64) @ V[0])


def random_return(env: RingWorld, params: RingWorldParams) -> float:
    """Expected return under uniformly random actions (the floor)."""
    V, _ = _backward(env, params, lambda q: q.mean(axis=0))
    return float(np.asarray(params.pi0, np.float64) @ V[0])



def qmdp_returns(env: RingWorld, params: RingWorldParams, key: Array, num_episodes: int) -> Array:
    """Episode returns (num_episodes,) of the QMDP policy on the exact belief: a_k = argmax_a sum_x alpha_k(x)
    Q_k(a, x), with alpha_k the optimal filter's belief (eq. 6: the LOF eq. 7, normalised; alpha_0 = pi0) and Q_k
    the fully informed DP values. It is a policy of the POMDP, so its return is a lower bound on the POMDP optimum
    (the fully informed optimum is an upper bound): a reference for what a memory that tracks the belief can earn.
    """
    if env.fully_observed:
        raise ValueError("qmdp_returns needs the beacon observations (fully_observed=False)")
    check_int("num_episodes", num_episodes)
    _, Q = _backward(env, params, lambda q: q.max(axis=0))
    Q = jnp.asarray(Q, params.T.dtype)  # (K, A, N)
    log_E = safe_log(params.E)

    def episode(key):
        key_reset, key_run = jax.random.split(key)
        _, state = env.reset(key_reset, params)

        def step(carry, inputs):
            state, w, total = carry
            k, key = inputs
            action = jnp.argmax(Q[k] @ jax.nn.softmax(w)).astype(jnp.int32)
            _, state, reward, _, _, info = env.step(key, state, action, params)
            y = jnp.argmax(info["next_obs"])  # y_{k+1}, before the auto-reset at the episode's end
            w = lof_step(params.T[action], log_E, w, y, normalize=True)  # eq. (6)-(7)
            return (state, w, total + reward), None

        steps = (jnp.arange(env.episode_length), jax.random.split(key_run, env.episode_length))
        init = (state, safe_log(params.pi0), jnp.zeros((), params.reward.dtype))
        return jax.lax.scan(step, init, steps)[0][2]

    return jax.jit(jax.vmap(episode))(jax.random.split(key, num_episodes))
