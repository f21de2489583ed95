"""End to end in a real browser: headless Chromium (the system's, never downloaded) drives the
example project's admin while a real `run_scheduler` fires what it queues.

Log in, create a cron schedule (its next runs previewed live as it is typed, before it is
saved), see its preview, pause it with a note, run it now, and see the run succeed in the
ledger. Each step saves a screenshot under artifacts/browser/ (or
$SCHEDULINATOR_ARTIFACTS). Without Chromium the test skips, unless
SCHEDULINATOR_REQUIRE_BROWSER=1 (CI), where it fails.

On a laptop's screen (1,366 x 768), measured in the page: the lists fit their box (nothing
scrolls out of sight) and no time in them wraps past two lines, the admin index links the
operations page, and every label of every picture is drawn at 11 px or more.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress

import pytest
from playwright.sync_api import Browser, Locator, Page, expect, sync_playwright

from django_schedulinator.models import Schedule

from .support.browser_support import (
    ADMIN_PASSWORD,
    ADMIN_USERNAME,
    CHROMIUM_ARGS,
    PICTURES_SCRIPT,
    Artifacts,
    ExampleProject,
    browser_required,
    find_chromium,
)

pytestmark = pytest.mark.subprocess

CRON = "0 9 * * 1-5"
TIMEZONE = "Europe/Berlin"
# Takes no arguments but the occurrence, so the schedule needs neither args nor kwargs.
TASK = "demo.heartbeat"
PAUSE_NOTE = "maintenance window"
# The scheduler sleeps at most a second between passes and is woken by a run now: a run
# that has not succeeded within this long is not going to.
LEDGER_TIMEOUT_SECONDS = 30.0
LEDGER_POLL_SECONDS = 0.5
STEP_TIMEOUT_MS = 15_000
# A common laptop screen: the admin must fit it at 100% zoom.
VIEWPORT = {"width": 1366, "height": 768}
SMALLEST_LABEL_PX = 11
MOST_LINES_OF_A_TIME = 2

# The changelist's table against its box, and the times in it that wrap (one line box per
# line of an inline element).
FIT_SCRIPT = """() => {
  const box = document.querySelector('#changelist .results');
  const times = [...document.querySelectorAll('#result_list td .schedulinator-time')];
  const lines = element => new Set(
    [...element.getClientRects()].filter(r => r.width > 0).map(r => Math.round(r.top))
  ).size;
  return {
    scrollWidth: box.scrollWidth,
    clientWidth: box.clientWidth,
    times: times.length,
    columns: [...document.querySelectorAll('#result_list thead th')].map(
      th => [th.className.replace('sortable ', ''), Math.round(th.getBoundingClientRect().width)]
    ),
    lines: times.map(time => [time.textContent.trim(), lines(time)]),
  };
}"""
# Each visible text of the pictures, at the size it is drawn: its font size times the scale
# of its picture on the screen (a picture shrunk to fit draws its text smaller).
LABELS_SCRIPT = """() => [...document.querySelectorAll('svg.schedulinator-chart text')]
  .filter(text => text.textContent.trim() && text.getClientRects().length)
  .map(text => {
    const ctm = text.getScreenCTM();
    const size = parseFloat(getComputedStyle(text).fontSize) * Math.hypot(ctm.a, ctm.b);
    return [text.textContent.trim(), Math.round(size * 100) / 100];
  })"""


@pytest.fixture(scope="module")
def artifacts() -> Artifacts:
    artifacts = Artifacts()
    artifacts.clear()
    return artifacts


@pytest.fixture(scope="module")
def chromium_path() -> str:
    path = find_chromium()
    if path is None:
        reason = (
            "no Chromium found (set SCHEDULINATOR_CHROMIUM, or install Debian's chromium "
            "package: apt-get install chromium)"
        )
        if browser_required():
            pytest.fail(f"SCHEDULINATOR_REQUIRE_BROWSER is set but {reason}", pytrace=False)
        pytest.skip(reason)
    return path


@pytest.fixture(scope="module")
def browser(chromium_path: str) -> Iterator[Browser]:
    with sync_playwright() as playwright:
        # executable_path always: Playwright never downloads a browser for these tests.
        browser = playwright.chromium.launch(
            executable_path=chromium_path, headless=True, args=CHROMIUM_ARGS
        )
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture(scope="module")
def example_project(artifacts: Artifacts) -> Iterator[ExampleProject]:
    """The example project served and scheduled in subprocesses, removed after the module."""
    project = ExampleProject()
    try:
        project.set_up()
        yield project
    finally:
        try:
            project.keep_logs(artifacts)
        finally:
            project.stop()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport=VIEWPORT)
    context.set_default_timeout(STEP_TIMEOUT_MS)
    try:
        yield context.new_page()
    finally:
        context.close()


class Screenshots:
    """Numbered full-page screenshots of the steps, plus one of the page where a step failed."""

    def __init__(self, page: Page, artifacts: Artifacts, prefix: str = "") -> None:
        self.page = page
        self.artifacts = artifacts
        self.prefix = prefix
        self.count = 0

    def take(self, step: str, element: Locator | None = None, *, screen: bool = False) -> None:
        """The whole page, only ``element`` (a picture, up close), or with ``screen`` what
        the screen shows (VIEWPORT)."""
        self.count += 1
        path = self.artifacts.path(f"{self.prefix}{self.count:02d}-{step}.png")
        if element is not None:
            element.screenshot(path=path)
        else:
            self.page.screenshot(path=path, full_page=not screen)

    @contextmanager
    def on_failure(self) -> Iterator[None]:
        try:
            yield
        except BaseException:
            # Best effort: the failure itself is what pytest must report.
            with suppress(Exception):
                self.page.screenshot(
                    path=self.artifacts.path(f"{self.prefix}failure.png"), full_page=True
                )
            raise


def assert_list_fits(page: Page, *, times: bool = True) -> None:
    """The changelist's table fits its box at this width, and no time in it (``times``:
    there must be some) wraps past MOST_LINES_OF_A_TIME lines."""
    measured = page.evaluate(FIT_SCRIPT)
    assert measured["scrollWidth"] <= measured["clientWidth"], (
        f"{page.url}: the list is {measured['scrollWidth']} px wide in "
        f"{measured['clientWidth']} px at {VIEWPORT['width']} px; its columns: "
        f"{measured['columns']}"
    )
    assert measured["times"] or not times, f"{page.url}: no times listed"
    wrapped = [(text, n) for text, n in measured["lines"] if n > MOST_LINES_OF_A_TIME]
    assert wrapped == [], f"{page.url}: times on more than {MOST_LINES_OF_A_TIME} lines"


def assert_labels_readable(page: Page) -> None:
    """Every label of the page's pictures is drawn at SMALLEST_LABEL_PX or more."""
    labels = page.evaluate(LABELS_SCRIPT)
    assert labels, f"{page.url}: no picture labels"
    small = [(text, size) for text, size in labels if size < SMALLEST_LABEL_PX]
    assert small == [], f"{page.url}: labels under {SMALLEST_LABEL_PX} px at 100% zoom"


def messages(page: Page) -> Locator:
    return page.locator("ul.messagelist")


def expect_message(page: Page, pattern: str) -> None:
    """Django's message list shows ``pattern`` and no error or warning."""
    expect(messages(page)).to_contain_text(re.compile(pattern, re.IGNORECASE))
    expect(messages(page).locator("li.error, li.warning")).to_have_count(0)


def run_action(page: Page, project: ExampleProject, name: str, action: str, note: str = "") -> None:
    """Tick the schedule's row in the changelist, choose ``action`` and press Go."""
    page.goto(f"{project.base_url}/admin/django_schedulinator/schedule/")
    row = page.locator("#result_list tbody tr").filter(has_text=name)
    row.locator("input.action-select").check()
    form = page.locator("#changelist-form")
    # .first: with actions_on_bottom the bar is rendered twice; Go sends its own index.
    form.locator("select[name=action]").first.select_option(action)
    if note:
        form.locator("input[name=note]").first.fill(note)
    form.locator("button[name=index]").first.click()


def log_in(page: Page, project: ExampleProject) -> None:
    page.goto(f"{project.base_url}/admin/login/?next=/admin/")
    page.locator("#id_username").fill(ADMIN_USERNAME)
    page.locator("#id_password").fill(ADMIN_PASSWORD)
    page.get_by_role("button", name="Log in").click()
    expect(page).to_have_url(re.compile(r"/admin/$"))
    expect(page.locator("#user-tools")).to_contain_text(ADMIN_USERNAME, ignore_case=True)


def add_cron_schedule(
    page: Page, project: ExampleProject, name: str, description: str, shots: Screenshots
) -> int:
    """Fill the add form, watching its live preview (an invalid cron named, then the next
    runs and the description, before anything is saved); save and continue editing; the
    new schedule's id."""
    page.goto(f"{project.base_url}/admin/django_schedulinator/schedule/add/")
    page.locator("#id_name").fill(name)
    page.locator("#id_task").select_option(TASK)
    page.locator("#id_args").fill("[]")
    page.locator("#id_kwargs").fill("{}")
    page.locator("#id_enabled").check()
    page.locator("#id_kind").select_option("cron")
    # No calendar exists yet: the field says so, and links to adding one.
    calendars = page.locator(".field-calendars")
    expect(calendars).to_contain_text("Calendars")
    expect(calendars).to_contain_text("No calendar of excluded days exists yet.")
    expect(calendars.locator("#schedulinator-add-calendar")).to_have_text("Add a calendar")
    calendars.scroll_into_view_if_needed()
    shots.take("add-form-calendars", calendars)
    zone = page.locator("#id_timezone")
    # A text input or a select of zones: both are within the contract.
    if zone.evaluate("element => element.tagName") == "SELECT":
        zone.select_option(TIMEZONE)
    else:
        zone.fill(TIMEZONE)
    box = page.locator("#schedulinator-preview-box")
    page.locator("#id_cron").fill("61 * * * *")
    expect(box).to_contain_text("Invalid cron expression")
    page.locator("#id_cron").fill(CRON)
    expect(box.locator("#schedulinator-preview tbody tr:has(td)").nth(4)).to_be_visible()
    expect(page.locator("#schedulinator-description")).to_have_text(description)
    shots.take("add-form-live-preview")
    # Cron's day rule is part of the timing: choosing it previews again.
    page.locator("#id_cron").fill("30 6 1-7 * 1")
    expect(page.locator("#schedulinator-description")).to_contain_text(", or on Monday")
    page.locator("#id_day_rule").select_option("both")
    expect(page.locator("#schedulinator-description")).to_contain_text(", but only on Monday")
    expect(box.locator("#schedulinator-preview tbody tr:has(td)").first).to_contain_text("Mon")
    shots.take("add-form-day-rule")
    page.locator("#id_day_rule").select_option("either")
    page.locator("#id_cron").fill(CRON)
    expect(page.locator("#schedulinator-description")).to_have_text(description)
    expect(page).to_have_url(re.compile(r"/schedule/add/$"))  # only previewed so far
    page.locator('[name="_continue"]').click()
    expect(page).to_have_url(re.compile(r"/schedule/\d+/change/"))
    expect(page.locator("ul.messagelist li.success")).to_be_visible()
    match = re.search(r"/schedule/(\d+)/change/", page.url)
    assert match, page.url
    return int(match.group(1))


def wait_for_succeeded_run_now(page: Page, project: ExampleProject, schedule_id: int) -> Locator:
    """Reload the schedule's runs until a "Run now" run shows "Succeeded" (bounded)."""
    url = f"{project.base_url}/admin/django_schedulinator/run/?schedule__id__exact={schedule_id}"
    rows = page.locator("#result_list tbody tr")
    done = rows.filter(has_text="Run now").filter(has_text="Succeeded")
    deadline = time.monotonic() + LEDGER_TIMEOUT_SECONDS
    while True:
        page.goto(url)
        expect(page.locator("#changelist")).to_be_visible()
        if done.count():
            return done.first
        if time.monotonic() > deadline:
            seen = "\n".join(rows.all_inner_texts()) or "(no runs listed)"
            raise AssertionError(
                f"no succeeded 'Run now' run of schedule {schedule_id} after "
                f"{LEDGER_TIMEOUT_SECONDS:.0f}s; the ledger shows:\n{seen}\n"
                f"{project.log('scheduler')}"
            )
        time.sleep(LEDGER_POLL_SECONDS)


def test_admin_schedule_preview_pause_run_now_and_ledger(
    page: Page, example_project: ExampleProject, artifacts: Artifacts
) -> None:
    project = example_project
    shots = Screenshots(page, artifacts)
    name = f"browser test {uuid.uuid4().hex[:8]}"
    # The admin describes the schedule as the model does.
    description = Schedule(kind="cron", cron=CRON, timezone=TIMEZONE).description

    with shots.on_failure():
        log_in(page, project)
        # The admin index links the operations page.
        operations_link = page.locator("#content-main").get_by_role(
            "link", name="Scheduler operations", exact=True
        )
        expect(operations_link).to_be_visible()
        shots.take("logged-in")

        schedule_id = add_cron_schedule(page, project, name, description, shots)
        # The change page previews the next occurrences (local time and UTC) and says in
        # words when it runs.
        preview_rows = page.locator("#schedulinator-preview tbody tr:has(td)")
        expect(preview_rows.nth(4)).to_be_visible()
        assert preview_rows.count() >= 5
        expect(page.get_by_text(description).first).to_be_visible()
        shots.take("schedule-saved-with-preview")

        run_action(page, project, name, "pause", note=PAUSE_NOTE)
        expect_message(page, "paus")
        row = page.locator("#result_list tbody tr").filter(has_text=name)
        # Paused shows in the list: the enabled icon is "no", or the note is listed.
        paused = row.locator('td.field-enabled img[alt="False"]').or_(row.get_by_text(PAUSE_NOTE))
        expect(paused.first).to_be_visible()
        # Alone (this test first), paused and never run: no time to measure yet.
        assert_list_fits(page, times=False)
        shots.take("paused", screen=True)

        page.goto(f"{project.base_url}/admin/django_schedulinator/schedule/{schedule_id}/change/")
        expect(page.locator("#id_enabled")).not_to_be_checked()
        expect(page.locator("#id_pause_note")).to_have_value(PAUSE_NOTE)
        shots.take("paused-change-page")

        run_action(page, project, name, "run_now")
        expect_message(page, "run")
        shots.take("run-now-queued")

        run = wait_for_succeeded_run_now(page, project, schedule_id)
        expect(run).to_be_visible()
        assert_list_fits(page)
        shots.take("ledger-run-succeeded")

        # The change log recorded the admin's changes, and the operations page reads the
        # index the scheduler fires from.
        page.goto(f"{project.base_url}/admin/django_schedulinator/schedule/{schedule_id}/change/")
        changes = page.locator("#schedulinator-changes")
        for action in ("Created", "Paused", "Run now"):
            expect(changes).to_contain_text(action)
        # Reached from the admin index.
        page.goto(f"{project.base_url}/admin/")
        operations_link.click()
        expect(page).to_have_url(re.compile(r"/admin/django_schedulinator/schedule/operations/$"))
        expect(page.locator("#schedulinator-status-schedules td.value")).to_have_text(
            re.compile(r"^\d+$")
        )
        expect(page.locator("#schedulinator-redis-error")).to_have_count(0)
        # The scheduler that fired it is listed, from its heartbeat.
        expect(page.locator("#schedulinator-schedulers tbody tr")).to_have_count(1)
        expect(page.locator("#schedulinator-scheduler-1")).to_contain_text("healthy")
        shots.take("operations")
        # And drawn: a bar of its last pass, short of the stale line.
        alive = page.locator("#schedulinator-alive")
        expect(alive.locator("#schedulinator-alive-1")).to_contain_text("healthy")
        assert_labels_readable(page)
        shots.take("schedulers-alive", alive)


def test_admin_pictures(page: Page, example_project: ExampleProject, artifacts: Artifacts) -> None:
    """The operations page's forecast and lateness histogram, and a schedule's strip of its
    last runs (succeeded, failed, skipped while paused), drawn from what a real scheduler
    fired; screenshots of each."""
    project = example_project
    shots = Screenshots(page, artifacts, prefix="pictures-")
    with shots.on_failure():
        strip_id = int(project.manage("shell", "-c", PICTURES_SCRIPT).split()[-1])
        log_in(page, project)

        # The list of many schedules fits the screen.
        page.goto(f"{project.base_url}/admin/django_schedulinator/schedule/")
        expect(page.locator("#result_list tbody tr").first).to_be_visible()
        assert_list_fits(page)
        shots.take("schedules-list", screen=True)

        page.goto(f"{project.base_url}/admin/django_schedulinator/schedule/operations/")
        forecast = page.locator("#schedulinator-forecast")
        expect(forecast.locator("svg#schedulinator-forecast-svg")).to_be_visible()
        expect(forecast.locator("#schedulinator-forecast-peak")).to_contain_text("peak:")
        # The schedules that fire every second are drawn apart, and listed.
        expect(forecast.locator("#schedulinator-forecast-frequent")).to_be_visible()
        expect(page.locator("#schedulinator-frequent")).to_contain_text("Every second")
        busiest = page.locator("#schedulinator-busiest")
        expect(busiest).to_contain_text("Every hour (UTC)")
        # Each busy minute once: the hourly herd is one row naming its other hours.
        minutes = busiest.locator("tbody th").all_inner_texts()
        assert len(minutes) == len(set(minutes)), minutes
        expect(busiest.locator("tbody th").first).to_contain_text(
            "led by the same schedules also at"
        )
        assert_labels_readable(page)
        lateness = page.locator("#schedulinator-lateness")
        expect(lateness.locator("svg#schedulinator-lateness-svg")).to_be_visible()
        expect(page.locator("#schedulinator-lateness-percentiles")).to_contain_text("p99")
        shots.take("operations")
        shots.take("forecast", forecast)
        shots.take("lateness", lateness)

        # A busy minute's group links to its schedules.
        busiest.get_by_role("link", name="Every hour (UTC)").first.click()
        expect(page.locator("#result_list tbody tr")).to_have_count(40)
        expect(page.locator("#changelist-filter")).to_contain_text("no jitter")
        assert_list_fits(page)
        shots.take("busiest-group-listed")

        page.goto(f"{project.base_url}/admin/django_schedulinator/schedule/{strip_id}/change/")
        strip = page.locator("#schedulinator-run-strip")
        expect(strip.locator("svg#schedulinator-run-strip-svg")).to_be_visible()
        for status in ("Succeeded", "Failed", "Skipped"):
            expect(strip.locator(".schedulinator-legend")).to_contain_text(status)
        strip.scroll_into_view_if_needed()
        assert_labels_readable(page)
        shots.take("schedule-strip-page")
        shots.take("schedule-strip", strip)
        # Each mark links to its run.
        strip.locator("a.schedulinator-run-link").last.click()
        expect(page).to_have_url(re.compile(r"/run/\d+/change/"))
