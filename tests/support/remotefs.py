"""A file system that is not local, for the tests of the file-system seam (store_format.fs).

:class:`ElsewhereHandler` serves a local folder through ``pyarrow.fs.PyFileSystem`` under paths that are not
valid local paths (``/elsewhere-<tag>/...``: no such folder exists), so any read that goes around pyarrow.fs (an
``open()``, ``os.stat``, an mmap of the path) fails instead of quietly reading the local file.  Every open is
counted, so a test can also see that reads went through it.  The scheme ``elsewhere://`` resolves to it once
:func:`register` has run in the process (or ``store_format.fs.FILESYSTEMS_ENV`` names :func:`from_uri`).

A folder is served read-only (a dump), or writable (``register(tag, root, writable=True)``: a job's ``--out`` or
``--history`` on the scheme), and then with or without an atomic rename of folders (``rename=True``: the handler's
``move`` is one ``os.rename`` and it says so with ``atomic_rename``, as HDFS's rename is; without it ``move``
refuses, as an object store has no rename of folders, and runtime/commit.py commits by a marker written last).
"""
from __future__ import annotations

import json
import os
import posixpath

import pyarrow.fs as pafs

SCHEME = "elsewhere"
PREFIX = "/elsewhere-not-a-local-path"
ROOTS: dict[str, str] = {}  # tag -> the local folder it serves (per process: register() fills it)
ROOTS_ENV = "REMOTEFS_ROOTS"  # the same as JSON, for other processes (a data source's Python workers)
OPENS: list[str] = []  # every path opened for reading through the handler
WRITES: list[str] = []  # every path written, made, moved or deleted through the handler (a writable tag)


class ElsewhereHandler(pafs.FileSystemHandler):
    """``PREFIX/<tag>/<rel>`` <-> ``<root>/<rel>``; read-only (writes raise) unless ``writable``."""

    def __init__(self, tag: str, root: str, writable: bool = False, rename: bool = False):
        self.tag, self.root = tag, os.path.abspath(root)
        self.writable, self.atomic_rename = writable, bool(writable and rename)

    def __reduce__(self):  # picklable: an executor rebuilds it from the tag and folder
        return ElsewhereHandler, (self.tag, self.root, self.writable, self.atomic_rename)

    def _key(self):
        return self.tag, self.root, self.writable, self.atomic_rename

    def __eq__(self, other):
        return isinstance(other, ElsewhereHandler) and other._key() == self._key()

    def _local(self, path: str) -> str:
        top = f"{PREFIX}/{self.tag}"
        path = "/" + path.lstrip("/")
        if path != top and not path.startswith(top + "/"):
            raise FileNotFoundError(f"{path}: outside {top}")
        return self.root + path[len(top):]

    def _public(self, local: str) -> str:
        return f"{PREFIX}/{self.tag}" + local[len(self.root):]

    def get_type_name(self):
        return SCHEME

    def equals(self, other):
        return isinstance(other, ElsewhereHandler) and other._key() == self._key()

    def _info(self, local: str) -> pafs.FileInfo:
        public = self._public(local)
        try:
            st = os.stat(local)
        except OSError:
            return pafs.FileInfo(public, pafs.FileType.NotFound)
        if os.path.isdir(local):
            return pafs.FileInfo(public, pafs.FileType.Directory, mtime_ns=st.st_mtime_ns)
        if os.path.isfile(local):
            return pafs.FileInfo(public, pafs.FileType.File, size=st.st_size, mtime_ns=st.st_mtime_ns)
        return pafs.FileInfo(public, pafs.FileType.Unknown)

    def get_file_info(self, paths):
        out = []
        for p in paths:
            try:
                out.append(self._info(self._local(p)))
            except FileNotFoundError:
                out.append(pafs.FileInfo(p, pafs.FileType.NotFound))
        return out

    def get_file_info_selector(self, selector):
        local = self._local(selector.base_dir)
        if not os.path.isdir(local):
            if selector.allow_not_found:
                return []
            raise FileNotFoundError(selector.base_dir)
        out = []
        for dirpath, dirnames, filenames in os.walk(local):
            for n in sorted(dirnames + filenames):
                out.append(self._info(os.path.join(dirpath, n)))
            if not selector.recursive:
                break
        return out

    def open_input_file(self, path):
        import pyarrow as pa

        local = self._local(path)
        if not os.path.isfile(local):
            raise FileNotFoundError(path)
        OPENS.append(path)
        return pa.PythonFile(open(local, "rb"), mode="r")

    def open_input_stream(self, path):
        return self.open_input_file(path)

    def normalize_path(self, path):
        return path

    def _refuse(self, *args):
        raise PermissionError("the elsewhere file system is read-only")

    # ---- writing (a writable tag only) ------------------------------------------------------------------
    def _writable(self, path: str) -> str:
        if not self.writable:
            self._refuse()
        WRITES.append(path)
        return self._local(path)

    def create_dir(self, path, recursive):
        local = self._writable(path)
        if recursive:
            os.makedirs(local, exist_ok=True)
        elif not os.path.isdir(local):
            os.mkdir(local)

    def delete_dir(self, path):
        import shutil

        shutil.rmtree(self._writable(path))

    def delete_dir_contents(self, path, missing_dir_ok=False):
        import shutil

        local = self._writable(path)
        if not os.path.isdir(local):
            if missing_dir_ok:
                return
            raise FileNotFoundError(path)
        for name in os.listdir(local):
            full = os.path.join(local, name)
            shutil.rmtree(full) if os.path.isdir(full) and not os.path.islink(full) else os.unlink(full)

    def delete_root_dir_contents(self):
        self._refuse()

    def delete_file(self, path):
        local = self._writable(path)
        if not os.path.isfile(local):
            raise FileNotFoundError(path)
        os.unlink(local)

    def move(self, src, dest):
        if not self.atomic_rename:  # an object store: no rename (runtime/commit.py copies, a marker written last)
            raise NotImplementedError("the elsewhere file system has no rename")
        os.rename(self._writable(src), self._writable(dest))

    def copy_file(self, src, dest):
        import shutil

        shutil.copyfile(self._local(src), self._writable(dest))

    def open_output_stream(self, path, metadata=None):
        import pyarrow as pa

        local = self._writable(path)
        os.makedirs(os.path.dirname(local), exist_ok=True)  # an object store has no folders to make first
        return pa.PythonFile(open(local, "wb"), mode="w")

    def open_append_stream(self, path, metadata=None):
        self._refuse()


def filesystem(tag: str, root, writable: bool = False, rename: bool = False) -> pafs.PyFileSystem:
    return pafs.PyFileSystem(ElsewhereHandler(tag, root, writable, rename))


def _served(tag: str) -> tuple[str, bool, bool]:
    """(folder, writable, rename) of ``tag``: ROOTS holds a folder (read-only) or {"root", "writable", "rename"}."""
    entry = ROOTS[tag]
    if isinstance(entry, dict):
        return entry["root"], bool(entry.get("writable")), bool(entry.get("rename"))
    return entry, False, False


def from_uri(uri: str):
    """``elsewhere://<tag>/<rel>`` -> (the file system of ``tag``, its path): the registered factory."""
    rest = uri.split("://", 1)[1]
    tag, _, rel = rest.partition("/")
    rel = rel.split("?", 1)[0]
    if tag not in ROOTS:
        ROOTS.update(json.loads(os.environ.get(ROOTS_ENV, "{}")))
    if tag not in ROOTS:
        raise ValueError(f"{uri}: no folder is served as {tag!r} in this process")
    return filesystem(tag, *_served(tag)), posixpath.join(f"{PREFIX}/{tag}", rel).rstrip("/")


def register(tag: str, root, *, writable: bool = False, rename: bool = False) -> str:
    """Serve the local folder ``root`` as ``elsewhere://<tag>/`` (read-only, or ``writable``, with or without an
    atomic ``rename``); returns that URI."""
    from store_format import fs

    root = os.path.abspath(root)
    ROOTS[tag] = {"root": root, "writable": True, "rename": rename} if writable else root
    fs.register_filesystem(SCHEME, from_uri)
    return f"{SCHEME}://{tag}/"


def environment() -> dict[str, str]:
    """The environment another process needs to resolve ``elsewhere://`` (and ``subtree://``) as this one does."""
    from store_format import fs

    return {fs.FILESYSTEMS_ENV: f"{SCHEME}=tests.support.remotefs:from_uri,"
                                f"{SUBTREE}=tests.support.remotefs:subtree_from_uri", ROOTS_ENV: json.dumps(ROOTS)}


# ---- a bucket per folder: pyarrow's own SubTreeFileSystem ------------------------------------------------------
#
# ``subtree://<bucket>/<key>`` is the file system ``SubTreeFileSystem(<the bucket's folder>, LocalFileSystem())`` and
# the path ``<key>``, relative, as an object store's keys are: at the bucket's top the parent of ``a1`` is ``""``.
# Its folders have no atomic rename here (runtime/commit.py commits on it by a marker written last).

SUBTREE = "subtree"


def subtree_from_uri(uri: str):
    """``subtree://<bucket>/<key>`` -> (the bucket's SubTreeFileSystem, ``<key>``): the registered factory."""
    rest = uri.split("://", 1)[1].split("?", 1)[0]
    bucket, _, key = rest.partition("/")
    if bucket not in ROOTS:
        ROOTS.update(json.loads(os.environ.get(ROOTS_ENV, "{}")))
    if bucket not in ROOTS:
        raise ValueError(f"{uri}: no folder is served as bucket {bucket!r} in this process")
    return pafs.SubTreeFileSystem(_served(bucket)[0], pafs.LocalFileSystem()), key.strip("/")


def register_bucket(bucket: str, root) -> str:
    """Serve the local folder ``root`` as ``subtree://<bucket>/``; returns that URI."""
    from store_format import fs

    ROOTS[bucket] = {"root": os.path.abspath(root), "writable": True, "rename": False}
    fs.register_filesystem(SUBTREE, subtree_from_uri)
    return f"{SUBTREE}://{bucket}/"


def no_local_path_used() -> bool:
    """Nothing went around the seam: no folder was ever made at the handler's paths on the local disk (a stray
    ``os.makedirs`` of a handler path by a process running as root would make one)."""
    return not os.path.exists(PREFIX)
