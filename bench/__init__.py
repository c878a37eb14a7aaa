"""Benchmarks (``make bench``): the harness against references measured side by side in one run.

Absolute times are noisy on shared machines, so every goal is a ratio against a
reference measured in the same invocation (wrk, the SDK's own client), or a CPU
figure from the operating system's accounting, never a wall-clock figure taken
in another run. Benchmarks are not tests: ``make test`` never asserts on speed.
"""
