"""Output item ids unique within one streamed response: a context-command round is spliced into
the client's response, and an upstream that numbers its items per response (``msg_1`` in every
response) would repeat an id the client already holds; the openai SDK's stream accumulator
refuses that ("conflicting output identities"; a reasoning item's id counts as a message's). A
repeated message or reasoning id is renamed for the client; the stored reply keeps the upstream's
(neither id takes part in mapping a request: ``mapping._READ_ITEMS``; a server tool's item's id
does, so it is never renamed)."""

from __future__ import annotations

from typing import Any

RENAMED = ("message", "reasoning")
"""The item types the SDK tells apart by id and whose id the proxy never reads back."""


class UniqueIds:
    """The message and reasoning ids one response has sent, and this round's renames of repeated ones."""

    def __init__(self) -> None:
        self.sent: set[str] = set()
        self.renames: dict[str, str] = {}

    def begin(self) -> None:
        self.renames = {}

    def sent_round(self, items: list[dict[str, Any]]) -> None:
        self.sent |= {i["id"] for i in items if i.get("type") in RENAMED and isinstance(i.get("id"), str)}

    def event(self, data: dict[str, Any], index: int) -> dict[str, Any]:
        """``data`` with a repeated item id renamed (a new dict), else ``data`` itself."""
        item = data.get("item")
        if isinstance(item, dict) and item.get("type") in RENAMED and isinstance(iid := item.get("id"), str):
            if data.get("type") == "response.output_item.added" and iid in self.sent and iid not in self.renames:
                self.renames[iid] = f"{iid}_{index}"
            if iid in self.renames:
                data = {**data, "item": {**item, "id": self.renames[iid]}}
        item_id = data.get("item_id")
        if isinstance(item_id, str) and item_id in self.renames:
            data = {**data, "item_id": self.renames[item_id]}
        return data

    def items(self, output: list[Any]) -> list[Any]:
        """A closing event's output items with this round's renames."""
        return [
            {**o, "id": self.renames[o["id"]]}
            if isinstance(o, dict) and o.get("type") in RENAMED and o.get("id") in self.renames
            else o
            for o in output
        ]
