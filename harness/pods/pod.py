"""The ``Pod`` protocol: what the supervisor and the injector need of any runtime."""

from __future__ import annotations

from typing import Protocol


class Pod(Protocol):
    """One restartable instance of a target (a process, a container)."""

    name: str

    @property
    def pid(self) -> int | None: ...

    async def start(self) -> int:
        """Start (or start again); returns the pid. TargetStartError if it cannot be started at all."""
        ...

    def kill(self, sig: str = "SIGKILL") -> bool:
        """Signal it now (SIGKILL unless told), synchronously: its event must precede what it
        breaks. False if it was not running."""
        ...

    def pause(self) -> bool: ...

    def resume(self) -> bool: ...

    async def wait(self) -> int:
        """Wait until the current instance exits; its return code."""
        ...

    async def stop(self, timeout: float) -> None:
        """SIGTERM, then SIGKILL after ``timeout``; reaps it and releases what it holds."""
        ...

    def log_tail(self, lines: int = 20) -> str: ...

    def identity(self) -> dict[str, str]:
        """Extra fields for pod events (a container id, say)."""
        ...
