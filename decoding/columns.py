"""Column descriptions, kept where each schema is declared: in its Arrow fields' metadata (key ``description``).
tools/schema_docs.py writes docs/output-schemas.md from them, so a column and what it means sit side by side.

The descriptions document the schema; they never reach an output.  Spark does not see them (pyspark's
``from_arrow_schema`` carries only its own metadata key into a StructField), and a table written by pyarrow is
written through :func:`plain`, so its Parquet file is the same bytes as without them.

This module is the home of the columns many tables share (:data:`SHARED`: broker, topic, ...): a schema declares
such a column with :func:`column` and no text, and writes its own only where its column means something else.
It lives at the bottom of the packages that declare schemas (decoding.kernels, the data sources, the jobs).
"""
from __future__ import annotations

import pyarrow as pa

DESCRIPTION = b"description"

SHARED = {
    "broker": "the broker the row belongs to: `--store NAME=PATH`'s NAME, else brokerName from the dump's "
              "broker.properties, else the store root's folder (`.../<broker>/store` -> `<broker>`; runtime/stores.py)",
    "run_id": "the audit run: `<UTC time>-<8 hex digits>`, one per `jobs.audit` run",
    "run_time": "when the audit run started (UTC, to the microsecond)",
    "topic": "topic name", "queue_id": "queue id within the topic",
    "queue_offset": "position in the consume queue (the message's QUEUEOFFSET)",
    "physical_offset": "byte offset in the broker's whole commitlog (segment base offset + file position)",
    "segment": "commitlog segment file name (its 20-digit base offset)",
    "file_position": "byte position inside the file (`segment` or `file`)",
    "group": "consumer group", "uniq_key": "the message's UNIQ_KEY property (the client-side message id)",
    "min_offset": "first queue offset the consume queue holds a unit for",
    "max_offset": "one past the last unit's queue offset (the broker's getMaxOffsetInQueue)",
    "store_size": "TOTALSIZE: the record's length in bytes",
    "store_timestamp": "STORETIMESTAMP, ms since the epoch (the broker's clock)",
}


def column(name: str, type: pa.DataType, description: str | None = None, nullable: bool = True) -> pa.Field:
    """A described field: ``description``, else the shared one of a column named ``name`` (a KeyError if neither)."""
    text = SHARED.get(name) if description is None else description
    if not text:
        raise KeyError(f"column {name!r}: no description given, and {name!r} is not in decoding.columns.SHARED")
    return pa.field(name, type, nullable, metadata={DESCRIPTION: text.encode("utf-8")})


def description(field: pa.Field) -> str | None:
    """What ``field`` means, from its metadata (None for an undescribed field)."""
    text = (field.metadata or {}).get(DESCRIPTION)
    return None if text is None else text.decode("utf-8")


def _plain_field(field: pa.Field) -> pa.Field:
    rest = {k: v for k, v in (field.metadata or {}).items() if k != DESCRIPTION}
    if rest == dict(field.metadata or {}):
        return field
    return field.with_metadata(rest) if rest else field.remove_metadata()


def plain(table: pa.Table) -> pa.Table:
    """``table`` without its columns' descriptions (the same columns, no copy): what an output file holds."""
    schema = pa.schema([_plain_field(f) for f in table.schema], metadata=table.schema.metadata)
    if schema.equals(table.schema, check_metadata=True):
        return table
    return pa.Table.from_arrays(table.columns, schema=schema)
