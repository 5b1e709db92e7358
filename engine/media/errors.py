"""The one error type of engine/media. The API maps it to a validation error (422 on /v1, spec §6.1)."""

from __future__ import annotations


class MediaError(Exception):
    """A media part was refused or could not be read or decoded.

    `message` is safe to show to the client (spec §6.5): generic, never a filesystem path, never whether a file
    exists, never fetched content. `index` is the position of the failing part in the list given to `load_all`.
    """

    def __init__(self, message: str, *, index: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.index = index
