"""Metadata: the config files against the data.

Checks: ``metadata.config_unreadable`` (error: neither the file nor its ``.bak`` parses),
``metadata.config_too_large`` (warning: a file too large to parse within memory, ``store_format.config.
CONFIG_MEMORY_LIMIT``: its checks are skipped, the rest of the store is audited; consumerOffset.json in the
broker's layout is read whatever its size: as columns, or past ``CONFIG_OFFSETS_LIMIT`` streamed into the run's
partials and read a batch at a time -- only running out of memory or disk on the way skips it),
``metadata.config_from_backup`` (warning: the main file was empty or broken; the broker loads the ``.bak``),
``metadata.config_missing`` (info), ``metadata.topic_not_in_config`` (warning: a topic with consume queues but
no topics.json entry; info for system topics, which 4.9.7 itself leaves out, e.g. RMQ_SYS_TRANS_OP_HALF_TOPIC;
never for an %LMQ% queue, which the broker keeps without a topic config),
``metadata.queue_outside_config`` (warning: a queue id at or past the topic's queue count),
``metadata.group_not_in_config`` (warning: offsets for a group without a subscriptionGroup.json entry),
``metadata.store_file_unreadable`` (error: an entry of the store no reader can read -- a FIFO, socket or device, a
link loop or dangling link, no permission, a part that is a file: never opened, reported once here),
``metadata.config_value_out_of_range`` (error: a value the broker cannot hold -- a consumer offset outside Java's
long, a queue id or delay level outside int or not a number, a queue count that is not an int: fastjson fails
on it and the broker does not start; the entry is left out and everything else in the file is used).
"""
from __future__ import annotations


import pyarrow as pa
import pyarrow.compute as pc

from decoding.metadata import CONFIG_FILE, is_too_large, is_value_error
from store_format import layout as L
from store_format.config import CONFIG_MEMORY_LIMIT_ENV, CONFIG_OFFSETS_LIMIT_ENV, too_large_size
from store_format.queues import holds_copies

from ..findings import Consequence, Severity, check, finding_rows
from ..contract import Family, FamilyResult

check("metadata.config_unreadable", Severity.ERROR, "{file} cannot be read: {error}",
      consequence=Consequence.DATA_LOST, roles=("input_missing",),
      action="Restore it from a backup.  With no `.bak` (or an empty one) the broker starts without what the file held "
             "(offsets, topics lost); with a `.bak` that does not decode either, it does not start "
             "(`recovery.broker_will_not_start`).")
check("metadata.config_too_large", Severity.WARNING,
      "{file} is too large to parse within memory[ ({size} bytes)]: its checks are skipped (the rest of the store is "
      "audited)",
      consequence=Consequence.COSMETIC,
      action=f"Audit it on a machine with more memory, with {CONFIG_MEMORY_LIMIT_ENV} (bytes) raised past its size "
             "(consumerOffset.json as brokers write it is never skipped for its size: past "
             f"{CONFIG_OFFSETS_LIMIT_ENV} offsets the audit spills it to the output's partials, so give that disk "
             "room and the driver memory for its maps); a broker writes a config file this large only with millions "
             "of entries, so look at why.")
check("metadata.config_from_backup", Severity.WARNING, "{file} is empty or broken; the broker will load {name}.bak",
      consequence=Consequence.DATA_AT_RISK,
      action="Expected after a crash during a write; the `.bak` may be slightly older.")
check("metadata.config_missing", Severity.INFO, "no {file}: its checks are skipped",
      consequence=Consequence.UNKNOWN, roles=("input_missing",),
      action="Copy it if the dump should have it: until then what it holds (consumer offsets, delay progress, topics, "
             "groups) is unknown, not absent.")
check("metadata.topic_not_in_config", Severity.WARNING,
      "topic {topic} has {queues} consume queue(s) but no topics.json entry", also=(Severity.INFO,),
      consequence=Consequence.COSMETIC,
      action="Auto-created or deleted topic; recreate it with `mqadmin updateTopic` if it is still used.")
check("metadata.queue_outside_config", Severity.WARNING,
      "queue {queue_id} of {topic} has data but topics.json gives it {queue_count} queues",
      consequence=Consequence.CONSUMERS_AFFECTED,
      action="The queue count was reduced: those messages are not consumed.")
check("metadata.group_not_in_config", Severity.WARNING,
      "consumer group {group} has offsets but no subscriptionGroup.json entry",
      consequence=Consequence.COSMETIC,
      action="Auto-created or deleted group; recreate it or clean its offsets.")
check("metadata.store_file_unreadable", Severity.ERROR, "{file} cannot be read: {reason}; not read (the rest of "
      "the store is)",
      consequence=Consequence.DATA_AT_RISK,
      action="Copy the store again, as regular files, with permission to read them.")
check("metadata.config_value_out_of_range", Severity.ERROR,
      "{file} {key} = {value}: {reason}; the broker cannot load this file (the entry is left out here)",
      consequence=Consequence.DATA_AT_RISK,
      action="Fix or remove the entry (or restore the file from its `.bak`) before the broker is started on this "
             "store.")

_TABLES = ("consumer_offsets", "delay_offsets", "topics", "subscription_groups")
# 5.x files a broker writes only with a feature on: read when present, never missing (enableLmq: offsets go to
# lmqConsumerOffset.json instead of consumerOffset.json, which is then not missing either)
_OPTIONAL = ("lmq_consumer_offsets",)


_system = L.is_system_topic


def _greatest(*values):
    """Spark's greatest(): nulls skipped, null when all are."""
    present = [v for v in values if v is not None]
    return max(present) if present else None


def on_driver(ctx) -> FamilyResult:
    res = FamilyResult()
    present = {}
    files: dict[str, list] = {}
    for table in _TABLES + _OPTIONAL:
        name = CONFIG_FILE[table]
        # column-wise: consumer_offsets may hold millions of rows; only its error rows become Python objects
        t = ctx.metadata(table)
        errors = t.filter(pc.is_valid(t.column("error"))).select(["broker", "error", "error_key", "error_value",
                                                                  "source"]).to_pylist()
        counts = dict(zip(*(c.to_pylist() for c in pc.value_counts(t.column("broker")).flatten())))
        # each broker's first source, in row order: one ordered grouping (a mask a broker was a pass over the table
        # a broker, 64 of them for a fleet's every table)
        sourced = t.filter(t.column("source").is_valid()).select(["broker", "source"])
        firsts = sourced.group_by("broker", use_threads=False).aggregate([("source", "first")])
        sources = dict(zip(firsts.column("broker").to_pylist(), firsts.column("source_first").to_pylist()))
        if table == "consumer_offsets":  # a file spilled (AuditContext.consumer_offset_parts): read, every row
            for spilled in ctx.spilled_offsets:
                counts[spilled.broker], sources[spilled.broker] = spilled.rows, spilled.source
        for s in ctx.stores:
            mine = counts.get(s.name, 0) > 0
            errs = [r for r in errors if r["broker"] == s.name]
            error = next((r["error"] for r in errs if not is_value_error(r["error"])), None)
            for r in errs:
                if is_value_error(r["error"]):
                    reason = r["error"].rsplit(": ", 1)[-1]
                    files.setdefault("metadata.config_value_out_of_range", []).append(dict(
                        broker=s.name, file=f"config/{name}", values={"key": r["error_key"], "value": r["error_value"],
                                                                      "reason": reason},
                        details={"key": r["error_key"], "value": r["error_value"], "reason": reason,
                                 "source": r["source"]}))
            source = sources.get(s.name)
            cfg = ctx.plans[s.name].store.root / "config"
            exists = (cfg / name).exists() or (cfg / f"{name}.bak").exists()
            present[(s.name, table)] = bool(mine and error is None and exists)
            file = f"config/{name}"
            if mine and error and is_too_large(error):
                size = too_large_size(error)
                files.setdefault("metadata.config_too_large", []).append(dict(
                    broker=s.name, file=file, values={"size": size}, details={"size": size, "error": error}))
            elif mine and error:
                files.setdefault("metadata.config_unreadable", []).append(dict(
                    broker=s.name, file=file, values={"error": error}))
            elif mine and source and source.endswith(".bak"):
                files.setdefault("metadata.config_from_backup", []).append(dict(
                    broker=s.name, file=file, values={"name": name}))
            elif not exists and table not in _OPTIONAL and not (table == "consumer_offsets" and (
                    cfg / CONFIG_FILE["lmq_consumer_offsets"]).exists()):
                files.setdefault("metadata.config_missing", []).append(dict(broker=s.name, file=file))
    for r in ctx.metadata("unreadable_files").to_pylist():
        if r["file"] is not None:
            files.setdefault("metadata.store_file_unreadable", []).append(dict(
                broker=r["broker"], file=r["file"], values={"reason": r["reason"]}, details={"reason": r["reason"]}))
    for check_id, rows in files.items():
        res.findings.append(finding_rows(check_id, rows))

    with_topics = [s.name for s in ctx.stores if present[(s.name, "topics")]]
    if with_topics:
        topics = {(r["broker"], r["topic"]): r for r in ctx.metadata("topics").to_pylist()
                  if r["topic"] is not None}
        queues = sorted({q for q in ctx.queue_ids if q[0] in with_topics}, key=lambda q: (q[0], q[1], q[2] is None,
                                                                                         q[2] or 0))
        missing: dict[tuple, int] = {}
        outside = []
        for broker, topic, qid in queues:
            conf = topics.get((broker, topic))
            if conf is None:
                if not holds_copies(topic):  # an %LMQ% queue is never a topics.json entry (light queues)
                    missing[(broker, topic)] = missing.get((broker, topic), 0) + 1
                continue
            count = _greatest(conf["read_queue_nums"], conf["write_queue_nums"])
            if topic != L.SCHEDULE_TOPIC and qid is not None and count is not None and qid >= count:
                outside.append(dict(broker=broker, topic=topic, queue_id=qid, file="config/topics.json",
                                    values={"queue_count": count},
                                    details={"read_queue_nums": conf["read_queue_nums"],
                                             "write_queue_nums": conf["write_queue_nums"]}))
        res.findings.append(finding_rows("metadata.topic_not_in_config", [dict(
            broker=b, topic=t, file="config/topics.json", severity=Severity.INFO if _system(t) else Severity.WARNING,
            values={"queues": n}, details={"queues": n}) for (b, t), n in sorted(missing.items())]))
        res.findings.append(finding_rows("metadata.queue_outside_config", outside))

    with_groups = [s.name for s in ctx.stores if present[(s.name, "subscription_groups")]]
    if with_groups:
        groups: dict[str, list] = {}
        for r in ctx.metadata("subscription_groups").to_pylist():
            if r["group"] is not None:
                groups.setdefault(r["broker"], []).append(r["group"])
        offsets = set()
        for t in ctx.consumer_offset_parts():  # a batch at a time where the file was spilled
            offsets |= groups_not_in_config(t, groups, with_groups)
        res.findings.append(finding_rows("metadata.group_not_in_config", [dict(
            broker=b, file="config/consumerOffset.json", values={"group": g},
            details={"group": g, "key": g}) for b, g in sorted(offsets)]))
    return res


def groups_not_in_config(offsets: pa.Table, groups: dict[str, list], brokers: list[str]) -> set[tuple[str, str]]:
    """(broker, group) of the committed offsets (rows of ``offsets``) of ``brokers`` whose group the broker's
    subscriptionGroup.json lacks (``groups``: broker -> its configured groups): only the distinct (broker, group)
    pairs become objects, found in one grouping (a mask a broker was a pass over every broker's offsets)."""
    rows = offsets.select(["broker", "group"])
    rows = rows.filter(pc.and_(pc.is_in(rows.column("broker"), pa.array(brokers, pa.string())),
                               pc.is_valid(rows.column("group"))))
    pairs = rows.group_by(["broker", "group"], use_threads=False).aggregate([])
    configured = {b: set(gs) for b, gs in groups.items()}
    return {(b, g) for b, g in zip(pairs.column("broker").to_pylist(), pairs.column("group").to_pylist())
            if g not in configured.get(b, ())}


FAMILY = Family(
    "metadata", "unreadable or backup-only config files; topics and groups missing from topics.json and "
    "subscriptionGroup.json", on_driver=on_driver, rank=90,
    while_listed=lambda ctx: ctx.metadata("unreadable_files"))  # the store's whole tree: with the run's listings
