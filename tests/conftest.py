import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
sys.path.insert(0, str(ROOT))

import os  # noqa: E402
import stat  # noqa: E402
import tempfile  # noqa: E402

# `logwatch watch` keeps a startup history per TARGET (state/history.py watch_state_dir): the
# tests' watches keep theirs in a directory of this run, never in the user's home
os.environ.setdefault("LOGWATCH_STATE_DIR", tempfile.mkdtemp(prefix="logwatch-test-state-"))
# nor their pattern cache (rules/patterns.py): one of this run, starting empty
os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="logwatch-test-cache-")
# the shipped configs name these in `url_env` / `secret_env`, which `run --check` requires to be
# set (as an operator's environment has them); nothing listens on port 9
os.environ.setdefault("SLACK_WEBHOOK_URL", "http://127.0.0.1:9/slack-webhook-for-tests")
os.environ.setdefault("LOGWATCH_WEBHOOK_SECRET", "secret-for-tests")

import pytest  # noqa: E402
from hypothesis import settings  # noqa: E402

# Property tests (Hypothesis) draw new examples at each run of `make test` / `make check`:
# a failure there is a finding, to fix and keep.  CI (`.ci/run` sets HYPOTHESIS_PROFILE=ci)
# draws the same examples each run, so a commit's verdict does not depend on the draw.
settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("HYPOTHESIS_PROFILE"):
    settings.load_profile(os.environ["HYPOTHESIS_PROFILE"])

# Tests in tiers: `make check` runs `-m "not integration"` (the pure core, about a minute: the
# edit loop); `make test` runs everything in parallel.  A test is an integration test when its
# module says so (`pytestmark`), when it is marked itself, or when it takes one of these
# fixtures: each starts a real process or server, so a new test that uses one cannot slip into
# the fast tier.
INTEGRATION_FIXTURES = frozenset({"daemons", "sshd_server", "receivers"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if INTEGRATION_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.integration)


@pytest.fixture(autouse=True)
def _dev_null_intact(request):  # type: ignore[no-untyped-def]
    """Catch a test (or the code under test) that replaces /dev/null: everything that runs
    after it would fail in confusing ways."""
    yield
    st = os.stat("/dev/null")
    assert stat.S_ISCHR(st.st_mode), f"{request.node.nodeid} left /dev/null as a regular file"
