"""S6 / Mamba on the CPU at the sizes of paper 4 (A.1): batch 16, L = 5002 (context 5000 plus the two query tokens),
d_inner 32, N = 32, float32; beside mambapy (pure-PyTorch Mamba with a Blelloch parallel scan, ``pip install -e
'.[bench]'``), run eagerly with torch using every core, as a mambapy user gets it.

* the diagonal selective scan, forward and forward+backward (gradients w.r.t. x, delta, B, C): memlab's
  ``selective_scan`` (sequential: the native kernel of ``memlab.layers.native`` and the ``lax.scan`` it falls
  back to; parallel: ``lax.associative_scan``; vmapped over the batch) vs mambapy's
  ``MambaBlock.selective_scan`` (``pscan``; it zero-pads L = 5002 to the next power of two, 8192, inside its scan
  and cuts the output back) and ``selective_scan_seq`` (a Python loop over time). Same x, delta, A (S4D-real), B,
  C, D. mambapy discretises B by Euler (delta B), so memlab runs with ``discretization="euler_b"`` here. The bound
  (not an API): the bare recursion writing the same output, h_t = exp(delta_t A) h_t-1 + delta_t B_t x_t,
  y_t = C_t h_t + D x_t, one jitted ``lax.scan`` over time on the whole (batch, d_inner, N) state, no checks and
  no method or discretisation switches: what no selective scan written as a ``lax.scan`` can beat. mambapy's
  sequential form is timed forward only: autograd through its 5002-step Python loop takes minutes (~20 ms a step
  on this machine at L = 300);
* the whole MambaBlock (d_model 16: in_proj, causal depthwise conv, x_proj, dt_proj, scan, gate, out_proj), with
  memlab's weights copied into mambapy's block (same architecture: bias-free projections, conv bias, dt_proj bias,
  A = -exp(A_log), D skip; torch's Conv1d with padding d_conv - 1 cut to the first L outputs is memlab's causal
  conv), forward and forward+backward (gradients w.r.t. the input); memlab with Euler-B as mambapy, and with its
  default exact ZOH (that row's max_abs_diff is the discretisation's effect, not an error);
* the paper-form S6 layer with a general A, d_in = d_h = d_out = 32, L = 50: exp(delta A) and its integral per token
  by jax.scipy.linalg.expm of the 2 d_h x 2 d_h augmented matrix (the previous algorithm) vs the batched Taylor
  scaling and squaring of ``memlab.layers.zoh.expm_and_integral``, forward and forward+backward (w.r.t. the layer).

Every output (y, or the concatenated gradients) is compared with the reference row's: max_abs_diff.
"""

from __future__ import annotations

import os

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from timing import compiled, peer, side_by_side  # benchmarks/timing.py (run.py puts benchmarks/ on sys.path)

from memlab.layers import s6
from memlab.layers.mamba import MambaBlock
from memlab.layers.s6 import S6, selective_scan

BATCH, L, D_INNER, N, D_MODEL = 16, 5002, 32, 32, 16
S6_D, S6_L = 32, 50
MISSING = "pip install -e '.[bench]' adds mambapy (and torch)"
mambapy = peer("mambapy.mamba")
torch = peer("torch")


def _rows(workload, implementations, batch, length, reference=None):
    """side_by_side rows, plus tokens/s; the reference is mambapy's pscan when mambapy is installed."""
    names = [name for name, _ in implementations]
    reference = reference if reference in names else None
    missing = None if reference is not None else MISSING
    rows = side_by_side(workload, implementations, reference=reference, missing=missing,
                        extra={"batch": batch, "L": length})
    for row in rows:
        row["tokens_per_s"] = batch * length / row["seconds"]
    return rows


def scan_inputs(key):
    kx, kd, kb, kc = jax.random.split(key, 4)
    x = jax.random.normal(kx, (BATCH, L, D_INNER))
    delta = jax.nn.softplus(jax.random.normal(kd, (BATCH, L, D_INNER)) - 4.0)
    A = -jnp.broadcast_to(jnp.arange(1.0, N + 1), (D_INNER, N))  # S4D-real
    B, C = jax.random.normal(kb, (BATCH, L, N)), jax.random.normal(kc, (BATCH, L, N))
    return x, delta, A, B, C, jnp.ones(D_INNER)


def _to_torch(*arrays, grad=False):
    return [torch.tensor(np.asarray(a), requires_grad=grad) for a in arrays]


def _torch_grads(loss, inputs):
    return torch.cat([g.reshape(-1) for g in torch.autograd.grad(loss, inputs)])


def _mambapy_block(pscan: bool):
    config = mambapy.MambaConfig(d_model=D_MODEL, n_layers=1, d_state=N, pscan=pscan)  # d_inner = 2 * 16 = 32
    return mambapy.MambaBlock(config)


# memlab's forms of the selective scan: (method, whether it runs the native kernel where it can)
SCAN_FORMS = {"memlab sequential (native kernel)": ("sequential", True),
              "memlab sequential (lax.scan)": ("sequential", False), "memlab parallel": ("parallel", True)}


def memlab_scan_fns(x, delta, A, B, C, D):
    """Forward and forward+backward callables of memlab's vmapped selective scan, per form."""
    fns = []
    for name, (method, native_scan) in SCAN_FORMS.items():
        def forward(x, delta, B, C, method=method):
            one = lambda x, d, b, c: selective_scan(x, d, A, b, c, D, discretization="euler_b", method=method,  # noqa: E731
                                                    a_nonzero=True)
            return jax.vmap(one)(x, delta, B, C)

        grads = jax.grad(lambda *args, forward=forward: jnp.sum(forward(*args) ** 2), argnums=(0, 1, 2, 3))
        fwd = compiled(forward, x, delta, B, C, native_scan=native_scan)
        fwd_bwd = compiled(lambda *a, grads=grads: jnp.concatenate([g.reshape(-1) for g in grads(*a)]), x, delta, B,
                           C, native_scan=native_scan)
        fns.append((name, lambda f=fwd: f(x, delta, B, C), lambda f=fwd_bwd: f(x, delta, B, C)))
    return fns


def bare_recursion(x, delta, A, B, C, D):
    """y (batch, L, d_inner): the selective scan with Euler-B, one ``lax.scan`` over time of the batched state."""

    def step(h, inputs):  # h (batch, d_inner, N)
        x_t, delta_t, B_t, C_t = inputs
        h = jnp.exp(delta_t[..., None] * A) * h + (delta_t * x_t)[..., None] * B_t[:, None, :]
        return h, jnp.einsum("bdn,bn->bd", h, C_t) + D * x_t

    h0 = jnp.zeros((x.shape[0], x.shape[2], A.shape[1]), x.dtype)
    time_major = [jnp.swapaxes(a, 0, 1) for a in (x, delta, B, C)]
    return jnp.swapaxes(jax.lax.scan(step, h0, time_major)[1], 0, 1)


def mambapy_scan_fns(x, delta, A, B, C, D):
    fns = []
    A_t, D_t = _to_torch(A, D)
    inputs = _to_torch(x, delta, B, C, grad=True)  # leaves: autograd.grad returns the gradients, accumulates nothing
    for name, pscan in (("mambapy pscan (L padded to 8192)", True), ("mambapy sequential", False)):
        block = _mambapy_block(pscan)
        scan = block.selective_scan if pscan else block.selective_scan_seq

        def forward(scan=scan):
            with torch.no_grad():
                return scan(inputs[0], inputs[1], A_t, inputs[2], inputs[3], D_t)

        def forward_backward(scan=scan):
            y = scan(inputs[0], inputs[1], A_t, inputs[2], inputs[3], D_t)
            return _torch_grads((y**2).sum(), inputs)

        fns.append((name, forward, forward_backward if pscan else None))  # see the module doc
    return fns


def selective_scan_rows() -> list[dict]:
    inputs = scan_inputs(jax.random.key(0))
    bound = jax.jit(bare_recursion)
    fns = memlab_scan_fns(*inputs) + [("bound: bare recursion (not an API)", lambda: bound(*inputs), None)]
    fns += mambapy_scan_fns(*inputs) if mambapy else []
    reference = "mambapy pscan (L padded to 8192)"
    rows = _rows("selective_scan forward", [(name, f) for name, f, _ in fns], BATCH, L, reference)
    rows += _rows("selective_scan forward+backward", [(name, g) for name, _, g in fns if g], BATCH, L, reference)
    return rows


def copy_into_mambapy(block: MambaBlock, torch_block):
    """memlab's MambaBlock weights into a mambapy MambaBlock (same shapes; the conv weight gets its channel axis)."""
    weights = {"in_proj.weight": block.in_proj.weight, "conv1d.weight": block.conv_weight[:, None, :],
               "conv1d.bias": block.conv_bias, "x_proj.weight": block.x_proj.weight,
               "dt_proj.weight": block.dt_proj.weight, "dt_proj.bias": block.dt_proj.bias, "A_log": block.A_log,
               "D": block.D, "out_proj.weight": block.out_proj.weight}
    state = {name: torch.tensor(np.asarray(value)) for name, value in weights.items()}
    torch_block.load_state_dict(state, strict=True)
    return torch_block


def mamba_block_rows() -> list[dict]:
    u = jax.random.normal(jax.random.key(1), (BATCH, L, D_MODEL))
    fns = []
    for discretization in ("euler_b", "zoh"):
        for name, (scan, native_scan) in SCAN_FORMS.items():
            block = MambaBlock(D_MODEL, d_state=N, scan=scan, discretization=discretization, key=jax.random.key(2))
            fwd = compiled(lambda block, u: jax.vmap(block)(u), block, u, native_scan=native_scan)
            grad = compiled(lambda block, u: jax.grad(lambda u: jnp.sum(jax.vmap(block)(u) ** 2))(u).reshape(-1),
                            block, u, native_scan=native_scan)
            fns.append((f"{name} ({discretization})", lambda f=fwd, b=block: f(b, u), lambda g=grad, b=block: g(b, u)))
    if mambapy:
        u_t = _to_torch(u, grad=True)
        for name, pscan in (("mambapy pscan", True), ("mambapy sequential", False)):
            torch_block = copy_into_mambapy(block, _mambapy_block(pscan))  # every memlab block has these weights

            def forward(torch_block=torch_block):
                with torch.no_grad():
                    return torch_block(u_t[0])

            def forward_backward(torch_block=torch_block):
                return _torch_grads((torch_block(u_t[0]) ** 2).sum(), u_t)

            fns.append((name, forward, forward_backward if pscan else None))  # see the module doc
    rows = _rows("MambaBlock forward", [(name, f) for name, f, _ in fns], BATCH, L, "mambapy pscan")
    rows += _rows("MambaBlock forward+backward", [(name, g) for name, _, g in fns if g], BATCH, L, "mambapy pscan")
    return rows


class S6AugmentedExpm(S6):
    """The S6 layer with the previous discretisation: jax.scipy.linalg.expm of the augmented matrix per token."""

    def expm_and_integral(self, delta):
        return s6.expm_and_integral_reference(self.A, delta)


def general_s6_rows() -> list[dict]:
    u = jax.random.normal(jax.random.key(4), (BATCH, S6_L, S6_D))
    layers = {"jax.scipy.linalg.expm (before)": S6AugmentedExpm(S6_D, S6_D, S6_D, key=jax.random.key(3)),
              "batched Taylor squaring (now)": S6(S6_D, S6_D, S6_D, key=jax.random.key(3))}
    fwd = eqx.filter_jit(lambda layer, u: jax.vmap(layer)(u))
    grad = eqx.filter_jit(eqx.filter_grad(lambda layer, u: jnp.sum(jax.vmap(layer)(u) ** 2)))
    flat_grad = lambda layer: jnp.concatenate([g.reshape(-1) for g in jax.tree.leaves(grad(layer, u))])  # noqa: E731
    reference = "jax.scipy.linalg.expm (before)"
    rows = _rows("S6 general A forward", [(name, lambda m=m: fwd(m, u)) for name, m in layers.items()],
                 BATCH, S6_L, reference)
    rows += _rows("S6 general A forward+backward", [(name, lambda m=m: flat_grad(m)) for name, m in layers.items()],
                  BATCH, S6_L, reference)
    return rows


def run() -> list[dict]:
    if torch is not None:
        torch.set_num_threads(os.cpu_count())
    return selective_scan_rows() + mamba_block_rows() + general_s6_rows()


if __name__ == "__main__":
    for r in run():
        print(r)
