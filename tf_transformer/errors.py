"""User-facing errors: raised for bad input (files, fields, values); ``tft`` prints them
as one line without a traceback."""


class UserError(ValueError):
    """Bad input from the user: the message names the file/line/field/value and what was expected."""


class DataError(UserError):
    """A data file is missing, malformed or inconsistent with its pair."""
