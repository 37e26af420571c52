"""Reusable sequence layers (no study imports them from another study; every study may use them).

* ``s5``        the S5 layer (Smith et al. 2022); the S5 memory of the PPO agents is ``memlab.rl.s5_memory``
* ``s6``        the S6 layer of paper 4, section 4.2, and the diagonal selective scan (sequential / parallel)
* ``native``    the diagonal selective scan's sequential form as a native CPU kernel (built on first use)
* ``mamba``     the Mamba block built on the selective scan
* ``gated_rnn`` GRU and LSTM cells in GSRNN form with their ISS margins and projections (paper 3, Theorem 2),
                and the bounded-input layer that makes the margins cover the cell's real inputs
* ``l1_ball``   Euclidean projection onto the l1 ball (Duchi et al. 2008)
* ``lru``       the Linear Recurrent Unit (Orvieto et al. 2023)
* ``attention`` causal softmax and linear attention, multi-head
* ``deltanet``  gated DeltaNet (Yang et al. 2024): the gated delta rule step by step and in its chunkwise form
* ``causal_conv`` the short causal depthwise convolution in front of Mamba's scan and (optionally) gated DeltaNet
* ``dense``     Equinox's Linear and MLP applied to a whole sequence as one matrix product
"""

from memlab.layers.attention import CausalLinearAttention, CausalSoftmaxAttention
from memlab.layers.deltanet import GatedDeltaNet, gated_delta_rule
from memlab.layers.dense import apply_linear, apply_mlp
from memlab.layers.gated_rnn import (
    GATED_CELLS,
    BoundedInput,
    GRUCell,
    LSTMCell,
    iss_margin,
    project_iss,
    project_model_iss,
)
from memlab.layers.l1_ball import project_l1_ball, project_rows_l1
from memlab.layers.lru import LRU
from memlab.layers.mamba import MambaBlock
from memlab.layers.s5 import S5_STEP_RANGE, S5Layer, dense_linear, hippo_diagonal
from memlab.layers.s6 import S6, selective_scan

__all__ = ["GATED_CELLS", "LRU", "S5_STEP_RANGE", "BoundedInput", "CausalLinearAttention", "CausalSoftmaxAttention",
           "GRUCell", "GatedDeltaNet", "LSTMCell", "MambaBlock", "S5Layer", "S6", "apply_linear", "apply_mlp",
           "dense_linear", "gated_delta_rule", "hippo_diagonal", "iss_margin", "project_iss", "project_l1_ball",
           "project_model_iss", "project_rows_l1", "selective_scan"]
