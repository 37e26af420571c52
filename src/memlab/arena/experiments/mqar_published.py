"""The MQAR accuracies Zoology and Based publish, as ``arena.mqar-zoology`` sets memlab's beside them: read off their
figures (never run), each with its source and whether it is the setting memlab runs."""

from __future__ import annotations

from typing import NamedTuple

ZOOLOGY = "HazyResearch/zoology d88d6f5"


class Published(NamedTuple):
    """A published accuracy (read, not run): the range ``low``-``high`` read off a figure (None: none published),
    whether it is ``this_setting`` (Zoology's Fig. 2 at L = 64, d_model = 64) or another, and its ``source``."""

    low: float | None
    high: float | None
    this_setting: bool
    source: str

    def text(self) -> str:
        if self.low is None:
            return "none published"
        value = f"≈ {self.low:.2f}" if self.low == self.high else f"{self.low:.2f}-{self.high:.2f}"
        return value if self.this_setting else f"{value} (other setting)"


# Zoology's figure 2 has attention and four gated convolutions (H3, Hyena, RWKV, BaseConv: no arena layer); Mamba and
# gated DeltaNet are published only on a mixed test set; GRU, LRU and S5 nowhere in Zoology or Based
_README_FIGURE = ("Zoology README, Recall-Memory Tradeoff figure (zoology/analysis/paper/zoology_paper/"
                  "zoology_results.png, " + ZOOLOGY + "), read off")
_GATED_DELTANET = Published(0.89, 1.0, False, _README_FIGURE + ": gated DeltaNet 0.89 at state ≈ 1.7e4, ≈ 0.99-1.0 "
                            "at 6.5e4 and above (mixed test set, as for Mamba); Zoology's gated DeltaNet runs have the "
                            "short convolution (zoology/experiments/models_repo.py: use_short_conv=True, conv_size 4)")
PUBLISHED = {
    "attention": Published(0.97, 0.97, True, "Zoology (arXiv 2312.04927) Fig. 2, read off at L = 64, d_model = 64 "
                           "(the same ≈ 0.97-0.98 at every width 64-512 and every L 64-512); the figure is also the "
                           "repository's assets/figure2.png (" + ZOOLOGY + ")"),
    "mamba": Published(0.70, 0.85, False, _README_FIGURE + ": Mamba 0.70-0.85 over state sizes 1.6e4-1e5; averaged "
                       "over test sets of K 4-256 at L 64-1024 after training on a mixture (mqar_example_configs/"
                       "original_mqar_configs.py); Based (arXiv 2402.18668) Fig. 2, read off (HazyResearch/based "
                       "32c1bd4 assets/tradeoff.png): 0.57-0.91 over 2^13-2^19 bytes of state"),
    "gated-deltanet": _GATED_DELTANET,
    "gated-deltanet-conv": _GATED_DELTANET,
    "gru": Published(None, None, False, "not in Zoology or Based"),
    "lru": Published(None, None, False, "not in Zoology or Based"),
    "s5": Published(None, None, False, "not in Zoology or Based"),
}
