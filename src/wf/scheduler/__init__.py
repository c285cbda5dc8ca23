"""WF-005 activity scheduler core: a pure, synchronous, deterministic state machine."""
