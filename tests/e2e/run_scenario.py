"""Run ONE phase of one end-to-end scenario in this process, print a JSON line, exit.

    python tests/e2e/run_scenario.py <scenario> <phase> --target T --namespace NS \
        [--execution-id X] [--state-file F]

``--target`` is a checkpointd gRPC target (``unix:///path/checkpointd.sock``,
``127.0.0.1:PORT``) or ``reference:<sqlite file>`` for fastaiagent's own SQLiteCheckpointer.
``--state-file`` is a JSON file the phases of one scenario share (the execution id, a fork's
new id); its directory is the scenario's work directory, where side effects are logged.

The last line on stdout is one JSON object:
``{"scenario", "phase", "target", "namespace", "execution_id", "pid", "ok", "result",
"error", "events", "store", "warnings"}``. ``events`` is every side effect logged so far by
any phase, each tagged with its phase and pid. ``store`` is what the store holds after the
phase: each execution's rows, oldest write first, and its pending interrupts.

Exit status: 0 the phase returned; 1 the phase raised (the JSON line says what); 2 usage
error; 3 the phase ran but reading the store back afterwards failed. A scenario that kills
its own process exits with ``scenarios.HARD_CRASH_EXIT_CODE`` and prints nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import uuid
import warnings
from pathlib import Path
from typing import Any

# Run as a script, with tests/e2e first on sys.path: mypy knows it as tests.e2e.scenarios.
from scenarios import (  # type: ignore[import-not-found]
    SCENARIOS,
    PhaseFn,
    PhaseRun,
    Workspace,
    make_checkpointer,
    store_report,
)

EXIT_OK = 0
EXIT_PHASE_RAISED = 1
EXIT_USAGE = 2
EXIT_REPORT_FAILED = 3


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenario", choices=sorted(SCENARIOS))
    parser.add_argument("phase")
    parser.add_argument("--target", required=True)
    parser.add_argument("--namespace", default="default")
    parser.add_argument("--execution-id", default=None)
    parser.add_argument("--state-file", type=Path, default=Path("scenario-state.json"))
    args = parser.parse_args(argv)
    phases = SCENARIOS[args.scenario].phases
    if args.phase not in phases:
        parser.error(f"scenario {args.scenario!r} has phases {sorted(phases)}, not {args.phase!r}")
    return args


def describe_error(exc: BaseException) -> dict[str, Any]:
    return {
        "type": type(exc).__name__,
        "mro": [cls.__name__ for cls in type(exc).__mro__],
        "message": str(exc),
    }


async def call_phase(fn: PhaseFn, run: PhaseRun) -> tuple[Any, BaseException | None]:
    """Run the phase in this process's one event loop: its result, or what it raised."""
    try:
        return await fn(run), None
    except Exception as exc:
        return None, exc


def run_phase(args: argparse.Namespace) -> tuple[int, dict[str, Any]]:
    state_file: Path = args.state_file.resolve()
    state_file.parent.mkdir(parents=True, exist_ok=True)
    memo: dict[str, Any] = (
        json.loads(state_file.read_text(encoding="utf-8")) if state_file.exists() else {}
    )
    execution_id = args.execution_id or memo.get("execution_id") or f"e2e-{uuid.uuid4()}"
    memo["execution_id"] = execution_id
    out: dict[str, Any] = {
        "scenario": args.scenario,
        "phase": args.phase,
        "target": args.target,
        "namespace": args.namespace,
        "execution_id": execution_id,
        "pid": os.getpid(),
        "ok": True,
        "result": None,
        "error": None,
    }
    code = EXIT_OK
    checkpointer = make_checkpointer(args.target, args.namespace)
    try:
        run = PhaseRun(
            checkpointer=checkpointer,
            ws=Workspace(dir=state_file.parent, phase=args.phase),
            execution_id=execution_id,
            memo=memo,
        )
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            phase_fn = SCENARIOS[args.scenario].phases[args.phase]
            out["result"], exc = asyncio.run(call_phase(phase_fn, run))
            if exc is not None:
                out["ok"] = False
                out["error"] = describe_error(exc)
                code = EXIT_PHASE_RAISED
            state_file.write_text(json.dumps(memo, indent=2), encoding="utf-8")
            out["events"] = run.ws.events()
            try:
                out["store"] = store_report(run)
            except Exception as report_exc:
                out["store"] = None
                out["report_error"] = describe_error(report_exc)
                code = EXIT_REPORT_FAILED
        out["warnings"] = [f"{w.category.__name__}: {w.message}" for w in caught]
    finally:
        close = getattr(checkpointer, "close", None)
        if callable(close):
            close()
    return code, out


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    code, out = run_phase(args)
    sys.stdout.write(json.dumps(out, sort_keys=True, default=str) + "\n")
    sys.stdout.flush()
    return code


if __name__ == "__main__":
    sys.exit(main())
