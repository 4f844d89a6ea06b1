"""CommitLog <-> IndexFile: every UNIQ_KEY and key of an indexable message can be found, every entry points at a
message one of whose keys has its hash, and the files' headers and hash chains hold together.

Indexable (IndexService.buildIndex): every record but ROLLBACK; keys are ``topic#UNIQ_KEY`` and ``topic#k`` for
each non-empty piece of KEYS split on " ".  Checks: ``index.key_missing`` (error; the warning
``index.not_yet_indexed`` when the broker indexes the message at start: past the consume queues' end, or in
the abnormal-recovery re-dispatch range), ``index.hash_mismatch``, ``index.entry_past_end``,
``index.entry_mid_record``, ``index.entry_not_a_message``, the warnings ``index.entry_in_damage``,
``index.entry_for_dropped_message`` (normal recovery leaves such stale entries, store-format.md section 14),
``index.time_inconsistent``, ``index.header_mismatch``; ``index.chain_problem`` (out-of-range or cyclic
links, unreachable entries), ``index.corrupt_file``, ``index.header_count_out_of_range``; the info
``index.duplicate_entries`` (expected after re-dispatch: counted, not an error) and the warning
``index.no_index`` (messages but no index files).

An index file the data source cannot open (too short, or a geometry neither its length and content nor
--config/--hash-slots/--index-num tell: store_format.indexfile.infer_geometry) is exactly one
``index.corrupt_file`` error.  The keys only it could serve are not checked one by one: the missing keys
(no entry in any readable file, not pending) of messages whose physical offset lies in its range
(:func:`unreadable_ranges`: its header's beginPhyOffset..endPhyOffset when it has a plausible one, else the gap
between the readable files before and after it) are one warning ``index.keys_unverifiable`` per file: "N keys
not verifiable: index file X unreadable", with the key and message counts and the offsets in its details.
"""
from __future__ import annotations

from pyspark.sql import functions as F

from .base import AuditContext, CheckResult, findings, locate_offsets, metrics


def index_hash(full_key):
    """IndexService.indexKeyHashMethod of ``topic#key`` strings, in the JVM: Java's own String.hashCode (through
    ``Objects.hashCode`` by reflection: no Python worker, UTF-16 exactly as the broker), then Math.abs with
    Integer.MIN_VALUE -> 0 (store_format.javahash.index_key_hash)."""
    h = F.reflect(F.lit("java.util.Objects"), F.lit("hashCode"), full_key).cast("long")
    return F.when(h == -(1 << 31), F.lit(0)).otherwise(F.abs(h)).cast("int")


def expected_keys(messages):
    """(message, key, key_hash) for every key the broker indexes: UNIQ_KEY and each key."""
    keys = F.array_distinct(F.concat(
        F.when(F.col("uniq_key").isNotNull(), F.array(F.col("uniq_key"))).otherwise(F.array().cast("array<string>")),
        F.coalesce(F.col("keys"), F.array().cast("array<string>"))))
    return (messages.where(F.col("tran_type") != "ROLLBACK")
            .select("broker", "physical_offset", "segment", "file_position", "topic", "queue_id", "queue_offset",
                    "store_timestamp", "kept", F.explode(keys).alias("key"))
            .withColumn("key_hash", index_hash(F.concat(F.col("topic"), F.lit("#"), F.col("key")))))


def run(ctx: AuditContext) -> CheckResult:
    res = CheckResult()
    idx = ctx.index
    entries = idx.where(F.col("kind") == "entry")
    headers = idx.where(F.col("kind") == "header")
    indexed = {s.name for s in ctx.stores if (ctx.store_objects[s.name].root / "index").is_dir()}
    m = ctx.messages
    kept = m.where(F.col("kept"))
    if len(indexed) < len(ctx.stores):
        res.findings.append(findings(
            kept.where(~F.col("broker").isin(*indexed) if indexed else F.lit(True)).groupBy("broker")
            .agg(F.count("*").alias("n")),
            "index.no_index", "warning",
            F.concat(F.lit("no index/ folder: key lookups of "), F.col("n").cast("string"),
                     F.lit(" messages cannot work (messageIndexEnable=false, or the folder is lost)")),
            {"messages": F.col("n")}, file=F.lit("index")))
    if not indexed:
        return res

    all_keys = expected_keys(m.where(F.col("broker").isin(*indexed)))
    expected = all_keys.where(F.col("kept"))
    pending_from = F.create_map(*[x for n, p in ctx.recovery.items() for x in (
        F.lit(n), F.lit(p.redispatch_from if p.redispatch_from is not None else p.max_cq_physical_offset))])
    missing = expected.join(entries.select("broker", "physical_offset", "key_hash"),
                            ["broker", "physical_offset", "key_hash"], "left_anti")
    pending = F.col("physical_offset") >= pending_from[F.col("broker")]
    ranges = unreadable_ranges(ctx, idx)
    if ranges:  # the keys only an unreadable file could serve: one summarized finding per file
        covered = F.broadcast(ctx.spark.createDataFrame(ranges, _RANGE_SCHEMA))
        missing = missing.join(covered, (F.col("broker") == F.col("u_broker"))
                               & F.col("physical_offset").between(F.col("u_from"), F.col("u_to")), "left")
        res.findings.append(_unverifiable(missing.where(F.col("u_file").isNotNull() & ~pending)))
        missing = missing.where(F.col("u_file").isNull() | pending)
    res.findings.append(findings(
        missing, F.when(pending, "index.not_yet_indexed").otherwise("index.key_missing"),
        F.when(pending, "warning").otherwise("error"),
        F.concat(F.lit("key "), F.col("topic"), F.lit("#"), F.col("key"),
                 F.when(pending, F.lit(" is not indexed yet (the broker indexes it at start)"))
                 .otherwise(F.lit(" of this message has no index entry: queries by it will not find it"))),
        {"key": F.col("key"), "key_hash": F.col("key_hash")}))

    # entries -> messages
    target = m.select("broker", "physical_offset", "kept", F.col("store_timestamp").alias("m_store_ts"),
                      F.col("topic").alias("m_topic"))
    j = entries.join(target, ["broker", "physical_offset"], "left")
    # a consequence of the truncation (the recovery family's error): one finding per index file
    dropped = j.where(~F.col("kept")).groupBy("broker", "file").agg(
        F.count("*").alias("n"), F.min("physical_offset").alias("first"), F.max("physical_offset").alias("last"))
    res.findings.append(findings(
        dropped, "index.entry_for_dropped_message", "warning",
        F.concat(F.col("n").cast("string"), F.lit(" entries point at messages recovery drops (physical offsets "),
                 F.col("first").cast("string"), F.lit(".."), F.col("last").cast("string"),
                 F.lit("): lookups find candidates that are gone")),
        {"entries": F.col("n"), "last_physical_offset": F.col("last")}, physical_offset=F.col("first")))
    loose = locate_offsets(ctx, j.where(F.col("kept").isNull()).drop("kept", "m_store_ts", "m_topic"))
    where = F.col("located")
    res.findings.append(findings(
        loose, F.concat(F.lit("index.entry_"), F.when(where == "in_damage", "in_damage")
                        .when(where == "mid_record", "mid_record").when(where == "past_end", "past_end")
                        .otherwise("not_a_message")),
        F.when(where == "in_damage", "warning").otherwise("error"),
        F.concat(F.lit("entry "), F.col("entry").cast("string"), F.lit(" "), F.col("located_text")),
        {"entry": F.col("entry"), "key_hash": F.col("key_hash")}))

    hashes = all_keys.groupBy("broker", "physical_offset").agg(
        F.collect_set("key_hash").alias("hashes"))
    good = j.where(F.col("kept")).join(hashes, ["broker", "physical_offset"], "left")
    res.findings.append(findings(
        good.where(~F.coalesce(F.array_contains(F.col("hashes"), F.col("key_hash")), F.lit(False))),
        "index.hash_mismatch", "error",
        F.concat(F.lit("entry "), F.col("entry").cast("string"), F.lit(" has hash "), F.col("key_hash").cast("string"),
                 F.lit(", which is none of the keys of the message it points at")),
        {"entry": F.col("entry"), "key_hash": F.col("key_hash")}, topic=F.col("m_topic")))
    # timeDiff is whole seconds from the header's begin; the first entry's is against the previous file
    late = (F.col("m_store_ts") < F.col("store_time")) | (F.col("m_store_ts") >= F.col("store_time") + 1000)
    res.findings.append(findings(
        good.where((F.col("entry") > 1) & late), "index.time_inconsistent", "warning",
        F.concat(F.lit("entry "), F.col("entry").cast("string"), F.lit(" says store time "),
                 F.col("store_time").cast("string"), F.lit(" (second precision) but the message was stored at "),
                 F.col("m_store_ts").cast("string")),
        {"entry": F.col("entry"), "entry_time": F.col("store_time"), "message_time": F.col("m_store_ts")},
        topic=F.col("m_topic")))

    problems = entries.where(F.size("problems") > 0)
    res.findings.append(findings(
        problems, "index.chain_problem", "error",
        F.concat(F.lit("entry "), F.col("entry").cast("string"), F.lit(": "), F.array_join("problems", ", ")),
        {"entry": F.col("entry"), "problems": F.array_join("problems", ","), "prev_index": F.col("prev_index")}))
    res.findings.append(findings(
        idx.where(F.col("kind") == "corrupt"), "index.corrupt_file", "error",
        F.concat(F.lit("index file "), F.col("file"), F.lit(" cannot be read: "), F.coalesce(F.col("reason"), F.lit("")),
                 F.lit(" "), F.coalesce(F.col("detail"), F.lit(""))),
        {"reason": F.col("reason")}, physical_offset=None))
    res.findings.append(_headers(headers))

    dups = (headers.groupBy("broker").agg(F.sum("duplicate_entries").alias("extra"),
                                          F.sum("duplicated_pairs").alias("keys")).where(F.col("extra") > 0))
    res.findings.append(findings(
        dups, "index.duplicate_entries", "info",
        F.concat(F.col("extra").cast("string"), F.lit(" duplicate index entries for "), F.col("keys").cast("string"),
                 F.lit(" (key, message) pair(s): expected after re-dispatch or a key listed twice")),
        {"duplicates": F.col("extra")}, file=F.lit("index")))
    per_broker = (entries.groupBy("broker", "file").count()  # per file first: a cheap partial aggregation
                  .groupBy("broker").agg(F.sum("count").alias("n"), F.count("*").alias("files")))
    res.metrics.append(metrics(per_broker, "broker", {"index_entries": "n", "index_files": "files"}))
    res.metrics.append(metrics(dups, "broker", {"index_duplicate_entries": "extra"}))
    return res


_RANGE_SCHEMA = "u_broker string, u_file string, u_from long, u_to long, u_basis string"
_END = 2**63 - 1


def unreadable_ranges(ctx: AuditContext, idx) -> list[tuple]:
    """(broker, file, from, to, basis) for every index file the data source could not open whose name the
    broker loads (a BAD_FILE_NAME file is never an index): the physical offsets of the messages whose keys only
    it could serve.  ``header``: its own header's beginPhyOffset..endPhyOffset, when the file holds one that counts
    entries (indexCount >= 2: then 4.9.7 set both from its first and last entry), is ordered and lies between its
    readable neighbours' ranges (a file begins at or after the previous file's endPhyOffset: a new file starts
    from it).  ``neighbours``: otherwise the gap between the
    readable files before and after it (in name order, the creation order): from the previous one's
    endPhyOffset (0 if none) to the next one's beginPhyOffset (the end of the log if none), both included (a
    message's keys may straddle two files).  Ranges are made disjoint in name order (an offset belongs to the
    oldest unreadable file whose range holds it)."""
    rows = (idx.where(F.col("kind").isin("header", "corrupt"))
            .select("broker", "file", "kind", "reason", "begin_phy_offset", "end_phy_offset", "index_count")
            .collect())
    if not any(r["kind"] == "corrupt" for r in rows):
        return []
    out = []
    for broker in sorted({r["broker"] for r in rows}):
        files = sorted((r for r in rows if r["broker"] == broker and r["reason"] != "BAD_FILE_NAME"),
                       key=lambda r: r["file"])
        taken_to = -1  # offsets up to here belong to an older unreadable file
        for i, r in enumerate(files):
            if r["kind"] != "corrupt":
                continue
            before = next((f for f in reversed(files[:i]) if f["kind"] == "header"), None)
            after = next((f for f in files[i + 1:] if f["kind"] == "header"), None)
            lo = before["end_phy_offset"] if before else 0
            hi = after["begin_phy_offset"] if after else _END
            begin, end = r["begin_phy_offset"], r["end_phy_offset"]
            if (r["index_count"] or 0) >= 2 and lo <= begin <= end <= hi:
                lo, hi, basis = begin, end, "header"
            else:
                basis = "neighbours"
            lo = max(lo, taken_to + 1)
            if lo <= hi:
                out.append((broker, r["file"], lo, hi, basis))
                taken_to = max(taken_to, hi)
    return out


def _unverifiable(covered):
    """One warning per unreadable index file: the missing keys of kept messages in its range (not pending)."""
    per_file = covered.groupBy("broker", "u_file", "u_from", "u_to", "u_basis").agg(
        F.count("*").alias("n"), F.countDistinct("physical_offset").alias("messages"),
        F.min("physical_offset").alias("first"), F.max("physical_offset").alias("last"))
    upto = F.when(F.col("u_to") == _END, F.lit("the end of the log")).otherwise(F.col("u_to").cast("string"))
    basis = F.when(F.col("u_basis") == "header", F.lit("per its header")) \
        .otherwise(F.lit("between its readable neighbours"))
    return findings(
        per_file, "index.keys_unverifiable", "warning",
        F.concat(F.col("n").cast("string"), F.lit(" keys not verifiable: index file "), F.col("u_file"),
                 F.lit(" unreadable ("), F.col("messages").cast("string"), F.lit(" messages at physical offsets "),
                 F.col("first").cast("string"), F.lit(".."), F.col("last").cast("string"), F.lit(", in its range "),
                 F.col("u_from").cast("string"), F.lit(".."), upto, F.lit(" "), basis,
                 F.lit("); see index.corrupt_file")),
        {"keys": F.col("n"), "messages": F.col("messages"), "first_physical_offset": F.col("first"),
         "last_physical_offset": F.col("last"), "range_from": F.col("u_from"), "range_to": F.col("u_to"),
         "range_basis": F.col("u_basis")},
        file=F.col("u_file"), physical_offset=F.col("first"))


def _headers(headers):
    """Header counters against the entries they describe."""
    # the entries' side is counted by the data source, in the header row
    h = headers.select("*", F.col("entry_slots").alias("slots"), F.col("last_entry_phy_offset").alias("last_phy"),
                       F.col("first_entry_phy_offset").alias("first_phy"))
    count_bad = (F.col("index_count") < 1) | (F.col("index_count") > F.col("index_num"))
    problems = F.array_compact(F.array(
        F.when(F.col("hash_slot_count") != F.coalesce(F.col("slots"), F.lit(0)),
               F.concat(F.lit("hashSlotCount "), F.col("hash_slot_count").cast("string"), F.lit(" but "),
                        F.coalesce(F.col("slots"), F.lit(0)).cast("string"), F.lit(" slots are used"))),
        F.when(F.col("last_phy").isNotNull() & (F.col("end_phy_offset") != F.col("last_phy")),
               F.concat(F.lit("endPhyOffset "), F.col("end_phy_offset").cast("string"),
                        F.lit(" but the last entry points at "), F.col("last_phy").cast("string"))),
        F.when(F.col("first_phy").isNotNull() & (F.col("begin_phy_offset") != F.col("first_phy")),
               F.concat(F.lit("beginPhyOffset "), F.col("begin_phy_offset").cast("string"),
                        F.lit(" but the first entry points at "), F.col("first_phy").cast("string")))))
    bad_count = findings(
        h.where(count_bad), "index.header_count_out_of_range", "error",
        F.concat(F.lit("indexCount "), F.col("index_count").cast("string"), F.lit(" is outside 1.."),
                 F.col("index_num").cast("string")), {"index_count": F.col("index_count")}, physical_offset=None)
    mismatch = findings(
        h.where(~count_bad & (F.size(problems) > 0)).withColumn("problems", problems), "index.header_mismatch",
        "warning", F.concat(F.lit("index header disagrees with its entries: "), F.array_join("problems", "; ")),
        {"problems": F.array_join("problems", "; ")}, physical_offset=None)
    return bad_count.unionByName(mismatch)

