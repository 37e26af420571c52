"""memlab's persistent compile cache: a warm process loads its programs from it without false alarms on stderr."""

import os
import subprocess
import sys

# compiles a program, stores it (min compile time 0) and says whether JAX found it in the cache
PROGRAM = """
import logging, sys
import jax, jax.numpy as jnp
from memlab import compile_cache
hits = []
logging.getLogger("jax._src.compiler").addFilter(lambda r: hits.append(r.getMessage()) or True)
logging.getLogger("jax._src.compiler").setLevel(logging.DEBUG)
compile_cache.enable(sys.argv[1], min_compile_secs=0.0)
def f(x):
    for _ in range(20):
        x = jnp.sin(x) @ x
    return x
jax.jit(f)(jnp.ones((8, 8))).block_until_ready()
print("hit" if any("cache hit for 'jit_f'" in m for m in hits) else "miss")
"""


def _run(folder):
    env = {k: v for k, v in os.environ.items() if k not in ("TF_CPP_MIN_LOG_LEVEL", "JAX_LOGGING_LEVEL")}
    return subprocess.run([sys.executable, "-c", PROGRAM, str(folder)], capture_output=True, text=True, env=env,
                          timeout=300, check=True)


def test_a_warm_process_loads_from_the_cache_quietly(tmp_path):
    cold, warm = _run(tmp_path), _run(tmp_path)
    assert cold.stdout.strip() == "miss"
    assert warm.stdout.strip() == "hit"
    assert "cpu_aot_loader" not in warm.stderr, warm.stderr


QUICK_LEVEL = """
import os
from memlab import compile_cache
for profile, flags in (("quick", ""), ("tiny", ""), ("quick-ablation", ""), ("paper", ""), ("paper-core", ""),
                       ("quick", "--xla_backend_optimization_level=3"),
                       ("quick", "--xla_cpu_use_fusion_emitters=true"), ("level-only", "")):
    os.environ["XLA_FLAGS"] = flags
    if profile == "level-only":
        compile_cache.use_quick_compiles("quick", compile_cache.LEVEL_ONLY)
    else:
        compile_cache.use_quick_compiles(profile)
    print(profile, os.environ["XLA_FLAGS"])
"""


def test_quick_profiles_compile_at_level_1_with_the_older_emitter_unless_the_user_chose_otherwise():
    out = subprocess.run([sys.executable, "-c", QUICK_LEVEL], capture_output=True, text=True, timeout=300,
                         check=True).stdout.splitlines()
    quick = "--xla_backend_optimization_level=1 --xla_cpu_use_fusion_emitters=false"
    assert out == [f"quick {quick}", f"tiny {quick}", f"quick-ablation {quick}", "paper ", "paper-core ",
                   "quick --xla_backend_optimization_level=3 --xla_cpu_use_fusion_emitters=false",
                   "quick --xla_cpu_use_fusion_emitters=true --xla_backend_optimization_level=1",
                   "level-only --xla_backend_optimization_level=1"]
