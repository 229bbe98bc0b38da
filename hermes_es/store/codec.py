"""The stored form of an event payload: msgpack, zstd-compressed with a shipped dictionary.

The recorder ``pack``s every payload it inserts and ``unpack``s what it selects; every reader
of the ``events`` table decodes through ``hermes_es.events.decode``, which ``unpack``s too.

Layout. A stored payload whose first byte is not ``0xC1`` is the payload itself: every event
written before compression existed, and anything compression would not shrink. ``0xC1`` is
the one byte msgpack never produces, so it marks the framed forms unambiguously:

* ``C1 00 <payload>``: stored as is (an arbitrary payload that itself starts with ``C1``);
* ``C1 <id> <frame>``: a zstd frame without its magic number, checksum or dictionary id,
  compressed with dictionary ``id`` of ``hermes_es.store.zdict`` (content size in the frame).

Chat messages are short (a few hundred bytes), too short for zstd to find repeats inside one;
the dictionary supplies common words and the field names every event repeats, and (from
dictionary 2 on) the entropy tables, which zstd would otherwise build for every payload. No
dictionary is trained on the store's own text (it would keep fragments of deleted sessions).
"""

from __future__ import annotations

import threading

import msgspec
import zstandard

from hermes_es.store.zdict import CURRENT, DICTIONARIES, FULL

MARK = 0xC1
"""First byte of a framed payload (never the first byte of a msgpack document)."""
RAW = 0
"""Kind byte after ``MARK``: the payload follows uncompressed."""
LEVEL = 3
"""zstd level: higher levels gain ~2% on these sizes and cost 1.5-2x the CPU."""
MIN_SIZE = 48
"""Payloads shorter than this are stored as they are (the frame would not pay for itself)."""

_MARK_BYTE = bytes([MARK])
_FRAMED = bytes((MARK, CURRENT))
"""The two bytes before a frame compressed with the current dictionary."""
_ESCAPED = bytes((MARK, RAW))


class PayloadError(msgspec.DecodeError):
    """A stored payload is framed but cannot be unpacked (unknown dictionary, bad frame)."""


class _Codecs(threading.local):
    """Per-thread compressor and decompressors (zstandard contexts are not thread-safe)."""

    def __init__(self) -> None:
        self.compressor: zstandard.ZstdCompressor | None = None
        self.decompressors: dict[int, zstandard.ZstdDecompressor] = {}


_DICTS: dict[int, zstandard.ZstdCompressionDict] = {}
_DICTS_LOCK = threading.Lock()
_local = _Codecs()


def _dictionary(dict_id: int) -> zstandard.ZstdCompressionDict:
    found = _DICTS.get(dict_id)
    if found is None:
        raw = DICTIONARIES.get(dict_id)
        if raw is None:
            raise PayloadError(f"stored event payload uses unknown dictionary {dict_id}")
        with _DICTS_LOCK:
            found = _DICTS.get(dict_id)
            if found is None:
                kind = zstandard.DICT_TYPE_RAWCONTENT
                if dict_id in FULL:
                    kind = zstandard.DICT_TYPE_FULLDICT
                found = zstandard.ZstdCompressionDict(raw, dict_type=kind)
                if dict_id == CURRENT:
                    found.precompute_compress(level=LEVEL)
                _DICTS[dict_id] = found
    return found


def _compressor() -> zstandard.ZstdCompressor:
    c = _local.compressor
    if c is None:
        # Magicless frames save 4 bytes a payload; the MARK byte already says "framed".
        c = _local.compressor = zstandard.ZstdCompressor(
            level=LEVEL,
            dict_data=_dictionary(CURRENT),
            compression_params=zstandard.ZstdCompressionParameters.from_level(
                LEVEL,
                format=zstandard.FORMAT_ZSTD1_MAGICLESS,
                write_checksum=0,
                write_content_size=1,
                write_dict_id=0,
            ),
        )
    return c


def _decompressor(dict_id: int) -> zstandard.ZstdDecompressor:
    d = _local.decompressors.get(dict_id)
    if d is None:
        d = _local.decompressors[dict_id] = zstandard.ZstdDecompressor(
            dict_data=_dictionary(dict_id), format=zstandard.FORMAT_ZSTD1_MAGICLESS
        )
    return d


def pack(payload: bytes) -> bytes:
    """The stored form of ``payload`` (compressed when that makes it smaller)."""
    if len(payload) >= MIN_SIZE:
        frame = (_local.compressor or _compressor()).compress(payload)
        if len(frame) + 2 < len(payload):
            return _FRAMED + frame
    if payload[:1] == _MARK_BYTE:
        return _ESCAPED + payload
    return payload


def unpack(stored: bytes) -> bytes:
    """The payload ``stored`` holds (stored forms of every release are understood)."""
    if stored[:1] != _MARK_BYTE:
        return bytes(stored)  # the same object when it already is bytes
    if len(stored) < 2:
        raise PayloadError("stored event payload is truncated (a lone frame marker)")
    kind = stored[1]
    if kind == RAW:
        return stored[2:]
    try:
        return _decompressor(kind).decompress(stored[2:])
    except zstandard.ZstdError as exc:
        raise PayloadError(f"stored event payload does not decompress: {exc}") from exc


def is_packed(stored: bytes) -> bool:
    """True when ``stored`` is a compressed frame (not a plain or escaped payload)."""
    return len(stored) >= 2 and stored[0] == MARK and stored[1] != RAW
