"""The one CSV reader of user tables: a byte-order mark and spaces after the commas are read through."""
from __future__ import annotations

from nas.core.csv_rows import read_csv


def test_a_byte_order_mark_and_spaces_after_commas_leave_the_names_and_cells_as_meant(tmp_path):
    path = tmp_path / "t.csv"
    path.write_bytes("\ufeffarch, acc , loss\n|a|, 91.5, 0.25\n\nb,\"x, y\",3\nc,1\n".encode("utf-8"))
    header, rows = read_csv(path)
    assert header == ["arch", "acc", "loss"]
    assert rows == [{"arch": "|a|", "acc": "91.5", "loss": "0.25"}, {"arch": "b", "acc": "x, y", "loss": "3"},
                    {"arch": "c", "acc": "1"}]
    (tmp_path / "empty.csv").write_text("")
    assert read_csv(tmp_path / "empty.csv") == ([], [])
