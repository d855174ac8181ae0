"""strom.server.malloc_tuning: glibc's thresholds applied at start, unless the operator chose."""

from __future__ import annotations

import platform

import pytest

from strom.server import malloc_tuning


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc only")
def test_applied_on_glibc(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("STROM_MALLOC_TUNING", *malloc_tuning._ENV):
        monkeypatch.delenv(name, raising=False)
    assert malloc_tuning.tune_malloc() is True


def test_switched_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STROM_MALLOC_TUNING", "0")
    assert malloc_tuning.tune_malloc() is False


def test_the_operators_malloc_variables_win(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delenv("STROM_MALLOC_TUNING", raising=False)
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "131072")
    with caplog.at_level("INFO", logger="strom.server"):
        assert malloc_tuning.tune_malloc() is False
    assert "MALLOC_TRIM_THRESHOLD_" in caplog.text
