"""Fixtures for the relay tests: the local GitHub API server."""

from tests.servers.github_api import github_api  # noqa: F401 - a fixture, used by name
