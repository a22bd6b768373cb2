"""The one error type for bad user input.

The CLI turns a BadInput into a single line on stderr and exit code 2. The message names the
problem and the fix; raising it must happen before anything is written.
"""


class BadInput(ValueError):
    """Input the user can fix: malformed record, missing file, impossible budget, ..."""

    def __init__(self, message: str):
        super().__init__(" ".join(str(message).split()))
