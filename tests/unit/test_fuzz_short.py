"""A short run of the request fuzzer (``make fuzz`` runs a long one): frames built from a valid
request of every API x version, mutated in structure and on the wire, through the real network
driver of an in-process broker. No traceback, no ERROR line, no unanswered request, no stall."""

from __future__ import annotations

import pytest

from strom.testing.fuzzer import fuzz


@pytest.mark.parametrize("seed", [1, 2])
def test_short_fuzz_run_finds_nothing(seed: int) -> None:
    sent, findings, outcomes, _seconds = fuzz(15_000, seed)
    assert sent == 15_000
    report = "\n".join(f"{f.kind} {f.api} v{f.version}: {f.detail} {f.frame.hex()}" for f in findings)
    assert not findings, report
    # the mix reaches the handlers (answered) and the decoder's refusals (closed)
    assert outcomes["answered"] > 3_000 and outcomes["closed"] > 3_000
