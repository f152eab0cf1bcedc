"""Errors that reach the user.  Each message names the bad value and what is allowed."""


class GwbatchError(Exception):
    """Base class: the CLI prints the message and exits non-zero, without a traceback."""

    exit_code = 2


class ConfigError(GwbatchError):
    """A campaign file, a --set override or a command-line option is invalid."""


class DataError(GwbatchError):
    """Input data cannot be used as given (layout, rates, overlaps, missing detectors)."""

    exit_code = 3


class OutputError(GwbatchError):
    """The output location cannot be used (finished run present, not a run directory)."""

    exit_code = 4
