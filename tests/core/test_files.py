"""Atomic writes: a file is replaced whole, also when threads write it at once."""
from __future__ import annotations

import threading

from nas.core.files import atomic_file


def test_threads_writing_one_file_at_once_each_replace_it_whole(tmp_path):
    path, errors = tmp_path / "selection.json", []
    start = threading.Barrier(8)

    def write(k: int) -> None:
        start.wait()
        try:
            for _ in range(50):
                with atomic_file(path) as f:
                    f.write(str(k) * 1000)
        except OSError as e:       # before: a shared temporary file, deleted under another thread's feet
            errors.append(e)

    threads = [threading.Thread(target=write, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    text = path.read_text()
    assert len(text) == 1000 and len(set(text)) == 1      # one writer's whole content
    assert [p.name for p in tmp_path.iterdir()] == ["selection.json"]      # no temporary file left
