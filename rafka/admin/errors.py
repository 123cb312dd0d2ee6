"""The admin commands' failures and their exit codes."""

from __future__ import annotations

EXIT_OK = 0
EXIT_KAFKA = 1  # the broker refused or failed the operation, or could not be reached
EXIT_USAGE = 2  # bad arguments (argparse uses 2 as well)
EXIT_NOT_FOUND = 3  # the named group or topic does not exist


class AdminError(Exception):
    """A failure the CLI reports on stderr and turns into ``exit_code``."""

    exit_code = EXIT_KAFKA


class KafkaFailure(AdminError):
    exit_code = EXIT_KAFKA


class UsageError(AdminError):
    exit_code = EXIT_USAGE


class NotFound(AdminError):
    exit_code = EXIT_NOT_FOUND
