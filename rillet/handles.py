"""Timers and tasks that an object holds in an attribute until they fire or it stops them."""
from __future__ import annotations

from typing import Any


def cancelled(handle: Any) -> None:
    """Cancel ``handle`` (an asyncio ``TimerHandle``, ``Handle`` or ``Task``) when there is one, and give
    ``None`` back, for ``self._timer = cancelled(self._timer)``."""
    if handle is not None:
        handle.cancel()
    return None
