"""One progress line per phase that never runs backwards (runtime/progress.py, issue 37): extract counts, writes and
counts back in one phase, one Spark job after the other; its line went from "100%, 10/10 tasks" to "69%, 22/32" as
the next job's tasks joined the total.  Each step now names itself and is measured by its own job.

Spark's status tracker is played by a script here (the jobs and stages a real one reports, in the order it reports
them), so the line is read at exactly the moment the issue saw: the second job submitted, part of it done."""
from __future__ import annotations

import io
from dataclasses import dataclass, field

from runtime import progress


@dataclass
class _Job:
    stageIds: list


@dataclass
class _Stage:
    numTasks: int
    numCompletedTasks: int


@dataclass
class _Tracker:
    """SparkContext.statusTracker() as a script sets it: {job id: [(tasks, done) per stage]}."""

    jobs: dict = field(default_factory=dict)

    def getJobIdsForGroup(self, group):
        return list(self.jobs)

    def getJobInfo(self, job):
        return _Job([(job, i) for i in range(len(self.jobs[job]))])

    def getStageInfo(self, stage):
        job, i = stage
        return _Stage(*self.jobs[job][i])


class _Context:
    def __init__(self, tracker):
        self.tracker = tracker

    def statusTracker(self):
        return self.tracker

    def setJobGroup(self, *args, **kwargs):
        pass

    def setLocalProperty(self, *args):
        pass


class _Session:
    def __init__(self, tracker):
        self.sparkContext = _Context(tracker)


def test_a_phase_of_several_spark_jobs_names_each_step_and_never_runs_backwards():
    progress.configure("extract")
    tracker = _Tracker()
    log = io.StringIO()
    with progress.Phase("select and write", 1 << 20, _Session(tracker), stream=log) as phase:
        phase.step("counting the selection")
        tracker.jobs[0] = [(10, 10)]  # the count: done
        phase._poll()
        first = phase.text(phase.started + 2.0)
        phase.step("writing")
        tracker.jobs[1] = [(10, 10), (12, 2)]  # the write: submitted, a stage of it done
        phase._poll()
        second = phase.text(phase.started + 4.0)
        tracker.jobs[2] = [(3, 1)]  # a second job of the same step
        phase._poll()
        third = phase.text(phase.started + 5.0)
    assert first.startswith("select and write (counting the selection): 100%, 10/10 tasks")
    assert second.startswith("select and write (writing): 55%, 12/22 tasks"), second  # not 69%, 22/32
    assert third.startswith("select and write (writing, Spark job 2): 33%, 1/3 tasks"), third
    lines = log.getvalue().splitlines()
    assert [line.split("] ", 1)[1] for line in lines[1:3]] == ["select and write: counting the selection",
                                                                "select and write: writing"]
