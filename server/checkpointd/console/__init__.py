"""The approvals console (``--console-listen``): a small page and its JSON API over HTTP.

It runs in the server's event loop and calls the gRPC servicers' own methods, so every answer
follows the same rules and carries the same errors as gRPC (contract W1): the same
validation, the same store calls, the same ErrorInfo reasons, and the same token rules
(:mod:`checkpointd.auth`: a read-only token is refused a decision with ``READ_ONLY_TOKEN``, a
namespace outside the token's grant with ``NAMESPACE_NOT_ALLOWED``).

API (all JSON; errors are ``{"error": {"code", "reason", "message", "metadata"}}`` with the
gRPC status name and an HTTP status that matches it):

- ``GET /api/session``: whether tokens are configured, and the session's grant.
- ``POST /api/session`` ``{"token": ...}``: checks the token, answers with its grant and sets
  an HttpOnly, SameSite=Strict session cookie; ``DELETE /api/session`` forgets it.
- ``GET /api/pending?namespace=&chain_name=&reason=&page_size=&page_token=``: the pending
  interrupts, newest first, each with its decision (ListPendingInterrupts).
- ``POST /api/decisions`` ``{"namespace", "execution_id", "interrupt_id"?, "approved",
  "reason"?, "response"?}``: submit a decision (SubmitDecision); ``decided_by`` is the token's
  name, or ``console`` without tokens. ``interrupt_id`` names one pause of a graph thread (a
  row's ``interrupt_id``, present on graph rows only); absent or empty decides a fastaiagent
  run's. ``response`` is the typed answer a graph pause asks for (contract K3), in the form the
  store keeps: ``{"actions": [{"type": "approve" | "edit" | "reject" | "respond", "args":
  {...} (edit), "message": "..." (reject, respond)}]}``, one per action of a LangChain
  ``HumanInTheLoopMiddleware`` pause in order, or ``{"resume": <any JSON>}`` for a plain
  ``interrupt()``. With actions, ``approved`` may be left out: it is then false exactly when
  an action is rejected. The console checks the body's shape (``INVALID_FIELD`` naming the
  body's field, such as ``response.actions.args``); SubmitDecision checks the rest, and what
  the pause does not take is refused before anything is written.
- ``GET /api/decisions?namespace=&limit=``: the newest ``limit`` decisions (default 50, at
  most 200), newest first, each with its resume state (ListDecisions, read to its end).
  Listings, events and this one show a decision's typed answer as the proto's JSON mapping
  writes it (``decision.response``: ``actions`` with ``type`` ``ACTION_DECISION_TYPE_EDIT``
  and ``edited_args_json``, or ``resume_json``).
- ``GET /api/checkpoints?namespace=&execution_id=&page_token=``: a run's checkpoints, oldest
  first (ListCheckpoints).
- ``GET /api/graph-checkpoints?namespace=&thread_id=&page_token=``: a LangGraph thread's
  checkpoints in every subgraph, newest first (ListGraphCheckpoints), each as a person reads
  it without decoding: ``checkpoint_id``, ``checkpoint_ns``, ``parent_checkpoint_id`` (what
  draws a fork: a checkpoint two others name), ``parents`` (a subgraph checkpoint's callers,
  by checkpoint_ns), ``interrupts`` (the tasks that paused there), ``step``, ``source``,
  ``wrote``, ``tasks``, ``created_at``.
- ``GET /api/graph-state?namespace=&thread_id=&checkpoint_ns=&checkpoint_id=``: one
  checkpoint with its channel values decoded (:mod:`checkpointd.graph.value_view`: JSON and
  msgpack read as data, never executed; anything else typed bytes), ``changes`` from its
  parent (each channel ``added``, ``removed`` or ``changed`` with ``before`` / ``after``, and
  what a list ``appended``), its ``pending_writes``, its ``parent`` and ``cut`` (what the
  size limits left out, by value). An unknown checkpoint is CHECKPOINT_NOT_FOUND.
- ``GET /api/graph-pauses?namespace=&thread_id=``: a thread's pauses, oldest first, each with
  its request and its decision (its pending pauses and newest decided ones, read by the
  thread's keys; ``complete`` is false when older decisions were left).
- ``GET /api/runs?namespace=&framework=&status=&chain_name=&page_size=&page_token=``: the
  namespace's runs, fastaiagent runs and LangGraph threads, newest activity first
  (ListExecutions, contract C12); ``framework`` is ``fastaiagent`` or ``langgraph``,
  ``status`` ``running``, ``paused``, ``ended`` or ``failed``, ``chain_name`` a run's chain or
  a thread's graph name; each run as the proto's JSON mapping writes an Execution.
- ``GET /api/namespaces?page_size=&page_token=``: the namespaces that hold a run, a pause or
  a LangGraph thread and that the caller may read, in name order (ListNamespaces, contract
  N2; 200 a page, at most 1000), each with its pending count, so a person picks one rather
  than typing it, whether its runs wait, run or ended.
- ``GET /api/events?namespace=``: server-sent events of the watch hub (WatchInterrupts): a
  snapshot first, then every event; each message after the snapshot carries its cursor as the
  event id, so a reconnecting EventSource resumes from ``Last-Event-ID``.

Callers authenticate with the session cookie or an ``Authorization: Bearer`` header. A
mutating request must carry the ``X-Checkpointd-Console: 1`` header (a cross-site form or
fetch cannot add it without a CORS preflight, which the console never grants) and, when the
browser sends one, an ``Origin`` equal to the console's own.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import ipaddress
import json
import logging
import secrets
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from importlib import resources
from typing import Any, Final

import grpc
from aiohttp import web
from google.protobuf.descriptor import EnumDescriptor
from google.protobuf.json_format import MessageToDict
from google.protobuf.message import Message

from checkpointd import decision_responses
from checkpointd import validation as v
from checkpointd.auth import CALL_GRANT, Authenticator, Grant, Role
from checkpointd.convert import pending_to_proto
from checkpointd.domain import PendingFilter
from checkpointd.errors import (
    CheckpointdError,
    CheckpointNotFound,
    InvalidField,
    MissingToken,
    NamespaceNotAllowed,
    ReadOnlyToken,
    status_for,
)
from checkpointd.graph.checkpoint_summary import CheckpointSummary, summarize
from checkpointd.graph.state_view import state_view
from checkpointd.listeners import Listener
from checkpointd.logging_setup import event
from checkpointd.readiness import StoreMonitor
from checkpointd.security import is_loopback
from checkpointd.servicers import CheckpointServicer, GraphServicer, InterruptServicer, ServiceDeps
from checkpointd.servicers.executions import ExecutionRpcs
from checkpointd.servicers.interrupts import _watch_response
from checkpointd.store.base import StoreUnavailable
from checkpointd.watch import EventItem, Progress, SnapshotDone, SnapshotRow, WatchItem
from checkpointd_client.v1 import checkpoint_pb2 as pb
from checkpointd_client.v1 import checkpoint_service_pb2 as cp_svc
from checkpointd_client.v1 import graph_service_pb2 as graph_svc
from checkpointd_client.v1 import interrupt_service_pb2 as svc

__all__ = ["CSRF_HEADER", "SESSION_COOKIE", "Console", "ConsoleError"]

log = logging.getLogger("checkpointd")

SESSION_COOKIE: Final = "checkpointd_session"
CSRF_HEADER: Final = "X-Checkpointd-Console"
#: ``decided_by`` of a decision made on a console without tokens.
ANONYMOUS_DECIDER: Final = "console"
#: A body larger than this is refused before it is parsed (a decision is a few hundred bytes).
MAX_BODY_BYTES: Final = 64 * 1024
#: Sessions kept at once; signing in beyond it ends the oldest session.
MAX_SESSIONS: Final = 1000
#: The most decisions ``GET /api/decisions`` answers with, and the most it reads to find them.
MAX_RECENT_DECISIONS: Final = 200
MAX_DECISIONS_SCANNED: Final = 20_000
#: The most decided pauses of one thread the run view lists (the newest).
MAX_THREAD_DECISIONS: Final = 1000
#: Seconds between SSE comment lines on a quiet stream, so proxies and browsers keep it open.
SSE_KEEPALIVE_SECONDS: Final = 15.0

_HTTP_STATUS: Final = {
    grpc.StatusCode.INVALID_ARGUMENT: 400,
    grpc.StatusCode.OUT_OF_RANGE: 400,
    grpc.StatusCode.UNAUTHENTICATED: 401,
    grpc.StatusCode.PERMISSION_DENIED: 403,
    grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.ALREADY_EXISTS: 409,
    grpc.StatusCode.FAILED_PRECONDITION: 409,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 429,
    grpc.StatusCode.UNAVAILABLE: 503,
    grpc.StatusCode.DEADLINE_EXCEEDED: 504,
}
_SECURITY_HEADERS: Final = {
    # The page loads only its own script and style and talks only to its own origin.
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
        "img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
#: The event stream carries every interrupt of the namespace; the page filters what it shows.
_EVERYTHING: Final = PendingFilter(chain_name=None, reason=None, agent_path_prefix=None)
#: The body's spelling of an action's type (the stored form's), by its proto value.
_ACTION_TYPES: Final = {name: number for number, name in decision_responses.ACTION_TYPES.items()}
_STATIC: Final = {
    "/": ("index.html", "text/html"),
    "/console.js": ("console.js", "text/javascript"),
    "/console.css": ("console.css", "text/css"),
}


class ConsoleError(Exception):
    """The console cannot start; the message says what to fix."""


class _Forbidden(CheckpointdError):
    """A cross-site or header-less mutating request (not a gRPC error: only HTTP has it)."""


def _is_loopback_ip(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _to_json(message: Message) -> dict[str, Any]:
    return MessageToDict(message, preserving_proto_field_name=True)


def _dump(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _unknown_field(field: str, raw: dict[str, Any], known: set[str], which: str = "") -> None:
    """INVALID_FIELD for the first key of ``raw`` that is not one of ``known`` (a typo must
    not pass as an answer without it)."""
    unknown = sorted(set(raw) - known)
    if unknown:
        raise InvalidField(
            field, f"has no field {unknown[0]!r}{which}: it holds {', '.join(sorted(known))}"
        )


def _action_decision(index: int, raw: object) -> pb.ActionDecision:
    """One answer of ``response.actions``, by its shape; SubmitDecision checks what it says."""
    which = f" (action {index + 1})"
    if not isinstance(raw, dict):
        raise InvalidField("response.actions", f"must hold JSON objects{which}")
    _unknown_field("response.actions", raw, {"type", "args", "message"}, which)
    kind = raw.get("type")
    number = _ACTION_TYPES.get(kind) if isinstance(kind, str) else None
    if number is None:
        raise InvalidField(
            "response.actions.type", f"must be approve, edit, reject or respond{which}"
        )
    action = pb.ActionDecision(type=number)
    args, message = raw.get("args"), raw.get("message")
    if args is not None:
        if not isinstance(args, dict):
            raise InvalidField("response.actions.args", f"must be a JSON object{which}")
        action.edited_args_json = _dump(args)
    if message is not None:
        if not isinstance(message, str):
            raise InvalidField("response.actions.message", f"must be a string{which}")
        action.message = message
    return action


def _decision_response(raw: object) -> pb.DecisionResponse:
    """The DecisionResponse of a body's ``response``: ``{"actions": [...]}`` or
    ``{"resume": value}`` (the stored form). Only its shape is checked here: whether it fits
    the pause is SubmitDecision's to say."""
    if not isinstance(raw, dict):
        raise InvalidField(
            "response", 'must be a JSON object: {"actions": [...]} or {"resume": <value>}'
        )
    _unknown_field("response", raw, {"actions", "resume"})
    if ("actions" in raw) == ("resume" in raw):
        raise InvalidField("response", "must hold either actions or resume")
    if "resume" in raw:  # any JSON value, null included
        return pb.DecisionResponse(resume_json=_dump(raw["resume"]))
    actions = raw["actions"]
    if not isinstance(actions, list) or not actions:
        raise InvalidField(
            "response.actions", "must be a non-empty list: one answer per action of the pause"
        )
    return pb.DecisionResponse(actions=[_action_decision(i, a) for i, a in enumerate(actions)])


def _as_body_field(exc: InvalidField) -> InvalidField:
    """``exc`` naming the body's field where SubmitDecision names its request's: the body
    spells ``resume_json`` ``resume`` and ``edited_args_json`` ``args``."""
    field, rule = exc.metadata.get("field", ""), exc.metadata.get("rule", "")
    if field == "response.resume_json":
        return InvalidField("response.resume", rule.replace("resume_json", "resume"))
    if field == "response.actions.edited_args_json":
        return InvalidField("response.actions.args", rule)
    if "resume_json" in rule:
        return InvalidField(field, rule.replace("resume_json", "resume"))
    return exc


def _error_response(exc: BaseException) -> web.Response:
    if isinstance(exc, _Forbidden):
        body = {
            "code": "PERMISSION_DENIED",
            "reason": "CROSS_SITE_REQUEST",
            "message": str(exc),
            "metadata": {},
        }
        return web.json_response({"error": body}, status=403)
    info = status_for(exc)
    if info is None:
        log.error("console request failed", exc_info=exc)
        body = {"code": "INTERNAL", "reason": "", "message": "internal error", "metadata": {}}
        return web.json_response({"error": body}, status=500)
    body = {
        "code": info.code.name,
        "reason": info.reason,
        "message": info.message,
        "metadata": info.metadata,
    }
    return web.json_response({"error": body}, status=_HTTP_STATUS.get(info.code, 500))


@dataclass(slots=True)
class _Session:
    grant: Grant


@dataclass(slots=True)
class Console:
    """The console's aiohttp application over the servicers' logic."""

    deps: ServiceDeps
    monitor: StoreMonitor
    authenticator: Authenticator | None
    secure_cookie: bool = False
    _servicer: InterruptServicer = field(init=False)
    _checkpoint_servicer: CheckpointServicer = field(init=False)
    _graph_servicer: GraphServicer | None = field(init=False)
    _executions: ExecutionRpcs | None = field(init=False)
    _sessions: dict[str, _Session] = field(default_factory=dict)
    _runner: web.AppRunner | None = None
    _streams: set[asyncio.Task[Any]] = field(default_factory=set)
    address: str = ""
    listen_host: str = "localhost"
    _loopback: bool = True

    def __post_init__(self) -> None:
        self._servicer = InterruptServicer(self.deps)
        self._checkpoint_servicer = CheckpointServicer(self.deps)
        graph = self.deps.graph_store
        self._graph_servicer = None if graph is None else GraphServicer(self.deps, graph)
        executions = self.deps.executions
        self._executions = None if executions is None else ExecutionRpcs(executions)

    # --- the app -----------------------------------------------------------------------

    def app(self) -> web.Application:
        """The routes, behind the error mapping and the security headers."""
        app = web.Application(client_max_size=MAX_BODY_BYTES, middlewares=[self._errors_middleware])
        app.add_routes(
            [
                *(web.get(path, self._static) for path in _STATIC),
                web.get("/api/session", self._get_session),
                web.post("/api/session", self._post_session),
                web.delete("/api/session", self._delete_session),
                web.get("/api/pending", self._pending),
                web.post("/api/decisions", self._decide),
                web.get("/api/namespaces", self._namespaces),
                web.get("/api/decisions", self._decisions),
                web.get("/api/checkpoints", self._checkpoints),
                web.get("/api/graph-checkpoints", self._graph_checkpoints),
                web.get("/api/graph-state", self._graph_state),
                web.get("/api/graph-pauses", self._graph_pauses),
                web.get("/api/runs", self._runs),
                web.get("/api/events", self._events),
            ]
        )
        return app

    async def start(self, listener: Listener, ssl_context: ssl.SSLContext | None = None) -> str:
        """Listen on ``listener`` (host:port); returns the bound ``host:port``."""
        host, _, port = listener.address.rpartition(":")
        self.listen_host = host.strip("[]").lower()
        self._loopback = is_loopback(listener)
        self._runner = web.AppRunner(self.app(), access_log=None, shutdown_timeout=2.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host.strip("[]"), int(port), ssl_context=ssl_context)
        try:
            await site.start()
        except OSError as exc:
            await self._runner.cleanup()
            self._runner = None
            raise ConsoleError(
                f"cannot serve the console on {listener.address}: {exc.strerror or exc}"
            ) from None
        addresses = self._runner.addresses
        bound_port = addresses[0][1] if addresses else int(port)
        self.address = f"{host}:{bound_port}"
        return self.address

    async def stop(self) -> None:
        """End the event streams, then the server (the watch hub has ended them already
        when the server shuts down)."""
        for task in list(self._streams):
            task.cancel()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    @web.middleware
    async def _errors_middleware(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        try:
            self._check_host(request)
            response = await handler(request)
        except web.HTTPException as exc:
            if exc.status == 413:
                return _error_response(
                    InvalidField("body", f"must be at most {MAX_BODY_BYTES} bytes")
                )
            raise
        except Exception as exc:  # mapped like the gRPC edge maps
            response = _error_response(exc)
        if not response.prepared:
            response.headers.update(_SECURITY_HEADERS)
        return response

    async def _static(self, request: web.Request) -> web.StreamResponse:
        name, content_type = _STATIC[request.path]
        text = resources.files("checkpointd.console").joinpath("static", name).read_text("utf-8")
        return web.Response(text=text, content_type=content_type, charset="utf-8")

    # --- who is asking -----------------------------------------------------------------

    def _grant(self, request: web.Request) -> Grant | None:
        """The caller's grant (None: tokens are off); MissingToken or InvalidToken."""
        if self.authenticator is None:
            return None
        header = request.headers.getall("Authorization", [])
        if header:
            return self.authenticator.authenticate([("authorization", h) for h in header])
        session = self._sessions.get(request.cookies.get(SESSION_COOKIE, ""))
        if session is None:
            raise MissingToken()
        return session.grant

    def _check_host(self, request: web.Request) -> None:
        """Without tokens, answer only requests addressed to this machine by a loopback name
        or to the listen address itself: a page whose own name was rebound to 127.0.0.1 (DNS
        rebinding) is same-origin to the browser, but its Host header still names it."""
        if self.authenticator is None and self._loopback:
            # (On a non-loopback address without tokens, --insecure already lets anyone who
            # can reach it in; a rebound name would add nothing.)
            host = (request.url.host or "").strip("[]").lower()
            if host not in ("localhost", self.listen_host) and not _is_loopback_ip(host):
                raise _Forbidden(f"this console answers on {self.listen_host} or loopback only")

    @staticmethod
    def _check_same_origin(request: web.Request) -> None:
        """A mutating request must come from the page itself (CSRF): the custom header, which
        a cross-site request cannot carry without a preflight, and a same-origin Origin."""
        if request.headers.get(CSRF_HEADER) != "1":
            raise _Forbidden(f"a mutating request must carry the {CSRF_HEADER}: 1 header")
        origin = request.headers.get("Origin")
        if origin is not None and origin != f"{request.scheme}://{request.host}":
            raise _Forbidden("the request's Origin is not this console")

    def _namespace(self, grant: Grant | None, raw: object) -> str:
        """The validated namespace, if the grant allows it (the gRPC rule, in its order)."""
        if not isinstance(raw, str):
            raise InvalidField("namespace", "must be a string")
        namespace = v.namespace(raw)
        if grant is not None and not grant.allows_namespace(namespace):
            raise NamespaceNotAllowed(namespace, grant.name)
        return namespace

    def _gate(self) -> None:
        """Refuse store calls until the store is open, as the gRPC store gate does."""
        if not self.monitor.opened:
            raise StoreUnavailable("the server is still waiting for its database to come up")

    def _describe(self, grant: Grant | None) -> dict[str, Any]:
        # The page counts a stream silent for longer than a few progress intervals as lost.
        hub = self.deps.watch_hub
        interval = None if hub is None else hub.progress_interval
        if grant is None:
            described: dict[str, Any] = {
                "token_name": None,
                "role": Role.READ_WRITE.value,
                "namespaces": None,
            }
        else:
            namespaces = None if grant.namespaces is None else sorted(grant.namespaces)
            described = {
                "token_name": grant.name,
                "role": grant.role.value,
                "namespaces": namespaces,
            }
        return {**described, "watch_progress_interval_s": interval}

    # --- session -----------------------------------------------------------------------

    async def _get_session(self, request: web.Request) -> web.StreamResponse:
        auth = self.authenticator is not None
        try:
            grant = self._grant(request)
        except CheckpointdError:
            return web.json_response({"auth": auth, "signed_in": False})
        return web.json_response({"auth": auth, "signed_in": True, **self._describe(grant)})

    async def _post_session(self, request: web.Request) -> web.StreamResponse:
        self._check_same_origin(request)
        body = await self._json_body(request)
        if self.authenticator is None:
            return web.json_response({"auth": False, "signed_in": True, **self._describe(None)})
        token = body.get("token")
        if not isinstance(token, str) or not token:
            raise InvalidField("token", "is required")
        grant = self.authenticator.authenticate([("authorization", f"Bearer {token}")])
        session_id = secrets.token_urlsafe(32)
        self._sessions[session_id] = _Session(grant)
        while len(self._sessions) > MAX_SESSIONS:
            # The oldest session goes first (dicts keep insertion order): memory stays bounded
            # however often a token signs in.
            del self._sessions[next(iter(self._sessions))]
        response = web.json_response({"auth": True, "signed_in": True, **self._describe(grant)})
        response.set_cookie(
            SESSION_COOKIE,
            session_id,
            httponly=True,
            samesite="Strict",
            secure=self.secure_cookie,
            path="/",
        )
        event(
            log,
            logging.INFO,
            "console_session",
            f"console session opened for token {grant.name!r}",
            token_name=grant.name,
        )
        return response

    async def _delete_session(self, request: web.Request) -> web.StreamResponse:
        self._check_same_origin(request)
        self._sessions.pop(request.cookies.get(SESSION_COOKIE, ""), None)
        response = web.json_response({"signed_in": False})
        response.del_cookie(SESSION_COOKIE, path="/")
        return response

    @staticmethod
    async def _json_body(request: web.Request) -> dict[str, Any]:
        try:
            text = await request.text()
        except UnicodeDecodeError:
            raise InvalidField("body", "must be a JSON object") from None
        # The gRPC fields' parser: finite numbers and bounded nesting, refused as a field.
        body = v.parse_json("body", text)
        if not isinstance(body, dict):
            raise InvalidField("body", "must be a JSON object")
        return body

    # --- the API -----------------------------------------------------------------------

    async def _pending(self, request: web.Request) -> web.StreamResponse:
        grant = self._grant(request)
        query = request.query
        namespace = self._namespace(grant, query.get("namespace", ""))
        self._gate()
        message = svc.ListPendingInterruptsRequest(namespace=namespace)
        for name in ("chain_name", "reason", "agent_path_prefix", "page_token"):
            if name in query:
                setattr(message, name, query[name])
        if "page_size" in query:
            try:
                message.page_size = int(query["page_size"])
            except (ValueError, OverflowError):
                raise InvalidField("page_size", "must be an integer") from None
        reply = await self._servicer.ListPendingInterrupts(message, None)
        return web.json_response(
            {
                "pending_interrupts": [_to_json(p) for p in reply.pending_interrupts],
                "next_page_token": reply.next_page_token,
            }
        )

    async def _namespaces(self, request: web.Request) -> web.StreamResponse:
        """One page of the namespaces that hold a run, a pause or a LangGraph thread, in name
        order (ListNamespaces, contract N2, narrowed to the caller's grant), each with its
        pending count, so a namespace whose runs are running or ended can be picked too."""
        grant = self._grant(request)
        query = request.query
        page_size = v.int_text("page_size", query.get("page_size"), 200, 1, 1000)
        self._gate()
        if self._executions is None:
            raise StoreUnavailable("this server does not list namespaces")
        message = cp_svc.ListNamespacesRequest(
            page_size=page_size, page_token=query.get("page_token", "")
        )
        granted = CALL_GRANT.set(grant)
        try:
            reply = await self._executions.list_namespaces(message)
        finally:
            CALL_GRANT.reset(granted)
        counts = await self.deps.store.count_pending_by_namespace()
        listed = [{"name": name, "pending": counts.get(name, 0)} for name in reply.namespaces]
        return web.json_response({"namespaces": listed, "next_page_token": reply.next_page_token})

    async def _decisions(self, request: web.Request) -> web.StreamResponse:
        """The newest decisions: ListDecisions lists oldest first, so its pages are read to
        the end (at most MAX_DECISIONS_SCANNED rows) keeping the last ``limit``."""
        grant = self._grant(request)
        namespace = self._namespace(grant, request.query.get("namespace", ""))
        limit = v.int_text("limit", request.query.get("limit"), 50, 1, MAX_RECENT_DECISIONS)
        self._gate()
        newest: collections.deque[dict[str, Any]] = collections.deque(maxlen=limit)
        token, scanned = "", 0
        while True:
            message = svc.ListDecisionsRequest(namespace=namespace, page_size=1000)
            message.page_token = token
            reply = await self._servicer.ListDecisions(message, None)
            newest.extend(_to_json(p) for p in reply.decided)
            scanned += len(reply.decided)
            token = reply.next_page_token
            if not token or scanned >= MAX_DECISIONS_SCANNED:
                break
        return web.json_response({"decided": list(reversed(newest)), "complete": not token})

    def _page_of(self, request: web.Request) -> dict[str, Any]:
        """A listing's namespace (one the caller may read), page size and page token, as the
        list requests name them."""
        query = request.query
        namespace = self._namespace(self._grant(request), query.get("namespace", ""))
        self._gate()
        return {
            "namespace": namespace,
            "page_size": v.int_text("page_size", query.get("page_size"), 200, 1, 1000),
            "page_token": query.get("page_token", ""),
        }

    async def _checkpoints(self, request: web.Request) -> web.StreamResponse:
        page = self._page_of(request)
        message = cp_svc.ListCheckpointsRequest(
            execution_id=request.query.get("execution_id", ""), **page
        )
        reply = await self._checkpoint_servicer.ListCheckpoints(message, None)
        checkpoints = [_to_json(c) for c in reply.checkpoints]
        return web.json_response(
            {"checkpoints": checkpoints, "next_page_token": reply.next_page_token}
        )

    def _graphs(self) -> GraphServicer:
        if self._graph_servicer is None:
            raise StoreUnavailable("this server does not serve graphs")
        return self._graph_servicer

    async def _graph_checkpoints(self, request: web.Request) -> web.StreamResponse:
        """A LangGraph thread's checkpoints, newest first, as a person reads them (step,
        source, the nodes whose tasks wrote, the time of its id, its parent, its pauses)."""
        page = self._page_of(request)
        message = graph_svc.ListGraphCheckpointsRequest(
            thread_id=request.query.get("thread_id", ""), **page
        )
        reply = await self._graphs().ListGraphCheckpoints(message, None)
        checkpoints = [
            _summary_json(summarize(t), _interrupt_writes(t)) for t in reply.checkpoint_tuples
        ]
        return web.json_response(
            {"checkpoints": checkpoints, "next_page_token": reply.next_page_token}
        )

    async def _graph_tuple(
        self, namespace: str, thread_id: str, checkpoint_ns: str, checkpoint_id: str
    ) -> graph_svc.GraphCheckpointTuple | None:
        message = graph_svc.GetGraphCheckpointRequest(
            namespace=namespace,
            thread_id=thread_id,
            checkpoint_ns=checkpoint_ns,
            checkpoint_id=checkpoint_id,
        )
        reply = await self._graphs().GetGraphCheckpoint(message, None)
        return reply.checkpoint_tuple if reply.HasField("checkpoint_tuple") else None

    async def _graph_state(self, request: web.Request) -> web.StreamResponse:
        """One checkpoint of a thread with its state decoded (never executed), what changed
        from its parent, and its pending writes."""
        query = request.query
        namespace = self._namespace(self._grant(request), query.get("namespace", ""))
        thread_id = query.get("thread_id", "")
        checkpoint_ns = query.get("checkpoint_ns", "")
        checkpoint_id = query.get("checkpoint_id", "")
        if not checkpoint_id:
            raise InvalidField("checkpoint_id", "is required")
        self._gate()
        found = await self._graph_tuple(namespace, thread_id, checkpoint_ns, checkpoint_id)
        if found is None:
            raise CheckpointNotFound(thread_id, checkpoint_id)
        parent_id = found.checkpoint.parent_checkpoint_id
        parent = None
        if parent_id:
            parent = await self._graph_tuple(namespace, thread_id, checkpoint_ns, parent_id)
        shown = state_view(found, parent)
        return web.json_response(
            {
                "checkpoint": _summary_json(summarize(found), _interrupt_writes(found)),
                "parent": (
                    None
                    if parent is None
                    else _summary_json(summarize(parent), _interrupt_writes(parent))
                ),
                "parent_missing": bool(parent_id) and parent is None,
                "values": shown.values,
                "changes": shown.changes,
                "pending_writes": shown.pending_writes,
                "cut": shown.cut,
            }
        )

    async def _graph_pauses(self, request: web.Request) -> web.StreamResponse:
        """A thread's pauses, each with its request and its decision: the ones waiting (or
        decided, not yet resumed) and the ones decided (the newest MAX_THREAD_DECISIONS;
        ``complete`` is false when older ones were left), read by the thread's keys."""
        query = request.query
        namespace = self._namespace(self._grant(request), query.get("namespace", ""))
        thread_id = v.identifier("thread_id", query.get("thread_id", ""), v.EXECUTION_ID_MAX)
        self._gate()
        if self.deps.executions is None:
            raise StoreUnavailable("this server does not read runs")
        pending, decided = await self.deps.executions.thread_pauses(
            namespace, thread_id, limit=MAX_THREAD_DECISIONS
        )
        found: dict[str, dict[str, Any]] = {}
        for row in [*pending, *reversed(decided)]:  # a decision is the newer word
            found[row.interrupt_id] = _to_json(pending_to_proto(row))
        pauses = sorted(found.values(), key=_pause_order)
        return web.json_response({"pauses": pauses, "complete": not decided.more})

    async def _runs(self, request: web.Request) -> web.StreamResponse:
        """The namespace's runs, fastaiagent runs and LangGraph threads, newest activity first
        (ListExecutions), filtered by framework, status and chain (a thread's graph) name."""
        page = self._page_of(request)
        query = request.query
        framework = _enum_name("framework", query.get("framework", ""), pb.Framework.DESCRIPTOR)
        status = _enum_name("status", query.get("status", ""), pb.ExecutionStatus.DESCRIPTOR)
        message = cp_svc.ListExecutionsRequest(
            framework=pb.Framework.Value(framework),
            status=pb.ExecutionStatus.Value(status),
            **page,
        )
        if query.get("chain_name"):
            message.chain_name = query["chain_name"]
        if self._executions is None:
            raise StoreUnavailable("this server does not list runs")
        reply = await self._executions.list_executions(message)
        runs = [_to_json(e) for e in reply.executions]
        return web.json_response({"runs": runs, "next_page_token": reply.next_page_token})

    async def _decide(self, request: web.Request) -> web.StreamResponse:
        self._check_same_origin(request)
        grant = self._grant(request)
        if grant is not None and grant.role is not Role.READ_WRITE:
            raise ReadOnlyToken("SubmitDecision", grant.name)
        body = await self._json_body(request)
        namespace = self._namespace(grant, body.get("namespace", ""))
        execution_id = body.get("execution_id")
        if not isinstance(execution_id, str):
            raise InvalidField("execution_id", "must be a string")
        reason = body.get("reason")
        if reason is not None and not isinstance(reason, str):
            raise InvalidField("reason", "must be a string")
        interrupt_id = body.get("interrupt_id", "")
        if not isinstance(interrupt_id, str):
            raise InvalidField("interrupt_id", "must be a string")
        raw_response = body.get("response")
        response = None if raw_response is None else _decision_response(raw_response)
        approved = body.get("approved")
        if approved is None and response is not None and response.actions:
            # The clients' rule: the verdict follows the answers.
            rejected = pb.ACTION_DECISION_TYPE_REJECT
            approved = all(action.type != rejected for action in response.actions)
        if not isinstance(approved, bool):
            raise InvalidField(
                "approved", "must be true or false (it may be left out when response has actions)"
            )
        self._gate()
        message = svc.SubmitDecisionRequest(
            namespace=namespace,
            execution_id=execution_id,
            approved=approved,
            decided_by=ANONYMOUS_DECIDER if grant is None else grant.name,
            interrupt_id=interrupt_id,
            response=response,
        )
        if reason:
            message.reason = reason
        try:
            reply = await self._servicer.SubmitDecision(message, None)
        except InvalidField as exc:
            raise _as_body_field(exc) from None
        return web.json_response({"pending": _to_json(reply.pending)})

    async def _events(self, request: web.Request) -> web.StreamResponse:
        grant = self._grant(request)
        namespace = self._namespace(grant, request.query.get("namespace", ""))
        raw_cursor = request.query.get("after_cursor") or request.headers.get("Last-Event-ID")
        after, after_time = _event_id(raw_cursor or "0")
        self._gate()
        hub = self.deps.watch_hub
        if hub is None:
            raise StoreUnavailable("this server does not serve watches")
        peer = f"console:{request.remote or ''}"
        # An HTTP write can be cancelled cleanly: a failure ends a blocked one at once.
        watch = hub.watch(
            namespace,
            after,
            _EVERYTHING,
            peer=peer,
            interrupt_writes=True,
            after_cursor_event_time=after_time,
        )
        response: web.StreamResponse | None = None
        task = asyncio.current_task()
        assert task is not None
        self._streams.add(task)
        try:
            async with watch:
                response = web.StreamResponse(
                    headers={"Content-Type": "text/event-stream", **_SECURITY_HEADERS}
                )
                await response.prepare(request)
                await response.write(b"retry: 1000\n\n")
                items = aiter(watch)
                while True:
                    try:
                        item = await asyncio.wait_for(anext(items), SSE_KEEPALIVE_SECONDS)
                    except TimeoutError:
                        await watch.guard(response.write(b": keepalive\n\n"))
                        continue
                    await watch.guard(response.write(_sse(item)))
        except ConnectionResetError:
            # The browser went away (a closed tab, a reconnect): nothing to tell it.
            if response is None:
                raise
        except Exception as exc:  # the stream ends with the mapped error
            if response is None:
                raise
            error = _error_response(exc)
            assert isinstance(error.body, bytes)
            with contextlib.suppress(ConnectionResetError):
                await response.write(b"event: failure\ndata: " + error.body + b"\n\n")
        finally:
            self._streams.discard(task)
        return response


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _pause_order(pause: dict[str, Any]) -> tuple[str, str]:
    return str(pause.get("created_at", "")), str(pause.get("interrupt_id", ""))


def _interrupt_writes(found: graph_svc.GraphCheckpointTuple) -> int:
    """How many tasks paused at a checkpoint (each writes its interrupts once)."""
    return sum(1 for write in found.pending_writes if write.channel == "__interrupt__")


def _enum_name(field: str, text: str, enum: EnumDescriptor) -> str:
    """The name of the enum value the query names in lower case (``langgraph`` for
    FRAMEWORK_LANGGRAPH); the unspecified one (any) for an empty one; INVALID_FIELD naming
    the values for another."""
    unspecified, *values = (value.name for value in enum.values)
    prefix = unspecified.removesuffix("UNSPECIFIED")
    names = [name.removeprefix(prefix).lower() for name in values]
    if not text:
        return unspecified
    if text not in names:
        raise InvalidField(field, f"must be one of {', '.join(names)}")
    return prefix + text.upper()


def _summary_json(seen: CheckpointSummary, interrupts: int) -> dict[str, Any]:
    parents = seen.metadata.get("parents")
    return {
        "checkpoint_id": seen.checkpoint_id,
        "checkpoint_ns": seen.checkpoint_ns,
        "parent_checkpoint_id": seen.parent_checkpoint_id,
        # A subgraph's checkpoint names the checkpoints of the graphs that called it, by ns.
        "parents": parents if isinstance(parents, dict) else {},
        "interrupts": interrupts,
        "step": seen.step,
        "source": seen.source,
        "wrote": seen.wrote,
        "tasks": seen.tasks,
        "created_at": None if seen.created_at is None else seen.created_at.isoformat(),
    }


def _event_id(text: str) -> tuple[int, datetime | None]:
    """A stream position as the page sends it back: ``CURSOR`` or ``CURSOR.MICROS`` (the
    time of the event at the cursor, which tells the store's event there from one of a
    history it went back from, I5)."""
    cursor, _, micros = text.partition(".")
    try:
        after = int(cursor)
        at = None if not micros else _EPOCH + timedelta(microseconds=int(micros))
    except (ValueError, OverflowError):
        raise InvalidField("after_cursor", "must be an integer, or CURSOR.MICROS") from None
    if after < 0:
        raise InvalidField("after_cursor", "must not be negative")
    return after, at


def _sse(item: WatchItem) -> bytes:
    """One server-sent event; every message after the snapshot carries its position as its
    id: its cursor, and the time of the event there when known."""
    message = _watch_response(item)
    at: datetime | None
    if isinstance(item, SnapshotRow):
        name, data, cursor, at = "snapshot", _to_json(message.snapshot), None, None
    elif isinstance(item, SnapshotDone):
        name, data, cursor, at = "ready", {"cursor": str(item.cursor)}, item.cursor, item.event_time
    elif isinstance(item, EventItem):
        event = item.event
        name, data, cursor, at = "interrupt", _to_json(message.event), event.cursor, event.event_at
    else:
        assert isinstance(item, Progress)
        name, data = "progress", {"cursor": str(item.cursor)}
        cursor, at = item.cursor, item.event_time
    text = f"event: {name}\n"
    if cursor is not None:
        stamp = "" if at is None else f".{(at - _EPOCH) // timedelta(microseconds=1)}"
        text += f"id: {cursor}{stamp}\n"
    return (text + f"data: {json.dumps(data, separators=(',', ':'))}\n\n").encode()
