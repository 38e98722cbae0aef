"""The error types the product raises (defined in the numerics core, tinyaot/core/errors.py, so every layer can
raise them); the CLI turns each into `Error: ...` and its exit code (2 input/environment, 1 verification, 3 bug)."""
from tinyaot.core.errors import InternalError, TinyaotError, VerificationError

__all__ = ["TinyaotError", "VerificationError", "InternalError"]
