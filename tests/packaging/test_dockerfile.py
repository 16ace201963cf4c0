"""The Dockerfile builds what it claims, checked without a Docker engine.

The builder stage's COPY and RUN steps are replayed on this machine as written: the build
context (filtered by .dockerignore) is copied where COPY puts it, every absolute path of an
ARG or ENV is moved under a temporary root, and each RUN runs under ``/bin/sh -c`` with that
environment. The virtualenv it builds is then served from with the image's own CMD (its
addresses moved to loopback and the temporary root) and answers a real RPC through the
installed client. The final stage is checked for what a sidecar image must be: non-root, no
compilers, the documented port, volumes and command.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

import pytest

from tests.support.dockerfile import Stage, dockerignore_filter, key_values, parse_dockerfile

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
PORT = "7470"
SOCKET = "/var/run/checkpointd/checkpointd.sock"
DATA_DIR = "/var/lib/checkpointd"
# A fresh machine downloads every wheel of requirements/serve.txt here (pip: the other
# environments are installed by uv, whose cache pip does not read).
BUILD_TIMEOUT_S = 300

#: Run by the virtualenv's python: a put and a get through the installed client on the socket,
#: then what the kubelet's ``grpc:`` probe asks on TCP (grpc.health.v1, service "").
CLIENT_SCRIPT = """
import sys, time
import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from checkpointd_client import Checkpoint, CheckpointdClient

with CheckpointdClient(sys.argv[1], namespace="image") as c:
    c.put_checkpoint(Checkpoint(execution_id="run-1", node_id="start", state_snapshot={"n": 2**64}))
    print(c.get_latest_checkpoint("run-1").state_snapshot["n"])
with grpc.insecure_channel(sys.argv[2]) as channel:
    health = health_pb2_grpc.HealthStub(channel)
    deadline = time.monotonic() + 20
    while True:
        status = health.Check(health_pb2.HealthCheckRequest(service=""), timeout=5).status
        if status == health_pb2.HealthCheckResponse.SERVING or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    print(health_pb2.HealthCheckResponse.ServingStatus.Name(status))
"""


@pytest.fixture(scope="module")
def stages() -> list[Stage]:
    """The Dockerfile, parsed."""
    return parse_dockerfile(DOCKERFILE.read_text())


def test_final_stage_is_slim_non_root_and_has_no_build_tools(stages: list[Stage]):
    """Two stages on python:3.11-slim; the final one runs as a numeric non-root user, installs
    no compilers, copies only the virtualenv, exposes 7470 and declares both volumes."""
    assert len(stages) == 2
    builder, final = stages
    assert builder.base == final.base == "python:3.11-slim"
    assert builder.name == "builder"

    users = final.all("USER")
    assert len(users) == 1
    uid, _, gid = users[0].partition(":")
    assert uid.isdigit()
    assert int(uid) != 0
    assert gid.isdigit()
    assert int(gid) != 0
    assert final.instructions[-1].keyword == "CMD"
    assert [i.keyword for i in final.instructions].index("USER") < len(final.instructions) - 1

    final_runs = " ".join(final.all("RUN"))
    for tool in ("apt-get", "apk", "build-essential", "gcc", "g++", "make", "pip install"):
        assert tool not in final_runs, f"the final stage runs {tool}"
    assert final.all("COPY") == ["--from=builder /opt/checkpointd /opt/checkpointd"]
    assert "ADD" not in {i.keyword for i in final.instructions}

    assert final.all("EXPOSE") == [PORT]
    assert json.loads(final.all("VOLUME")[0]) == [DATA_DIR, "/var/run/checkpointd"]
    env = key_values(" ".join(final.all("ENV")))
    assert env["CHECKPOINTD_DATA_DIR"] == DATA_DIR
    assert env["PATH"].startswith("/opt/checkpointd/bin:")
    cmd = json.loads(final.all("CMD")[0])
    assert cmd == [
        "checkpointd",
        "serve",
        "--listen",
        f"0.0.0.0:{PORT}",
        "--listen",
        f"unix://{SOCKET}",
    ]


def test_final_stage_runs_the_virtualenvs_checkpointd_as_the_user_it_creates(
    stages: list[Stage],
):
    """Read together, the final stage's instructions give what the image runs: the user
    switched to is the one its RUN creates (not root) and owns both volumes; the only thing
    copied from the builder is the builder's virtualenv, to the same path, which is first on
    PATH; there is no ENTRYPOINT, and the CMD is in exec form (so SIGTERM reaches the server,
    not a shell) starting this project's ``checkpointd`` script from that virtualenv."""
    builder, final = stages
    setup = shlex.split(" ".join(final.all("RUN")))

    def option(command: str, flag: str) -> str:
        words = setup[setup.index(command) :]
        return words[words.index(flag) + 1]

    uid, gid = option("useradd", "--uid"), option("groupadd", "--gid")
    assert option("useradd", "--gid") == gid
    assert final.all("USER") == [f"{uid}:{gid}"]
    assert int(uid) != 0
    assert int(gid) != 0
    keywords = [i.keyword for i in final.instructions]
    assert max(i for i, k in enumerate(keywords) if k == "RUN") < keywords.index("USER")
    volumes = json.loads(final.all("VOLUME")[0])
    chown = setup[setup.index("chown") + 1 : setup.index("chown") + 1 + 1 + len(volumes)]
    assert chown == [f"{uid}:{gid}", *volumes]

    venv = key_values(" ".join(builder.all("ENV")))["VIRTUAL_ENV"]
    assert "--without-pip" in shlex.split(" ".join(builder.all("RUN")))
    assert final.all("COPY") == [f"--from={builder.name} {venv} {venv}"]
    assert {"ADD", "ENTRYPOINT"}.isdisjoint(keywords)
    assert "ENTRYPOINT" not in {i.keyword for i in builder.instructions}
    env = key_values(" ".join(final.all("ENV")))
    assert env["VIRTUAL_ENV"] == venv
    assert env["PATH"].split(":")[0] == f"{venv}/bin"

    [cmd] = final.all("CMD")
    argv = json.loads(cmd)  # exec form; shell form is not JSON
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert argv[0] in scripts
    assert argv[:2] == ["checkpointd", "serve"]


def test_dockerignore_keeps_the_context_to_the_sources():
    """The build context leaves out the virtualenv, VCS data and caches."""
    ignore = dockerignore_filter(ROOT)
    top = set(ignore(str(ROOT), [p.name for p in ROOT.iterdir()]))
    assert {".git", ".venv", "tests"} <= top
    assert not {"pyclient", "server", "pyproject.toml", "README.md"} & top
    assert ignore(str(ROOT / "pyclient"), ["checkpointd_client.egg-info", "__pycache__"]) == {
        "checkpointd_client.egg-info",
        "__pycache__",
    }


def _replay_builder(builder: Stage, root: Path) -> dict[str, str]:
    """Run the builder's COPY and RUN steps under ``root``; return the stage's environment."""
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "PYTHON", "VIRTUAL_ENV"))
    }
    # `python` is this interpreter (3.11, like the image's); the image's /usr/local/bin comes
    # first on its PATH, this bin directory first here.
    shim = root / "shim-bin"
    shim.mkdir()
    (shim / "python").symlink_to(sys.executable)
    env["PATH"] = f"{shim}:{env.get('PATH', '/usr/bin:/bin')}"

    def moved(value: str) -> str:
        return str(root / value.lstrip("/")) if value.startswith("/") else value

    workdir = root
    context_filter = dockerignore_filter(ROOT)
    ran = 0
    for instruction in builder.instructions:
        if instruction.keyword in ("ARG", "ENV"):
            for key, value in key_values(instruction.args).items():
                env[key] = moved(value)
        elif instruction.keyword == "WORKDIR":
            workdir = Path(moved(instruction.args))
            workdir.mkdir(parents=True, exist_ok=True)
        elif instruction.keyword == "COPY":
            *sources, dest = instruction.args.split()
            for source in sources:
                src = ROOT / source.rstrip("/")
                if src.is_dir():
                    shutil.copytree(src, workdir / dest, ignore=context_filter)
                else:  # into the directory ``dest``, made as Docker makes it
                    (workdir / dest).mkdir(parents=True, exist_ok=True)
                    shutil.copy2(src, workdir / dest / src.name)
        elif instruction.keyword == "RUN":
            script = instruction.args
            unmapped = [w for w in shlex.split(script) if w.startswith("/")]
            assert not unmapped, f"RUN uses absolute paths the replay cannot move: {unmapped}"
            # The image builds without a pip cache; here pip may use the local one.
            run_env = {k: v for k, v in env.items() if k != "PIP_NO_CACHE_DIR"}
            result = subprocess.run(
                ["/bin/sh", "-c", script],
                cwd=workdir,
                env=run_env,
                capture_output=True,
                text=True,
                timeout=BUILD_TIMEOUT_S,
                check=False,
            )
            assert result.returncode == 0, f"RUN failed: {script}\n{result.stdout}\n{result.stderr}"
            ran += 1
        else:
            pytest.fail(f"the replay does not know {instruction.keyword} in the builder stage")
    assert ran > 0
    return env


@pytest.mark.timeout(BUILD_TIMEOUT_S + 60)
def test_builder_steps_build_a_virtualenv_that_serves_the_image_cmd(stages, tmp_path):
    """The builder's RUN steps, replayed, give a virtualenv (no editable installs) whose
    ``checkpointd`` serves the image's CMD on the embedded SQLite store in
    CHECKPOINTD_DATA_DIR, answers a put/get through the installed client on the socket, and
    answers the kubelet's gRPC health probe with SERVING on TCP."""
    builder, final = stages
    root = tmp_path / "root"
    root.mkdir()
    build_env = _replay_builder(builder, root)
    venv = Path(build_env["VIRTUAL_ENV"])
    copied = final.all("COPY")[0].split()[-1]
    assert venv == root / copied.lstrip("/")
    assert not (venv / "bin" / "pip").exists()  # the image carries no installer
    wheels = sorted(p.name for p in Path(build_env["WHEEL_DIR"]).glob("*.whl"))
    assert [re.sub(r"-0\.1\.0-.*", "", name) for name in wheels] == [
        "checkpointd",
        "checkpointd_client",
    ]

    final_env = key_values(" ".join(final.all("ENV")))
    data_dir = root / final_env["CHECKPOINTD_DATA_DIR"].lstrip("/")
    data_dir.mkdir(parents=True)
    socket_dir = Path(tempfile.mkdtemp(prefix="cpd-img-"))  # socket paths must stay short
    env = {
        "PATH": f"{venv / 'bin'}:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "CHECKPOINTD_DATA_DIR": str(data_dir),
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONUNBUFFERED": "1",
    }
    # The package is the installed wheel, not this checkout.
    where = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-c",
            "import checkpointd, checkpointd_client as c;"
            "print(checkpointd.__file__); print(c.__file__)",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    for line in where.stdout.splitlines():
        assert Path(line).is_relative_to(venv / "lib"), line

    socket = socket_dir / "checkpointd.sock"
    cmd = json.loads(final.all("CMD")[0])
    cmd = [
        arg.replace(f"0.0.0.0:{PORT}", "127.0.0.1:0").replace(SOCKET, str(socket)) for arg in cmd
    ]
    log_path = tmp_path / "server.log"
    with log_path.open("wb") as log:
        server = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while "serving on" not in log_path.read_text() and time.monotonic() < deadline:
            assert server.poll() is None, log_path.read_text()
            time.sleep(0.05)
        serving = re.search(r"serving on (?P<addresses>[^(]+) \(", log_path.read_text())
        assert serving, log_path.read_text()
        addresses = [a.strip() for a in serving.group("addresses").split(",")]
        tcp = next(a for a in addresses if not a.startswith("unix:"))
        client = subprocess.run(
            [str(venv / "bin" / "python"), "-c", CLIENT_SCRIPT, f"unix://{socket}", tcp],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert client.returncode == 0, client.stderr
        assert client.stdout.split() == [str(2**64), "SERVING"]
        assert (data_dir / "checkpointd.db").is_file()
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(15)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        shutil.rmtree(socket_dir, ignore_errors=True)
    assert server.returncode == 0, log_path.read_text()
