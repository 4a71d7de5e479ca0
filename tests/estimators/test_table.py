"""`table:PATH[:COLUMN]`: a CSV of measured results as a score, as `nas search`'s objective at zero
training cost, and as the ground truth of `nas fidelity`; an arch the table lacks is one line."""
from __future__ import annotations

import csv
import json
import random
from pathlib import Path

import pytest

from estimators import EstimatorContext, build_estimator, canonical_spec
from nas import api, cli
from nas.core import yaml_io
from nas.core.arch import arch_id
from nas.core.config import load_config
from nas.core.errors import ArchError, ConfigError
from search_spaces.cell201 import Cell201Options, Cell201Space, from_nb201_string, to_nb201_string
from tests.support.tiny import tiny_config

SPACE = Cell201Space(Cell201Options(image_size=12, channels=4), 1, 10)
A = "|nor_conv_3x3~0|+|none~0|skip_connect~1|+|none~0|nor_conv_3x3~1|avg_pool_3x3~2|"
B = "|none~0|+|skip_connect~0|none~1|+|none~0|none~1|skip_connect~2|"
# B with a conv on 1<-0, dead since node 1 feeds nothing: another spelling of B's network
B_DEAD = "|nor_conv_1x1~0|+|skip_connect~0|none~1|+|none~0|none~1|skip_connect~2|"
B_DEAD_POOL = "|avg_pool_3x3~0|+|skip_connect~0|none~1|+|none~0|none~1|skip_connect~2|"    # a third spelling


def write_csv(path: Path, header: list[str], rows: list[list]) -> Path:
    with path.open("w", newline="") as f:
        csv.writer(f).writerows([header, *rows])
    return path


def table_value(arch: dict) -> float:
    """An arbitrary accuracy (%) per arch, not monotone in its MACs."""
    return 50.0 + (int(arch_id(arch), 16) % 4000) / 100


def full_table(space, path: Path) -> Path:
    return write_csv(path, ["index", "arch", "acc"],
                     [[i, to_nb201_string(a), table_value(a)] for i, a in enumerate(space.enumerate())])


def test_rows_by_string_mapping_or_id_score_their_value(tmp_path):
    a, b = from_nb201_string(A), SPACE.canonical(from_nb201_string(B))
    by_text = write_csv(tmp_path / "t.csv", ["index", "arch", "acc", "loss"],
                        [[0, A, 91.5, 0.3], [1, json.dumps(b), 88.25, 0.4]])
    by_id = write_csv(tmp_path / "ids.csv", ["arch_id", "acc"], [[arch_id(SPACE.canonical(a)), 91.5],
                                                                   [arch_id(b), 88.25]])
    context = EstimatorContext(SPACE)
    assert build_estimator(f"table:{by_text}:acc").scores([a, b], context) == [91.5, 88.25]
    assert build_estimator(f"table:{by_text}:loss").scores([b], context) == [0.4]
    assert build_estimator(f"table:{by_id}").scores([b, a], context) == [88.25, 91.5]
    assert canonical_spec(f"macs + 2*table:{by_id}") == f"macs+2*table:{by_id}"


def test_spellings_of_one_network_give_the_canonical_rows_value_else_their_mean(tmp_path):
    b = from_nb201_string(B)
    assert SPACE.canonical(from_nb201_string(B_DEAD)) == SPACE.canonical(b)
    both = write_csv(tmp_path / "both.csv", ["arch", "acc"], [[B_DEAD, 80.0], [B, 70.0]])
    dead_only = write_csv(tmp_path / "dead.csv", ["arch", "acc"], [[B_DEAD, 80.0], [B_DEAD_POOL, 70.0]])
    context = EstimatorContext(SPACE)
    assert build_estimator(f"table:{both}").scores([b], context) == [70.0]
    assert build_estimator(f"table:{dead_only}").scores([b], context) == [75.0]


def test_two_rows_writing_one_arch_alike_are_an_error_unless_they_agree(tmp_path):
    """The answer must not depend on row order: differing rows of one arch name their lines."""
    b = SPACE.canonical(from_nb201_string(B))
    for name, rows, lines in (("strings", [[B, 70.0], [A, 91.5], [B, 80.0]], "2, 4"),
                              ("dead", [[B_DEAD, 60.0], [B, 70.0], [B_DEAD, 65.0]], "2, 4"),
                              ("ids", [[arch_id(b), 80.0], [arch_id(b), 70.0]], "2, 3")):
        path = write_csv(tmp_path / f"{name}.csv", ["arch_id" if name == "ids" else "arch", "acc"], rows)
        with pytest.raises(ConfigError, match=rf"^score: {path}: lines {lines} give arch {arch_id(b)} different "
                                              r"values \(\d+, \d+\); keep one row per arch$"):
            build_estimator(f"table:{path}").scores([b], EstimatorContext(SPACE))
    agreeing = write_csv(tmp_path / "agree.csv", ["arch", "acc"], [[B, 70.0], [json.dumps(b), 70.0], [B, 70]])
    assert build_estimator(f"table:{agreeing}").scores([b], EstimatorContext(SPACE)) == [70.0]


def test_a_table_of_another_spaces_notation_says_every_row_was_skipped(tmp_path):
    """A NAS-Bench-201 table for a MobileNetV3 space: not a YAML error, not '0 archs'."""
    from tests.conftest import make_space

    mbv3 = make_space("mobilenetv3", small=True)
    path = write_csv(tmp_path / "nb201.csv", ["arch", "acc"], [[A, 91.5], [B, 70.0]])
    with pytest.raises(ConfigError) as raised:
        build_estimator(f"table:{path}").scores([mbv3.min()], EstimatorContext(mbv3))
    assert str(raised.value) == (f"score: {path}: none of its 2 rows is an arch of space 'mobilenetv3' (rows of other "
                                 f"spaces or choices are skipped; line 2: {A})")


def test_a_table_path_holding_a_plus_is_one_component(tmp_path):
    path = write_csv(tmp_path / "a+b.csv", ["arch", "acc"], [[B, 70.0]])
    assert canonical_spec(f"2*table:{path} + macs") == f"macs+2*table:{path}"
    assert canonical_spec(f"table:{path}:acc") == f"table:{path}:acc"
    b = SPACE.canonical(from_nb201_string(B))
    assert build_estimator(f"table:{path}").scores([b], EstimatorContext(SPACE)) == [70.0]
    with pytest.raises(ConfigError, match=r"^score: table:.*/a: no such table file \('\+' joins components: the "
                                          r"path of a table holding '\+' must name an existing file\)$"):
        canonical_spec(f"table:{tmp_path / 'a+c.csv'}")


def test_a_missing_arch_is_an_error_naming_it(tmp_path):
    path = write_csv(tmp_path / "t.csv", ["arch", "acc"], [[A, 91.5]])
    b = SPACE.canonical(from_nb201_string(B))
    with pytest.raises(ArchError) as raised:
        build_estimator(f"table:{path}").scores([b], EstimatorContext(SPACE))
    assert str(raised.value) == (f"table:{path}: arch {arch_id(b)} ({to_nb201_string(b)}) is not in the table "
                                 "(1 archs of space 'cell201')")


@pytest.mark.parametrize("rows, spec_tail, needle", [
    ([["arch", "acc"], [A, 1]], ".missing", "no such table file"),
    ([["arch", "acc", "loss"], [A, 1, 2]], "", "name the score column (table:"),
    ([["arch", "acc"], [A, 1]], ":top1", "no column 'top1'; columns: arch, acc"),
    ([["name", "acc"], [A, 1]], "", "no arch column (the header needs 'arch' or 'arch_id'"),
])
def test_bad_tables_are_one_line_naming_score(tmp_path, rows, spec_tail, needle):
    path = write_csv(tmp_path / "t.csv", rows[0], rows[1:])
    with pytest.raises(ConfigError, match="^score: .*" + needle.replace("(", r"\(")):
        build_estimator(f"table:{path}{spec_tail}")


def test_a_bad_row_names_its_line(tmp_path):
    path = write_csv(tmp_path / "t.csv", ["arch", "acc"], [[A, 1], [A.replace("nor_conv_3x3", "conv"), 2]])
    with pytest.raises(ArchError, match=f"{path}: line 3: .*unknown operation 'conv'"):
        build_estimator(f"table:{path}").scores([from_nb201_string(A)], EstimatorContext(SPACE))


@pytest.fixture
def tiny_cell201(tmp_path) -> Path:
    path = tmp_path / "tiny_cell201.yaml"
    path.write_text(yaml_io.dumps(tiny_config(space="cell201", steps=8)))
    return path


def test_a_config_is_searched_at_zero_training_cost_by_a_table(tmp_path, tiny_cell201, capsys):
    space = api.build_space(load_config(str(tiny_cell201)))
    table = full_table(space, tmp_path / "all.csv")
    out = tmp_path / "search"
    code = cli.main(["search", str(tiny_cell201), "--score", f"table:{table}", "--searcher", "random",
                     "--trials", "6", "--out", str(out), "--device", "cpu", "--quiet"])
    assert code == 0, capsys.readouterr().err
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert len(records) == 6 and all(r["score_value"] == table_value(r["arch"]) for r in records)
    best = max(records, key=lambda r: r["score_value"])
    assert yaml_io.load_mapping(out / "best.yaml") == best["arch"]
    assert f"best {best['arch_id']} ({to_nb201_string(best['arch'])}):" in capsys.readouterr().out
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("argv, needle", [
    (["--score", "supernet"], "--score: 'supernet' ranks by the trained supernet's accuracy"),
    ([], "--out: required when searching a config rather than a trained run"),
])
def test_what_an_untrained_search_cannot_do_is_one_line(tmp_path, tiny_cell201, capsys, argv, needle):
    out = [] if not argv else ["--out", str(tmp_path / "s")]
    code = cli.main(["search", str(tiny_cell201), *argv, *out, "--device", "cpu"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and needle in err, err


def test_a_search_meeting_an_arch_missing_from_the_table_exits_2_with_one_line(tmp_path, tiny_cell201, capsys):
    table = write_csv(tmp_path / "t.csv", ["arch", "acc"], [[A, 91.5], [B, 70.0]])    # A: not of the tiny space
    code = cli.main(["search", str(tiny_cell201), "--score", f"table:{table}", "--trials", "3",
                     "--out", str(tmp_path / "s"), "--device", "cpu", "--quiet"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert "is not in the table (1 archs of space 'cell201'; 1 rows of other spaces or choices skipped)" in err, err


BINARY = b"arch,acc\n\x89PNG\r\n\x1a\n\xff\xfe\x00\x01"


@pytest.mark.parametrize("content", [b"\xff\xfe\x00\x01binary", BINARY], ids=["header", "rows"])
def test_a_binary_table_is_one_line_for_search(tmp_path, tiny_cell201, capsys, content):
    (tmp_path / "t.csv").write_bytes(content)
    code = cli.main(["search", str(tiny_cell201), "--score", f"table:{tmp_path / 't.csv'}", "--trials", "3",
                     "--out", str(tmp_path / "s"), "--device", "cpu", "--quiet"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert f"--score: {tmp_path / 't.csv'}: not a UTF-8 text file (byte 0x" in err and "a table is a CSV file" in err


@pytest.fixture(scope="module")
def cell201_run(tmp_path_factory) -> Path:
    runs = tmp_path_factory.mktemp("runs")
    api.train(load_config(tiny_config(space="cell201", steps=8)), name="tiny", runs_dir=runs, progress=False)
    return runs


@pytest.mark.slow
def test_a_table_is_the_ground_truth_of_fidelity_with_no_training(cell201_run, tmp_path):
    space = api.load_run("tiny", cell201_run, device="cpu").space
    table = full_table(space, tmp_path / "all.csv")
    result = api.fidelity("tiny", runs_dir=cell201_run, archs=4, ground_truth_dir=f"table:{table}",
                          estimators="macs", out=tmp_path / "out", progress=False, device="cpu")
    assert result.new == 0 and len(result.records) == 4
    for record in result.records:
        assert record["standalone_test_top1"] == pytest.approx(table_value(record["arch"]) / 100)
        assert record["standalone_seconds"] == [0.0]
    assert result.summary["recipe"] == {"table": str(table), "column": "acc"}


def test_a_table_lacking_a_selected_arch_fails_before_measuring(cell201_run, tmp_path, capsys):
    table = write_csv(tmp_path / "t.csv", ["arch", "acc"], [[B, 70.0]])
    code = cli.main(["fidelity", "tiny", "--runs-dir", str(cell201_run), "--archs", "3", "--ground-truth",
                     f"table:{table}", "--out", str(tmp_path / "out"), "--device", "cpu", "--quiet"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "is not in the table" in err, err
    assert not (tmp_path / "out").exists()


def test_a_binary_table_is_one_line_for_fidelity(cell201_run, tmp_path, capsys):
    (tmp_path / "t.csv").write_bytes(BINARY)
    code = cli.main(["fidelity", "tiny", "--runs-dir", str(cell201_run), "--archs", "3", "--ground-truth",
                     f"table:{tmp_path / 't.csv'}", "--out", str(tmp_path / "out"), "--device", "cpu", "--quiet"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "not a UTF-8 text file (byte 0x89" in err, err


def scale_table(tmp_path, values: list[float]) -> tuple[str, list[dict]]:
    rng, archs = random.Random(0), {}
    while len(archs) < len(values):
        arch = SPACE.canonical(SPACE.sample(rng))
        archs[arch_id(arch)] = arch
    archs = list(archs.values())
    path = write_csv(tmp_path / "acc.csv", ["arch", "acc"], [[to_nb201_string(a), v] for a, v in zip(archs, values)])
    return f"table:{path}", archs


def test_a_ground_truth_tables_scale_is_decided_from_its_whole_column(tmp_path):
    """Fractions stay, percentages are divided by 100 (a dead network under 1% included); one
    stray value above 1 in a fraction column is an error, not a column read 100x off."""
    from nas.engine.fidelity.table_truth import TableTruth

    spec, archs = scale_table(tmp_path, [0.91, 0.55, 0.873, 0.1])
    assert [TableTruth(spec, SPACE).top1(a) for a in archs] == [0.91, 0.55, 0.873, 0.1]
    spec, archs = scale_table(tmp_path, [91.0, 55.0, 0.5, 87.25])
    assert [TableTruth(spec, SPACE).top1(a) for a in archs] == [0.91, 0.55, 0.005, 0.8725]
    spec, archs = scale_table(tmp_path, [0.91, 0.55, 0.873, 91.5])
    with pytest.raises(ConfigError, match=r"^ground_truth_dir: .*acc.csv: column 'acc': mixes fractions and "
                                          r"percentages \(1 of 4 values above 1, e.g. arch \w+: 91.5; arch \w+: 0.91\)"):
        TableTruth(spec, SPACE)
    spec, archs = scale_table(tmp_path, [91.0, 155.0, 87.0])
    with pytest.raises(ConfigError, match=r"column 'acc': arch \w+ has 155, no accuracy \(a fraction in \[0, 1\]"):
        TableTruth(spec, SPACE)


def test_a_table_ground_truth_refuses_training_options(cell201_run, tmp_path, capsys):
    table = write_csv(tmp_path / "t.csv", ["arch", "acc"], [[B, 70.0]])
    code = cli.main(["fidelity", "tiny", "--runs-dir", str(cell201_run), "--epochs", "2", "--ground-truth",
                     f"table:{table}", "--device", "cpu", "--quiet"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "--epochs: a table ground truth" in err and "trains nothing" in err, err


def test_eval_takes_a_nas_bench_201_string_and_prints_it_beside_the_id(cell201_run, capsys):
    text = "|nor_conv_3x3~0|+|none~0|skip_connect~1|+|none~0|nor_conv_1x1~1|skip_connect~2|"
    code = cli.main(["eval", "tiny", "--runs-dir", str(cell201_run), "--arch", text, "--device", "cpu"])
    out = capsys.readouterr().out
    assert code == 0 and out.startswith(f"{arch_id(SPACE.canonical(from_nb201_string(text)))} ({text})  val top-1"), out


def test_a_table_saved_with_a_byte_order_mark_and_spaces_after_commas_scores_as_written(tmp_path):
    a, b = from_nb201_string(A), from_nb201_string(B)
    path = tmp_path / "sheet.csv"
    path.write_text(f"\ufeffarch, acc\n{A}, 91.5\n{B}, 88.25\n", encoding="utf-8")
    assert build_estimator(f"table:{path}").scores([a, b], EstimatorContext(SPACE)) == [91.5, 88.25]
    assert build_estimator(f"table:{path}:acc").scores([b], EstimatorContext(SPACE)) == [88.25]


def test_a_score_table_reads_its_column_as_the_ground_truth_does_a_mixed_column_refused_by_both(tmp_path):
    from nas.engine.fidelity.table_truth import TableTruth

    spec, archs = scale_table(tmp_path, [0.91, 0.55, 0.873, 91.5])
    with pytest.raises(ConfigError, match=r"^score: .*acc.csv: column 'acc': mixes fractions and percentages \(1 of "
                                          r"4 values above 1, e.g. arch \w+: 91.5; arch \w+: 0.91\)"):
        build_estimator(spec).scores(archs, EstimatorContext(SPACE))
    with pytest.raises(ConfigError, match=r"^ground_truth_dir: .*acc.csv: column 'acc': mixes fractions"):
        TableTruth(spec, SPACE)
    # a column that is no accuracy (a loss, a latency) stays a score as it is, and no ground truth
    spec, archs = scale_table(tmp_path, [0.5, 150.0, 2.0])
    assert build_estimator(spec).scores(archs, EstimatorContext(SPACE)) == [0.5, 150.0, 2.0]
    with pytest.raises(ConfigError, match=r"column 'acc': arch \w+ has 150, no accuracy"):
        TableTruth(spec, SPACE)

