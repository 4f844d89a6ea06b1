"""Body compression as RocketMQ producers apply it (zlib, lz4 frame, zstd frame), with an output cap.

Producers compress bodies over ``compressMsgBodyOverHowmuch`` (4 KiB); the broker stores the compressed
bytes and sets COMPRESSED_FLAG plus the 3-bit type (lz4 1, zstd 2, zlib 3; 0 = legacy zlib).  Decompression
is always capped so a hostile "bomb" body yields an error, never an unbounded allocation.
"""
from __future__ import annotations

import zlib

import lz4.frame
import zstandard

from .errors import ErrorKind, StoreFormatError

DEFAULT_MAX_DECOMPRESSED = 64 * 1024 * 1024
ZLIB_LEVEL = 5  # RocketMQ's default compressLevel


def compress(body: bytes, kind: str) -> bytes:
    if kind == "ZLIB":
        return zlib.compress(body, ZLIB_LEVEL)
    if kind == "LZ4":
        return lz4.frame.compress(body)
    if kind == "ZSTD":
        return zstandard.ZstdCompressor(level=ZLIB_LEVEL).compress(body)
    raise ValueError(f"unknown compression {kind!r}: use ZLIB, LZ4 or ZSTD")


def decompress(body: bytes, kind: str, max_output: int = DEFAULT_MAX_DECOMPRESSED) -> bytes:
    """Decompress ``body``; more than ``max_output`` bytes or a corrupt stream -> StoreFormatError."""
    try:
        if kind == "ZLIB":
            d = zlib.decompressobj()
            out = d.decompress(body, max_output + 1)
            if not d.eof and len(out) <= max_output:
                raise StoreFormatError(ErrorKind.DECOMPRESSION, "zlib stream is truncated", field="body")
        elif kind == "LZ4":
            d = lz4.frame.LZ4FrameDecompressor()
            out = d.decompress(body, max_length=max_output + 1)
            if not d.eof and len(out) <= max_output:
                raise StoreFormatError(ErrorKind.DECOMPRESSION, "lz4 frame is truncated", field="body")
        elif kind == "ZSTD":
            with zstandard.ZstdDecompressor().stream_reader(body) as reader:
                out = reader.read(max_output + 1)
        else:
            raise StoreFormatError(ErrorKind.DECOMPRESSION, f"unknown compression {kind}", field="body")
    except StoreFormatError:
        raise
    except (zlib.error, RuntimeError, zstandard.ZstdError, ValueError) as e:
        raise StoreFormatError(ErrorKind.DECOMPRESSION, f"{kind} body cannot be decompressed: {e}", field="body") from None
    if len(out) > max_output:
        raise StoreFormatError(ErrorKind.DECOMPRESSION,
                               f"{kind} body expands past the {max_output}-byte cap (possible decompression bomb)",
                               field="body")
    return out
