"""The selector's one exception type."""

from __future__ import annotations

from contracts.errors import BadInput


class SelectorError(BadInput, ValueError):
    """Input the selector cannot use; the message names the file, line or field and the fix."""
