"""memlab: sequence models as memory, measured against the optimal inference algorithm."""

__version__ = "0.1.0"
