"""The dumps an audit reads: store roots and their broker names (runtime/stores.py ``StoreRef``).  The chain of
custody over their files is every job's, and lives in runtime/custody.py; the audit's names for it are kept here."""
from __future__ import annotations

from runtime.custody import (SHOWN, CustodyError, Fingerprint, changes, check_custody, fingerprint,  # noqa: F401
                          input_files)
from runtime.stores import StoreRef  # noqa: F401
