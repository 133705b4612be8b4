#!/usr/bin/env python3
"""Summarises the Java scenario suite's surefire reports (target/java-compat/<target>/*.xml)
as a markdown table: one row per scenario, one column per target, each cell pass, FAIL (with
the first line of the failure) or skipped, so docs/compatibility.md quotes real runs.

With --verdict TARGET --expected FILE it also judges TARGET's run: a failure not listed in
FILE (tests/java/expected-failures.txt) fails the run, a listed one is an expected failure,
and a listed one that passed fails the run too (the list must be kept true). Exit 0 or 1,
with a closing line "N passed, N failed"."""
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


def expected_failures(path: Path, target: str):
    listed = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split(None, 2)
        if len(parts) < 2:
            sys.exit(f"{path}: malformed line {line!r}: want '<target> <TestClass> <why>'")
        if parts[0] == target:
            listed[parts[1]] = parts[2] if len(parts) > 2 else ""
    return listed


def verdict(cells, listed, target):
    passed = failed = expected = 0
    problems = []
    for name, cell in sorted(cells.items()):
        cls = name.split(".", 1)[0]
        if cell.startswith("FAIL"):
            if cls in listed:
                expected += 1
                print(f"{target}: expected failure {name} ({listed[cls]})")
            else:
                failed += 1
                problems.append(f"{target}: FAILED {name}: {cell}")
        elif cell.startswith("pass"):
            passed += 1
            if cls in listed:
                failed += 1
                problems.append(f"{target}: {name} passed but is listed as an expected failure: "
                                "remove it from tests/java/expected-failures.txt")
    missing = sorted(set(listed) - {n.split(".", 1)[0] for n in cells})
    for problem in problems:
        print(problem)
    if not cells:
        print(f"{target}: no scenario reports (the suite did not run)")
        failed += 1
    print(f"{target}: {expected} expected failures"
          + (f"; listed but not run: {', '.join(missing)}" if missing else ""))
    print(f"{target}: {passed} passed, {failed} failed")
    return failed == 0


def main():
    args = sys.argv[1:]
    judge = expected_file = None
    if "--verdict" in args:
        i = args.index("--verdict")
        judge = args[i + 1]
        del args[i:i + 2]
    if "--expected" in args:
        i = args.index("--expected")
        expected_file = Path(args[i + 1])
        del args[i:i + 2]
    root = Path(args[0] if args else "target/java-compat")
    if judge:
        listed = expected_failures(expected_file, judge) if expected_file else {}
        sys.exit(0 if verdict(results(root / judge), listed, judge) else 1)
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
