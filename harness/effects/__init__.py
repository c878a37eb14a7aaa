"""Effect sources, one module each, behind one protocol (:class:`EffectSource`).

``registry.source_of(scenario.audit.effects)`` is the one place that turns the scenario's
section into a source; everything that reads effects (the auditor, the final read,
checkpoint reads, the preflight, contract checks) goes through the source it
returns, and ``init`` asks every kind of source for its drafts (``registry.drafts``).

| module | source | read |
| --- | --- | --- |
| ``sql`` | ``sqlite``: a SQLite file; ``postgres``: PostgreSQL | from the run directory; live, at the end |
| ``sink`` | the harness's effect sink's record | from the run directory |
| ``downstream`` | the downstream proxy's record of calls to an API | from the run directory |
| ``jsonl`` | a JSON-lines file | from the run directory |
| ``files`` | markers in the files of a directory | from the run directory |
| ``tool`` | a read tool of the target | live, at the end |
| ``command`` | a command's CSV output | live, at the end |

A new source is a module here, a section in :mod:`harness.scenario.effects`, a row in
``registry.KINDS``, and a fixture in the conformance kit
(``tests/integration/test_source_conformance.py``), which fails until it has one.

Nothing is imported here: the auditor's first step opens a SQLite store
(:mod:`harness.effects.sqlite_file`) before it may import the scenario's models.
"""
