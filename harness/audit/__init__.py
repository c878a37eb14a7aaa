"""The auditor: verdicts per intent from the history and the target's effects, then statistics.

Offline only: it reads a run directory and never talks to a target, a pod or a
service (the final read of live effect sources, ``harness.run.final_read``, is done
by the runner before the audit). ``fold`` reads the history in one pass of
small ``accumulators`` (one per concern), ``effects`` the effect sources,
``verdicts`` judges, ``summary`` is the typed result, ``gate`` applies
thresholds, ``auditor`` puts them together.
"""
