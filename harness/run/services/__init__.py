"""The services the harness runs beside a target, one module each behind one base (:mod:`.base`), and
their registry (:mod:`.registry`): PostgreSQL and its proxy, the effect sink, the downstream proxy,
nginx. What a scenario sees of each (its section, its placeholders) is :mod:`harness.scenario.serving`."""
