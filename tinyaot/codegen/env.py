"""The one jinja environment every generated file goes through: model C, HAL, verification harness, build files
(Makefile, CMakeLists.txt, <name>.mk) and report.md. Nothing else in tinyaot formats C or build files.

trim_blocks and lstrip_blocks: a line holding only a `{% ... %}` tag leaves no blank line or indentation behind,
so templates can be laid out like the C they produce. StrictUndefined: a missing context variable is an error at
render time, never an empty string in the C. No autoescape: the output is C and text, not HTML; every identifier or
comment that comes from a model goes through codegen.cfmt before it reaches a template.
"""
from __future__ import annotations

import functools
from pathlib import Path

import jinja2

from tinyaot.paths import TEMPLATES


@functools.lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    """The shared environment (cached: jinja compiles each template once per process)."""
    return jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), undefined=jinja2.StrictUndefined,
                              keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True, autoescape=False)


def render(template: str, **context: object) -> str:
    """`template` (a path under templates/) rendered with `context`."""
    return environment().get_template(template).render(**context)


def render_to(template: str, dest: Path, **context: object) -> Path:
    """Render `template` into the file `dest` (parent folders created) and return `dest`."""
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(render(template, **context))
    return dest
