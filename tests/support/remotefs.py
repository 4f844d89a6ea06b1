"""A file system that is not local, for the tests of the file-system seam (store_format.fs).

:class:`ElsewhereHandler` serves a local folder through ``pyarrow.fs.PyFileSystem`` under paths that are not
valid local paths (``/elsewhere-<tag>/...``: no such folder exists), so any read that goes around pyarrow.fs (an
``open()``, ``os.stat``, an mmap of the path) fails instead of quietly reading the local file.  Every open is
counted, so a test can also see that reads went through it.  The scheme ``elsewhere://`` resolves to it once
:func:`register` has run in the process (or ``store_format.fs.FILESYSTEMS_ENV`` names :func:`from_uri`).
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


class ElsewhereHandler(pafs.FileSystemHandler):
    """``PREFIX/<tag>/<rel>`` <-> ``<root>/<rel>``; read-only (writes raise)."""

    def __init__(self, tag: str, root: str):
        self.tag, self.root = tag, os.path.abspath(root)

    def __reduce__(self):  # picklable: an executor rebuilds it from the tag and folder
        return ElsewhereHandler, (self.tag, self.root)

    def __eq__(self, other):
        return isinstance(other, ElsewhereHandler) and (other.tag, other.root) == (self.tag, self.root)

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
        return isinstance(other, ElsewhereHandler) and (other.tag, other.root) == (self.tag, self.root)

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

    create_dir = delete_dir = delete_dir_contents = delete_root_dir_contents = delete_file = move = copy_file = \
        open_output_stream = open_append_stream = _refuse


def filesystem(tag: str, root: str) -> pafs.PyFileSystem:
    return pafs.PyFileSystem(ElsewhereHandler(tag, root))


def from_uri(uri: str):
    """``elsewhere://<tag>/<rel>`` -> (the file system of ``tag``, its path): the registered factory."""
    rest = uri.split("://", 1)[1]
    tag, _, rel = rest.partition("/")
    if tag not in ROOTS:
        ROOTS.update(json.loads(os.environ.get(ROOTS_ENV, "{}")))
    if tag not in ROOTS:
        raise ValueError(f"{uri}: no folder is served as {tag!r} in this process")
    return filesystem(tag, ROOTS[tag]), posixpath.join(f"{PREFIX}/{tag}", rel).rstrip("/")


def register(tag: str, root) -> str:
    """Serve the local folder ``root`` as ``elsewhere://<tag>/``; returns that URI."""
    from store_format import fs

    ROOTS[tag] = os.path.abspath(root)
    fs.register_filesystem(SCHEME, from_uri)
    return f"{SCHEME}://{tag}/"


def environment() -> dict[str, str]:
    """The environment another process needs to resolve ``elsewhere://`` as this one does."""
    from store_format import fs

    return {fs.FILESYSTEMS_ENV: f"{SCHEME}=tests.support.remotefs:from_uri", ROOTS_ENV: json.dumps(ROOTS)}
