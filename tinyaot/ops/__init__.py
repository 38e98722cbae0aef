"""One file per operator; importing this package imports every module in it, and each op file registers itself
(see registry.py). A new operator is a new file here: nothing else lists the op files."""
import importlib
import pkgutil

for _info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
    importlib.import_module(f"{__name__}.{_info.name}")
