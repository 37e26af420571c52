"""pi-SSM study (paper: pi-ssm-hybrid-state-space.md)."""
