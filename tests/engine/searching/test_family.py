"""A family in one command (`nas search --max-macs 35%,50%,75%`, `nas.search_family`): one subnet per
budget, members searched in ascending order sharing their evaluations, resumable; bad lists refused."""
from __future__ import annotations

import json
import os
import signal

import pytest

from nas import api, cli
from nas.core.arch import arch_id
from nas.core.config import load_config
from nas.core.errors import ConfigError, RecordError, SearchError
from nas.engine.searching.family import FAMILY, is_family, read_family, write_family
from nas.engine.searching.family_budgets import member_specs
from nas.engine.searching.family_search import REUSED, member_seed
from nas.engine.untrained import untrained_run
from tests.support.family import FavoursMax, favours_max  # noqa: F401  (fixture)
from tests.support.figures import no_figures  # noqa: F401  (fixture)

pytestmark = pytest.mark.usefixtures("no_figures")

BUDGETS = ["20%", "60%"]
SMALL = ["10%", "20%"]      # 36 and 78 archs of the tiny space


def _family(run, out, **options):
    options = {"max_macs": BUDGETS, "trials": 12, **options}
    return api.search_family(run, "evolution", out=out, progress=False, score=FavoursMax.name, **options)


def _lines(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _budget(space, spec: str) -> float:
    low, high = space.macs(space.min()), space.macs(space.max())
    return low + float(spec[:-1]) / 100 * (high - low)


def test_a_planted_two_budget_family_answers_each_budget_with_its_largest_arch(trained, favours_max, tmp_path):
    run = api.load_run("tiny", trained)
    space = run.space
    family = _family(run, tmp_path / "fam", trials=100, max_macs=SMALL)      # more than either budget admits
    archs = {arch_id(space.canonical(a)): space.canonical(a) for a in space.enumerate()}
    assert len(family.members) == 2 and family.budgets == [_budget(space, s) for s in SMALL]
    for member, budget in zip(family.members, family.budgets):
        feasible = [a for a in archs.values() if space.macs(a) <= budget]
        assert member.macs == max(space.macs(a) for a in feasible) <= budget
        assert member.evaluated == len(feasible)
    assert family.members[0].arch_id != family.members[1].arch_id
    record = read_family(tmp_path / "fam")
    assert [m["arch_id"] for m in record["members"]] == [m.arch_id for m in family.members]
    assert [m["dir"] for m in record["members"]] == [m.dir.name for m in family.members]
    assert record["evaluations"] == len({a for a in archs if space.macs(archs[a]) <= family.budgets[1]})
    assert (record["cost"], record["budget_specs"], record["trials"]) == ("macs", SMALL, 100)
    # each member's folder is an ordinary search folder
    summary = api.search_summary(family.members[1].dir)
    assert summary["arch_id"] == family.members[1].arch_id


def test_members_share_evaluations_and_a_rerun_evaluates_nothing(trained, favours_max, tmp_path):
    run = api.load_run("tiny", trained)
    family = _family(run, tmp_path / "fam")
    first, second = family.members
    assert len(favours_max) == len(set(favours_max)), "an arch was scored twice"
    earlier = {r["arch_id"] for r in first.trials}
    reused = [r for r in _lines(second.dir / "results.jsonl") if r["arch_id"] in earlier]
    assert reused and all(r[REUSED] == first.dir.name for r in reused)
    assert first.best == reused[0]["arch"], "the second member starts from the first's answer"
    assert family.new == len(favours_max) == family.evaluations
    favours_max.clear()
    again = _family(run, tmp_path / "fam")
    assert favours_max == [] and again.new == 0
    assert [m.arch_id for m in again.members] == [m.arch_id for m in family.members]


def test_a_member_killed_midway_resumes_without_evaluating_the_finished_one(trained, favours_max, tmp_path):
    run = api.load_run("tiny", trained)
    family = _family(run, tmp_path / "fam")
    second = family.members[1].dir / "results.jsonl"
    kept = _lines(second)[:5]
    second.write_text("".join(json.dumps(r) + "\n" for r in kept))
    (family.members[1].dir / "summary.json").unlink()
    favours_max.clear()
    again = _family(run, tmp_path / "fam")
    assert len(favours_max) == again.new == 12 - len(kept) - sum(REUSED in r for r in _lines(second)[5:])
    assert not set(favours_max) & {r["arch_id"] for r in family.members[0].trials}


def test_members_k_are_evenly_spaced_and_a_family_has_its_default_folder(trained, favours_max, tmp_path):
    assert member_specs(5) == ["20%", "35%", "50%", "65%", "80%"] and member_specs(1) == ["50%"]
    run = api.load_run("tiny", trained)
    family = api.search_family(run, "random", members=2, trials=3, progress=False, score=FavoursMax.name)
    assert family.budget_specs == ["20%", "80%"] and is_family(family.dir)
    assert family.dir == run.dir.search(f"family-random-macs{family.dir.name.split('-macs')[1]}")
    assert family.dir.name.endswith("-n2-score-test_favours_max-s0")


def _cli(capsys, trained, tmp_path, *flags: str) -> tuple[int, str]:
    code = cli.main(["search", "tiny", "--runs-dir", str(trained), "--score", FavoursMax.name, "--quiet",
                     "--trials", "3", "--out", str(tmp_path / "fam"), *flags])
    return code, capsys.readouterr().err


@pytest.mark.parametrize("flags, problem", [
    (["--max-macs", ","], "--max-macs: an empty budget in the list ','"),
    (["--max-macs", "50%,20%"], "--max-macs: a family's budgets must be strictly increasing (no duplicates), got "
                                "50% ("),
    (["--max-macs", "20%,20%"], "--max-macs: a family's budgets must be strictly increasing"),
    (["--max-params", "1K,50%"], "--max-params: 0.001M is below the cheapest subnet"),
    (["--max-macs", "20%,50%", "--max-params", "1M,2M"], "--max-macs: a family's budgets are on one cost, and "
                                                         "--max-params holds a list too"),
    (["--members", "2", "--max-macs", "50%"], "--members: gives the MACs budgets"),
    (["--members", "0"], "--members: must be an integer >= 1, got 0"),
    (["--max-latency-ms", "1.2,fast"], "--max-latency-ms: cannot read 'fast'"),
    (["--members", "2000000"], "--members: 2,000,000 members; a family has at most 61 (K budgets from 20% to 80%"),
    (["--max-macs", ",".join(["1%"] * 100_000)], "--max-macs: 100,000 budgets; a family has at most 61 members"),
    (["--max-macs", "50%,100%,999M"], "--max-macs: 999M (999,000,000) is above the max subnet's"),
    (["--max-macs", "20%,60%", "--study", "../../x"], "'../../x' is not a valid name"),
])
def test_a_bad_budget_list_is_one_line_and_exit_2(trained, favours_max, tmp_path, capsys, flags, problem):
    code, err = _cli(capsys, trained, tmp_path, *flags)
    assert code == 2 and len(err.strip().splitlines()) == 1 and problem in err, err
    assert not (tmp_path / "fam").exists() and favours_max == []


def test_the_cli_prints_one_line_per_member_and_the_family_as_json(trained, favours_max, tmp_path, capsys):
    code = cli.main(["search", "tiny", "--runs-dir", str(trained), "--score", FavoursMax.name, "--quiet",
                     "--trials", "3", "--out", str(tmp_path / "fam"), "--max-macs", "20%,60%"])
    out = capsys.readouterr().out.splitlines()
    family = read_family(tmp_path / "fam")
    assert code == 0 and len(out) == 3
    assert [line.split(":")[0] for line in out[:2]] == [m["dir"] for m in family["members"]]
    assert all(m["arch_id"] in line and f"({m['budget_spec']})" in line for m, line in zip(family["members"], out))
    assert out[2].startswith(f"family of 2 in {tmp_path / 'fam'}: {family['evaluations']} distinct archs evaluated "
                             f"({len(favours_max)} now)")
    assert cli.main(["search", "tiny", "--runs-dir", str(trained), "--score", FavoursMax.name, "--quiet",
                     "--trials", "3", "--out", str(tmp_path / "fam"), "--max-macs", "20%,60%", "--json"]) == 0
    assert {k: v for k, v in json.loads(capsys.readouterr().out).items() if k not in ("dir", "new")} == family


def test_a_damaged_family_json_is_one_line_naming_it(tmp_path):
    (tmp_path / FAMILY).write_text('{"kind": "family", "cost": "macs"}')
    with pytest.raises(RecordError, match=rf"^{tmp_path / FAMILY}: damaged record: budget_specs: missing \(required\) "
                                          r"\(and \d+ more\); remove the family folder and search again$"):
        read_family(tmp_path)
    with pytest.raises(SearchError, match="would not be readable"):
        write_family(tmp_path, {"kind": "family"})
    assert not is_family(tmp_path / "nothing")


def test_the_auto_score_is_announced_once_for_the_family_and_kept_by_every_member(trained, tmp_path, capsys):
    run = api.load_run("tiny", trained)
    family = api.search_family(run, "random", max_macs=BUDGETS, trials=3, progress=True, out=tmp_path / "fam")
    err = capsys.readouterr().err
    announced = [err[at:].splitlines()[0] for at in range(len(err)) if err.startswith("score auto:", at)]
    summaries = [json.loads((family.dir / m["dir"] / "summary.json").read_text()) for m in read_family(family.dir)["members"]]
    assert len(announced) == 1 and len(summaries) == 2, announced
    assert all(s["score_line"] == announced[0] for s in summaries), (announced, [s["score_line"] for s in summaries])


@pytest.mark.parametrize("searcher", ["random", "optuna-tpe"])
def test_each_member_draws_its_own_archs_rather_than_replaying_the_first_members(searcher, tmp_path):
    # the default space is too large to list, so every draw is a seeded sample: with one seed
    # for both members, the second replayed the first's draws and answered its arch
    run = untrained_run(load_config("fashion_mnist_mbv3"), tmp_path / "run")
    family = api.search_family(run, searcher, max_macs="35%,75%", trials=8, score="macs", progress=False,
                               out=tmp_path / "fam")
    first, second = family.members
    told_again = [r for r in second.trials if REUSED in r]
    assert [r["arch_id"] for r in told_again] == [first.arch_id], "only the first member's answer is shared"
    assert family.evaluations == len(first.trials) + len(second.trials) - 1 == 15
    if searcher == "random":        # an Optuna study keeps its seed in its sampler, not in search.json
        seeds = [json.loads((m.dir / "search.json").read_text())["settings"]["seed"] for m in family.members]
        assert seeds == [0, member_seed(0, 2)] and seeds[1] != 0


def test_optuna_start_up_trials_draw_every_other_arch_within_the_members_window(tmp_path):
    run = untrained_run(load_config("fashion_mnist_mbv3"), tmp_path / "run")
    options = {"n_startup_trials": 6}
    family = api.search_family(run, "optuna-tpe", max_macs="35%,75%", trials=7, score="macs", progress=False,
                               out=tmp_path / "fam", options=options)
    low, budget = family.budgets
    second = family.members[1].trials     # in completion order; the first: the first member's answer
    assert REUSED in second[0]
    drawn_near = second[1:6:2]            # the 2nd, 4th and 6th start-up trials (evolution's rule)
    assert all(low < r["macs"] <= budget for r in drawn_near), [r["macs"] for r in second]
    assert family.members[1].macs > low


def test_budgets_closer_than_the_labels_digits_get_labels_that_tell_them_apart(trained, favours_max, tmp_path):
    run = api.load_run("tiny", trained)
    low = _budget(run.space, "50%")
    family = _family(run, tmp_path / "fam", max_macs=[f"{low:.1f}", f"{low + 0.2:.1f}"], trials=2)
    names = [m.dir.name for m in family.members]
    assert names[0][3:] != names[1][3:], names       # m1-macs0.1786M and m2-macs0.1786M before
    parsed = [float(name.split("-macs")[1].rstrip("M")) * 1e6 for name in names]
    assert parsed == pytest.approx([float(f"{low:.1f}"), float(f"{low + 0.2:.1f}")], abs=0.05)
    assert family.dir == tmp_path / "fam" and read_family(family.dir)["members"][1]["dir"] == names[1]


def test_a_rerun_with_fewer_trials_is_refused_and_leaves_family_json_as_it_was(trained, favours_max, tmp_path):
    run = api.load_run("tiny", trained)
    _family(run, tmp_path / "fam", trials=4)
    before = (tmp_path / "fam" / FAMILY).read_text()
    with pytest.raises(ConfigError, match=r"^trials: 3 is fewer than the 4 per member .* was searched with; repeat "
                                          r"it with trials=4, or more to continue it"):
        _family(run, tmp_path / "fam", trials=3)
    assert (tmp_path / "fam" / FAMILY).read_text() == before and json.loads(before)["trials"] == 4
    assert _family(run, tmp_path / "fam", trials=5).record["trials"] == 5     # more trials continue it


def test_sigterm_during_a_family_search_says_a_rerun_resumes_and_the_rerun_does(trained, favours_max, tmp_path,
                                                                                   capsys, monkeypatch):
    scores = FavoursMax.scores

    def terminated_at_the_ninth(self, archs, context):
        if len(FavoursMax.scored) == 8:          # in the second member (6 trials each)
            os.kill(os.getpid(), signal.SIGTERM)
        return scores(self, archs, context)

    monkeypatch.setattr(FavoursMax, "scores", terminated_at_the_ninth)
    args = ["search", "tiny", "--runs-dir", str(trained), "--score", FavoursMax.name, "--quiet", "--trials", "6",
            "--out", str(tmp_path / "fam"), "--max-macs", "20%,60%"]
    assert cli.main(args) == 143
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith(f"nas search: stopped: SIGTERM: the family search stopped; its finished members and "
                              f"every arch evaluated are kept in {tmp_path / 'fam'}; run the same nas search again"), err
    assert not any("Traceback" in line for line in err)
    done = list(favours_max)
    assert len(read_family(tmp_path / "fam")["members"]) == 1
    monkeypatch.setattr(FavoursMax, "scores", scores)
    assert cli.main(args) == 0
    again = favours_max[len(done):]
    assert not set(again) & set(done), "the rerun evaluated an arch again"
    assert len(read_family(tmp_path / "fam")["members"]) == 2


@pytest.mark.slow
def test_spawned_optuna_workers_tell_the_familys_earlier_records_again(trained, tmp_path):
    run = api.load_run("tiny", trained)
    family = api.search_family(run, "optuna-tpe", max_macs=SMALL, trials=8, workers=2, score="macs",
                               progress=False, out=tmp_path / "fam")
    first, second = family.members
    earlier = {r["arch_id"]: r for r in first.trials}
    records = _lines(second.dir / "results.jsonl")      # written by the spawned workers
    again = [r for r in records if r["arch_id"] in earlier]
    assert first.arch_id in {r["arch_id"] for r in again}, "the first member's answer goes first"
    assert all(r.get(REUSED) == first.dir.name for r in again), [r["arch_id"] for r in again if REUSED not in r]
    assert all(r["macs"] == earlier[r["arch_id"]]["macs"] for r in again)
    assert family.new == family.evaluations == len(first.trials) + len(records) - len(again)
