"""Builders for every output format (pure), publishers (HTTP, files, GitHub), and reports.

The pipeline hands one `RunRecord` (dashboard_export.model) to `write_run` and the
publishers; see docs/export.md. Never imports torch.
"""

from __future__ import annotations

from contracts.errors import BadInput, Unavailable


class ExportError(BadInput):
    """A run cannot be exported or published; the message says which field, file or endpoint."""


class PublishRefused(ExportError):
    """An endpoint answered 4xx: the body or the credentials are wrong, and sending the same
    again fails the same way. `status` is the endpoint's own answer."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


class WriteUnavailable(Unavailable):
    """A file of the run could not be written for the machine's reasons (a full disk, a
    quota, an I/O error, a read-only file system): an infrastructure fault, not bad input;
    the message names the file."""


class PublishUnavailable(Unavailable):
    """An endpoint (HUD, the CRCR relay, GitHub) stayed down or unreachable through the
    publisher's retries: an outage, not an ExportError; the same publish may succeed later.
    `retry_after`: seconds the endpoint asked to wait (its `Retry-After`), when it named any."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after
