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
