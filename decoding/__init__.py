"""Bulk decoding of CommitLog records, in three parts from the ground up (tests/test_layers.py holds the order):

* the schemas' column descriptions (:mod:`decoding.columns`), which every Arrow schema of the project declares;
* the kernels: the numba-compiled record passes and their compile cache (:mod:`decoding.compiled`, the only module
  that imports numba) under the Arrow kernels (:mod:`decoding.kernels`) and the small files' tables
  (:mod:`decoding.metadata`), Arrow in and Arrow out, no Spark;
* the Spark Arrow UDFs over the kernels (:mod:`decoding.spark`, the only module that imports pyspark; imported on
  demand, so kernel users need no Spark)."""
from .kernels import (ALL_COLUMNS, DEFAULT_COLUMNS, MESSAGE_DECODER_COLUMNS, Frames, decode_binary, decode_buffer,
                      decode_frames, frames_from_binary, frames_from_buffer, message_schema, resolve_columns,
                      tune_allocator)

__all__ = ["ALL_COLUMNS", "DEFAULT_COLUMNS", "MESSAGE_DECODER_COLUMNS", "Frames", "decode_binary", "decode_buffer",
           "decode_frames", "frames_from_binary", "frames_from_buffer", "message_schema", "resolve_columns",
           "tune_allocator"]
