"""A small real-HTTP client for the console's API (urllib: nothing between the test and the
socket but the standard library)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from email.message import Message
from typing import Any

CSRF = {"X-Checkpointd-Console": "1"}


@dataclass
class Reply:
    status: int
    headers: Message
    body: Any

    @property
    def reason(self) -> str:
        return str(self.body["error"]["reason"]) if "error" in self.body else ""


def call(
    method: str,
    url: str,
    body: Any = None,
    *,
    token: str | None = None,
    cookie: str | None = None,
    headers: dict[str, str] | None = None,
) -> Reply:
    """One request; the reply's JSON body whatever its status."""
    sent = dict(headers or {})
    if token is not None:
        sent["Authorization"] = f"Bearer {token}"
    if cookie is not None:
        sent["Cookie"] = cookie
    data = None if body is None else json.dumps(body).encode()
    if data is not None:
        sent.setdefault("Content-Type", "application/json")
    request = urllib.request.Request(url, data=data, method=method, headers=sent)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return Reply(response.status, response.headers, json.loads(response.read()))
    except urllib.error.HTTPError as error:
        with error:
            return Reply(error.code, error.headers, json.loads(error.read()))


def decide(
    url: str, namespace: str, execution_id: str, approved: bool = True, **kwargs: Any
) -> Reply:
    """POST a decision the way the page does (with the CSRF header)."""
    headers = {**CSRF, **kwargs.pop("headers", {})}
    body = {"namespace": namespace, "execution_id": execution_id, "approved": approved}
    body.update(kwargs.pop("body", {}))
    return call("POST", url + "api/decisions", body, headers=headers, **kwargs)


class EventStream:
    """The console's server-sent events, read line by line from a real socket."""

    def __init__(self, url: str, *, token: str | None = None, last_event_id: str = "") -> None:
        headers = {"Accept": "text/event-stream"}
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        if last_event_id:
            headers["Last-Event-ID"] = last_event_id
        self._response = urllib.request.urlopen(
            urllib.request.Request(url, headers=headers), timeout=30
        )

    def next(self) -> tuple[str, str, Any]:
        """The next message: its event name, id ('' when none) and parsed data."""
        name, event_id, data = "message", "", ""
        while True:
            line = self._response.readline().decode()
            assert line, "the stream ended"
            line = line.rstrip("\n")
            if not line:
                if data:
                    return name, event_id, json.loads(data)
                continue
            field, _, value = line.partition(": ")
            if field == "event":
                name = value
            elif field == "id":
                event_id = value
            elif field == "data":
                data += value

    def until(self, name: str) -> tuple[str, Any]:
        """Skip to the next ``name`` message; its id and data."""
        while True:
            got, event_id, data = self.next()
            if got == name:
                return event_id, data

    def close(self) -> None:
        self._response.close()
