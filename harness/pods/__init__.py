"""Pods: running instances of a target, and the supervisor that keeps one running.

A pod is not a fault. This package starts, stops, restarts and reports on pods
(a child process, a container); the fault injector acts on them only through
the supervisor's kill, pause and resume.
"""
