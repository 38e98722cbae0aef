"""The one error type the product raises for bad input; the CLI turns it into `Error: ...` and exit code 1."""


class TinyaotError(Exception):
    """A problem with the user's input or environment, stated in one line the user can act on."""
