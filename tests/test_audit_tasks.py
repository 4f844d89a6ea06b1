"""How the audit's tasks run as a Spark job (jobs/audit/tasks.py): each Spark task receives and unpickles its own bin
only, Python workers are reused from task to task, and what the job cost around the tasks is reported for
--profile (issue 40, cluster efficiency).  Driver threads and Spark give the same partial tables."""
from __future__ import annotations

from jobs.audit import job as audit_job
from jobs.audit.tasks import RunInfo, pack, run_tasks
from runtime.session import Executor

from .support.counted import CountedFacts, CountedTask

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
