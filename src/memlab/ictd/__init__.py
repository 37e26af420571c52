"""ictd study (paper: softmax-transformers-in-context-td.md): softmax transformers that run TD learning in context.

Tasks        mrp.py (MRP, v_pi, mu_pi, MSVE, sampling), boyan.py (Algorithm 2), random_tasks.py (Assumption 5.1 family)
References   softmax_td.py (weighted softmax TD eq. 11-12, its kernel eq. 4 and TD recursion, batch linear / tabular
             TD, operator form eq. 24-28)
Models       transformer.py (prompt 13, theta* 15, dual-head 14-18, single-head + TSM 21-23), pretrain.py (Algorithm 1)
Metrics      verify.py (Theorem 1 / Lemma 1), depth.py (Theorem 2), policy_eval.py (Fig. 1 MSVE and its references),
             neu.py (NEU of eq. 31 on the looped space 32), emergence.py (V_em, A_em, d_t of App. F.4)
Experiments  experiments/: verify, depth (+ depth_cells, depth_analysis), msve (+ msve_cells, msve_analysis), neu
             (+ neu_figures), pretrain, mask (indexed in its __init__.py), with
             cells.py (one Algorithm 1 seed per cell), setting.py, diagnostics.py, report.py, setting_tables.py and
             setting_figures.py, shared by pretrain and mask
"""

from memlab.ictd.boyan import boyan_chain
from memlab.ictd.depth import covering_trajectories, depth_curves, theorem2_at
from memlab.ictd.emergence import a_emergence, kernel_diagonal_mean, v_emergence
from memlab.ictd.mrp import MRP, Task, msve, sample_trajectory, stationary_distribution, value_function
from memlab.ictd.neu import comparison_points, estimator_statistics, neu, theta_star_looped, update_samples
from memlab.ictd.policy_eval import context_msve, make_task_set
from memlab.ictd.pretrain import PretrainConfig, evaluate
from memlab.ictd.random_tasks import random_task, random_task_batch, task_margin
from memlab.ictd.softmax_td import (
    batch_linear_td,
    feature_scores,
    iterate_operator,
    kernel_weights,
    operator_form,
    operator_from_counts,
    population_kernel,
    tabular_td_fixed_point,
    td_with_weights,
    weighted_softmax_td,
)
from memlab.ictd.train import make_train, train_seeds
from memlab.ictd.transformer import forward, make_prompt, readout, theta_star
from memlab.ictd.verify import trial_prompts, verify_trials

__all__ = [
    "MRP", "PretrainConfig", "Task", "a_emergence", "batch_linear_td", "boyan_chain", "comparison_points",
    "context_msve", "covering_trajectories", "depth_curves", "estimator_statistics", "evaluate", "feature_scores",
    "forward", "iterate_operator", "kernel_diagonal_mean", "kernel_weights", "make_prompt", "make_task_set",
    "make_train", "msve", "neu", "operator_form", "operator_from_counts", "population_kernel", "random_task",
    "random_task_batch", "readout", "sample_trajectory", "stationary_distribution", "tabular_td_fixed_point",
    "task_margin", "td_with_weights", "theorem2_at", "theta_star", "theta_star_looped", "train_seeds", "trial_prompts",
    "update_samples", "v_emergence", "value_function", "verify_trials", "weighted_softmax_td",
]
