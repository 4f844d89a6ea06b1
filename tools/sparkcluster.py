"""Spark daemons on this machine, started from the installed ``pyspark`` and stopped by pid: a standalone
cluster (one Master, N Workers, each its own JVM) and a Spark Connect server.  The cluster tests
(tests/test_cluster.py, tests/test_connect.py) and ``make bench``'s cluster figure (bench/run.py) use them.

    python tools/sparkcluster.py [--workers 2] [--cores 1] [--memory 1g]   # start, print the master URL,
                                                                         # stop on Ctrl-C or end of stdin

Every daemon listens on 127.0.0.1 on ports chosen free when it starts (``spark.port.maxRetries=0``: a port
taken in between fails the start, which is tried again with new ports, instead of Spark quietly binding the
next one), runs in a process group of its own, logs into the work folder, and sees an empty SPARK_CONF_DIR
(the user's spark-defaults.conf and log settings stay out of it) and no PYTHONPATH: what its executors import
comes from the application (``--py-files``, ``spark.executorEnv.*``, Connect artifacts), never from the
environment that started it.  ``stop()`` ends the daemons and everything they started (executor JVMs, Python
workers), by pid: SIGTERM, a bounded wait, then SIGKILL.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
CONNECT_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
HOST = "127.0.0.1"
# the daemons' own JVMs (Master, Worker) are small; executors get what the application asks for
DAEMON_MEMORY = "256m"
DAEMON_JAVA_OPTS = "-XX:+UseSerialGC -XX:TieredStopAtLevel=1"
# what the environment must not hand the daemons (the checkout on PYTHONPATH, another Spark's configuration)
_DROPPED_ENV = ("PYTHONPATH", "SPARK_CONF_DIR", "SPARK_HOME", "PYSPARK_DRIVER_PYTHON", "PYSPARK_SUBMIT_ARGS",
                "SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED", "PYSPARK_GATEWAY_PORT", "PYSPARK_GATEWAY_SECRET")


class DaemonError(RuntimeError):
    """A daemon that did not start (its log's tail says why)."""


def spark_home() -> Path:
    """The installed pyspark's Spark distribution (bin/, sbin/, jars/)."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def daemon_env(work: Path, extra: dict | None = None, memory: str = DAEMON_MEMORY) -> dict:
    """The environment a daemon starts with (see the module docstring); ``memory``: its JVM's heap."""
    conf = work / "conf"
    conf.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in _DROPPED_ENV}
    env.update(SPARK_CONF_DIR=str(conf), SPARK_LOCAL_IP=HOST, SPARK_LOCAL_DIRS=str(work / "local"),
               SPARK_DAEMON_MEMORY=memory, SPARK_CONNECT_MODE="0",
               # the Master's REST submission server listens on a fixed port (6066), so a second cluster of this
               # machine would fail to start: spark-submit here uses the spark:// RPC port only
               SPARK_DAEMON_JAVA_OPTS=f"{DAEMON_JAVA_OPTS} -Dspark.port.maxRetries=0 -Dspark.master.rest.enabled=false")
    env.update(extra or {})
    return env


def _descendants(pids: set[int]) -> set[int]:
    """``pids`` and every live process below them (read from /proc)."""
    parents: dict[int, int] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    parents[int(d)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    found, todo = set(), [p for p in pids if p in parents]
    while todo:
        pid = todo.pop()
        found.add(pid)
        todo += [c for c, ppid in parents.items() if ppid == pid and c not in found]
    return found


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has ended
    except (OSError, IndexError):
        return False


def stop_processes(procs: list[subprocess.Popen], timeout: float = 30.0) -> list[int]:
    """End ``procs`` (each the leader of its own process group) and every process below them: SIGTERM to the
    groups and the descendants, at most ``timeout`` seconds for them to go, then SIGKILL.  Returns the pids
    that had to be killed."""
    tree = _descendants({p.pid for p in procs if p.poll() is None})
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
    for pid in tree:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for p in procs:
            p.poll()  # reap our own children
        if not any(_alive(pid) for pid in tree):
            break
        time.sleep(0.2)
    killed = [pid for pid in tree | _descendants(tree) if _alive(pid)]
    for pid in killed:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    for p in procs:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
    return killed


@dataclass
class Daemon:
    name: str
    proc: subprocess.Popen
    log: Path

    def tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def check(self) -> None:
        if self.proc.poll() is not None:
            raise DaemonError(f"{self.name} exited with status {self.proc.returncode}; {self.log}:\n{self.tail()}")


def _start(name: str, cmd: list[str], work: Path, env: dict) -> Daemon:
    log = work / "logs" / f"{name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env,
                                cwd=work, start_new_session=True)
    return Daemon(name, proc, log)


def _wait(what: str, ready, daemons: list[Daemon], timeout: float, interval: float = 0.5):
    """Poll ``ready()`` until it returns something truthy, a daemon exits, or ``timeout`` seconds pass."""
    deadline = time.monotonic() + timeout
    while True:
        for d in daemons:
            d.check()
        value = ready()
        if value:
            return value
        if time.monotonic() > deadline:
            raise DaemonError(f"{what} not ready after {timeout:.0f} s; " +
                              "; ".join(f"{d.log}:\n{d.tail(15)}" for d in daemons))
        time.sleep(interval)


def _json(url: str) -> dict | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return json.load(r)
    except (OSError, ValueError):
        return None


@dataclass
class SparkCluster:
    """A running standalone cluster: ``master_url`` (spark://127.0.0.1:PORT) for ``--master``."""

    master_url: str
    web_url: str
    work: Path
    daemons: list[Daemon] = field(default_factory=list)

    def state(self) -> dict | None:
        """The Master's view (its web UI's /json/): workers, cores, running and completed applications."""
        return _json(f"{self.web_url}/json/")

    def pids(self) -> set[int]:
        """Every live process of the cluster: the daemons, executor JVMs, Python workers."""
        return _descendants({d.proc.pid for d in self.daemons})

    def stop(self, timeout: float = 30.0) -> list[int]:
        return stop_processes([d.proc for d in reversed(self.daemons)], timeout)

    def __enter__(self) -> "SparkCluster":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def start_cluster(work: Path, workers: int = 2, cores: int = 1, memory: str = "1g", timeout: float = 180.0,
                  attempts: int = 3, env: dict | None = None) -> SparkCluster:
    """A Master and ``workers`` Workers (``cores`` cores and ``memory`` for executors each) from the installed
    pyspark, logging and working under ``work``; returns once every Worker has registered with the Master."""
    work = Path(work)
    for attempt in range(1, attempts + 1):
        try:
            return _start_cluster(work, workers, cores, memory, timeout, env)
        except DaemonError as e:
            if attempt == attempts or "Address already in use" not in str(e) and "BindException" not in str(e):
                raise


def _start_cluster(work: Path, workers: int, cores: int, memory: str, timeout: float, env: dict | None):
    spark_class = str(spark_home() / "bin" / "spark-class")
    base = daemon_env(work, env)
    port, web = free_port(), free_port()
    master = _start("master", [spark_class, MASTER_CLASS, "--host", HOST, "--port", str(port), "--webui-port",
                               str(web)], work, base)
    cluster = SparkCluster(f"spark://{HOST}:{port}", f"http://{HOST}:{web}", work, [master])
    try:
        _wait("the Spark master", lambda: (cluster.state() or {}).get("status") == "ALIVE", [master], timeout)
        for i in range(workers):
            wdir = work / f"worker-{i}"
            wdir.mkdir(parents=True, exist_ok=True)
            cluster.daemons.append(_start(f"worker-{i}", [
                spark_class, WORKER_CLASS, "--host", HOST, "--cores", str(cores), "--memory", memory,
                "--webui-port", str(free_port()), "--work-dir", str(wdir), cluster.master_url], work, base))

        def registered():
            s = cluster.state() or {}
            return sum(w.get("state") == "ALIVE" for w in s.get("workers", [])) == workers

        _wait(f"{workers} workers", registered, cluster.daemons, timeout)
    except BaseException:
        cluster.stop()
        raise
    return cluster


def app_conf(executor_memory: str = "512m") -> dict[str, str]:
    """What an application run on one of these clusters sets: its driver on 127.0.0.1 (where the executors
    reach it) and executors of ``executor_memory`` (at most a Worker's ``memory``) that start fast."""
    return {"spark.driver.host": HOST, "spark.executor.memory": executor_memory,
            "spark.executor.extraJavaOptions": DAEMON_JAVA_OPTS}


def spark_submit_command(master: str, app: Path, args: list, *, py_files: Path | str, conf: dict | None = None,
                         properties_file: Path | None = None) -> list[str]:
    """``spark-submit --master MASTER [--properties-file F] --conf K=V... --py-files ZIP[,FILE...] APP ARGS`` with the
    installed pyspark's spark-submit."""
    cmd = [str(spark_home() / "bin" / "spark-submit"), "--master", master]
    if properties_file is not None:
        cmd += ["--properties-file", str(properties_file)]
    for key, value in (conf or {}).items():
        cmd += ["--conf", f"{key}={value}"]
    return cmd + ["--py-files", str(py_files), str(app), *map(str, args)]


def spark_submit(master: str, app: Path, args: list, *, py_files: Path, conf: dict | None = None,
                 env: dict | None = None, cwd: Path | None = None, timeout: float | None = None,
                 properties_file: Path | None = None) -> subprocess.CompletedProcess:
    """:func:`spark_submit_command` run to its end in ``env`` (default this environment), output captured as
    text."""
    cmd = spark_submit_command(master, app, args, py_files=py_files, conf=conf, properties_file=properties_file)
    return subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)


@dataclass
class ConnectServer:
    """A running Spark Connect server: ``url`` (sc://127.0.0.1:PORT) for ``SparkSession.builder.remote``."""

    url: str
    port: int
    work: Path
    daemon: Daemon

    def pids(self) -> set[int]:
        return _descendants({self.daemon.proc.pid})

    def stop(self, timeout: float = 30.0) -> list[int]:
        return stop_processes([self.daemon.proc], timeout)

    def __enter__(self) -> "ConnectServer":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def start_connect_server(work: Path, master: str = "local[2]", conf: dict | None = None, env: dict | None = None,
                         memory: str = "1g", timeout: float = 180.0, attempts: int = 3) -> ConnectServer:
    """A Spark Connect server (the spark-connect jar ships in pyspark's jars/) on a free port of 127.0.0.1,
    running its queries on ``master``, with ``conf`` as --conf settings and ``memory`` for its driver JVM (Spark's
    launcher sizes the server as a daemon: SPARK_DAEMON_MEMORY); returns once it accepts clients."""
    work = Path(work)
    for attempt in range(1, attempts + 1):
        port = free_port()
        cmd = [str(spark_home() / "bin" / "spark-submit"), "--class", CONNECT_CLASS, "--name", "Spark Connect server",
               "--master", master, "--conf", f"spark.connect.grpc.binding.address={HOST}",
               "--conf", f"spark.connect.grpc.binding.port={port}", "--conf", "spark.port.maxRetries=0",
               "--conf", f"spark.driver.host={HOST}"]
        for key, value in (conf or {}).items():
            cmd += ["--conf", f"{key}={value}"]
        daemon = _start(f"connect-{port}", cmd, work, daemon_env(work, env, memory))
        server = ConnectServer(f"sc://{HOST}:{port}", port, work, daemon)
        try:
            _wait("the Spark Connect server", lambda: _listening(port), [daemon], timeout)
            return server
        except DaemonError as e:
            server.stop()
            if attempt == attempts or ("Address already in use" not in str(e) and "BindException" not in str(e)):
                raise


def _listening(port: int) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=2):
            return True
    except OSError:
        return False


def main(argv=None) -> int:
    import argparse
    import tempfile

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--cores", type=int, default=1)
    ap.add_argument("--memory", default="1g")
    ap.add_argument("--work", type=Path, help="work folder (default: a new temporary one)")
    args = ap.parse_args(argv)
    work = args.work or Path(tempfile.mkdtemp(prefix="sparkcluster-"))
    with start_cluster(work, args.workers, args.cores, args.memory) as cluster:
        print(f"{cluster.master_url}  (web UI {cluster.web_url}, logs in {work}/logs); Ctrl-C or end of input stops it",
              flush=True)
        try:
            sys.stdin.read()
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
