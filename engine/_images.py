"""Input-image folding for models without vision (SPEC §9).

Owns: turning ``image_url`` messages into ``[attached image: <target>]`` lines and saving data
URLs into the session scratchpad.  Does not: decide when to fold (the session does, R-IMG-4).
"""

from __future__ import annotations

import base64
import binascii
import re
import secrets
from pathlib import Path

from eventstore import ImageUrlPayload, OmniMessage, TextPayload, create_private
from eventstore.builders import user_text
from projections.markers import IMAGE_DROPPED_LINE, attached_image_line

__all__ = ["fold_images"]

_EXTENSIONS = {"image/png": "png", "image/jpeg": "jpg", "image/gif": "gif", "image/webp": "webp"}
_DATA_URL = re.compile(r"^data:([^;,]*);base64,(.*)\Z", re.DOTALL)


def _save(scratchpad: Path, mime: str, data: bytes) -> Path:
    ext = _EXTENSIONS.get(mime.lower(), "bin")
    while True:
        path = scratchpad / f"upload-{secrets.token_hex(4)}.{ext}"
        try:
            f = create_private(path)
        except FileExistsError:
            continue
        with f:
            f.write(data)
        return path


def _line_for(url: str, scratchpad: Path) -> str:
    if url.startswith(("http://", "https://")):
        return attached_image_line(url)
    match = _DATA_URL.match(url)
    if match is None:
        return IMAGE_DROPPED_LINE
    try:
        data = base64.b64decode(match.group(2), validate=True)
    except (binascii.Error, ValueError):
        return IMAGE_DROPPED_LINE
    path = _save(scratchpad, match.group(1), data)
    return attached_image_line(path.resolve().as_posix())


def fold_images(messages: list[OmniMessage], scratchpad: Path) -> list[OmniMessage]:
    """R-IMG-1/2: replace image messages by lines appended to the last user text.

    ``scratchpad`` must exist (the session creates it with private modes, R-ROOT-9).

    Inputs without images come back unchanged (the same list).  Raises ``OSError`` when a data
    URL cannot be saved (R-STEER-6: the run must not continue without its images).
    """
    if not any(isinstance(m.payload, ImageUrlPayload) for m in messages):
        return messages
    lines: list[str] = []
    kept: list[OmniMessage] = []
    for msg in messages:
        if isinstance(msg.payload, ImageUrlPayload):
            lines.append(_line_for(msg.payload.image_url, scratchpad))
        else:
            kept.append(msg)
    joined = "\n".join(lines)
    for i in range(len(kept) - 1, -1, -1):
        p = kept[i].payload
        if isinstance(p, TextPayload) and p.role == "user":
            kept[i] = user_text(
                p.text + "\n\n" + joined, sender=p.sender, timestamp=kept[i].timestamp
            )
            return kept
    kept.append(user_text(joined))
    return kept
