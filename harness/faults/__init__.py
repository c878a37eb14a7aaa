"""Fault injection: the seeded schedule, pods that can be killed, their supervisor, the injector."""
