"""Where the product's data folders are: `templates/` (C kernels, model, HAL and project templates) and `boards/`
(one TOML per board).

In the repository both sit at the top level, beside the package. An installed wheel carries them inside the package
as `tinyaot/_data/templates` and `tinyaot/_data/boards` (setup.py maps the two folders there), and they are
found through importlib.resources. A source checkout, or an editable install (which imports `tinyaot/` from the
checkout), has no `_data` folder in the package and reads the top-level folders directly.

Both are used as real directories (jinja2's file loader, shutil copies, the C compiler's include path), so a
package imported from a zip archive is refused rather than half-working.
"""
from __future__ import annotations

from importlib import resources
from pathlib import Path

from tinyaot.errors import TinyaotError

_PACKAGE_DIR = Path(__file__).resolve().parent
SOURCE_ROOT = _PACKAGE_DIR.parent  # the checkout's top level, when tinyaot is imported from one


def data_folder(name: str) -> Path:
    """The folder `name` ("templates" or "boards") as shipped in the installed package, else the checkout's."""
    shipped = resources.files("tinyaot").joinpath("_data", name)
    if shipped.is_dir():
        if not isinstance(shipped, Path):
            raise TinyaotError(f"tinyaot's {name}/ is inside a zip archive ({shipped}); install tinyaot unzipped "
                               "(pip install installs it so)")
        return shipped
    beside = SOURCE_ROOT / name
    if beside.is_dir():
        return beside
    raise TinyaotError(f"tinyaot's {name}/ folder is missing: neither {_PACKAGE_DIR / '_data' / name} (installed "
                       f"package) nor {beside} (source checkout) exists; reinstall tinyaot")


TEMPLATES = data_folder("templates")
BOARDS = data_folder("boards")
