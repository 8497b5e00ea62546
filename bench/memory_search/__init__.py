"""The parts of the memory search section (``bench/memory_bench.py``, which runs them)."""
