"""RingWorld PPO speed on the CPU (issue 13, "Speed"): Table 1 settings (64 environments, unroll 1024, 30 epochs x
8 minibatches, actor and critic [128, 128]), float32.

OTHER JOBS MAY SHARE THE MACHINE (2 cores). Every timed row records what else ran while it was timed
(``timing.Load``, as every side-by-side row does: ``load1_before``, ``load1_after``, ``other_cpus``, and
``unreliable`` when others used the CPU), and the ``load avg`` rows give the 1/5/15-minute averages at the start and
the end: at a load of ~4 on 2 cores a timing is up to about twice what an idle machine would give.

Rows (``seconds`` is one call of what the row times):
* ``matmul peak``: best of 5 jitted float32 ``jnp.dot`` of 2048 x 2048 matrices (2 * 2048^3 FLOPs), measured at the
  start and at the end; the better of the two is the machine's attainable FLOP/s, the denominator of ``pct_peak``.
* ``env rollout``: ``vmap`` over 64 environments of ``ringworld.rollout`` (``lax.scan`` of 1024 steps, random
  actions), jitted, best of 3: the environment alone; ``steps_s`` env-steps per second.
* ``ppo update`` per memory: ``jax.jit(ppo.update)`` compiled ahead of time (``compile_s``: lowering + XLA
  compilation), called once as a warm-up and once timed (``seconds``; when the warm-up already takes more than
  ``SLOW_UPDATE_S`` -- S5-256 -- that call, which runs after compilation, is the timing). ``rollout_s``: the PPO
  rollout alone (``memlab.rl.rollout``: memory step + actor/critic + environment, 64 x 1024 steps, jitted, no
  optimisation); the rest of ``seconds`` is the 30 x 8 minibatch gradient steps. ``steps_s`` = 64 * 1024 / seconds;
  ``min_30M`` = 457 updates x seconds / 60 (one paper cell of 30 M steps). ``target`` (issue 13): the fixed
  filters >= 12,000 env-steps/s (the issue's "<= 45 min per 30 M steps" is its rounding: 12,000/s is 41.7 min),
  Deep ALF and S5-12 <= 60 min per 30 M steps; S5-256 has none. lof-softmax (~ lof) is skipped for time.
* FLOPs: XLA's ``cost_analysis`` of the compiled update (``gflop_xla1``) counts the body of every ``lax.scan`` (a
  while loop in HLO) ONCE, so it is about one rollout step plus one minibatch gradient, not the update. ``gflop``
  puts the trip counts back: XLA's count of one rollout step x 1024 + XLA's count of one minibatch's
  ``value_and_grad(ppo_loss)`` x 30 x 8 (Adam and GAE, O(parameters) and O(steps), are left out). The minibatch
  loss of a trainable memory still holds its sequential diagonal scan over the 1024 steps (Deep ALF's
  ``linear_scan``; S5 as built by ``agents.make_memory``, method "sequential"), whose body -- complex
  multiply-adds of width N = 12 or P/2 = 6 / 128, ~0.1 % of the matrix products -- is counted once.
  ``gflop_mlp`` is the hand count for the actor and critic alone (2 FLOPs per multiply-add, backward = 2 x
  forward) as a check. ``gflop_s`` = gflop / seconds, ``pct_peak`` its share of the matmul peak.
"""

from __future__ import annotations

import os
import time

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from timing import Load, timed  # benchmarks/timing.py (run.py puts benchmarks/ on sys.path)

from memlab.belief.ringworld import rollout as env_rollout
from memlab.belief.runs import make_memory, ringworld_for
from memlab.rl import PPOConfig, make_train, ppo_loss
from memlab.rl.ppo import Batch, trainable_spec
from memlab.rl.rollout import rollout as ppo_rollout

MEMORIES = ("lof", "alf", "alf-softmax", "s5-12", "deep-alf-all-random", "s5-256")  # lof-softmax ~ lof: skipped
# the targets: env-steps/s for the fixed filters (12,000/s is 41.7 min per 30 M steps; the issue rounds it
# to "<= 45 min"), minutes per 30 M steps for the learned memories
TARGET_STEPS_PER_S = {"lof": 12_000, "lof-softmax": 12_000, "alf": 12_000, "alf-softmax": 12_000}
TARGET_MIN = {"s5-12": 60.0, "deep-alf-all-random": 60.0}
PAPER_UPDATES = PPOConfig().num_updates  # 457 updates = 30 M steps
SLOW_UPDATE_S = 30.0


def load_row(when: str) -> dict:
    one, five, fifteen = os.getloadavg()
    return {"case": f"load avg ({when})", "memory": f"1m {one:.2f} 5m {five:.2f} 15m {fifteen:.2f}"}


def flops_of(compiled) -> float:
    """XLA's FLOP count of a compiled computation (loop bodies counted once)."""
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, list) else cost
    return float(cost.get("flops", np.nan))


def matmul_peak_row(n: int = 2048, repeats: int = 5) -> dict:
    a, b = jax.random.normal(jax.random.key(0), (2, n, n), jnp.float32)
    dot = jax.jit(jnp.dot)
    load = Load.start()
    seconds = timed(lambda: dot(a, b), repeats)
    return {"case": "matmul peak", "memory": f"{n}x{n} f32", "seconds": seconds, "gflop_s": 2 * n**3 / seconds / 1e9,
            **load.stop()}


def env_rollout_row(num_envs: int = 64, num_steps: int = 1024) -> dict:
    env = ringworld_for("lof")
    params = env.default_params
    run = jax.jit(jax.vmap(lambda key: env_rollout(env, params, key, num_steps)))
    keys = jax.random.split(jax.random.key(1), num_envs)
    load = Load.start()
    seconds = timed(lambda: run(keys), repeats=3)
    return {"case": "env rollout", "memory": "(random)", "seconds": seconds,
            "steps_s": round(num_envs * num_steps / seconds), **load.stop()}


def mlp_flops(config: PPOConfig, num_features: int, num_actions: int) -> float:
    """Hand count of the actor + critic FLOPs of one update: forward in the rollout, forward + backward (3 x
    forward) in every epoch."""
    def macs(sizes):
        return sum(a * b for a, b in zip(sizes[:-1], sizes[1:]))

    forward = 2 * (macs((num_features, *config.actor_layers, num_actions)) +
                   macs((num_features, *config.critic_layers, 1)))
    samples = config.num_envs * config.unroll
    return forward * samples * (1 + 3 * config.epochs)


def corrected_flops(config: PPOConfig, env, params, state) -> float:
    """FLOPs of one update with the loop trip counts put back: XLA's count of one rollout step x unroll + XLA's
    count of one minibatch gradient x epochs x minibatches (a trainable memory's sequential scan inside the loss
    keeps its elementwise body counted once: see the module docstring)."""
    agent = state.agent
    step = jax.jit(lambda actors, key: ppo_rollout(agent, env, params, actors, key, 1))
    step_flops = flops_of(step.lower(state.actors, jax.random.key(2)).compile())
    _, transitions, _, _ = jax.jit(lambda actors, key: ppo_rollout(agent, env, params, actors, key, config.unroll))(
        state.actors, jax.random.key(3))
    n = config.envs_per_minibatch
    env_major = jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1)[:n], transitions)
    zeros = jnp.zeros((n, config.unroll), jnp.float32)
    memory_state = jax.tree.map(lambda x: x[:n], state.actors.memory_state)
    minibatch = Batch(memory_state, env_major, zeros + 1.0, zeros)
    trained, static = eqx.partition(agent, trainable_spec(agent))
    grad = jax.jit(jax.value_and_grad(lambda p, b: ppo_loss(p, static, b, config), has_aux=True))
    compiled = grad.lower(trained, minibatch).compile()
    return step_flops * config.unroll + flops_of(compiled) * config.epochs * config.minibatches


def update_row(memory: str, config: PPOConfig) -> dict:
    env = ringworld_for(memory)
    params = env.default_params
    ppo = make_train(config, env, params, lambda k: make_memory(memory, k, env, params))
    state = jax.block_until_ready(jax.jit(ppo.init)(jax.random.key(0)))
    start = time.perf_counter()
    compiled = jax.jit(ppo.update).lower(state).compile()
    compile_s = time.perf_counter() - start
    load = Load.start()
    start = time.perf_counter()
    jax.block_until_ready(compiled(state))
    update_s = time.perf_counter() - start
    if update_s < SLOW_UPDATE_S:
        start = time.perf_counter()
        jax.block_until_ready(compiled(state))
        update_s = time.perf_counter() - start
    row_load = load.stop()
    rollout = jax.jit(lambda s, key: ppo_rollout(s.agent, env, params, s.actors, key, config.unroll))
    rollout_s = timed(lambda: rollout(state, jax.random.key(4)))
    gflop = corrected_flops(config, env, params, state)
    minutes = PAPER_UPDATES * update_s / 60
    steps = config.num_envs * config.unroll
    target = "-"
    if memory in TARGET_STEPS_PER_S:
        met = steps / update_s >= TARGET_STEPS_PER_S[memory]
        target = f">={TARGET_STEPS_PER_S[memory]}/s: {'met' if met else 'MISSED'}"
    elif memory in TARGET_MIN:
        met = minutes <= TARGET_MIN[memory]
        target = f"<={TARGET_MIN[memory]:g} min: {'met' if met else 'MISSED'}"
    return {"case": "ppo update", "memory": memory, "seconds": update_s, "steps_s": round(steps / update_s),
            "min_30M": minutes, "target": target,
            "compile_s": compile_s, "rollout_s": rollout_s, "gflop": gflop / 1e9,
            "gflop_xla1": flops_of(compiled) / 1e9,
            "gflop_mlp": mlp_flops(config, state.agent.memory.num_features, env.num_actions) / 1e9,
            "gflop_s": gflop / 1e9 / update_s, **row_load}


def run() -> list[dict]:
    rows = [load_row("start"), matmul_peak_row(), env_rollout_row()]
    config = PPOConfig()
    rows += [update_row(memory, config) for memory in MEMORIES]
    rows += [matmul_peak_row(), load_row("end")]
    peak = max(row["gflop_s"] for row in rows if row["case"] == "matmul peak")  # the better of start and end
    for row in rows:
        if row["case"] == "ppo update":
            row["pct_peak"] = 100 * row["gflop_s"] / peak
    return rows


if __name__ == "__main__":
    for r in run():
        print(r)
