"""What a filter's time depends on besides the filter (issue 33): the memory its output lands in.

The exact HMM filter that stores every belief (N = 12, T = 1000, 2000 sequences: a 96 MB float32 result) on one
CPU device, memlab's ``log_belief`` beside dynamax's ``hmm_filter``, each workload in a fresh process
(``timing.isolated``; each condition in two processes, to show how much a process's time varies by itself) under
four conditions:

* ``clean``: nothing ran before;
* ``after a 1 GB free``: dynamax's parallel filter ran first (it allocates and frees about 1 GB), the condition in
  which a tester saw both libraries run about twice as slow;
* ``hugetlb``, clean and after the free: the same with ``GLIBC_TUNABLES=glibc.malloc.hugetlb=1`` (glibc >= 2.35),
  which makes malloc ask for transparent huge pages on the memory it maps.

XLA's CPU runtime takes a large result from malloc, which maps fresh memory for it and unmaps it when the array
is freed, so every call touches every page of its output for the first time: one page fault per 4 KB page
(``page_faults_per_call``, from ``getrusage``), each a kernel entry that zero-fills the page. With huge pages it
is one fault per 2 MB. Every row is a side-by-side (``timing.side_by_side``) of the two libraries.
"""

from __future__ import annotations

import resource

import jax
import jax.numpy as jnp
from bench_belief import AsProbabilities, random_hmm  # benchmarks/ (run.py puts it on sys.path)
from timing import isolated, peer, side_by_side

from memlab.belief.fast_filters import log_belief

N, K, B = 12, 1000, 2000
HUGETLB = {"GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"}
ONE_DEVICE = {"XLA_FLAGS": "--xla_force_host_platform_device_count=1"}


def _faults_per_call(fn) -> int:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    fn().block_until_ready()
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before


def filters_after(condition: str, free_first: bool) -> list[dict]:
    """The side-by-side of memlab's and dynamax's filter in this process, after dynamax's parallel filter if
    ``free_first``."""
    dynamax = peer("dynamax.hidden_markov_model")
    if dynamax is None:
        return []
    from dynamax.hidden_markov_model import parallel_inference

    hmm = random_hmm(N, 4)
    ys = jax.random.randint(jax.random.key(1), (B, K), 0, 4)
    log_E = jnp.log(hmm.E)
    memlab = jax.jit(jax.vmap(lambda y: log_belief(hmm, y)))
    peer_filter = jax.jit(jax.vmap(lambda y: dynamax.hmm_filter(hmm.T @ hmm.pi0, hmm.T.T, log_E[y]).filtered_probs))
    if free_first:
        parallel = jax.jit(jax.vmap(lambda y: parallel_inference.hmm_filter(hmm.T @ hmm.pi0, hmm.T.T,
                                                                             log_E[y]).filtered_probs))
        for i in range(0, B, 250):
            jax.block_until_ready(parallel(ys[i:i + 250]))
    implementations = [("memlab log_belief (vmapped)", lambda: AsProbabilities(memlab(ys))),
                       ("dynamax hmm_filter (vmapped)", lambda: peer_filter(ys))]
    rows = side_by_side(f"exact HMM filter, every belief stored, one device: {condition}", implementations,
                        extra={"N": N, "T": K, "batch": B, "condition": condition})
    faults = {name: _faults_per_call(fn) for name, fn in implementations}  # after the rounds: a warm heap
    return [{**row, "page_faults_per_call": faults[row["implementation"]]} for row in rows]


CONDITIONS = (("clean", False, {}), ("after a 1 GB free", True, {}), ("hugetlb, clean", False, HUGETLB),
              ("hugetlb, after a 1 GB free", True, HUGETLB))
PROCESSES = 2  # each condition in two fresh processes, interleaved: how much a process's time varies by itself


def run() -> list[dict]:
    rows = []
    for process in range(1, PROCESSES + 1):
        for condition, free_first, env in CONDITIONS:
            rows += [{**row, "process": process}
                     for row in isolated(filters_after, condition, free_first, env={**ONE_DEVICE, **env})]
    return rows
