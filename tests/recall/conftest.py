"""The recall tests' shared fixture: a training record of given numbers, as the analyses read one."""

from __future__ import annotations

import pytest

from memlab.recall import TrainingRecord


@pytest.fixture
def training_record():
    """``make(student, alpha, T, n, mse, ...)`` -> a :class:`TrainingRecord` with these numbers (one seed); the numbers
    no analysis reads are placeholders."""
    def make(student, alpha, T, n, mse, mean=1.0, tag_only=0.5, stderr=float("nan"), val_tag_only=None, budget=None):
        return TrainingRecord(alpha=alpha, T=T, n=n, student=student, num_val=1, best_val_mse=[mse], mse=mse,
                              mse_stderr=stderr, best_epoch=[0], val_curve=[mse], train_curve=[mse],
                              baseline_mean=mean, baseline_tag_only=tag_only, val_baseline_mean=mean,
                              val_baseline_tag_only=tag_only if val_tag_only is None else val_tag_only,
                              target="a1", step_budget=budget, adam_steps=1)

    return make
