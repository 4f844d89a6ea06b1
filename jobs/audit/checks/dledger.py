"""The DLedger commit log (``enableDLegerCommitLog=true``): each entry's header, its index unit and the committed
index, by DLedger's own checks (store_format.dledger, docs/store-format-dledger.md).  The CommitLog records inside
the entries are checked by the other families as any store's.

Checks, each positioned at the record inside the entry (``file``: the data file, ``file_position`` and
``physical_offset``: the record's, entry + 48; ``details.index``, ``details.term``, ``details.entry_position``):
``dledger.body_crc`` (an entry's bodyCrc or chainCrc that is not what its body gives: DLedger never verifies either,
so the broker serves the entry as it is), ``dledger.term`` (an entry's term is lower than the previous entry's:
DLedger's recovery ends the ledger there), ``dledger.position`` (an entry's pos field is not where it lies: the same),
``dledger.index`` (an entry's index does not follow the previous one's: the same; a warning when only its index unit
is missing or disagrees: DLedger rewrites the units from there) and ``dledger.committed`` (the checkpoint's
committed index against the ledger DLedger's recovery leaves: behind its end, RocketMQ serves only the committed
entries until the node leads again; past it, entries DLedger had committed are gone).

Where each is decided: on the driver, from DLedger's own walk of the data files as columns (DLedgerLog.table with
the compiled entry walk, .recover): Python steps only at the entries that fail a check,
for every broker whose store is a DLedger store (``applies``).
"""
from __future__ import annotations

import numpy as np

from decoding.kernels import CompiledFramer
from store_format import dledger as D
from store_format.commitlog import dledger_header_run

from ..contract import Family, FamilyResult
from ..findings import Consequence, Severity, check, concat_findings, finding_rows

check("dledger.body_crc", Severity.ERROR,
      "DLedger entry {index} holds {crc} {stored}, not its body's {expected}: DLedger never checks it, so the broker "
      "serves the record as it is",
      consequence=Consequence.DATA_AT_RISK,
      action="Compare the record with its producer's copy or a slave's (`rocketmq-forensics compare`): the body or "
             "the entry header changed after it was written; re-send the message if the body did.")
check("dledger.term", Severity.ERROR,
      "DLedger entry {index} has term {term} after term {previous}: terms never go backwards, and DLedger's recovery "
      "ends the ledger at the first entry that does",
      consequence=Consequence.DATA_LOST,
      action="Copy the entries from there on out (`rocketmq-forensics extract --walk salvage`) before the restart "
             "truncates them, and compare with the group's other nodes, which hold the committed entries.")
check("dledger.position", Severity.ERROR,
      "DLedger entry {index}'s pos field says {pos_field}, the entry lies at {entry_position}: DLedger's recovery "
      "ends the ledger at the first such entry",
      consequence=Consequence.DATA_LOST,
      action="Copy the entries from there on out (`rocketmq-forensics extract --walk salvage`) before the restart "
             "truncates them, and compare with the group's other nodes, which hold the committed entries.")
check("dledger.index", Severity.ERROR, "DLedger entry {index}: {problem}", also=(Severity.WARNING,),
      consequence=Consequence.DATA_AT_RISK,
      action="An entry whose index does not follow ends DLedger's ledger there: copy the entries after it out "
             "before the restart. A missing or disagreeing index unit DLedger rewrites from its entry at start: "
             "nothing to do, but keep a copy of the index files if the entries disagree with them.")
check("dledger.committed", Severity.WARNING, "DLedger's checkpoint {problem}", also=(Severity.ERROR,),
      consequence=Consequence.DATA_AT_RISK,
      action="Behind the ledger's end: RocketMQ serves only the committed entries until the node leads its group "
             "again, then commits the rest; start the group, not a lone node. Past it: entries the group had "
             "committed are gone from this node; copy them from another node of the group.")


def applies(plan) -> bool:
    """A DLedger store: its CommitLog lies in DLedger entries (store_format.store.Store.dledger_home)."""
    return plan.store.dledger_home is not None


def _at(e: D.Entry, **more) -> dict:
    """A finding's position at the record inside entry ``e`` (RocketMQ's offset, entry + 48)."""
    details = {"index": e.index, "term": e.term, "entry_position": e.position, **more.pop("details", {})}
    return dict(file=e.file.removeprefix("data/"), file_position=e.file_position + D.BODY_OFFSET,
                physical_offset=e.record_offset, details=details, **more)


def broker_rows(log: D.DLedgerLog) -> dict[str, list[dict]]:
    """{check id: finding rows} of one DLedger home: every entry failing a check DLedger has (or a CRC it never
    verifies), and its checkpoint against the ledger its recovery leaves."""
    rows: dict[str, list[dict]] = {}

    def add(check_id: str, **row):
        rows.setdefault(check_id, []).append(row)

    table = log.table()
    ordinal = np.cumsum(table.kinds == 0) - 1  # each entry's place among the entries
    unit_run = last_unit = None
    for i in np.flatnonzero((table.kinds == 0) & (table.problems != 0)):  # the entries failing a check
        e = table.entry(i)
        failed = dict(e.problems)
        values = {"index": e.index}
        if D.CHECK_BODY_CRC in failed:
            add("dledger.body_crc", **_at(e, values={**values, "crc": "bodyCrc", "stored": e.body_crc & 0xFFFFFFFF,
                                                        "expected": e.body_crc32},
                                          details={"crc": "bodyCrc", "reason": failed[D.CHECK_BODY_CRC]}))
        if D.CHECK_CHAIN_CRC in failed:  # no DLedger version writes one: any value disagrees with what it writes
            add("dledger.body_crc", **_at(e, values={**values, "crc": "chainCrc", "stored": e.chain_crc & 0xFFFFFFFF,
                                                        "expected": "0 (no DLedger version computes a chainCrc)"},
                                          details={"crc": "chainCrc", "reason": failed[D.CHECK_CHAIN_CRC]}))
        if D.CHECK_TERM in failed:  # only an entry after another fails it
            add("dledger.term", **_at(e, values={**values, "term": e.term, "previous": int(table.prev_term[i])},
                                      details={"reason": failed[D.CHECK_TERM]}))
        if D.CHECK_POSITION in failed:
            add("dledger.position", **_at(e, values={**values, "pos_field": e.pos_field,
                                                     "entry_position": e.position},
                                          details={"reason": failed[D.CHECK_POSITION]}))
        if D.CHECK_INDEX in failed:
            add("dledger.index", severity=Severity.ERROR,
                **_at(e, values={**values, "problem": f"{failed[D.CHECK_INDEX]}: DLedger's recovery ends the ledger "
                                                      "at the first entry whose index does not follow"},
                      details={"reason": failed[D.CHECK_INDEX], "what": "entry"}))
        follows_run = unit_run is not None and ordinal[i] == last_unit + 1
        if D.CHECK_INDEX_UNIT in failed and follows_run:  # one finding per run of entries
            unit_run["details"].update(count=unit_run["details"]["count"] + 1, last_index=e.index)
            unit_run["values"]["problem"] = _unit_problem(unit_run["details"])
        elif D.CHECK_INDEX_UNIT in failed:
            unit = e.index_unit
            details = {"reason": failed[D.CHECK_INDEX_UNIT], "what": "index_unit", "count": 1, "last_index": e.index,
                       "index_file": unit.file if unit else None,
                       "index_file_position": unit.file_position if unit else None}
            unit_run = _at(e, severity=Severity.WARNING, values={**values, "problem": _unit_problem(details)},
                           details=details)
            add("dledger.index", **unit_run)
        else:
            unit_run = None
        if D.CHECK_INDEX_UNIT in failed:
            last_unit = ordinal[i]
    _committed(log, log.recover(table), add)
    return rows


def _unit_problem(details: dict) -> str:
    more = details["count"] - 1
    return (f"{details['reason']}" + (f" (and the index units of the {more} entr{'y' if more == 1 else 'ies'} after "
            f"it, to index {details['last_index']})" if more else "") + "; DLedger rewrites the index units from the "
            "first that disagrees")


def _committed(log: D.DLedgerLog, ledger: D.Ledger, add) -> None:
    """``dledger.committed``: what ``updateCommittedIndex`` makes of the checkpoint's committed index."""
    wanted, end = log.metadata.committed_index, ledger.end_index
    if end < 0:
        return
    # at RocketMQ's commit-log max offset: DLedger's committed position (0 when nothing is committed)
    where = dict(file=f"{log.home.name}/{D.CHECKPOINT_FILE}", physical_offset=max(ledger.committed_pos, 0))
    details = {"checkpoint_committed_index": wanted, "ledger_end_index": end,
               "committed_index": ledger.committed_index, "committed_position": ledger.committed_pos}
    if wanted is not None and wanted > end:
        add("dledger.committed", severity=Severity.ERROR, **where, details=details, values={"problem": (
            f"says index {wanted} is committed, but DLedger's recovery ends the ledger at index {end}: the "
            f"{wanted - end} committed entr{'y' if wanted - end == 1 else 'ies'} after it are gone from this node")})
    elif ledger.committed_index < end:
        said = "has no committed index" if wanted is None else f"says committed index {wanted}"
        add("dledger.committed", severity=Severity.WARNING, **where, details=details, values={"problem": (
            f"{said}, the ledger ends at index {end}: until the node leads its group again RocketMQ serves only "
            f"to physical offset {max(ledger.committed_pos, 0)}")})


def on_driver(ctx) -> FamilyResult:
    rows: dict[str, list[dict]] = {}
    for name, plan in ctx.plans.items():
        if not applies(plan):
            continue
        log = D.DLedgerLog(plan.store.dledger_home, data_file_size=plan.store.segment_size,
                           header_run=dledger_header_run(CompiledFramer))
        for check_id, found in broker_rows(log).items():
            rows.setdefault(check_id, []).extend(dict(r, broker=name) for r in found)
    return FamilyResult(findings=[concat_findings([finding_rows(c, r) for c, r in rows.items()])])


FAMILY = Family(
    "dledger", "a DLedger commit log's entries by DLedger's own checks: CRCs, terms, positions, index units, the "
    "committed index", on_driver=on_driver, applies=applies, rank=25)
