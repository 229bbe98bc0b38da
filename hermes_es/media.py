"""Attachments handled once: documents become text, images a description, audio a transcript.

``describe_attachment`` inspects a file a single time and returns an ``Attachment`` whose
``render_attachment_text`` is what goes into the model context, so later turns never carry the
original bytes. When a file cannot be turned into text (too large, no vision, no transcriber),
only its path and a short note are kept.
"""

from __future__ import annotations

import mimetypes
import re
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Literal

import msgspec

from hermes_es.errors import HermesError, ValidationError

AttachmentKind = Literal["document", "image", "audio", "other"]

DEFAULT_MAX_TEXT_BYTES = 200_000
_SNIFF_BYTES = 8192


class Attachment(msgspec.Struct, frozen=True, kw_only=True):
    """One file, inspected once."""

    kind: AttachmentKind
    """What the file is: document, image, audio or other."""
    path: str
    """Absolute path of the file."""
    text: str | None
    """Extracted text, image description or transcript; None when only the path is kept."""
    note: str
    """A one-line human note: what was done, or why only the path is kept."""
    size: int
    """File size in bytes."""
    mime: str
    """MIME type, from the file's magic bytes or its extension."""


# --- recognising files -----------------------------------------------------------------------

_TEXT_MIME_BY_EXT = {
    ".txt": "text/plain",
    ".text": "text/plain",
    ".log": "text/plain",
    ".md": "text/markdown",
    ".markdown": "text/markdown",
    ".rst": "text/x-rst",
    ".csv": "text/csv",
    ".tsv": "text/tab-separated-values",
    ".json": "application/json",
    ".jsonl": "application/jsonl",
    ".yaml": "application/yaml",
    ".yml": "application/yaml",
    ".toml": "application/toml",
    ".ini": "text/plain",
    ".cfg": "text/plain",
    ".xml": "application/xml",
    ".html": "text/html",
    ".htm": "text/html",
    ".css": "text/css",
    ".py": "text/x-python",
    ".pyi": "text/x-python",
    ".js": "text/javascript",
    ".mjs": "text/javascript",
    ".ts": "text/x-typescript",
    ".tsx": "text/x-typescript",
    ".jsx": "text/javascript",
    ".go": "text/x-go",
    ".rs": "text/x-rust",
    ".c": "text/x-c",
    ".h": "text/x-c",
    ".cc": "text/x-c++",
    ".cpp": "text/x-c++",
    ".hpp": "text/x-c++",
    ".java": "text/x-java",
    ".kt": "text/x-kotlin",
    ".rb": "text/x-ruby",
    ".php": "text/x-php",
    ".swift": "text/x-swift",
    ".sh": "text/x-shellscript",
    ".bash": "text/x-shellscript",
    ".zsh": "text/x-shellscript",
    ".sql": "application/sql",
    ".diff": "text/x-diff",
    ".patch": "text/x-diff",
}
_IMAGE_MIME_BY_EXT = {
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".gif": "image/gif",
    ".webp": "image/webp",
    ".bmp": "image/bmp",
    ".tif": "image/tiff",
    ".tiff": "image/tiff",
    ".heic": "image/heic",
}
_AUDIO_MIME_BY_EXT = {
    ".mp3": "audio/mpeg",
    ".wav": "audio/wav",
    ".ogg": "audio/ogg",
    ".oga": "audio/ogg",
    ".opus": "audio/opus",
    ".m4a": "audio/mp4",
    ".aac": "audio/aac",
    ".flac": "audio/flac",
}


def _magic_mime(head: bytes) -> str | None:
    """MIME type from a file's first bytes, for the binary formats handled here."""
    if head.startswith(b"%PDF-"):
        return "application/pdf"
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if head.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if head[:6] in (b"GIF87a", b"GIF89a"):
        return "image/gif"
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "image/webp"
    if head[:4] == b"RIFF" and head[8:12] == b"WAVE":
        return "audio/wav"
    if head.startswith(b"BM") and len(head) >= 26 and head[14] in (12, 40, 52, 56, 108, 124):
        return "image/bmp"
    if head.startswith(b"ID3") or head[:2] in (b"\xff\xfb", b"\xff\xf3", b"\xff\xf2"):
        return "audio/mpeg"
    if head.startswith(b"OggS"):
        return "audio/ogg"
    if head.startswith(b"fLaC"):
        return "audio/flac"
    if head[4:8] == b"ftyp" and head[8:12] in (b"M4A ", b"M4B "):
        return "audio/mp4"
    return None


def _looks_like_utf8_text(head: bytes) -> bool:
    """True when the sample has no NUL byte and decodes as UTF-8 (a cut last character is ok)."""
    if b"\x00" in head:
        return False
    for trim in range(4):
        try:
            head[: len(head) - trim].decode("utf-8")
        except UnicodeDecodeError:
            continue
        return True
    return False


def _classify(path: Path, head: bytes) -> tuple[AttachmentKind, str]:
    """Kind and MIME type: magic bytes first, then the extension, then UTF-8 sniffing."""
    magic = _magic_mime(head)
    suffix = path.suffix.lower()
    if magic == "application/pdf":
        return "document", magic
    # A text extension with text content wins over a weak signature ("BM…", "ID3…").
    if suffix in _TEXT_MIME_BY_EXT and _looks_like_utf8_text(head):
        return "document", _TEXT_MIME_BY_EXT[suffix]
    if magic is not None:
        return ("image" if magic.startswith("image/") else "audio"), magic
    if suffix in _IMAGE_MIME_BY_EXT:
        return "image", _IMAGE_MIME_BY_EXT[suffix]
    if suffix in _AUDIO_MIME_BY_EXT:
        return "audio", _AUDIO_MIME_BY_EXT[suffix]
    if suffix in _TEXT_MIME_BY_EXT:
        return "document", _TEXT_MIME_BY_EXT[suffix]
    if _looks_like_utf8_text(head):
        return "document", "text/plain"
    guessed, _ = mimetypes.guess_type(path.name)
    return "other", guessed or "application/octet-stream"


# --- image dimensions ------------------------------------------------------------------------


def _png_size(data: bytes) -> tuple[int, int] | None:
    if len(data) >= 24 and data[12:16] == b"IHDR":
        width, height = struct.unpack(">II", data[16:24])
        return int(width), int(height)
    return None


def _gif_size(data: bytes) -> tuple[int, int] | None:
    if len(data) >= 10:
        width, height = struct.unpack("<HH", data[6:10])
        return int(width), int(height)
    return None


def _bmp_size(data: bytes) -> tuple[int, int] | None:
    if len(data) >= 26:
        width, height = struct.unpack("<ii", data[18:26])
        return abs(int(width)), abs(int(height))
    return None


def _webp_size(data: bytes) -> tuple[int, int] | None:
    chunk = data[12:16]
    if chunk == b"VP8 " and len(data) >= 30:
        width, height = struct.unpack("<HH", data[26:30])
        return int(width) & 0x3FFF, int(height) & 0x3FFF
    if chunk == b"VP8L" and len(data) >= 25:
        bits = int.from_bytes(data[21:25], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if chunk == b"VP8X" and len(data) >= 30:
        width = int.from_bytes(data[24:27], "little") + 1
        height = int.from_bytes(data[27:30], "little") + 1
        return width, height
    return None


# JPEG start-of-frame markers carry the dimensions; C4, C8 and CC are other segment types.
_JPEG_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}


def _jpeg_size(data: bytes) -> tuple[int, int] | None:
    index = 2
    while index + 4 <= len(data):
        if data[index] != 0xFF:
            return None
        marker = data[index + 1]
        if marker == 0xFF:  # fill byte
            index += 1
            continue
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:  # markers without a length
            index += 2
            continue
        (length,) = struct.unpack(">H", data[index + 2 : index + 4])
        if marker in _JPEG_SOF and index + 9 <= len(data):
            height, width = struct.unpack(">HH", data[index + 5 : index + 9])
            return int(width), int(height)
        index += 2 + int(length)
    return None


_SIZE_READERS: dict[str, Callable[[bytes], tuple[int, int] | None]] = {
    "image/png": _png_size,
    "image/gif": _gif_size,
    "image/bmp": _bmp_size,
    "image/webp": _webp_size,
    "image/jpeg": _jpeg_size,
}


def image_dimensions(path: Path, mime: str) -> tuple[int, int] | None:
    """Width and height from the image header (PNG, GIF, JPEG, WebP, BMP), None if unknown."""
    reader = _SIZE_READERS.get(mime)
    if reader is None:
        return None
    with path.open("rb") as handle:
        data = handle.read(64 * 1024 if mime == "image/jpeg" else 64)
    return reader(data)


# --- describing one attachment ---------------------------------------------------------------


def _path_only(kind: AttachmentKind, path: Path, size: int, mime: str, note: str) -> Attachment:
    return Attachment(kind=kind, path=str(path), text=None, note=note, size=size, mime=mime)


def _too_large_note(size: int, limit: int) -> str:
    return f"{size} bytes, over the {limit}-byte text limit; only the path is kept"


def _pdf_text(path: Path, max_text_bytes: int) -> tuple[str | None, str]:
    """Text of a PDF page by page, stopping once it passes the limit; (text or None, note)."""
    import pypdf  # imported here: only PDFs pay for it

    try:
        reader = pypdf.PdfReader(str(path))
        if reader.is_encrypted and not reader.decrypt(""):
            return None, "encrypted PDF; only the path is kept"
        pages: list[str] = []
        used = 0
        for page in reader.pages:
            page_text = page.extract_text() or ""
            pages.append(page_text)
            used += len(page_text.encode("utf-8"))
            if used > max_text_bytes:
                return None, (
                    f"PDF text is over the {max_text_bytes}-byte text limit; only the path is kept"
                )
        page_count = len(reader.pages)
    except Exception as exc:  # pypdf raises many exception types on malformed files
        return None, f"could not read PDF ({exc}); only the path is kept"
    text = "\n\n".join(p.strip() for p in pages if p.strip())
    if not text:
        return None, f"PDF with {page_count} page(s) but no extractable text; only the path is kept"
    return text, f"text extracted from a {page_count}-page PDF"


def _document(path: Path, size: int, mime: str, max_text_bytes: int) -> Attachment:
    if mime == "application/pdf":
        text, note = _pdf_text(path, max_text_bytes)
        return Attachment(
            kind="document", path=str(path), text=text, note=note, size=size, mime=mime
        )
    if size > max_text_bytes:
        return _path_only("document", path, size, mime, _too_large_note(size, max_text_bytes))
    data = path.read_bytes()
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        return _path_only("document", path, size, mime, "not UTF-8 text; only the path is kept")
    if "\x00" in text:
        return _path_only("document", path, size, mime, "contains NUL bytes; only the path is kept")
    return Attachment(
        kind="document", path=str(path), text=text, note="text extracted", size=size, mime=mime
    )


def _image_metadata(path: Path, mime: str, size: int) -> str:
    fmt = mime.split("/", 1)[1].upper()
    dims = image_dimensions(path, mime)
    shape = f", {dims[0]}×{dims[1]}" if dims else ""
    return f"{fmt} image{shape}, {size} bytes"


def _image(
    path: Path,
    size: int,
    mime: str,
    can_see_images: bool,
    describe_image: Callable[[Path], str] | None,
) -> Attachment:
    metadata = _image_metadata(path, mime, size)
    if can_see_images and describe_image is not None:
        try:
            description = describe_image(path)
        except HermesError as exc:
            note = f"{metadata}; vision failed ({exc}); only the path is kept"
            return _path_only("image", path, size, mime, note)
        note = f"{metadata}; described once by vision"
        return Attachment(
            kind="image", path=str(path), text=description, note=note, size=size, mime=mime
        )
    reason = "model cannot see images" if not can_see_images else "no vision describer"
    return _path_only("image", path, size, mime, f"{metadata}; {reason}; only the path is kept")


def _audio(
    path: Path, size: int, mime: str, transcriber: Callable[[Path], str] | None
) -> Attachment:
    if transcriber is None:
        note = f"audio, {size} bytes; no transcriber configured; only the path is kept"
        return _path_only("audio", path, size, mime, note)
    try:
        transcript = transcriber(path)
    except HermesError as exc:
        note = f"audio, {size} bytes; transcription failed ({exc}); only the path is kept"
        return _path_only("audio", path, size, mime, note)
    return Attachment(
        kind="audio", path=str(path), text=transcript, note="transcribed", size=size, mime=mime
    )


def describe_attachment(
    path: Path,
    *,
    can_see_images: bool,
    describe_image: Callable[[Path], str] | None,
    transcriber: Callable[[Path], str] | None,
    max_text_bytes: int = DEFAULT_MAX_TEXT_BYTES,
) -> Attachment:
    """Inspect ``path`` once and return what the model should keep of it."""
    resolved = path.expanduser().resolve()
    if not resolved.exists():
        raise ValidationError(f"attachment not found: {path}", subject=str(path))
    if not resolved.is_file():
        raise ValidationError(f"attachment is not a regular file: {path}", subject=str(path))
    try:
        size = resolved.stat().st_size
        with resolved.open("rb") as handle:
            head = handle.read(_SNIFF_BYTES)
    except OSError as exc:
        raise ValidationError(
            f"cannot read attachment {path}: {exc.strerror}", subject=str(path)
        ) from exc
    kind, mime = _classify(resolved, head)
    if kind == "document":
        return _document(resolved, size, mime, max_text_bytes)
    if kind == "image":
        return _image(resolved, size, mime, can_see_images, describe_image)
    if kind == "audio":
        return _audio(resolved, size, mime, transcriber)
    return _path_only("other", resolved, size, mime, f"binary file, {size} bytes; path kept")


# --- paths mentioned in a message ------------------------------------------------------------

_QUOTED = re.compile(r"\"([^\"\n]+)\"|'([^'\n]+)'|`([^`\n]+)`")
_TRAILING = ".,;:!?)]}>\"'`"
_LEADING = "([{<\"'`@"


def _candidates(text: str) -> list[str]:
    """Quoted spans and whitespace-separated words (trimmed of punctuation), in text order."""
    found: list[tuple[int, str]] = []
    for match in _QUOTED.finditer(text):
        span = next(group for group in match.groups() if group is not None)
        found.append((match.start(), span))
    for match in re.finditer(r"\S+", text):
        stripped = match.group().lstrip(_LEADING)
        found.append((match.start(), stripped))
        found.append((match.start(), stripped.rstrip(_TRAILING)))
    found.sort(key=lambda item: item[0])
    return [token for _, token in found]


def _looks_like_path(token: str) -> bool:
    """A token worth checking: has a slash, starts with ``~``, or has a file extension."""
    if not token or ("://" in token and not token.startswith("file://")):
        return False
    return "/" in token or token.startswith("~") or "." in token.strip(".")


def find_paths_in_message(text: str, cwd: Path) -> list[Path]:
    """Existing files named in ``text`` (absolute, ``~/…`` or relative to ``cwd``), in order."""
    seen: set[Path] = set()
    paths: list[Path] = []
    for token in _candidates(text):
        if token.startswith("file://"):
            token = token[len("file://") :]
        if not _looks_like_path(token):
            continue
        candidate = Path(token).expanduser()
        if not candidate.is_absolute():
            candidate = cwd / candidate
        try:
            if not candidate.is_file():
                continue
            resolved = candidate.resolve()
        except (OSError, ValueError):
            continue
        if resolved not in seen:
            seen.add(resolved)
            paths.append(resolved)
    return paths


# --- rendering for the model context ---------------------------------------------------------

_TEXT_LABEL = {"document": "content", "image": "description", "audio": "transcript"}


def render_attachment_text(att: Attachment) -> str:
    """The text block that goes into the model context for one attachment."""
    name = Path(att.path).name
    lines = [
        f"[attached {att.kind}: {name}]",
        f"path: {att.path}",
        f"type: {att.mime}, {att.size} bytes",
        f"note: {att.note}",
    ]
    if att.text is not None:
        lines.append(f"{_TEXT_LABEL.get(att.kind, 'text')}:")
        lines.append(att.text.rstrip("\n"))
        lines.append(f"[end of attached {att.kind}: {name}]")
    return "\n".join(lines)
