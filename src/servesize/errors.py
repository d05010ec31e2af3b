"""Errors that reach the user as one line, with their exit code.

Every error servesize raises on purpose derives from ``ServesizeError``; the CLI prints
``servesize: <message>`` and exits with the error's ``exit_code``: 2 for bad input and refusals,
3 when servesize predicts that vLLM itself would refuse to start (``WouldNotStart``), 130 on Ctrl-C
and 143 on SIGTERM (a measurement records it first). Anything else is a bug, printed as one line
that says so (``servesize: bug: ...``, exit 1); the fuzz suite (tests/test_fuzz_inputs.py) fails on any case that reaches it.
"""


MAX_ECHO_CHARS = 60  # how much of a value a refusal repeats: a 5,000-digit number is cut, with an ellipsis
MAX_MESSAGE_CHARS = 1000  # a refusal line longer than this (an echo clip() missed) keeps its start and its fix


def clip(value: object, limit: int = MAX_ECHO_CHARS) -> str:
    """``repr(value)`` cut to ``limit`` characters with an ellipsis: how a one-line refusal echoes a value."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def excerpt(text: object, limit: int = 200) -> str:
    """``str(text)`` on one line (every run of whitespace one space), cut to ``limit`` characters with an ellipsis:
    how a server's answer or an exception's text is quoted in one line."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[:limit] + "..."


def _bounded(message: str) -> str:
    if len(message) <= MAX_MESSAGE_CHARS:
        return message
    keep = MAX_MESSAGE_CHARS // 2 - 3
    return f"{message[:keep]} ... {message[-keep:]}"


class ServesizeError(Exception):
    """A refusal or bad input: the message is the whole user-facing line (bounded: MAX_MESSAGE_CHARS)."""

    exit_code = 2
    # the input field (a Scenario or query field name) the error is about, where one is: set where the value is
    # checked (``Param.parse``, a rule that names the flag), so a face that shows fields (the explorer) marks it
    field: str | None = None

    def __init__(self, *args: object, field: str | None = None):
        if len(args) == 1 and isinstance(args[0], str):
            args = (_bounded(args[0]),)
        super().__init__(*args)
        if field is not None:
            self.field = field


class BadInput(ServesizeError):
    """A flag, file or value the user gave cannot be used as it is."""


class OutOfRange(BadInput):
    """A value read, but outside the range its Param declares (the message names the range)."""


class UnreadableNumber(BadInput):
    """A number that cannot be read as ``what``, and why (``reason``): a caller that words its own refusal (a
    Param naming its flag) takes the reason from here rather than from the message's text."""

    def __init__(self, text: object, what: str, reason: str):
        self.reason = reason
        super().__init__(f"cannot read {clip(text)} as {what}: {reason}")


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


class WouldNotStart(DoesNotFit):
    """vLLM itself would refuse to start with these flags (its own start-up check fails): exit 3.

    The message is vLLM's reason and the fix: the largest ``--max-model-len`` that starts, as vLLM
    estimates it (``largest_max_model_len``; 0 when not even one token fits)."""

    exit_code = 3

    def __init__(self, message: str, largest_max_model_len: int = 0, available_bytes: int | None = None,
                 field: str | None = None):
        self.largest_max_model_len = largest_max_model_len
        self.available_bytes = available_bytes  # per GPU, as vLLM would have logged it
        super().__init__(message, field=field)

    def to_dict(self) -> dict:
        """What ``--json`` prints on exit 3: the refusal, as the one stderr line says it, and its figures."""
        return {"would_start": False, "exit_code": self.exit_code, "refusal": str(self),
                "largest_max_model_len": self.largest_max_model_len,
                "available_kv_bytes_per_gpu": self.available_bytes}


class Interrupted(ServesizeError):
    """Ctrl-C during a measurement: one line naming the record to resume, exit 130."""

    exit_code = 130


class Terminated(ServesizeError):
    """SIGTERM during a measurement: ended as Ctrl-C ends it (the record kept, one line), exit 143 (128 + 15)."""

    exit_code = 143
