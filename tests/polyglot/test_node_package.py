"""The Node.js client as npm ships it: ``npm pack`` of clients/node installed into a fresh
project outside the repository, then used from CommonJS, from an ES module and from
TypeScript (``tsc --strict`` against the exports map's ``types`` conditions), and running the
LangGraph.js quickstart: a graph paused, decided and resumed once.

The project lies in a temporary folder, where the repository's proto/ cannot be reached:
the calls to a real server (a shared one per backend) prove that the package carries the
protocol it loads. One pack and one install serve the whole module; ``npm install`` takes
the client's dependencies from npm's cache (filled by ``make install``'s ``npm ci``) when it
has them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tarfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.shared_server import SharedSidecar
from tests.support.sidecar import Sidecar

from .conftest import NODE_CLIENT, ROOT, _node_unavailable
from .test_node_readme import run_quickstart

pytestmark = pytest.mark.xdist_group("node-package")

PACKAGE = "checkpointd-client"
NPM_TIMEOUT_S = 180
NODE_TIMEOUT_S = 60
TSC = NODE_CLIENT / "node_modules" / ".bin" / "tsc"
LANGGRAPH_SOURCE = NODE_CLIENT / "src" / "langgraph" / "index.js"
#: What a LangGraph.js project has beside the client: LangGraph.js and the saver's peers.
LANGGRAPH_PEERS = ("@langchain/langgraph", "@langchain/langgraph-checkpoint", "@langchain/core")

#: What the tarball holds besides package.json, README.md and LICENSE: the client's modules, their
#: types and ES module entries, and the protocol.
SHIPPED_SUFFIXES = (".js", ".mjs", ".d.ts", ".d.mts")


@dataclass(frozen=True)
class Consumer:
    """A fresh npm project with the packed client installed, and what ``npm pack`` said."""

    directory: Path
    tarball: Path
    files: list[str]
    size: int

    @property
    def installed(self) -> Path:
        return self.directory / "node_modules" / PACKAGE


def _run(
    args: list[str], cwd: Path, timeout: float, **env: str
) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, **env}
    full_env.pop("CHECKPOINTD_TOKEN", None)
    return subprocess.run(
        args, cwd=cwd, env=full_env, capture_output=True, text=True, timeout=timeout, check=False
    )


def _checked(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, f"{result.args} failed:\n{result.stdout}\n{result.stderr}"
    return result.stdout


@pytest.fixture(scope="module")
def consumer(node: str, tmp_path_factory: pytest.TempPathFactory) -> Consumer:
    """``npm pack`` clients/node, then ``npm init -y`` and ``npm install <tarball>`` in a
    temporary folder."""
    npm = shutil.which("npm")
    if npm is None:
        _node_unavailable("`npm` is not on PATH")
    base = tmp_path_factory.mktemp("node-package")
    packs = base / "packs"
    packs.mkdir()
    packed = json.loads(
        _checked(
            _run(
                [npm, "pack", "--json", "--pack-destination", str(packs)],
                NODE_CLIENT,
                NPM_TIMEOUT_S,
            )
        )
    )[0]
    tarball = packs / packed["filename"]
    project = base / "project"
    project.mkdir()
    _checked(_run([npm, "init", "-y"], project, NPM_TIMEOUT_S))
    install = [npm, "install", "--no-audit", "--no-fund", "--prefer-offline", str(tarball)]
    _checked(_run(install, project, NPM_TIMEOUT_S))
    files = sorted(entry["path"] for entry in packed["files"])
    return Consumer(project, tarball, files, int(packed["size"]))


def test_the_tarball_ships_the_modules_their_types_and_the_protocol_only(
    consumer: Consumer,
) -> None:
    """Every module of src/ (with its types and ES module entries) and every .proto of
    clients/node/proto, package.json, README.md and LICENSE (Apache-2.0, the repository's);
    no tests, no examples."""
    on_disk = [p for folder in ("src", "proto") for p in (NODE_CLIENT / folder).rglob("*")]
    expected = sorted(
        ["LICENSE", "README.md", "package.json"]
        + [
            str(p.relative_to(NODE_CLIENT))
            for p in on_disk
            if p.name.endswith(SHIPPED_SUFFIXES) or p.suffix == ".proto"
        ]
    )
    assert consumer.files == expected
    assert "src/index.d.ts" in consumer.files
    assert "src/index.mjs" in consumer.files
    assert "proto/checkpointd/v1/error_reason.proto" in consumer.files
    with tarfile.open(consumer.tarball) as archive:
        manifest = archive.extractfile("package/package.json")
        assert manifest is not None
        package = json.load(manifest)
    assert "private" not in package
    assert package["name"] == PACKAGE


def test_the_packed_protocol_is_the_repository_proto(consumer: Consumer) -> None:
    """The installed package's proto/checkpointd/v1 is proto/checkpointd/v1, byte for byte
    (tools/gen_proto.py writes the copy; its --check keeps the committed one fresh)."""
    source = ROOT / "proto" / "checkpointd" / "v1"
    shipped = consumer.installed / "proto" / "checkpointd" / "v1"
    names = sorted(p.name for p in source.glob("*.proto"))
    assert names, source
    assert sorted(p.name for p in shipped.iterdir()) == names
    for name in names:
        assert (shipped / name).read_bytes() == (source / name).read_bytes(), name


#: Put a checkpoint and read it back, fail a read with NOT_FOUND, and report what the module
#: sees (``cjs``: what require() returns, ``esm``: what import() does); the same lines as
#: CommonJS and as an ES module.
ROUND_TRIP = """
  const { CheckpointdClient, CheckpointdError, ErrorReason, PROTO_ROOT, json } = api;
  const client = new CheckpointdClient({
    target: process.env.CPD_TARGET, namespace: process.env.CPD_NAMESPACE,
  });
  const put = await client.putCheckpoint({
    execution_id: 'pkg-run', node_id: 'start', status: 'CHECKPOINT_STATUS_COMPLETED',
    state_snapshot_json: json.stringify({ order: 12345678901234567890n }),
  });
  const got = await client.getCheckpoint('pkg-run', put.checkpoint_id);
  let missing = null;
  try {
    await client.getLatestCheckpoint('pkg-no-such-run');
  } catch (err) {
    missing = [err instanceof CheckpointdError, err.codeName, err.reason];
  }
  client.close();
  process.stdout.write(JSON.stringify({
    id: got.checkpoint_id === put.checkpoint_id, sequence: got.sequence,
    order: String(json.parse(got.state_snapshot_json).order), missing,
    reason: ErrorReason.NO_CHECKPOINTS, protoRoot: PROTO_ROOT,
    require: Object.keys(cjs).sort(), import: Object.keys(esm).sort(),
    same: Object.keys(cjs).every((name) => esm[name] === cjs[name]),
  }));
"""

SCRIPTS = {
    "commonjs": (
        "client.cjs",
        "const cjs = require('checkpointd-client');\n"
        "const api = cjs;\n"
        "(async () => {\n"
        "  const esm = await import('checkpointd-client');\n"
        f"{ROUND_TRIP}"
        "})().catch((err) => { console.error(err); process.exit(1); });\n",
    ),
    "esm": (
        "client.mjs",
        "import { createRequire } from 'node:module';\n"
        "import * as esm from 'checkpointd-client';\n"
        "const cjs = createRequire(import.meta.url)('checkpointd-client');\n"
        "const api = esm;\n"
        f"{ROUND_TRIP}",
    ),
}


def _exports(node: str, consumer: Consumer, specifier: str) -> dict[str, Any]:
    """The export names of ``specifier`` as require() and import() see them, and whether the
    two share their values."""
    script = (
        f"const cjs = require('{specifier}');\n"
        f"import('{specifier}').then((esm) => process.stdout.write(JSON.stringify({{\n"
        "  require: Object.keys(cjs).sort(), import: Object.keys(esm).sort(),\n"
        "  same: Object.keys(cjs).every((k) => esm[k] === cjs[k]),\n"
        "})));\n"
    )
    return dict(
        json.loads(_checked(_run([node, "-e", script], consumer.directory, NODE_TIMEOUT_S)))
    )


@pytest.mark.parametrize("kind", sorted(SCRIPTS))
def test_the_installed_package_puts_and_reads_back_a_checkpoint(
    node: str, consumer: Consumer, sidecar: SharedSidecar, kind: str
) -> None:
    """From CommonJS and from an ES module, outside the repository: a put is read back with
    its big integer, a missing run is a CheckpointdError (NOT_FOUND, NO_CHECKPOINTS), the
    protocol is loaded from the installed package, and require() and import() give the same
    exports, by name and by value (one module instance)."""
    name, source = SCRIPTS[kind]
    (consumer.directory / name).write_text(source)
    result = _run(
        [node, name],
        consumer.directory,
        NODE_TIMEOUT_S,
        CPD_TARGET=sidecar.target,
        CPD_NAMESPACE=sidecar.namespace,
    )
    report = json.loads(_checked(result))
    assert report["id"] is True
    assert report["sequence"].isdigit()
    assert report["order"] == "12345678901234567890"
    assert report["missing"] == [True, "NOT_FOUND", "NO_CHECKPOINTS"]
    assert report["reason"] == "NO_CHECKPOINTS"
    assert Path(report["protoRoot"]) == consumer.installed.resolve() / "proto"
    assert not Path(report["protoRoot"]).is_relative_to(ROOT)
    assert "CheckpointdClient" in report["require"]
    assert report["import"] == report["require"]
    assert report["same"] is True


#: A TypeScript program over the client's API. Each @ts-expect-error line must fail to type-check
#: (tsc reports a directive that suppresses nothing), so the types are not `any`.
TS_ESM = """
import {
  CheckpointdClient, CheckpointdError, ErrorReason, json, dateFromTimestamp,
  type Checkpoint, type ErrorReasonName, type WatchMessage,
} from 'checkpointd-client';

export async function main(): Promise<void> {
  const client = new CheckpointdClient({ namespace: 'ts', retry: { maxAttempts: 3 } });
  const put: Checkpoint = await client.putCheckpoint(
    { execution_id: 'run-1', status: 'CHECKPOINT_STATUS_COMPLETED', node_index: 2n },
    { requestId: 'r-1' },
  );
  const sequence: string = put.sequence;
  const when: Date = dateFromTimestamp(put.created_at);
  const page = await client.listCheckpoints('run-1', { pageSize: 10, descending: true });
  const parents: (string | undefined)[] = page.checkpoints.map((c) => c.parent_checkpoint_id);
  const runs = await client.listExecutions({ status: 'paused', activeSince: when });
  const paused: boolean = runs.executions[0]?.status === 'EXECUTION_STATUS_PAUSED';
  const detail = await client.getExecution('run-1');
  const approved: boolean | undefined = detail.pending_interrupt?.decision?.approved;
  const recorded = await client.recordInterrupt({ execution_id: 'run-2' }, { reason: 'review' });
  try {
    await client.claimInterrupt('run-2', { claimToken: 'token-1' });
  } catch (err) {
    if (err instanceof CheckpointdError && err.reason === ErrorReason.NO_PENDING_INTERRUPT) {
      const field: string | undefined = err.metadata['field'];
      console.log(err.code, err.codeName, field);
    }
  }
  const decided = await client.submitDecision('run-2', { approved: true, metadata: { by: 'ts' } });
  const stop = new AbortController();
  for await (const message of client.watch({ signal: stop.signal, chainName: 'refunds' })) {
    const seen: WatchMessage = message;
    if (seen.item === 'event') console.log(seen.event.cursor, seen.event.pending.execution_id);
    stop.abort();
  }
  client.watchInterrupts({ afterCursor: '0' }).cancel();
  const retention = await client.applyGraphRetention({ keepNewest: 3, dryRun: true });
  const cached = await client.getIdempotencyResult('run-1', 'charge');
  const order = json.parse<{ order: bigint }>(cached.result_json).order;
  const reason: ErrorReasonName = ErrorReason.LEASE_HELD;
  console.log(sequence, parents, paused, approved, recorded.pending_created, decided.decision,
    retention.threads_deleted, order, reason);
  // @ts-expect-error: an int64 of a reply is a decimal string
  const wrong: number = put.sequence;
  // @ts-expect-error: not a reason of the protocol
  console.log(ErrorReason.NO_SUCH_REASON, wrong);
  // @ts-expect-error: a checkpoint needs its status
  await client.putCheckpoint({ execution_id: 'run-3' });
  // @ts-expect-error: submitDecision needs approved
  await client.submitDecision('run-2', { decidedBy: 'ts' });
  type DecideOptions = Parameters<typeof client.submitDecision>[1];
  const edit: DecideOptions = { response: { actions: [{ type: 'edit', args: { amount: 5 } }] } };
  // @ts-expect-error: a resume value carries no verdict, so approved is needed with it
  const bare: DecideOptions = { response: { resume: 1 } };
  // @ts-expect-error: not an action type of the protocol
  const odd: DecideOptions = { response: { actions: [{ type: 'ignore' }] } };
  console.log(edit, bare, odd);
  client.close();
}
"""

#: The CommonJS view (require's `types` condition), and every runtime name declared.
TS_CJS = """
import checkpointd = require('checkpointd-client');
import { CheckpointdClient, {exports} } from 'checkpointd-client';

const client = new checkpointd.CheckpointdClient({ timeoutMs: 5000 });
export const methods: (keyof CheckpointdClient)[] = {methods};
export const values = [CheckpointdClient, {exports}];
// @ts-expect-error: listExecutions takes a status name, not any text
void client.listExecutions({ status: 'sleeping' });
"""

#: The ES module entry has named exports only, as src/index.mjs does.
TS_NO_DEFAULT = "import checkpointd from 'checkpointd-client';\nconsole.log(checkpointd);\n"


def _tsc(consumer: Consumer, *files: str) -> list[str]:
    """The errors of ``tsc --strict --noEmit`` over ``files``: node16 resolution, and
    declaration files not checked (skipLibCheck: @types/node is most of the time otherwise)."""
    config = {
        "compilerOptions": {
            "strict": True,
            "noEmit": True,
            "module": "node16",
            "moduleResolution": "node16",
            "target": "es2022",
            "lib": ["es2022"],
            "types": ["node"],
            "skipLibCheck": True,
        },
        "files": list(files),
    }
    (consumer.directory / "tsconfig.json").write_text(json.dumps(config))
    result = _run([str(TSC), "-p", "."], consumer.directory, NPM_TIMEOUT_S)
    errors = [line for line in result.stdout.splitlines() if ": error TS" in line]
    assert (result.returncode == 0) == (not errors), result.stdout + result.stderr
    return errors


def test_typescript_checks_a_program_against_the_packed_types(
    node: str, consumer: Consumer
) -> None:
    """``tsc --strict`` (node16 resolution, so the exports map's ``types`` conditions) accepts
    a program over the whole API from an ES module and from CommonJS, with every runtime
    export and method of the client declared; each @ts-expect-error line is an error indeed;
    a default import of the ES module entry, which has none, is the one error.

    The package's declaration files are checked too, copied as .ts sources: skipLibCheck
    would pass over a name they do not define, which TypeScript then takes for ``any``."""
    if not TSC.exists():
        _node_unavailable(f"typescript is missing: run `npm ci` in {NODE_CLIENT}")
    script = (
        "const api = require('checkpointd-client');\n"
        "const methods = Object.getOwnPropertyNames(api.CheckpointdClient.prototype)"
        ".filter((m) => m !== 'constructor');\n"
        "process.stdout.write(JSON.stringify({ exports: Object.keys(api), methods }));\n"
    )
    runtime = json.loads(_checked(_run([node, "-e", script], consumer.directory, NODE_TIMEOUT_S)))
    others = [name for name in runtime["exports"] if name != "CheckpointdClient"]
    assert len(runtime["methods"]) > 20, runtime
    (consumer.directory / "api.mts").write_text(TS_ESM)
    (consumer.directory / "api.cts").write_text(
        TS_CJS.replace("{exports}", ", ".join(others)).replace(
            "{methods}", json.dumps(runtime["methods"])
        )
    )
    (consumer.directory / "default.mts").write_text(TS_NO_DEFAULT)
    declarations = consumer.directory / "declarations"
    declarations.mkdir(exist_ok=True)
    sources = []
    for path in sorted((consumer.installed / "src").glob("*.d.ts")):
        source = declarations / path.name.replace(".d.ts", ".ts")
        source.write_text(path.read_text())
        sources.append(str(source.relative_to(consumer.directory)))
    assert "declarations/index.ts" in sources, sources
    errors = _tsc(consumer, "api.mts", "api.cts", "default.mts", *sources)
    assert len(errors) == 1, errors
    assert errors[0].startswith("default.mts(1,8): error TS1192"), errors


@pytest.fixture(scope="module")
def langgraph_consumer(consumer: Consumer) -> Consumer:
    """The consumer project with the saver's peers installed after the client (which
    installed without them), at the versions of clients/node's lock file."""
    npm = shutil.which("npm")
    assert npm is not None
    lock = json.loads((NODE_CLIENT / "package-lock.json").read_text())["packages"]
    peers = [f"{name}@{lock[f'node_modules/{name}']['version']}" for name in LANGGRAPH_PEERS]
    install = [npm, "install", "--no-audit", "--no-fund", "--prefer-offline", *peers]
    _checked(_run(install, consumer.directory, NPM_TIMEOUT_S))
    return consumer


@pytest.mark.skipif(
    not LANGGRAPH_SOURCE.exists(), reason="src/langgraph/index.js (CheckpointdSaver) is not here"
)
def test_the_langgraph_subpath_resolves_from_commonjs_esm_and_typescript(
    node: str, langgraph_consumer: Consumer
) -> None:
    """``checkpointd-client/langgraph``, with its peer installed: require() and import() give
    the same exports (the ES module wrapper names every one), and TypeScript finds its types
    for both (and checks them, copied as a .ts source)."""
    consumer = langgraph_consumer
    exports = _exports(node, consumer, f"{PACKAGE}/langgraph")
    assert "CheckpointdSaver" in exports["require"]
    assert exports["import"] == exports["require"]
    assert exports["same"] is True
    # A saver is a BaseCheckpointSaver of the peer as each module system resolves it: an ES
    # module gets the peer's ESM declarations, a CommonJS one its CJS ones, and a class
    # declared against one is not assignable to the other (the dual-package hazard).
    (consumer.directory / "langgraph.mts").write_text(
        "import { BaseCheckpointSaver } from '@langchain/langgraph-checkpoint';\n"
        "import { CheckpointdSaver } from 'checkpointd-client/langgraph';\n"
        "export const saver: typeof CheckpointdSaver = CheckpointdSaver;\n"
        "export const base: BaseCheckpointSaver = new CheckpointdSaver({ namespace: 'n' });\n"
        "import { GraphResumeWorker } from 'checkpointd-client/langgraph';\n"
        "export const worker: GraphResumeWorker =\n"
        "  new GraphResumeWorker({ namespace: 'n', resolver: () => undefined }).start();\n"
    )
    (consumer.directory / "langgraph.cts").write_text(
        "import checkpoint = require('@langchain/langgraph-checkpoint');\n"
        "import langgraph = require('checkpointd-client/langgraph');\n"
        "export const saver: typeof langgraph.CheckpointdSaver = langgraph.CheckpointdSaver;\n"
        "export const base: checkpoint.BaseCheckpointSaver =\n"
        "  new langgraph.CheckpointdSaver({ namespace: 'n' });\n"
    )
    declarations = consumer.directory / "declarations" / "langgraph"
    declarations.mkdir(parents=True, exist_ok=True)
    source = declarations / "index.ts"
    source.write_text((consumer.installed / "src" / "langgraph" / "index.d.ts").read_text())
    assert _tsc(consumer, "langgraph.mts", "langgraph.cts", "declarations/langgraph/index.ts") == []


@pytest.mark.skipif(
    not LANGGRAPH_SOURCE.exists(), reason="src/langgraph/index.js (CheckpointdSaver) is not here"
)
@pytest.mark.parametrize("backend", ["sqlite"])
def test_g15_the_packed_package_runs_the_langgraph_quickstart(
    node: str, langgraph_consumer: Consumer, sidecar_factory: Callable[..., Sidecar]
) -> None:
    """The README's LangGraph.js quickstart, copied into the fresh project beside the packed
    client: a graph pauses in the inbox and the worker resumes it once decided, with nothing
    from the repository (its own server: the quickstart writes the default namespace)."""
    script = langgraph_consumer.directory / "langgraph_quickstart.js"
    shutil.copyfile(NODE_CLIENT / "examples" / "langgraph_quickstart.js", script)
    run_quickstart(node, script, langgraph_consumer.directory, sidecar_factory().target)
