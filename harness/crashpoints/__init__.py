"""Crash points: hold the target where its work has become durable but it does not know yet, and kill it.

A server's retry safety is decided at a few moments: when its database commits,
when a downstream it calls records the call, when its answer is on the wire.
The harness stands at each of those (it runs the PostgreSQL the target writes
to, the effect sink it calls, the proxy its answers pass), so it can stop the
reply there, SIGKILL the pod and let the client retry: the crash lands exactly
at that moment, on any server, without a failpoint in its code.

Two halves, on two layers of ARCHITECTURE.md:

``points``    the names of hold points (``db_commit#2``): pure vocabulary, used by the scenario model
``pgwire``    PostgreSQL's wire protocol as far as holding a commit needs (framing, transactions): pure
``pgproxy``   the proxy between the target and the harness's PostgreSQL that holds commits
``pgrelay``   where a run only observes, that proxy as a process of its own, telling commits over a pipe
``holds``     the hold controller a run wires in (``faults.crash_points``): counts the points of
              each attempt, records them, and at a planned one cuts the pod off and kills it
``explore``   ``mcp-chaos crashpoints``: a clean call, then runs that kill the target at each point
``advice``    what a finding at a point says about the server, in its own statements, and what to change
``render``    the point × verdict table, and per finding its advice, its class's fix and one try's story
``emit``      the scenario that reproduces a finding, and the pytest file that runs it
"""
