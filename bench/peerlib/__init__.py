"""The side-by-side benchmark suite's parts (``uv run python bench/peers.py`` drives them)."""
