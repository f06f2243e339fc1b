"""JSON Schemas shipped with dashboard_export (data only)."""
