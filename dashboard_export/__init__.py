"""Builders for every output format (pure), publishers (HTTP, files, GitHub), and reports.

The pipeline hands one `RunRecord` (dashboard_export.model) to `write_run` and the
publishers; see docs/export.md. Never imports torch.
"""

from __future__ import annotations


class ExportError(Exception):
    """A run cannot be exported or published; the message says which field, file or endpoint."""
