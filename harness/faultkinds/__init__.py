"""Fault kinds as packages: one module per kind of fault, each declaring everything about it in one place.

A kind's module holds one :class:`~harness.faultkinds.base.Kind`: its blame rank, what it is in
words, how the schedule places it and how the injector strikes and heals it (a pod fault), what a
stream rule of it does in words (a fault proxy's), the fix group and fixes of its own, and its colour
on report.html's timeline. :mod:`harness.faultkinds.registry` lists the modules; the schedule, the
injector, ``describe``, the audit's causes and fixes and the reports read it instead of naming kinds
(decision 0088). Pure: no I/O, so the offline audit and the reports may import it.
"""
