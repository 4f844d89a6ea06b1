"""A mistyped option gets a suggestion (argparse on Python 3.11 has none): every job's parser, through the one
runtime (runtime.cli.suggest_options), and the console for a mistyped job name.  No Spark: usage errors stop before."""
from __future__ import annotations

import pytest

from jobs import console
from runtime import cli


def _mistyped(option: str) -> str:
    """``--store`` -> ``--stroe``: two letters of the name swapped (not an abbreviation of any option)."""
    name = option[2:]
    i = max(1, len(name) // 2)
    return "--" + name[:i - 1] + name[i] + name[i - 1] + name[i + 1:]


@pytest.mark.parametrize("job", console.JOBS)
def test_every_job_suggests_the_option_a_mistyped_one_meant(job, capsys):
    parser = cli.add_runtime_arguments(console.job_module(job).build_parser())
    options = sorted(o for a in parser._actions for o in a.option_strings if o.startswith("--") and len(o) > 6)
    known = {o for a in parser._actions for o in a.option_strings}
    for option in options:
        typo = _mistyped(option)
        if typo in known or any(o.startswith(typo) for o in known) or cli.did_you_mean(typo, options) != option:
            continue  # a swap that spells (or abbreviates) another option, or is closer to one
        with pytest.raises(SystemExit) as stop:
            console.job_module(job).main([typo, "x"], prog=f"rocketmq-forensics {job}")
        assert stop.value.code == 2
        err = capsys.readouterr().err.strip().splitlines()[-1]
        assert err.startswith(f"rocketmq-forensics {job}: error: ") and \
            err.endswith(f"did you mean {option} (not {typo})?"), err
        break
    else:
        pytest.fail(f"{job}: no option to mistype")


def test_a_mistyped_required_option_is_suggested_beside_the_missing_one(capsys):
    with pytest.raises(SystemExit):
        console.job_module("audit").main(["--stroe", "dump", "--out", "o"], prog="rocketmq-forensics audit")
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err == ("rocketmq-forensics audit: error: the following arguments are required: --store; did you mean "
                   "--store (not --stroe)?")


def test_a_mistyped_job_is_suggested(capsys):
    assert console.console(["extrct", "--store", "x"]) == cli.EXIT_FAILED
    assert "no job 'extrct' (did you mean extract?)" in capsys.readouterr().err
