"""Errors that reach the user as one line and exit code 2.

Every error servesize raises on purpose derives from ``ServesizeError``; the CLI prints
``servesize: <message>`` and exits 2. Anything else is a bug and is reported as one too.
"""


class ServesizeError(Exception):
    """A refusal or bad input: the message is the whole user-facing line."""


class BadInput(ServesizeError):
    """A flag, file or value the user gave cannot be used as it is."""


class UnsupportedArchitecture(ServesizeError):
    """A config.json describes a design servesize does not model: refuse, never guess."""

    def __init__(self, model_type: str, reason: str, fields: tuple[str, ...] = ()):
        self.model_type = model_type
        self.reason = reason
        self.fields = tuple(fields)
        named = f" (fields: {', '.join(self.fields)})" if self.fields else ""
        super().__init__(
            f"unsupported architecture {model_type!r}: {reason}{named}; "
            "servesize refuses to produce a possibly wrong figure"
        )


class DoesNotFit(ServesizeError):
    """The model cannot be served on the requested GPUs with these settings."""


class Interrupted(ServesizeError):
    """Ctrl-C during a measurement: one line naming the record to resume, exit 130."""

    exit_code = 130


class Terminated(ServesizeError):
    """SIGTERM during a measurement: ended as Ctrl-C ends it (the record kept, one line), exit 143 (128 + 15)."""

    exit_code = 143
