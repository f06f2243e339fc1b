"""The names the tracer plugin (`workflows.runner.impact_tracer`) and the code that starts or
reads a traced test process share, apart from the plugin so that reading a trace does not
import pytest."""

from __future__ import annotations

OUT_VAR = "SPYRE_CI_TRACE_OUT"
MODE_VAR = "SPYRE_CI_TRACE_MODE"
# A file of variant ids: trace only these, and not the session (a production run refreshes
# the traces it lacks; `spyre-ci impact-map` traces everything, the session included).
IDS_VAR = "SPYRE_CI_TRACE_IDS"
SESSION = "(session)"
