"""wf: a workflow server whose heart is a deterministic, distributed activity scheduler."""

__version__ = "0.1.0"
