"""A fleet's per-broker costs (issue 40, "Wide and many": 64 brokers in one audit against one broker of their bytes):
what every broker's scan tasks look up is made in one pass over the survey's parts for all brokers, not in a pass per
broker (which read a fleet's every part as often as it has brokers)."""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from jobs.audit.buckets import key_hash
from jobs.audit.checks import delays as D
from jobs.audit.tasks import Emitter, Outputs, RunInfo


def _survey(tmp_path, parts: list[pa.Table]) -> Outputs:
    """The survey's spilled ``delays.pending`` as its tasks write it: a part per task."""
    run = RunInfo(tmp_path / "findings", "run", None, partials_dir=tmp_path / "partials")
    rows = []
    for k, t in enumerate(parts):
        e = Emitter()
        e.spill("delays.pending", t)
        e.write_findings(run, f"part-{k:05d}.parquet")
        rows.append(e.partials["_spilled"][0])
    return Outputs({"_spilled": pa.concat_tables(rows)})


class _Ctx:
    def __init__(self, survey: Outputs, brokers: list[str]):
        self.survey, self.plans, self.passes = survey, dict.fromkeys(brokers), 0

    def survey_partial_batches(self, name, schema, columns=None):
        self.passes += 1
        return self.survey.batches(name, schema, columns)


def _pending(broker: str, offsets: list[int], keys: list[str | None]) -> pa.Table:
    n = len(offsets)
    return pa.table({"broker": [broker] * n, "level": [1] * n, "queue_offset": list(range(n)),
                     "physical_offset": offsets, "deliver_time": [0] * n, "uniq_key": keys,
                     "real_topic": ["T" if k is not None else None for k in keys]}, schema=D.PENDING)


def test_every_brokers_delay_probe_is_made_in_one_pass_and_is_its_own(tmp_path):
    """Three brokers' pending delayed messages spread over the parts (one broker's in two parts and two brokers in one
    part, a message without a key, a broker with none): each broker's probe is what its own rows give (offsets and
    key hashes, distinct and sorted), None without rows, the parts read once for all of them; a broker asked again
    gets its probe again."""
    parts = [_pending("b0", [300, 100], ["k3", "k1"]),
             pa.concat_tables([_pending("b0", [100, 700], ["k1", None]), _pending("b2", [50], ["k9"])]),
             _pending("b2", [10, 50], ["k8", "k9"])]
    ctx = _Ctx(_survey(tmp_path, parts), ["b0", "b1", "b2"])
    got = {b: D.probes(ctx, b) for b in ctx.plans}
    assert ctx.passes == 1
    assert got["b1"] is None
    for broker, offsets, keys in (("b0", [100, 300, 700], ["k1", "k3"]), ("b2", [10, 50], ["k8", "k9"])):
        assert got[broker]["physical_offsets"].tolist() == offsets
        want = np.unique(key_hash(pa.chunked_array([pa.array(["T"] * len(keys))]),
                                  pa.chunked_array([pa.array(keys)])))
        assert got[broker]["copies"].tolist() == want.tolist()
    again = D.probes(ctx, "b2")
    assert again["physical_offsets"].tolist() == [10, 50] and ctx.passes == 2


def test_a_brokers_plan_parses_topics_json_and_looks_for_its_features_once(tmp_path, monkeypatch):
    """What planning asks of each broker's Store (its batch and compaction topics, its kinds of queue, whether it
    dispatches to several queues, and the families' applies: POP and timers on a 5.x store): topics.json parsed once
    and the store's 5.x structures looked for once, with the answers the files give."""
    import json
    import shutil

    from jobs.audit.checks import pop, timers
    from jobs.audit.plan import plan_broker
    from runtime.stores import resolve_stores
    from store_format import features, store as S

    from .conftest import FIXTURES_5X

    root = tmp_path / "store"
    shutil.copytree(FIXTURES_5X / "v5-batchcq" / "store", root)
    (root / "config" / "topics.json").write_text(json.dumps({"topicConfigTable": {
        "Declared": {"topicName": "Declared", "attributes": {"queue.type": "BatchCQ"}},
        "Kept": {"topicName": "Kept", "attributes": {"cleanup.policy": "COMPACTION"}},
        "Plain": {"topicName": "Plain"}}}))
    parsed, looked = [], []
    read_config, store_features = S.read_config, features.store_features
    monkeypatch.setattr(S, "read_config", lambda folder, name: parsed.append(name) or read_config(folder, name))
    monkeypatch.setattr(features, "store_features", lambda loc: looked.append(loc) or store_features(loc))
    plan = plan_broker(resolve_stores([f"b={root}"])[0])
    st = plan.store
    assert st.batch_topics == {"BatchTopic", "Declared"} and st.compaction_topics == {"Kept"}
    assert st.topics_by_kind == {"batch": {"BatchTopic", "Declared"}, "compaction": {"Kept"}}
    assert st.multi_dispatch and pop.applies(plan) and timers.applies(plan) == store_features(root).timer_store
    assert parsed.count("topics.json") == 1 and len(looked) == 1
