"""The custodian's dashboard in a real headless Chromium (Debian's), driven by Playwright.

It loads, shows the analysts the test created with their quotas, and updates after an analyst's query.
Skipped with a reason where no system Chromium or no Playwright is installed (CI installs both).
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from overlapdp.samples import adult_schema, synthetic_adult
from overlapdp.service.client import AdminClient, Client
from overlapdp.service.embedded import embedded_service

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
playwright_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
expect = playwright_api.expect
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no system Chromium (apt-get install chromium)")

LAUNCH_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.mark.slow
def test_dashboard_shows_analysts_and_updates_after_a_query(tmp_path: Path) -> None:
    data = tmp_path / "adult.csv"
    synthetic_adult(3_000, seed=2).to_csv(data, index=False)
    with embedded_service(tmp_path / "ledger.sqlite") as (url, admin_token):
        admin = AdminClient(url, admin_token)
        admin.register_dataset("adult", str(data), adult_schema().to_json(), budget=3.0, definition="pure")
        alice = Client(url, admin.create_analyst("alice", {"adult": 1.0}))
        admin.create_analyst("bob", {"adult": 0.5})
        with playwright_api.sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=LAUNCH_ARGS)
            page = browser.new_page()
            page.goto(f"{url}/dashboard")
            page.fill("#token", admin_token)
            page.click("#connect")
            page.wait_for_selector("#analysts tr[data-analyst='alice']", timeout=15_000)
            page.wait_for_selector("#analysts tr[data-analyst='bob']", timeout=15_000)
            alice_row = page.locator("#analysts tr[data-analyst='alice'] td")
            assert alice_row.nth(2).inner_text() == "1"  # quota
            assert alice_row.nth(3).inner_text() == "0"  # nothing spent yet
            assert page.locator("#datasets tr[data-name='adult']").count() == 1
            # An analyst's query shows up in the live ledger and in the spend, without a reload.
            alice.query("adult", "age BETWEEN 20 AND 29 AND sex = 1", epsilon=0.25)
            # (The page's CSP forbids eval, so waits use locators rather than wait_for_function.)
            expect(page.locator("#analysts tr[data-analyst='alice'] td").nth(3)).to_have_text(
                "0.25", timeout=15_000
            )
            page.wait_for_selector("#ledger tbody tr", timeout=15_000)
            assert "age BETWEEN 20 AND 29" in page.locator("#ledger tbody").inner_text()
            # The load heat map is drawn from the ledger once something is charged.
            expect(page.locator("#heat-img")).to_have_attribute("src", re.compile("^blob:"), timeout=15_000)
            page.screenshot(path=str(tmp_path / "dashboard.png"))
            # A wrong token is refused and shows an error, not data.
            other = browser.new_page()
            other.goto(f"{url}/dashboard")
            other.fill("#token", "not-the-admin-token-at-all")
            other.click("#connect")
            expect(other.locator("#error")).to_contain_text("refused", timeout=15_000)
            assert other.locator("#content").is_hidden()
            browser.close()
        alice.close()
        admin.close()


def test_heatmap_endpoint_is_admin_only_and_draws_the_ledger(tmp_path: Path) -> None:
    import httpx

    HANG = 120.0  # seconds: httpx's default of 5 fails a request a busy machine is slow to draw

    data = tmp_path / "adult.csv"
    synthetic_adult(2_000, seed=3).to_csv(data, index=False)
    with embedded_service(tmp_path / "ledger.sqlite") as (url, admin_token):
        admin = AdminClient(url, admin_token)
        admin.register_dataset("adult", str(data), adult_schema().to_json(), budget=3.0, definition="pure")
        path = f"{url}/v1/admin/datasets/adult/heatmap.png?x=age&y=sex"
        auth = {"Authorization": f"Bearer {admin_token}"}
        assert httpx.get(path, headers=auth, timeout=HANG).status_code == 404  # nothing charged yet
        alice = Client(url, admin.create_analyst("alice", {"adult": 1.0}))
        alice.query("adult", "age < 30 AND sex = 0", epsilon=0.5)
        r = httpx.get(path, headers=auth, timeout=HANG)
        assert r.status_code == 200 and r.content[:8] == b"\x89PNG\r\n\x1a\n"
        assert httpx.get(path, timeout=HANG).status_code == 401
        assert (
            httpx.get(path, headers={"Authorization": "Bearer " + "x" * 30}, timeout=HANG).status_code == 401
        )
        bad = httpx.get(f"{url}/v1/admin/datasets/adult/heatmap.png?x=age&y=nope", headers=auth, timeout=HANG)
        assert bad.status_code == 400 and "nope" in bad.text
        alice.close()
        admin.close()
