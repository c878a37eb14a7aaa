"""The auditor: verdicts per intent from the history and the target's effects, then statistics.

It runs after the run and never talks to the target while a run is going on;
everything it knows comes from the history file and the effect source.
"""
