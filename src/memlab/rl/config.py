"""PPO hyper-parameters: the paper's Table 1 (App. E.2.1) as the defaults.

What Table 1 leaves open follows PureJaxRL (Lu et al. 2023, whose PPO the paper says it follows): Adam's
epsilon 1e-5, advantages normalised per minibatch, the value loss clipped around the rollout's values
(``0.5 * max((V - R)^2, (V_clip - R)^2)``, with ``clip_value_loss=False`` the plain ``0.5 * (V - R)^2``).
The number of updates is ``total_steps // (num_envs * unroll)`` (30e6 // 65536 = 457 with the defaults).
"""

from __future__ import annotations

import dataclasses

from memlab.checks import check_int, check_real

__all__ = ["PPOConfig"]


@dataclasses.dataclass(frozen=True)
class PPOConfig:
    learning_rate: float = 5e-5  # Adam, constant (Table 1: no annealing)
    num_envs: int = 64
    unroll: int = 1024  # environment steps per environment and update; BPTT runs over all of them
    total_steps: int = 30_000_000
    epochs: int = 30
    minibatches: int = 8  # taken along the environment axis: num_envs // minibatches whole unrolls each
    gamma: float = 0.99
    gae_lambda: float = 1.0
    clip_eps: float = 0.2
    entropy_coef: float = 0.0
    value_coef: float = 1.0
    max_grad_norm: float = 0.5
    actor_layers: tuple[int, ...] = (128, 128)  # hidden widths, LeakyReLU
    critic_layers: tuple[int, ...] = (128, 128)
    adam_eps: float = 1e-5  # PureJaxRL's
    clip_value_loss: bool = True  # PureJaxRL's clipped value loss

    def __post_init__(self):
        self.validate()

    def validate(self) -> None:
        """ValueError naming the first bad field."""
        for name in ("num_envs", "unroll", "total_steps", "epochs", "minibatches"):
            check_int(name, getattr(self, name))
        if self.num_envs % self.minibatches:
            raise ValueError(f"num_envs ({self.num_envs}) must be a multiple of minibatches ({self.minibatches}): "
                             "minibatches are whole environments")
        if self.total_steps < self.num_envs * self.unroll:
            raise ValueError(f"total_steps ({self.total_steps}) is less than one update's num_envs * unroll "
                             f"({self.num_envs * self.unroll})")
        for name in ("learning_rate", "clip_eps", "max_grad_norm", "adam_eps"):
            check_real(name, getattr(self, name), 0.0, open_low=True)
        for name in ("gamma", "gae_lambda"):
            check_real(name, getattr(self, name), 0.0, 1.0)
        for name in ("entropy_coef", "value_coef"):
            check_real(name, getattr(self, name), 0.0)
        for name in ("actor_layers", "critic_layers"):
            layers = getattr(self, name)
            if not isinstance(layers, tuple) or not layers:
                raise ValueError(f"{name} must be a non-empty tuple of widths, got {layers!r}")
            for width in layers:
                check_int(f"{name} width", width)
        if not isinstance(self.clip_value_loss, bool):
            raise ValueError(f"clip_value_loss must be a bool, got {self.clip_value_loss!r}")

    @property
    def num_updates(self) -> int:
        """PPO updates in the run: ``total_steps // (num_envs * unroll)``."""
        return self.total_steps // (self.num_envs * self.unroll)

    @property
    def envs_per_minibatch(self) -> int:
        return self.num_envs // self.minibatches
