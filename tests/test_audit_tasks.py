"""How the audit's tasks run as a Spark job (jobs/audit/tasks.py): each Spark task receives and unpickles its own bin
only, Python workers are reused from task to task, and what the job cost around the tasks is reported for
--profile (issue 40, cluster efficiency).  Driver threads and Spark give the same partial tables."""
from __future__ import annotations

from jobs.audit import job as audit_job
from jobs.audit.tasks import RunInfo, pack, run_tasks
from runtime.session import Executor

from .support.counted import CountedFacts, CountedTask, ReadyOnFirstTask

SIZES = [50, 10, 40, 30, 20, 60, 5, 35]  # eight tasks of uneven cost: six bins on two cores (TASKS_PER_CORE 3)


def _tasks() -> list[CountedTask]:
    return [CountedTask(i, size) for i, size in enumerate(SIZES)]


def test_each_spark_task_unpickles_its_own_bin_only(spark):
    executor = Executor("spark", 2)
    bins = pack(_tasks(), executor.slots)
    outputs = run_tasks(spark, _tasks(), executor, RunInfo(None))

    report = outputs.get("unpickled").to_pylist()
    # every task unpickled exactly once in all (a closure over the stage's bins unpickles them all in every task),
    # and each in the Spark task that runs its bin: what a run saw unpickled is its own bin's tasks
    assert sorted(r["unpickled"] for r in report) == list(range(len(SIZES)))
    bin_of = {i: b for b, items in enumerate(bins) for i, _ in items}
    assert all(bin_of[r["unpickled"]] == bin_of[r["task"]] for r in report)

    tasks = outputs.get("_spark_tasks").to_pylist()
    assert sorted(r["bin"] for r in tasks) == list(range(len(bins)))
    # Python workers reused: fewer processes than Spark tasks, and some ran a task before this one
    assert len({r["pid"] for r in tasks}) < len(bins)
    assert any(r["worker_tasks_before"] > 0 for r in tasks)
    job = outputs.get("_spark_job").to_pylist()[0]
    assert job["bins"] == len(bins) and job["work_bytes"] == sum(r["work_bytes"] for r in tasks)


def test_shared_objects_are_unpickled_once_per_python_worker(spark):
    """What many tasks share (a broker's facts: jobs/audit/tasks.py ``Shared``) is shipped apart from the bins and
    unpickled once in each Python worker, however many bins that worker runs; its tasks there share one object."""
    import uuid

    facts = CountedFacts(uuid.uuid4().hex)
    tasks = [CountedTask(i, size, facts) for i, size in enumerate(SIZES)]
    outputs = run_tasks(spark, tasks, Executor("spark", 2), RunInfo(None))

    seen = outputs.get("shared").to_pylist()
    assert sorted(r["task"] for r in seen) == list(range(len(SIZES)))
    workers = {r["pid"] for r in seen}
    bins = outputs.get("_spark_job").to_pylist()[0]["bins"]
    assert len(workers) < bins  # reused workers: the case where per-bin shipping would unpickle it again
    assert all(r["unpickled"] == 1 for r in seen)  # once in each worker (per bin: up to 3 times in one)
    assert all(len({r["facts"] for r in seen if r["pid"] == pid}) == 1 for pid in workers)
    # the bins carry a reference, not the facts: the shared bytes are counted once for the stage
    job = outputs.get("_spark_job").to_pylist()[0]
    assert job["shared_bytes"] > 0


def test_driver_and_spark_make_the_same_tables(spark):
    made = {where: run_tasks(spark, _tasks(), Executor(where, 2), RunInfo(None)).get("made").sort_by("task")
            for where in ("driver", "spark")}
    assert made["driver"].equals(made["spark"])
    assert made["spark"].column("square").to_pylist() == [i * i for i in range(len(SIZES))]


def test_profile_names_the_fixed_cost_of_a_spark_stage(spark):
    outputs = run_tasks(spark, _tasks(), Executor("spark", 2), RunInfo(None))
    text = "\n".join(audit_job._spark_cost_lines("scan", outputs))
    for name in ("scan as a Spark job: 6 bin(s)", "until the first task ran", "Python workers started",
                 "task shipping", "kernel load on executors", "around the tasks"):
        assert name in text
    assert audit_job._spark_cost_lines("scan", run_tasks(spark, _tasks(), Executor("driver", 2), RunInfo(None))) == []


def test_a_stage_begun_in_the_driver_goes_on_in_spark_once_the_executors_are_ready(spark):
    """``--executor auto`` on a cluster (jobs/audit/tasks.py ``_run_driver_first``): the driver's threads begin the
    stage while the executors' warm-up runs; once it is ready, the tasks not started go to one Spark job.  Every
    task runs once, some in each place, and the tables come back in the tasks' order, as the driver alone makes
    them."""
    import os
    import uuid
    from types import SimpleNamespace

    token = uuid.uuid4().hex
    warming = SimpleNamespace(ready=ReadyOnFirstTask(token))
    tasks = [CountedTask(i, size, ready=token) for i, size in enumerate(SIZES)]
    outputs = run_tasks(spark, tasks, Executor("spark", 2), RunInfo(None), warming=warming)

    ran = outputs.get("ran").to_pylist()
    assert [r["task"] for r in ran] == list(range(len(SIZES)))  # each once, in the tasks' order
    here = {r["task"] for r in ran if r["pid"] == os.getpid()}
    first = outputs.get("_driver_first").to_pylist()[0]
    # the driver's two threads each held a task when the executors were ready, and may each have begun one more
    assert 1 <= len(here) == first["tasks"] <= 4 and first["handed_to_spark"] == len(SIZES) - len(here)
    assert first["cost"] == sum(SIZES[i] for i in here) and first["ready_after_seconds"] is not None
    assert outputs.get("_spark_job").to_pylist()[0]["bins"] >= 1
    alone = run_tasks(spark, _tasks(), Executor("driver", 2), RunInfo(None))
    assert outputs.get("made").equals(alone.get("made"))
    text = "\n".join(audit_job._driver_first_lines("scan", outputs))
    assert f"scan begun in the driver: {len(here)} task(s)" in text
    assert f"{len(SIZES) - len(here)} left to a Spark" in text


def test_a_stage_the_driver_ends_before_the_executors_are_ready_is_no_spark_job(spark):
    import threading
    from types import SimpleNamespace

    warming = SimpleNamespace(ready=threading.Event())  # never ready
    outputs = run_tasks(spark, _tasks(), Executor("spark", 2), RunInfo(None), warming=warming)
    first = outputs.get("_driver_first").to_pylist()[0]
    assert first == {"tasks": len(SIZES), "cost": sum(SIZES), "handed_to_spark": 0, "ready_after_seconds": None}
    assert "_spark_job" not in outputs.partials
    assert outputs.get("made").equals(run_tasks(spark, _tasks(), Executor("driver", 2), RunInfo(None)).get("made"))
