"""fileio: atomic writes keep the file mode; appends repair a torn last line."""

import os
import stat

from fib_runtime.fileio import append_lines, atomic_write_text, read_lines


def test_atomic_write_mode(tmp_path):
    p = tmp_path / "a.json"
    umask = os.umask(0o022)
    try:
        atomic_write_text(p, "{}\n")
        assert stat.S_IMODE(p.stat().st_mode) == 0o644  # not mkstemp's 0600
        os.chmod(p, 0o640)
        atomic_write_text(p, "{\"a\": 1}\n")
        assert stat.S_IMODE(p.stat().st_mode) == 0o640 and p.read_text() == "{\"a\": 1}\n"
    finally:
        os.umask(umask)
    assert not [f for f in tmp_path.iterdir() if f.name.endswith(".tmp")]


def test_append_repairs_missing_newline(tmp_path):
    p = tmp_path / "t.jsonl"
    p.write_text('{"a": 1}')  # a writer died before its newline
    append_lines(p, ['{"b": 2}', '{"c": 3}\n'])
    assert p.read_text() == '{"a": 1}\n{"b": 2}\n{"c": 3}\n'
    assert [n for n, _ in read_lines(p)] == [1, 2, 3]
    assert append_lines(p, []) == 0
