"""Bulk decoding of CommitLog records: Arrow kernels (:mod:`udfs.kernels` over the numba-compiled passes of
:mod:`udfs.compiled`; no Spark) and their Spark wrappers (:mod:`udfs.spark`, imported on demand so kernel
users need no Spark)."""
from .kernels import (ALL_COLUMNS, DEFAULT_COLUMNS, MESSAGE_DECODER_COLUMNS, Frames, decode_binary, decode_buffer,
                      decode_frames, frames_from_binary, frames_from_buffer, message_schema, resolve_columns,
                      tune_allocator)

__all__ = ["ALL_COLUMNS", "DEFAULT_COLUMNS", "MESSAGE_DECODER_COLUMNS", "Frames", "decode_binary", "decode_buffer",
           "decode_frames", "frames_from_binary", "frames_from_buffer", "message_schema", "resolve_columns",
           "tune_allocator"]
