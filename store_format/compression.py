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
_READ_CHUNK = 1 << 20  # output is produced and counted this much at a time
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
            out = _capped(d, body, max_output + 1, lambda: d.unconsumed_tail)
            if not d.eof and len(out) <= max_output:
                raise StoreFormatError(ErrorKind.DECOMPRESSION, "zlib stream is truncated", field="body")
        elif kind == "LZ4":
            d = lz4.frame.LZ4FrameDecompressor()
            out = _capped(d, body, max_output + 1, lambda: b"")  # lz4 keeps unread input itself
            if not d.eof and len(out) <= max_output:
                raise StoreFormatError(ErrorKind.DECOMPRESSION, "lz4 frame is truncated", field="body")
        elif kind == "ZSTD":
            # zstd's one-shot API allocates whatever content size a frame header declares, and its stream reader
            # says nothing of a frame cut short; so a streaming pass counts the output first (memory: one
            # chunk), and only a frame known to fit is decoded, by an object that tells whether it ended
            out = None  # past the cap
            if _zstd_output_size(body, max_output + 1) <= max_output:
                whole = zstandard.ZstdDecompressor().decompressobj()
                out = whole.decompress(body)
                if not whole.eof:
                    raise StoreFormatError(ErrorKind.DECOMPRESSION, "zstd frame is truncated", field="body")
        else:
            raise StoreFormatError(ErrorKind.DECOMPRESSION, f"unknown compression {kind}", field="body")
    except StoreFormatError:
        raise
    except (zlib.error, RuntimeError, zstandard.ZstdError, ValueError) as e:
        raise StoreFormatError(ErrorKind.DECOMPRESSION, f"{kind} body cannot be decompressed: {e}", field="body") from None
    if out is None or len(out) > max_output:
        raise StoreFormatError(ErrorKind.DECOMPRESSION,
                               f"{kind} body expands past the {max_output}-byte cap (possible decompression bomb)",
                               field="body")
    return out



def _zstd_output_size(body: bytes, limit: int) -> int:
    """How many bytes the first zstd frame of ``body`` decodes to, counting no further than ``limit``."""
    n = 0
    with zstandard.ZstdDecompressor().stream_reader(body) as reader:
        while n < limit:
            chunk = reader.read(min(_READ_CHUNK, limit - n))
            if not chunk:
                break
            n += len(chunk)
    return n


def _capped(d, body: bytes, limit: int, unread) -> bytes:
    """Up to ``limit`` bytes from a zlib/lz4 decompressor, in chunks: lz4 allocates its whole ``max_length``
    up front and zlib grows to twice it, so one call with the cap would cost 64-128 MiB for any body."""
    out, data = bytearray(), body
    while len(out) < limit:
        chunk = d.decompress(data, min(_READ_CHUNK, limit - len(out)))
        data = unread()
        out += chunk
        if d.eof or not chunk:
            break
    return bytes(out) if len(out) < limit else out  # past the cap the caller only needs the length
