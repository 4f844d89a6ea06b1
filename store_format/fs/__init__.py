"""The one way in to a dump's files, and the file-system seam: read-only opens that refuse anything but regular
files and folders, on the local file system or, through ``pyarrow.fs``, on any other.  Every reader imports it as
``store_format.fs``; the concerns live apart:

* fs/hostile.py: hostile-input opens of local files (:func:`open_fd`: look, open read-only and non-blocking,
  check what was opened; every failure an :class:`UnreadableError` naming the path and the reason in words), and
  what the file's holes say (:func:`data_extents`, :func:`written_length`);
* fs/remote.py: remote locations (:class:`Location`, :class:`StorePath`, :func:`resolve`,
  :func:`register_filesystem`: local files stay paths and are memory-mapped, others are read by ranges);
* fs/maps.py: maps and listings of any dump file (:class:`ReadOnlyMap`, :func:`open_file`, :func:`read_bytes`,
  :func:`entries`, :func:`files_under`, :func:`stat_files_under`,
  :func:`unreadable_entries`, :func:`map_range`, :func:`read_written`);
* fs/identity.py: where a path really is (identity and overlap by device and inode: :func:`overlap`);
* fs/listings.py: a run's look at local folders, taken once for all its walks (:func:`listings_of_the_run`,
  :func:`scanned`);
* fs/zero_tails.py: where a run found a local file's zeros begin, searched once for all its readers
  (:func:`zero_tails_of_the_run`).
"""
from __future__ import annotations

from .hostile import UnreadableError, data_end, data_extents, describe, error_line, open_fd, written_length
from .identity import ancestry, identity, overlap, real, store_root_of
from .listings import RunListings, let_go_of_listings, listings_of_the_run, run_listings_for, scanned
from .maps import OUTPUT_MARKER, STORE_FILES, STORE_FOLDERS, Entry, ReadOnlyMap, check_file, check_folder, entries, \
    entry, files_under, map_range, open_file, part_of, read_bytes, read_written, stat_files_under, \
    unreadable_entries
from .remote import FILESYSTEMS_ENV, Location, StorePath, as_path, as_typed, filesystem_of, is_uri, local_path, \
    register_filesystem, resolve, uri_below, uri_of

__all__ = ["ReadOnlyMap", "data_end", "data_extents", "written_length", "Location", "StorePath", "resolve", "as_path",
           "as_typed", "is_uri", "local_path", "uri_below", "uri_of", "filesystem_of", "register_filesystem",
           "FILESYSTEMS_ENV", "real", "identity", "ancestry", "overlap", "store_root_of", "UnreadableError", "Entry",
           "error_line", "open_fd", "open_file", "read_bytes", "check_file", "check_folder", "entry", "entries",
           "files_under", "stat_files_under", "unreadable_entries", "read_written", "part_of", "describe", "map_range", "OUTPUT_MARKER", "STORE_FILES",
           "STORE_FOLDERS", "RunListings", "let_go_of_listings", "listings_of_the_run",
           "run_listings_for", "scanned"]
