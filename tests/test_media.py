"""Tests for hermes_es.media: attachments inspected once and rendered for the model context."""

from __future__ import annotations

import struct
import wave
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest

from hermes_es.errors import ResponderError, ValidationError
from hermes_es.media import (
    Attachment,
    describe_attachment,
    find_paths_in_message,
    image_dimensions,
    render_attachment_text,
)


def _attach(
    path: Path,
    *,
    can_see_images: bool = False,
    describe_image: Callable[[Path], str] | None = None,
    transcriber: Callable[[Path], str] | None = None,
    max_text_bytes: int = 200_000,
) -> Attachment:
    return describe_attachment(
        path,
        can_see_images=can_see_images,
        describe_image=describe_image,
        transcriber=transcriber,
        max_text_bytes=max_text_bytes,
    )


def _png(width: int, height: int) -> bytes:
    """A real, decodable greyscale PNG of the given size."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    raw = b"".join(b"\x00" + b"\x80" * width for _ in range(height))
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(raw))
        + chunk(b"IEND", b"")
    )


def _pdf(lines: list[str]) -> bytes:
    """A minimal valid one-page PDF showing ``lines`` in Helvetica, with a correct xref table."""
    ops = ["BT", "/F1 12 Tf", "72 720 Td", "14 TL"]
    for line in lines:
        escaped = line.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")
        ops.append(f"({escaped}) Tj T*")
    ops.append("ET")
    stream = "\n".join(ops).encode("latin-1")
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
        b"/Resources << /Font << /F1 4 0 R >> >> /Contents 5 0 R >>",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream",
    ]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    for offset in offsets:
        out += b"%010d 00000 n \n" % offset
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        xref,
    )
    return bytes(out)


def _wav(path: Path) -> Path:
    with wave.open(str(path), "wb") as handle:
        handle.setnchannels(1)
        handle.setsampwidth(2)
        handle.setframerate(8000)
        handle.writeframes(b"\x00\x00" * 800)
    return path


def test_plain_text_is_extracted(tmp_path: Path) -> None:
    """A .txt file becomes a document with its full text."""
    path = tmp_path / "notes.txt"
    path.write_text("remember the milk\nand the eggs\n", encoding="utf-8")
    att = _attach(path)
    assert att.kind == "document"
    assert att.text == "remember the milk\nand the eggs\n"
    assert att.mime == "text/plain"
    assert att.size == path.stat().st_size
    assert att.path == str(path.resolve())


def test_markdown_is_extracted_and_rendered(tmp_path: Path) -> None:
    """Markdown is a document whose rendered block starts with the attached-document header."""
    path = tmp_path / "notes.md"
    path.write_text("# Plan\n\n- ship it\n", encoding="utf-8")
    att = _attach(path)
    assert att.kind == "document" and att.mime == "text/markdown"
    rendered = render_attachment_text(att)
    assert rendered.startswith("[attached document: notes.md]\n")
    assert "# Plan\n\n- ship it" in rendered
    assert f"path: {path.resolve()}" in rendered
    assert rendered.endswith("[end of attached document: notes.md]")


def test_code_file_is_extracted(tmp_path: Path) -> None:
    """Source code is text; a UTF-8 BOM is dropped."""
    path = tmp_path / "main.py"
    path.write_bytes(b"\xef\xbb\xbfdef main() -> None:\n    print('hi')\n")
    att = _attach(path)
    assert att.kind == "document" and att.mime == "text/x-python"
    assert att.text == "def main() -> None:\n    print('hi')\n"


def test_unknown_extension_is_sniffed_as_utf8_text(tmp_path: Path) -> None:
    """A file with no known extension is a document when its bytes are UTF-8 text."""
    path = tmp_path / "Dockerfile"
    path.write_text("FROM python:3.11\nRUN echo 'héllo'\n", encoding="utf-8")
    att = _attach(path)
    assert att.kind == "document"
    assert att.text is not None and "héllo" in att.text


def test_text_file_starting_like_a_signature_stays_text(tmp_path: Path) -> None:
    """A .txt that happens to start with "BM" or "ID3" is still a text document."""
    path = tmp_path / "cars.txt"
    path.write_text("BMW and Audi, 12345678901234567890 ID3\n", encoding="utf-8")
    att = _attach(path)
    assert att.kind == "document" and att.text is not None and att.text.startswith("BMW")


def test_binary_blob_is_other_with_path_only(tmp_path: Path) -> None:
    """Bytes that are no known format and not text are kept as a path only."""
    path = tmp_path / "blob.bin"
    path.write_bytes(bytes(range(256)) * 4)
    att = _attach(path)
    assert att.kind == "other" and att.text is None
    assert "binary file, 1024 bytes" in att.note


def test_pdf_text_is_extracted(tmp_path: Path) -> None:
    """A real PDF's text comes out through pypdf."""
    path = tmp_path / "report.pdf"
    path.write_bytes(_pdf(["Quarterly report", "Revenue grew (a lot)"]))
    att = _attach(path)
    assert att.kind == "document" and att.mime == "application/pdf"
    assert att.text is not None
    assert "Quarterly report" in att.text and "Revenue grew (a lot)" in att.text
    assert "1-page PDF" in att.note


def test_pdf_over_the_limit_keeps_only_the_path(tmp_path: Path) -> None:
    """A PDF whose text passes max_text_bytes is kept as a path with a note."""
    path = tmp_path / "long.pdf"
    path.write_bytes(_pdf(["x" * 80] * 20))
    att = _attach(path, max_text_bytes=500)
    assert att.text is None and "over the 500-byte text limit" in att.note


def test_broken_pdf_keeps_only_the_path(tmp_path: Path) -> None:
    """A file that starts like a PDF but is not one is kept as a path with a note."""
    path = tmp_path / "broken.pdf"
    path.write_bytes(b"%PDF-1.4\ngarbage with no objects\n")
    att = _attach(path)
    assert att.kind == "document" and att.text is None
    assert "only the path is kept" in att.note


def test_large_text_file_keeps_only_the_path(tmp_path: Path) -> None:
    """A text file over max_text_bytes is not read into context."""
    path = tmp_path / "huge.log"
    path.write_text("line\n" * 1000, encoding="utf-8")
    att = _attach(path, max_text_bytes=1000)
    assert att.kind == "document" and att.text is None
    assert att.note == "5000 bytes, over the 1000-byte text limit; only the path is kept"
    rendered = render_attachment_text(att)
    assert "line\nline" not in rendered and str(path.resolve()) in rendered


def test_png_without_vision_keeps_path_and_dimensions(tmp_path: Path) -> None:
    """An image the model cannot see is kept as path plus format and width×height."""
    path = tmp_path / "shot.png"
    path.write_bytes(_png(37, 21))
    att = _attach(path)
    assert att.kind == "image" and att.mime == "image/png" and att.text is None
    assert att.note.startswith(f"PNG image, 37×21, {path.stat().st_size} bytes")
    assert "model cannot see images" in att.note


def test_png_with_vision_is_described_once(tmp_path: Path) -> None:
    """With vision, the describer runs once and its text is what is kept."""
    path = tmp_path / "cat.png"
    path.write_bytes(_png(4, 4))
    calls: list[Path] = []

    def describe(p: Path) -> str:
        calls.append(p)
        return "a small grey square"

    att = _attach(path, can_see_images=True, describe_image=describe)
    assert calls == [path.resolve()]
    assert att.text == "a small grey square"
    assert "description:\na small grey square" in render_attachment_text(att)


def test_vision_failure_falls_back_to_path(tmp_path: Path) -> None:
    """A describer raising ResponderError leaves the path and a note, not an exception."""
    path = tmp_path / "cat.png"
    path.write_bytes(_png(4, 4))

    def describe(p: Path) -> str:
        raise ResponderError("vision endpoint down")

    att = _attach(path, can_see_images=True, describe_image=describe)
    assert att.text is None and "vision failed (vision endpoint down)" in att.note


def test_gif_and_jpeg_dimensions_are_read(tmp_path: Path) -> None:
    """GIF and JPEG headers give width and height; the extension does not matter."""
    gif = tmp_path / "anim.gif"
    gif.write_bytes(b"GIF89a" + struct.pack("<HH", 320, 200) + b"\x00" * 20)
    jpeg = tmp_path / "photo.dat"
    app0 = b"\xff\xe0" + struct.pack(">H", 16) + b"JFIF\x00" + b"\x00" * 9
    sof0 = b"\xff\xc0" + struct.pack(">HBHHB", 11, 8, 480, 640, 1) + b"\x01\x11\x00"
    jpeg.write_bytes(b"\xff\xd8" + app0 + sof0 + b"\xff\xd9")
    assert image_dimensions(gif, "image/gif") == (320, 200)
    att = _attach(jpeg)
    assert att.kind == "image" and att.mime == "image/jpeg"
    assert "JPEG image, 640×480" in att.note


def test_audio_with_transcriber_keeps_the_transcript(tmp_path: Path) -> None:
    """Audio is transcribed once when a transcriber is given."""
    path = _wav(tmp_path / "memo.wav")
    att = _attach(path, transcriber=lambda p: f"transcript of {p.name}")
    assert att.kind == "audio" and att.mime == "audio/wav"
    assert att.text == "transcript of memo.wav"
    assert "transcript:\ntranscript of memo.wav" in render_attachment_text(att)


def test_audio_without_transcriber_keeps_the_path(tmp_path: Path) -> None:
    """Without a transcriber, audio is a path with a note."""
    path = _wav(tmp_path / "memo.wav")
    att = _attach(path)
    assert att.kind == "audio" and att.text is None
    assert "no transcriber configured" in att.note
    rendered = render_attachment_text(att)
    assert rendered.startswith("[attached audio: memo.wav]\n")
    assert "transcript:" not in rendered


def test_missing_file_and_directory_are_validation_errors(tmp_path: Path) -> None:
    """A missing path or a directory raises ValidationError naming the path."""
    missing = tmp_path / "nope.txt"
    with pytest.raises(ValidationError, match="attachment not found") as info:
        _attach(missing)
    assert str(missing) in str(info.value)
    with pytest.raises(ValidationError, match="not a regular file") as info:
        _attach(tmp_path)
    assert str(tmp_path) in str(info.value)


def test_paths_in_message_are_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Absolute, ~/ and cwd-relative paths that exist as files are found, in order, once each."""
    home = tmp_path / "home"
    (home / "docs").mkdir(parents=True)
    (home / "docs" / "plan.md").write_text("p")
    monkeypatch.setenv("HOME", str(home))
    cwd = tmp_path / "project"
    (cwd / "src").mkdir(parents=True)
    (cwd / "src" / "app.py").write_text("a")
    (cwd / "notes with space.txt").write_text("n")
    other = tmp_path / "elsewhere.csv"
    other.write_text("c")

    message = (
        f"Compare src/app.py with ~/docs/plan.md, and {other}. "
        f'Also "notes with space.txt" and ./src/app.py again; ignore missing.txt, '
        f"the folder {cwd / 'src'} and https://example.com/a.py"
    )
    found = find_paths_in_message(message, cwd)
    assert found == [
        (cwd / "src" / "app.py").resolve(),
        (home / "docs" / "plan.md").resolve(),
        other.resolve(),
        (cwd / "notes with space.txt").resolve(),
    ]


def test_no_paths_in_plain_prose(tmp_path: Path) -> None:
    """Ordinary words are not paths, even when a same-named file exists without a dot."""
    (tmp_path / "hello").write_text("h")
    assert find_paths_in_message("hello there, how are you?", tmp_path) == []


def test_apostrophes_do_not_hide_paths(tmp_path: Path) -> None:
    """A path between two apostrophes is still found, and file:// URLs count too."""
    (tmp_path / "app.py").write_text("a")
    (tmp_path / "b.txt").write_text("b")
    text = f"don't open app.py, it's broken; see file://{tmp_path / 'b.txt'}"
    assert find_paths_in_message(text, tmp_path) == [
        (tmp_path / "app.py").resolve(),
        (tmp_path / "b.txt").resolve(),
    ]
