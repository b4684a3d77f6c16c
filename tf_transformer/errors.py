"""User-facing errors, one hierarchy: everything raised for bad input is a :class:`UserError`,
which ``tft`` prints as one line without a traceback.

Messages name the file, line, field or value and what was expected, in the library's own
terms (``beam_size``, ``model path``); the command line rewords them for its flags where it
must.
"""


class UserError(ValueError):
    """Bad input from the user: the message names the file/line/field/value and what was expected."""


class ConfigError(UserError):
    """A configuration value is missing, of the wrong type or breaks a rule."""


class DataError(UserError):
    """A data file is missing, malformed or inconsistent with its pair."""


class WriteError(UserError):
    """A file or directory could not be written (permissions, a full disk, a bad path): the
    message names the path and the errno; nothing half-written is left behind."""

    def __init__(self, message: str, path=None, errno_code=None):
        super().__init__(message)
        self.path = None if path is None else str(path)
        self.errno = errno_code

    @classmethod
    def at(cls, path, errno_code=None, reason: str = "") -> "WriteError":
        """``cannot write PATH: [Errno N NAME] reason``."""
        import errno as errno_names
        import os

        name = errno_names.errorcode.get(errno_code, "") if errno_code else ""
        text = reason or (os.strerror(errno_code) if errno_code else "write failed")
        code = f"[Errno {errno_code} {name}] " if errno_code else ""
        return cls(f"cannot write {path}: {code}{text}", path, errno_code)


class DamagedFileError(UserError):
    """A saved model, checkpoint or backup is truncated, unreadable or holds non-finite weights."""


class ClusterError(UserError):
    """A worker of a multi-worker run stopped or cannot be reached: not bad input, but a one-line
    message says what happened and how to resume (rerun every worker), not a traceback."""
