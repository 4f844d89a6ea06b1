"""The dumps an audit reads (store roots and their broker names: jobs/stores.py), and the chain of custody over
their files (sizes, mtimes, optionally sha256, before and after the run)."""
from __future__ import annotations

import hashlib

from jobs.stores import StoreRef
from store_format import fs


def input_files(stores: list[StoreRef]) -> list:
    """Every file of the stores: ``Path``s, or ``fs.StorePath``s of a store on another file system."""
    return sorted((p for s in stores for p in _files_under(s.path)), key=lambda p: p.parts)  # Path's order


def _files_under(root: str):
    where = fs.as_path(root)
    if not isinstance(where, fs.StorePath):
        return (p for p in where.rglob("*") if p.is_file())
    import pyarrow.fs as pafs

    infos = where.loc.fs.get_file_info(pafs.FileSelector(where.loc.path, recursive=True))
    return (fs.StorePath(fs.Location(where.loc.fs, i.path)) for i in infos if i.type == pafs.FileType.File)


def fingerprint(files: list, sha256: bool) -> dict[str, dict]:
    out = {}
    for p in files:
        st = p.stat()
        entry = {"size": st.st_size, "mtime_ns": st.st_mtime_ns}
        if sha256:
            h = hashlib.sha256()
            with fs.open_file(p) as f:  # the read-only way in (no FIFO, device or link loop is read)
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    h.update(chunk)
            entry["sha256"] = h.hexdigest()
        out[str(p)] = entry
    return out
