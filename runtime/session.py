"""Building the SparkSession every job and test uses: spark-conf/ defaults, project modules importable by
Python workers, and the data sources registered.

A classic session's Python workers import the project from PYTHONPATH (set here) or ``--py-files``.  A Spark
Connect session (``SPARK_REMOTE=sc://...`` or ``SparkSession.builder.remote(...)``) runs its Python workers on the
server, which sees none of this machine's files: :func:`ship_project` adds the project's zip to the session as a
Python artifact (``spark.addArtifacts(zip, pyfile=True)``), and :func:`build_session` does so for the jobs.
The zip is the one ``make package`` writes (:func:`write_project_zip`, tools/package.py)."""
from __future__ import annotations

import hashlib
import os
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent  # the checkout, the install's site-packages, or the zip
SPARK_CONF_DIR = REPO / "spark-conf"
PACKAGES = ("store_format", "decoding", "datasources", "runtime", "jobs")  # what the zip carries
ZIP_NAME = "rocketmq_forensics"

# The fast profile for tests (spark-notes.md: "Fast tests").
TEST_PROFILE = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    "spark.sql.adaptive.enabled": "false",
    "spark.sql.codegen.wholeStage": "false",
    "spark.driver.memory": "1g",
    "spark.driver.extraJavaOptions": "-XX:+UseSerialGC -XX:TieredStopAtLevel=1",
}


# What the jobs need whatever spark-conf/ says or wherever it is (a zip on --py-files has no spark-conf/):
# a clean stderr, the Python data sources push filters down, and Delta (delta-rs) cannot read Spark's INT96
# timestamps.
REQUIRED = {
    "spark.ui.showConsoleProgress": "false",  # runtime/progress.py draws the progress line; Spark's bar would garble it
    "spark.sql.python.filterPushdown.enabled": "true",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
}


# What a classic session sets whatever spark-conf/ or a cluster's defaults say (the caller's ``extra`` still wins;
# a Spark Connect session cannot set it: the server's configuration governs): each executor's Python workers run
# task after task, keeping the project's modules and the compiled kernels they loaded (jobs/audit/tasks.py),
# instead of a worker importing and loading them again for every task.
CLASSIC_REQUIRED = {
    "spark.python.worker.reuse": "true",
}


def read_defaults(path: Path = SPARK_CONF_DIR / "spark-defaults.conf") -> dict[str, str]:
    conf = {}
    if path.exists():
        for line in path.read_text().splitlines():
            line = line.strip()
            if line and not line.startswith("#"):
                key, _, value = line.partition(" ")
                conf[key] = value.strip().replace("spark-conf/", f"{SPARK_CONF_DIR}/")
    return conf


#: seconds the last :func:`build_session` of this process took (the JVM's start included): what a job's
#: --profile reports apart from the job's own time
last_start_seconds: float | None = None

# Lines the JVM writes on its stderr before any configuration of ours applies, which no option silences: Spark's
# launcher always adds --add-modules=jdk.incubator.vector (org.apache.spark.launcher.JavaModuleOptions), and
# the JVM's module bootstrap then prints this warning unconditionally.  A JVM this process starts has its stderr
# read through a pipe, and every other line passed on (:func:`_start_jvm`).
JVM_NOISE = (b"WARNING: Using incubator modules: ",)


def _start_jvm(options: dict[str, str]) -> None:
    """Start the session's JVM the way SparkSession.builder would (spark-submit with ``options`` as ``--conf``),
    with its stderr through a pipe that drops :data:`JVM_NOISE`; nothing to do where a JVM runs already (an
    earlier session, or spark-submit started this driver: its JVM printed the line before Python ran)."""
    import subprocess
    import threading

    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    if SparkContext._gateway is not None or os.environ.get("PYSPARK_GATEWAY_PORT"):
        return
    conf = SparkConf()
    for key, value in options.items():
        conf.set(key, value)
    gateway = launch_gateway(conf, popen_kwargs={"stderr": subprocess.PIPE})
    threading.Thread(target=_pass_on, args=(gateway.proc.stderr,), name="jvm-stderr", daemon=True).start()
    SparkContext._ensure_initialized(gateway=gateway)


def _pass_on(pipe) -> None:
    """The JVM's stderr to this process's, line by line, without :data:`JVM_NOISE` (read until the JVM ends, so
    it never blocks on a full pipe)."""
    for line in iter(pipe.readline, b""):
        if not line.startswith(JVM_NOISE):
            try:
                os.write(2, line)
            except OSError:  # our stderr is gone: the JVM's lines go with it
                pass


def build_session(app_name: str, master: str | None = None, test_profile: bool = False, extra: dict | None = None,
                  sources: bool = True):
    """A SparkSession with the project's defaults.  Python workers use this interpreter and can import
    the project's packages (data source classes are pickled by reference); the data sources registered unless
    ``sources`` is False (a job that reads none, such as the audit: registering costs a second of start).  With SPARK_REMOTE set, a Spark
    Connect session: the confs a server lets a session set are set (the others are the server's, silently),
    and the project is shipped to it (:func:`ship_project`)."""
    global last_start_seconds
    started = time.perf_counter()
    from decoding.kernels import bound_driver_memory

    bound_driver_memory()  # this process is a driver: what its steps free goes back (a third off its peak)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    paths = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    if str(REPO) not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO)] + paths))
    from pyspark.sql import SparkSession

    # SPARK_REMOTE=sc://...: a Spark Connect session (pyspark refuses a master beside it; the server has its own)
    remote = os.environ.get("SPARK_REMOTE")
    # spark-conf/ and the test profile configure the JVM this process starts; a Connect server has its own
    # configuration, and a session may set only the runtime SQL confs the jobs need
    conf = {**REQUIRED, **({} if remote else read_defaults())}
    if test_profile and not remote:
        conf.update(TEST_PROFILE)
    if not remote:
        conf.update(CLASSIC_REQUIRED)
    conf.update(extra or {})
    builder = SparkSession.builder.appName(app_name)
    if remote and master:
        raise ValueError(f"SPARK_REMOTE={remote} asks for a Spark Connect session, and master={master!r} for a "
                         "classic one: unset one of them")
    # spark-submit --master (or a master set by the caller) wins over spark-defaults.conf's local[2]
    submitted = bool(os.environ.get("PYSPARK_GATEWAY_PORT"))  # set when spark-submit started this driver
    if not remote and (master or ("spark.master" in conf and not submitted)):
        builder = builder.master(master or conf["spark.master"])
    launched_master = master or (conf.get("spark.master") if not submitted else None)
    conf.pop("spark.master", None)
    for key, value in conf.items():
        builder = builder.config(key, value)
    if not remote:
        _start_jvm({"spark.app.name": app_name, **({"spark.master": launched_master} if launched_master else {}),
                    **conf})
    session = builder.getOrCreate()
    if is_connect(session):  # no SparkContext in this process; the server's log level is the server's
        ship_project(session)
    else:
        session.sparkContext.setLogLevel("WARN")
    if sources:
        from datasources import register

        register(session)  # a source that cannot register fails here, with its name
    last_start_seconds = time.perf_counter() - started
    return session


EXECUTORS = ("auto", "driver", "spark")


@dataclass(frozen=True)
class Executor:
    """Where a job's own tasks run (jobs/audit/tasks.py): ``driver``, this process's threads, one per core; or
    ``spark``, one Spark job whose tasks are bins of the work, TASKS_PER_CORE per core (store_format.plan's split
    policy), so the cores stay busy when the bins' costs differ."""

    where: str
    cores: int  # the session's cores: its default parallelism

    @property
    def slots(self) -> int:
        """Threads at a time (driver), or Spark tasks (spark)."""
        from store_format.plan import TASKS_PER_CORE

        return self.cores if self.where == "driver" else TASKS_PER_CORE * self.cores


def choose_executor(spark, requested: str = "auto") -> Executor:
    """The executor for ``requested`` (:data:`EXECUTORS`): ``auto`` runs in the driver when the session is local
    (its executors are this machine's cores anyway, and a first Spark job's start (JVM warm-up, Python workers
    importing the kernels) costs more than scanning a gigabyte), else as Spark jobs (a cluster, Spark Connect)."""
    from datasources import default_parallelism, local_master

    if requested not in EXECUTORS:
        raise ValueError(f"executor {requested!r}: choose one of {', '.join(EXECUTORS)}")
    where = requested if requested != "auto" else "driver" if local_master(spark) else "spark"
    return Executor(where, default_parallelism(spark))


def is_connect(spark) -> bool:
    """A Spark Connect session: no SparkContext, RDDs or JVM in this process."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


# Modules the zip carries as sources only: numba keys decoding/compiled.py's kernel cache on the file its functions'
# code names (a precompiled module names the file it was compiled as, not the zip it is imported from).
SOURCE_ONLY = ("decoding/compiled.py",)


def write_project_zip(target: Path, root: Path = REPO) -> Path:
    """The project's packages under ``root`` as a zip Python imports from: what ``spark-submit --py-files`` and
    Spark Connect artifacts carry.  Each module's source, and beside it (``name.pyc``, where zipimport looks) its
    bytecode for this interpreter, checked against the source's hash: Python never caches what it compiles from a
    zip, so without it every Python worker compiled the project again (about half a second of CPU each); an
    interpreter of another version, or a source changed in the zip, falls back to the source.  Written beside
    ``target`` and renamed, so a reader never sees half a zip."""
    import py_compile

    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    pyc = target.with_name(f".{target.name}.{os.getpid()}.pyc")
    try:
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf:
            for package in PACKAGES:
                for path in sorted((Path(root) / package).rglob("*.py")):
                    if "__pycache__" in path.parts:
                        continue
                    name = path.relative_to(root).as_posix()
                    zf.write(path, name)
                    if name in SOURCE_ONLY:
                        continue
                    # named as it is in the zip (tracebacks, runtime.causes), whatever the zip's path on a worker
                    py_compile.compile(str(path), cfile=str(pyc), dfile=f"{ZIP_NAME}.zip/{name}", doraise=True,
                                       invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH)
                    zf.write(pyc, name[:-3] + ".pyc")
        tmp.replace(target)
    finally:
        pyc.unlink(missing_ok=True)
        tmp.unlink(missing_ok=True)
    return target


def project_zip(folder: Path | None = None) -> Path:
    """The running project as a zip: the one it was imported from (``--py-files``), else one written from the
    folders it was imported from (a checkout or an install) into ``folder`` (default: a folder of this user's
    in the temp dir), named after its content, so an unchanged project is one file whatever its age."""
    if REPO.is_file():
        return REPO
    folder = Path(folder or Path(tempfile.gettempdir()) / f"rocketmq-forensics-{os.getuid()}")
    fresh = write_project_zip(folder / f".{ZIP_NAME}-{os.getpid()}.zip")
    digest = hashlib.sha256()
    with zipfile.ZipFile(fresh) as zf:  # the members' names and bytes (the archive also holds their mtimes)
        for info in sorted(zf.infolist(), key=lambda i: i.filename):
            digest.update(info.filename.encode() + b"\0" + zf.read(info) + b"\0")
    named = folder / f"{ZIP_NAME}-{digest.hexdigest()[:16]}.zip"
    fresh.replace(named)
    return named


def ship_project(spark, zip_path: str | Path | None = None) -> Path:
    """Make the project importable by the Python workers of a Spark Connect session: ``zip_path`` (default
    :func:`project_zip`) added to the session as a Python artifact.  Artifacts belong to the session; adding the
    same zip again is harmless, another zip of the same file name is refused by the server.  Call it before
    ``datasources.register(spark)`` in a Connect notebook (jobs' sessions do it themselves)."""
    path = Path(zip_path) if zip_path is not None else project_zip()
    spark.addArtifacts(str(path), pyfile=True)
    return path
