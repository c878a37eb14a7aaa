"""One run's lifecycle: its parts wired (``wiring``), started and stopped in one declared order
(``runner``), the driver and its retry policy, the reads of the store during it (``checkpoints``),
the liveness watch, the preflight before it, its control file, and the final read after it.
"""
