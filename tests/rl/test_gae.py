"""GAE with the done flag aligned to the transition, against numbers worked out by hand (below, in comments)."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from memlab.rl import gae

# One unroll of L = 4 steps, gamma = 0.5, last_value V_4 = 3. Three environments (columns):
#   env 0: the episode ends at transition 1 (done_1), so steps 0-1 and 2-3 belong to different episodes;
#   env 1: no done (bootstraps from V_4 through the whole unroll);
#   env 2: done at the last transition (no bootstrap from V_4).
REWARDS = [1.0, 2.0, 3.0, 4.0]
VALUES = [0.5, 1.0, 1.5, 2.0]
DONES = np.array([[0, 0, 0], [1, 0, 0], [0, 0, 0], [0, 0, 1]], bool)
GAMMA, LAST_VALUE = 0.5, 3.0

# TD errors delta_t = r_t + 0.5 (1 - d_t) V_{t+1} - V_t:
#   env 0: d0 = 1 + .5*1.0 - .5 = 1.0   d1 = 2 + 0 - 1.0 = 1.0    d2 = 3 + .5*2.0 - 1.5 = 2.5   d3 = 4 + .5*3 - 2 = 3.5
#   env 1: d0 = 1.0                     d1 = 2 + .5*1.5 - 1 = 1.75  d2 = 2.5                     d3 = 3.5
#   env 2: d0 = 1.0                     d1 = 1.75                  d2 = 2.5                     d3 = 4 + 0 - 2 = 2.0
# lambda = 1: A_t = delta_t + 0.5 (1 - d_t) A_{t+1}, i.e. the discounted return to the episode's end (or to the
# bootstrap) minus V_t. env 0: A3 = 3.5, A2 = 2.5 + .5*3.5 = 4.25, A1 = 1.0 (cut), A0 = 1 + .5*1 = 1.5;
# check A0 = (1 + .5*2) - .5 = 1.5 and A2 = (3 + .5*4 + .25*3) - 1.5 = 4.25.
# env 1: A3 = 3.5, A2 = 4.25, A1 = 1.75 + .5*4.25 = 3.875, A0 = 1 + .5*3.875 = 2.9375
#        (= 1 + .5*2 + .25*3 + .125*4 + .0625*3 - .5). env 2: A3 = 2, A2 = 2.5 + 1 = 3.5, A1 = 1.75 + 1.75 = 3.5,
#        A0 = 1 + 1.75 = 2.75 (= 1 + .5*2 + .25*3 + .125*4 - .5).
ADV_LAMBDA_1 = [[1.5, 2.9375, 2.75], [1.0, 3.875, 3.5], [4.25, 4.25, 3.5], [3.5, 3.5, 2.0]]
# lambda = 0.5 (gamma * lambda = 0.25): env 0: A3 = 3.5, A2 = 2.5 + .25*3.5 = 3.375, A1 = 1.0, A0 = 1 + .25 = 1.25;
# env 1: A3 = 3.5, A2 = 3.375, A1 = 1.75 + .25*3.375 = 2.59375, A0 = 1 + .25*2.59375 = 1.6484375;
# env 2: A3 = 2.0, A2 = 2.5 + .5 = 3.0, A1 = 1.75 + .75 = 2.5, A0 = 1 + .625 = 1.625.
ADV_LAMBDA_HALF = [[1.25, 1.6484375, 1.625], [1.0, 2.59375, 2.5], [3.375, 3.375, 3.0], [3.5, 3.5, 2.0]]


@pytest.mark.parametrize("lam, expected", [(1.0, ADV_LAMBDA_1), (0.5, ADV_LAMBDA_HALF)])
def test_gae_by_hand(lam, expected):
    rewards = np.tile(np.array(REWARDS, np.float32)[:, None], (1, 3))
    values = np.tile(np.array(VALUES, np.float32)[:, None], (1, 3))
    advantages, targets = jax.jit(gae, static_argnums=(4, 5))(rewards, values, DONES, np.full(3, LAST_VALUE,
                                                                                             np.float32), GAMMA, lam)
    np.testing.assert_allclose(advantages, expected, rtol=1e-6)
    np.testing.assert_allclose(targets, np.array(expected) + values, rtol=1e-6)


def test_gae_lambda_zero_is_the_td_error():
    rewards, values = np.array(REWARDS), np.array(VALUES)
    advantages, _ = gae(rewards, values, DONES[:, 0], LAST_VALUE, GAMMA, 0.0)
    np.testing.assert_allclose(advantages, [1.0, 1.0, 2.5, 3.5], rtol=1e-6)
