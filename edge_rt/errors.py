"""Errors that name the problem and the fix.

Every error the user can cause derives from :class:`EdgeRtError`; the CLI prints
its message (no traceback) and exits non-zero.
"""

from __future__ import annotations


class EdgeRtError(Exception):
    """An error the user can fix; the message says how."""


class AudioInputError(EdgeRtError, ValueError):
    """An audio file is missing, unreadable or unusable."""


class PackNotBuiltError(EdgeRtError, FileNotFoundError):
    """A model pack has not been built (or is incomplete)."""


class PackSpecError(EdgeRtError, ValueError):
    """A pack declaration file is malformed."""


class IntegrityError(EdgeRtError):
    """A downloaded or built file does not match its recorded sha256."""


class UnsupportedLanguageError(EdgeRtError, ValueError):
    """A language the pack cannot handle was requested."""


class AcquisitionError(EdgeRtError):
    """A pinned wheel could not be downloaded."""
