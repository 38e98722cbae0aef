"""Fixtures and the exclusion summary for the ONNX backend cases."""
from __future__ import annotations

import re
from collections import Counter

import pytest

from tinyaot.toolchain.host import cache_root


@pytest.fixture
def per_case_host_cache(request, monkeypatch):
    """Each case gets its own tinyaot cache root ($TINYAOT_CACHE, under the usual one), so its host library has a
    cache folder of its own. The shared host cache keeps the 64 most recently used libraries; this folder alone
    compiles about 180, which would evict each other (every run recompiling everything) and every other test's
    entries. One folder per case keeps each a hit from the second run on."""
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", request.node.callspec.id)
    monkeypatch.setenv("TINYAOT_CACHE", str(cache_root().parent / "onnx_backend" / name))


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """Counts for this folder: selected, passed, failed, xfailed, and skipped grouped by reason."""
    counts: Counter = Counter()
    reasons: Counter = Counter()
    for outcome in ("passed", "failed", "skipped", "xfailed", "xpassed", "error"):
        for rep in terminalreporter.stats.get(outcome, []):
            nodeid = getattr(rep, "nodeid", "")
            if "test_onnx_backend_case" not in nodeid:
                continue
            if rep.when not in ("call", "setup") or (outcome == "passed" and rep.when != "call"):
                continue
            counts[outcome] += 1
            if outcome == "skipped":
                msg = rep.longrepr[2] if isinstance(rep.longrepr, tuple) else str(rep.longrepr)
                msg = msg.removeprefix("Skipped: ")
                reasons[msg.split(" -- ")[0]] += 1
    if not counts:
        return
    tr = terminalreporter
    tr.section("ONNX backend cases")
    tr.write_line(f"selected {sum(counts.values())}: passed {counts['passed']}, failed {counts['failed']}, "
                  f"xfailed {counts['xfailed']}, xpassed {counts['xpassed']}, excluded {counts['skipped']}")
    for reason, n in reasons.most_common():
        tr.write_line(f"  {n:4d}  {reason}")
