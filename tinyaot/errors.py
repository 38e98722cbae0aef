"""The one error type the product raises for bad input (defined in the numerics core, tinyaot/core/errors.py,
so every layer can raise it); the CLI turns it into `Error: ...` and exit code 1."""
from tinyaot.core.errors import TinyaotError

__all__ = ["TinyaotError"]
