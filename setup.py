"""Package layout, the part pyproject.toml cannot express with a package search: `templates/` and `boards/` stay at
the repository's top level (where the product's layout names them) and install inside the package as
`tinyaot/_data/templates/...` and `tinyaot/_data/boards/...`, read through importlib.resources (tinyaot/paths.py).

Each data folder and every folder below it is listed as a package mapped onto the top-level folder (a package-dir
mapping), so setuptools installs their files as package data without guessing; nothing in them is Python.
"""
from pathlib import Path

from setuptools import find_packages, setup

HERE = Path(__file__).resolve().parent
DATA_FOLDERS = {"templates": "tinyaot._data.templates", "boards": "tinyaot._data.boards"}
# What the data folders hold: C sources and headers, jinja2 templates, a linker script, board files.
DATA_FILES = ["*.c", "*.h", "*.j2", "*.ld", "*.toml"]


def data_packages() -> dict[str, str]:
    """Dotted package name -> its folder (relative to this file), for each data folder and its subfolders."""
    found = {}
    for folder, package in DATA_FOLDERS.items():
        found[package] = folder
        for sub in sorted(p for p in (HERE / folder).rglob("*") if p.is_dir() and p.name != "__pycache__"):
            rel = sub.relative_to(HERE / folder)
            found[".".join((package, *rel.parts))] = "/".join((folder, *rel.parts))
    return found


DATA_PACKAGES = data_packages()

setup(
    packages=find_packages(include=["tinyaot", "tinyaot.*"]) + list(DATA_PACKAGES),
    # mapping the top of each data folder is enough: setuptools finds the subpackages' folders below it
    package_dir={package: folder for package, folder in DATA_PACKAGES.items() if package in DATA_FOLDERS.values()},
    package_data={"tinyaot": ["toolchain/*.c"], **{package: DATA_FILES for package in DATA_PACKAGES}},
    include_package_data=False,
)
