"""The benchmark dump: realistic broker traffic of a given size, written once by the bulk writer and cached.

Issue 9's dump: 8 topics x 8 queues, bodies of 100-400 bytes (lognormal, median ~220 B: ~80% of them in that
range, a few compressed large ones), tags, one or two keys, UNIQ_KEYs, one producer in twenty on IPv6 (5%),
RocketMQ's default 1 GiB segments and index geometry; the rest of the generator's traffic (batches, delays,
transactions, retries, DLQ) at its usual low rates.  ``ensure_dump`` writes it below a cache folder in a
sub-folder named by every parameter, so a changed parameter never reuses a stale dump, and returns its
description (``meta.json``): messages, record bytes, segments, index files.
"""
from __future__ import annotations

import json
import os
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np

from store_format import layout as L
from store_format.commitlog import KIND_MESSAGE, Segment, list_segments, salvage_arrays
from store_format.fs import ReadOnlyMap
from store_format.write.generate import TrafficConfig, generate_store, progress_line
from store_format.indexfile import list_index_files
from store_format.write.writer import WriterConfig

GENERATOR_VERSION = 1  # bump when the dump's traffic changes
BODY_LOG_MEAN = 5.4  # lognormal(5.4, 0.6) body sizes: median 221 B, 81% between 100 and 400 B
RECORD_BYTES = 475  # the generator's mean record at these settings (measured), to size a dump
PRODUCERS, IPV6_PRODUCERS = 20, 1  # 5% of the producers' sends come from an IPv6 host


@dataclass(frozen=True)
class DumpSpec:
    size_mib: float = 1024
    seed: int = 1
    segment_mib: float = 1024  # mappedFileSizeCommitLog
    index_slots: int = L.DEFAULT_MAX_HASH_SLOT_NUM  # maxHashSlotNum (maxIndexNum is 4x: RocketMQ's ratio)
    cover: bool = False  # every topic and queue from the start (TrafficConfig.cover): the scaling dumps
    rate: float = 2000.0  # simulated stores per second
    topics: int = 8  # issue 40's wide broker: 5,000 topics x 8 queues (bench/bench_wide.py)
    queues: int = 8  # per topic
    flows: float = 1.0  # times the generator's rates of transactions and send-backs (issue 40's memory bench: 10)

    @property
    def messages(self) -> int:
        return max(int(self.size_mib * (1 << 20)) // RECORD_BYTES, 64)

    def traffic(self) -> TrafficConfig:
        return TrafficConfig(messages=self.messages, topics=self.topics, queues=self.queues, seed=self.seed, producers=PRODUCERS,
                             ipv6_producers=IPV6_PRODUCERS, body_log_mean=BODY_LOG_MEAN, cover=self.cover,
                             rate=self.rate, p_half=TrafficConfig.p_half * self.flows,
                             p_send_back=TrafficConfig.p_send_back * self.flows)

    def writer(self) -> WriterConfig:
        return WriterConfig(mappedFileSizeCommitLog=int(self.segment_mib * (1 << 20)),
                            maxHashSlotNum=self.index_slots, maxIndexNum=4 * self.index_slots)

    @property
    def key(self) -> str:
        return (f"dump-v{GENERATOR_VERSION}-{self.size_mib:g}MiB-seed{self.seed}-seg{self.segment_mib:g}MiB"
                f"-slots{self.index_slots}{'-cover' if self.cover else ''}"
                f"{f'-rate{self.rate:g}' if self.rate != DumpSpec.rate else ''}"  # the defaults: no suffix
                f"{'' if (self.topics, self.queues) == (8, 8) else f'-{self.topics}x{self.queues}q'}"
                f"{f'-flows{self.flows:g}' if self.flows != DumpSpec.flows else ''}")


def ensure_dump(spec: DumpSpec, cache: Path, progress: bool = True) -> dict:
    """The dump of ``spec`` under ``cache`` (generated when missing): its meta.json as a dict, with ``store``."""
    root = Path(cache) / spec.key
    meta_path = root / "meta.json"
    if meta_path.exists():
        return json.loads(meta_path.read_text())
    # generated beside it and renamed into place whole: a second process asking for the same dump meanwhile (a
    # bench started while another generates it) generates its own, and never clears the folder being written
    shutil.rmtree(root, ignore_errors=True)  # what a generation that died left
    partial = root.with_name(f"{root.name}.partial-{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    stats = generate_store(partial / "store", spec.traffic(), spec.writer(),
                           progress=progress_line() if progress else None)
    segments = list_segments(partial / "store" / "commitlog")
    ends = [int(segment_frames(s)[1].max(initial=0)) for s in segments]
    meta = {"spec": asdict(spec), "store": str(root / "store"), "messages": stats["messages"],
            "record_bytes": stats["bytes"], "commitlog_bytes": sum(ends), "segment_data_bytes": ends,
            "segments": len(segments), "index_files": len(list_index_files(partial / "store" / "index")),
            "generate_seconds": round(stats["total_s"], 1)}
    (partial / "meta.json").write_text(json.dumps(meta, indent=1))
    try:
        os.rename(partial, root)
    except OSError:  # another process's dump got there first: the same spec, the same bytes
        shutil.rmtree(partial, ignore_errors=True)
    return json.loads(meta_path.read_text())


def segment_frames(segment) -> tuple[np.ndarray, np.ndarray]:
    """(starts, ends) of the messages in one segment file, from the bulk framer (CRC checked)."""
    with ReadOnlyMap(segment.path) as m:
        items = salvage_arrays(m.buf, segment.name, segment.base_offset)
    msg = items.kinds == KIND_MESSAGE
    return items.positions[msg], items.positions[msg] + items.sizes[msg]


class SegmentBytes(NamedTuple):
    segment: Segment
    data: np.ndarray  # the segment's written bytes, in memory
    starts: np.ndarray  # its messages' file positions
    sizes: np.ndarray  # and sizes


def load_messages(store: Path) -> list[SegmentBytes]:
    """Every segment with its written bytes in memory (what the in-process ceilings, framers and decoders run
    over) and its messages' starts and sizes."""
    out = []
    for seg in list_segments(Path(store) / "commitlog"):
        starts, ends = segment_frames(seg)
        data = np.fromfile(seg.path, np.uint8, count=int(ends.max(initial=0)))
        out.append(SegmentBytes(seg, data, starts, ends - starts))
    return out
