"""Fixtures and the exclusion summary for the ONNX backend cases."""
from __future__ import annotations

from collections import Counter




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
