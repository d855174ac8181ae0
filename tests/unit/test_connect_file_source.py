"""The file source's line splitting and its choice of a batch's end: only complete lines, Kafka's
line endings (\\n, \\r\\n, \\r), positions as bytes after each line."""

from __future__ import annotations

from pathlib import Path

import pytest

from strom.connect.runtime import _complete_end, offset_key, split_lines


def test_split_lines_positions() -> None:
    data = "a\nbé\r\nc\rd\n".encode()
    assert split_lines(data, 100) == [(102, "a"), (107, "bé"), (109, "c"), (111, "d")]
    assert split_lines(b"", 0) == []
    assert split_lines(b"\n\n", 0) == [(1, ""), (2, "")]


def test_complete_end(tmp_path: Path) -> None:
    f = tmp_path / "in.txt"
    assert _complete_end(str(f), 0, 1 << 20) == 0  # no file yet: wait, as Kafka's task does
    f.write_bytes(b"one\ntwo\nthr")
    assert _complete_end(str(f), 0, 1 << 20) == 8  # the partial line waits for its newline
    assert _complete_end(str(f), 8, 1 << 20) == 8
    assert _complete_end(str(f), 0, 5) == 4  # a byte budget ends at a line boundary
    f.write_bytes(b"one\r")  # a \r at the end may be half of \r\n only when more is to come
    assert _complete_end(str(f), 0, 1 << 20) == 4
    f.write_bytes(b"one\r\ntwo\n")
    assert _complete_end(str(f), 0, 4) == 0  # \r at the budget's edge with more after it: not yet
    f.write_bytes(b"a\nb\r\nc\n")
    assert _complete_end(str(f), 0, 4) == 2  # ... the batch ends at the line before it
    f.write_bytes(b"x\n")
    with pytest.raises(RuntimeError, match="truncated or replaced"):
        _complete_end(str(f), 9, 1 << 20)


def test_offset_key_is_connects() -> None:
    assert (
        offset_key("local-file-source", "/tmp/test.txt")
        == b'["local-file-source",{"filename":"/tmp/test.txt"}]'
    )
