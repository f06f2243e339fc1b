"""Builders for every output format (pure), publishers (HTTP, files, GitHub), and reports.

Never imports torch.
"""
