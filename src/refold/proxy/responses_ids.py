"""Output item ids unique within one streamed response: a context-command round is spliced into
the client's response, and an upstream that numbers its items per response (``msg_1`` in every
response) would repeat an id the client already holds; the openai SDK's stream accumulator
refuses that ("conflicting output identities"). A repeated message id is renamed for the client;
the stored reply keeps the upstream's (a message's id takes no part in mapping a request)."""

from __future__ import annotations

from typing import Any


class UniqueIds:
    """The message ids one response has sent, and this round's renames of repeated ones."""

    def __init__(self) -> None:
        self.sent: set[str] = set()
        self.renames: dict[str, str] = {}

    def begin(self) -> None:
        self.renames = {}

    def sent_round(self, items: list[dict[str, Any]]) -> None:
        self.sent |= {i["id"] for i in items if i.get("type") == "message" and isinstance(i.get("id"), str)}

    def event(self, data: dict[str, Any], index: int) -> dict[str, Any]:
        """``data`` with a repeated message id renamed (a new dict), else ``data`` itself."""
        item = data.get("item")
        if isinstance(item, dict) and item.get("type") == "message" and isinstance(iid := item.get("id"), str):
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
            if isinstance(o, dict) and o.get("type") == "message" and o.get("id") in self.renames
            else o
            for o in output
        ]
