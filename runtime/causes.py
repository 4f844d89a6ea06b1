"""A failure reduced to its cause, in one line: what the jobs' runtime (runtime/cli.py) prints without ``--debug``.

A failed Spark job reaches Python as a ``Py4JJavaError`` whose text is the JVM's whole chain: ``An error
occurred while calling o123.parquet.`` and two hundred lines of ``at org.apache...`` frames and ``Caused by:``
exceptions, the cause (``java.io.IOException: No space left on device``) at the bottom.  pyspark's captured
errors (``AnalysisException``, ``PythonException``...) carry the same, or a Python worker's traceback.
:func:`cause_line` keeps what a user acts on:

* the innermost exception of the chain (the last ``Caused by:``; the last line of a Python worker's traceback),
  as ``<message> (<exception's short class name>)``;
* the file it was about (the nearest ``file:/...``, ``hdfs://...`` or absolute path the chain names), and the
  operation when the chain says it (Spark's ``Task failed while writing rows to PATH``: ``writing``).

``MemoryError`` and the OS errors of a full disk or a file size limit (ENOSPC, EDQUOT, EFBIG) name the file
(``OSError.filename``) and the operation from where the job was (runtime/progress.py's phase or step).
"""
from __future__ import annotations

import errno
import os
import re

from store_format.fs import Location

# an exception line of a Java chain: "java.io.IOException: msg", "Caused by: org.apache...SparkException: msg",
# ": org.apache..." (py4j's first line after "An error occurred while calling ...")
_JAVA = re.compile(r"^(?:Caused by: |: )?((?:[A-Za-z_$][\w$]*\.)+[A-Za-z_$][\w$]*)(?::\s?(.*))?$")
_PY_EXC = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Warning|Failure|Iteration))(?::\s?(.*))?$")
_PATH = re.compile(r"((?:file|hdfs|s3a?|gs|abfss?|wasbs?|viewfs|elsewhere):/{1,3}[^\s'\",;]+|(?<![\w:.])/(?:[^\s'\",;:]+))")
_WRITING = re.compile(r"\bwrit(?:e|ing)\b", re.I)
_READING = re.compile(r"\bread(?:ing)?\b", re.I)
_CALL = re.compile(r"An error occurred while calling [\w$]+\.(\w+)")
_SQLSTATE = re.compile(r"\s*SQLSTATE: \w+\.?\s*$")
FULL_DISK = (errno.ENOSPC, getattr(errno, "EDQUOT", -1), errno.EFBIG)


def is_spark_error(e: BaseException) -> bool:
    """A failure that came from Spark: py4j's Java errors and pyspark's captured ones."""
    module = type(e).__module__ or ""
    return module.startswith(("py4j", "pyspark.errors", "pyspark.sql.utils")) or any(
        c.__name__ in ("Py4JJavaError", "CapturedException", "PySparkException") for c in type(e).__mro__)


def spark_error_text(e: BaseException) -> str:
    """All the text of a Spark error: py4j's Java chain (``str``), pyspark's message and JVM stack."""
    try:
        parts = [str(e)]  # a Py4JJavaError asks the JVM for its text
    except Exception:  # noqa: BLE001 - the JVM is gone: what py4j kept of the message
        parts = [str(getattr(e, "errmsg", "") or type(e).__name__)]
    for name in ("desc", "stackTrace"):
        value = getattr(e, name, None)
        if isinstance(value, str) and value and value not in parts[0]:
            parts.append(value)
    return "\n".join(parts)


def reduce_text(text: str) -> str:
    """The cause of a Spark error's text, in one line (see the module's docstring)."""
    lines = [ln.rstrip() for ln in text.splitlines()]
    if any(ln.startswith("Traceback (most recent call last):") for ln in lines):
        root = _python_root(lines)
        if root:  # its own message names the file when there is one (an OSError's filename); frames are code
            return root
    chain = []  # (class, message) from outermost to innermost
    for ln in lines:
        stripped = ln.strip()
        if not stripped or stripped.startswith("at ") or stripped.startswith("... ") or ln[:1] in ("\t", " "):
            continue
        m = _JAVA.match(stripped)
        if m and _looks_like_class(m.group(1)):
            chain.append((m.group(1), (m.group(2) or "").strip()))
    if chain:
        cls, message = chain[-1]
        message = _strip_class_prefixes(message)
        short = cls.rsplit(".", 1)[-1]
        root = f"{message} ({short})" if message else short
        return _with_place(root, text, [m for _, m in reversed(chain)])
    first = next((ln.strip() for ln in lines if ln.strip()), "")
    return _SQLSTATE.sub("", first) or "(no message)"


def _looks_like_class(name: str) -> bool:
    last = name.rsplit(".", 1)[-1]
    return last[:1].isupper() and last.endswith(("Exception", "Error", "Throwable", "Failure")) and "." in name


def _python_root(lines: list[str]) -> str | None:
    """The exception line that ends the last Python traceback in ``lines``."""
    start = max(i for i, ln in enumerate(lines) if ln.startswith("Traceback (most recent call last):"))
    found = None
    for ln in lines[start + 1:]:
        if ln[:1] in (" ", "\t") or not ln:
            continue
        m = _PY_EXC.match(ln)
        if m:
            found = f"{m.group(2).strip()} ({m.group(1).rsplit('.', 1)[-1]})" if m.group(2) else m.group(1)
        elif found is None:
            continue
        else:
            break  # past the traceback (pyspark's JVM stack follows)
    return found


def _strip_class_prefixes(message: str) -> str:
    """``java.io.IOException: java.io.IOException: No space left on device`` -> ``No space left on device``."""
    while True:
        m = _JAVA.match(message)
        if not (m and _looks_like_class(m.group(1)) and m.group(2)):
            return _SQLSTATE.sub("", message)
        message = m.group(2).strip()


def _with_place(root: str, text: str, messages: list[str] | None = None) -> str:
    """``root`` with the file it was about and the operation, when the chain names them and ``root`` does not."""
    if messages is None:
        messages = [text]
    if _PATH.search(root):
        return root
    for message in messages:  # the innermost first
        m = _PATH.search(message)
        if m:
            path = m.group(1).rstrip(".)")
            op = "writing" if _WRITING.search(message) else "reading" if _READING.search(message) else None
            return f"{root}, {op} {path}" if op else f"{root}: {path}"
    call = _CALL.search(text)
    return f"{root}, in {call.group(1)}()" if call else root


_OURS = tuple(f"{os.sep}{p}{os.sep}" for p in ("jobs", "runtime", "store_format", "decoding", "datasources"))
_PATH_NAMES = ("path", "filename", "file", "target", "dest")


def path_in_frames(e: BaseException) -> str | None:
    """The file our code was at when ``e`` was raised: the innermost frame of the project's packages holding a
    local ``path`` (or ``filename``, ``file``...) that is a path.  An error from pyarrow's writers (a full disk:
    ``Error writing bytes to file``) or from an allocation names no file of its own; the frame that called it
    does."""
    frames = []
    tb = e.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    for frame in reversed(frames):
        if not frame.f_code.co_filename.replace("/", os.sep).endswith(".py") or \
                not any(p in frame.f_code.co_filename for p in _OURS):
            continue
        for name in _PATH_NAMES:
            value = frame.f_locals.get(name)
            if isinstance(value, Location):
                return value.as_typed
            if isinstance(value, os.PathLike) or (isinstance(value, str) and (os.sep in value or "://" in value)):
                return os.fspath(value) if isinstance(value, os.PathLike) else value
    return None


def os_error_line(e: OSError, where: str | None) -> str | None:
    """A full disk or a file size limit (``e.errno`` in :data:`FULL_DISK`): ``PATH: <reason>, <where>``; None for
    another OS error (its usual line)."""
    if e.errno not in FULL_DISK:
        return None
    reason = os.strerror(e.errno)
    path = os.fsdecode(e.filename) if e.filename is not None else path_in_frames(e)
    return (f"{path}: " if path else "") + reason + (f", {where}" if where else "")


def memory_line(e: MemoryError, where: str | None) -> str:
    """``out of memory, <where>`` (and the message, when there is one: the allocation that failed), after the
    file our code was at when it ran out."""
    text = str(e).strip()
    path = path_in_frames(e)
    return (f"{path}: " if path else "") + "out of memory" + (f" ({text})" if text else "") + (
        f", {where}" if where else "")


def cause_line(e: BaseException, where: str | None = None) -> str | None:
    """The one line for ``e`` when this module knows better than the error's own text: a Spark error reduced to
    its cause, a full disk or a MemoryError named with the file and the operation; else None."""
    if isinstance(e, MemoryError):
        return memory_line(e, where)
    if isinstance(e, OSError) and not is_spark_error(e):
        return os_error_line(e, where)
    if is_spark_error(e):
        line = reduce_text(spark_error_text(e))
        return line + (f" ({where})" if where and where not in line else "")
    return None
