#!/usr/bin/env python3
"""Summarises the Java scenario suite's surefire reports (target/java-compat/<target>/*.xml)
as a markdown table: one row per scenario, one column per target, each cell pass, FAIL (with
the first line of the failure) or skipped, so docs/compatibility.md quotes real runs."""
import sys
import xml.etree.ElementTree as ET
from pathlib import Path


def results(folder: Path):
    cells = {}
    for report in sorted(folder.glob("TEST-*.xml")):
        suite = ET.parse(report).getroot()
        for case in suite.iter("testcase"):
            name = f"{case.get('classname').rsplit('.', 1)[-1]}.{case.get('name')}"
            failure = case.find("failure")
            if failure is None:
                failure = case.find("error")
            if failure is not None:
                message = (failure.get("message") or failure.get("type") or "").strip()
                cells[name] = "FAIL: " + message.splitlines()[0][:160] if message else "FAIL"
            elif case.find("skipped") is not None:
                cells[name] = "skipped"
            else:
                cells[name] = f"pass ({float(case.get('time', 0)):.1f} s)"
    return cells


def main():
    root = Path(sys.argv[1] if len(sys.argv) > 1 else "target/java-compat")
    targets = sorted(p.name for p in root.iterdir() if p.is_dir()) if root.exists() else []
    table = {t: results(root / t) for t in targets}
    names = sorted({n for cells in table.values() for n in cells})
    if not names:
        print("java-compat: no reports found under", root)
        return
    print("| scenario | " + " | ".join(targets) + " |")
    print("|---|" + "---|" * len(targets))
    for name in names:
        row = [table[t].get(name, "not run").replace("|", "\\|") for t in targets]
        print(f"| {name} | " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
