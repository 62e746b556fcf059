"""The repository's benchmarks: timing scripts (``python benchmarks/step_time.py``, ...) and the
UCI regression harness (``python -m benchmarks.uci``). Not part of the installed package."""
