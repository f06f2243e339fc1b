"""The HTML pages' one Jinja2 environment: templates in `dashboard_export/templates/`, every
value escaped unless a template marks it safe (autoescape), an undefined name an error.

The pages (the run report, the run browser's pages, the readiness page) are self-contained:
inline CSS, no scripts, no external assets. Python prepares the values; the markup lives in
the templates.
"""

from __future__ import annotations

from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined

_ENV = Environment(
    loader=PackageLoader("dashboard_export", "templates"),
    autoescape=True,
    undefined=StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
    keep_trailing_newline=True,
)


def render(template: str, **values: Any) -> str:
    """The page `template` (a file in dashboard_export/templates/) filled with `values`."""
    return _ENV.get_template(template).render(**values)


def load_templates() -> int:
    """Compile every template now (a process that forks page writers: the warm `spyre-ci`
    process), so that each fork renders without compiling; how many. The environment still
    compiles a template again when its file changed (Jinja's auto-reload)."""
    names = _ENV.list_templates()
    for name in names:
        _ENV.get_template(name)
    return len(names)
