"""The parts of the load and fault section (``bench/load_bench.py``, which runs them)."""
