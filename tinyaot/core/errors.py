"""The error types the product raises (defined in the numerics core so every layer can raise them). The CLI turns
each into one line `Error: ...` and the exit code the class names (README "Exit codes"):

    TinyaotError        2  a problem with the user's input or environment (bad file or flag, missing tool,
                           unwritable path, full disk), stated with the path and what to do
    VerificationError   1  the generated code failed its proof (outputs differ from the reference, a canary
                           overwritten): the run found a real problem, as a regression gate does
    InternalError       3  tinyaot contradicted itself (a tinyaot bug)
"""


class TinyaotError(Exception):
    """A problem with the user's input or environment, stated in one line the user can act on."""

    exit_code = 2


class VerificationError(TinyaotError):
    """The generated code did not pass verification (QEMU or the host C against the numpy reference, a layer
    against onnxruntime, an overwritten canary)."""

    exit_code = 1


class InternalError(TinyaotError):
    """tinyaot found itself inconsistent: a bug, not the user's input."""

    exit_code = 3
