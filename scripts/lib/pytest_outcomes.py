"""A pytest plugin of scripts/numpy-tests.sh (loaded with `-p pytest_outcomes`, a copy of this file on
PYTHONPATH): appends each test's outcome to the file given with --outcomes-to, a line "OUTCOME<TAB>NODEID"
as soon as the test has ended, so that a run killed midway (a crash, a timeout) keeps the outcomes of the
tests that ended before. OUTCOME is pass (an unexpected pass of a non-strict xfail too), fail (its setup,
call or teardown failed), skip, or xfail (failed as expected)."""

_out = None
_reports = {}


def pytest_addoption(parser):
    parser.addoption("--outcomes-to", metavar="FILE", help="append each test's outcome to FILE")


def pytest_configure(config):
    global _out
    path = config.getoption("outcomes_to")
    if path:
        _out = open(path, "a", buffering=1)  # a line at a time: what ended is written before a crash


def pytest_runtest_logreport(report):
    if _out is None:
        return
    reports = _reports.setdefault(report.nodeid, [])
    reports.append(report)
    if report.when != "teardown":  # every test has a teardown report, even one whose setup failed
        return
    del _reports[report.nodeid]
    if any(r.failed for r in reports):
        outcome = "fail"
    elif any(r.skipped for r in reports):
        outcome = "xfail" if any(hasattr(r, "wasxfail") for r in reports) else "skip"
    else:
        outcome = "pass"
    _out.write(f"{outcome}\t{report.nodeid}\n")
