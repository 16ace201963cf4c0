"""The Kubernetes manifests in deploy/kubernetes are valid and wire the sidecar as documented.

Every resource is validated strictly (unknown fields are errors) by kubernetes-validate
against the OpenAPI schemas of Kubernetes 1.29, the first release that runs native sidecars
(an init container with ``restartPolicy: Always``) by default, and of the newest release its
bundled schemas cover. The wiring is then checked: the socket shared through an emptyDir,
the target the app is given, gRPC probes on the image's port, the user the image runs as,
the SQLite volume and the Postgres DSN from a Secret that exists.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_validate import utils as kv

from tests.support.dockerfile import key_values, parse_dockerfile

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
PORT = "7470"
SOCKET = "/var/run/checkpointd/checkpointd.sock"
DEPLOY = ROOT / "deploy" / "kubernetes"
SIDECARS_DEFAULT_ON = "1.29.0"
VERSIONS = [SIDECARS_DEFAULT_ON, kv.latest_version()]
SOCKET_DIR = str(Path(SOCKET).parent)
TARGET = f"unix://{SOCKET}"


def load(path: Path) -> list[dict[str, Any]]:
    """The resources of one manifest file."""
    with path.open(encoding="utf-8") as fh:
        return [doc for doc in yaml.safe_load_all(fh) if doc]


def manifests() -> list[Path]:
    """Every manifest under deploy/kubernetes."""
    return sorted(DEPLOY.rglob("*.yaml"))


def variant(name: str) -> dict[str, dict[str, Any]]:
    """The resources of one variant directory, by kind."""
    out: dict[str, dict[str, Any]] = {}
    for path in sorted((DEPLOY / name).glob("*.yaml")):
        for resource in load(path):
            assert resource["kind"] not in out, f"two {resource['kind']} in {name}"
            out[resource["kind"]] = resource
    return out


def image_user() -> tuple[int, int]:
    """The uid and gid the image's final stage runs as."""
    final = parse_dockerfile(DOCKERFILE.read_text())[-1]
    uid, _, gid = final.all("USER")[0].partition(":")
    return int(uid), int(gid)


def test_manifests_exist_for_both_variants():
    """There is a README and a SQLite and a Postgres variant, and nothing else unvalidated."""
    assert (DEPLOY / "README.md").is_file()
    assert {p.relative_to(DEPLOY).as_posix() for p in manifests()} == {
        "sqlite/deployment.yaml",
        "sqlite/pvc.yaml",
        "postgres/deployment.yaml",
        "postgres/secret.yaml",
    }


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("path", manifests(), ids=lambda p: p.relative_to(DEPLOY).as_posix())
def test_manifest_is_valid_kubernetes(path: Path, version: str):
    """Each resource validates strictly against the Kubernetes version's schemas."""
    resources = load(path)
    assert resources
    for resource in resources:
        validated = kv.validate(resource, version, strict=True)
        assert validated == kv.major_minor(version)


def test_strict_validation_rejects_a_misspelt_field():
    """The validation is strict enough to catch a typo (so the test above can fail)."""
    deployment = variant("sqlite")["Deployment"]
    broken = json.loads(json.dumps(deployment).replace("readOnlyRootFilesystem", "readOnlyRootFs"))
    with pytest.raises(kv.ValidationError):
        kv.validate(broken, kv.latest_version(), strict=True)


def _pod(deployment: dict[str, Any]) -> dict[str, Any]:
    pod: dict[str, Any] = deployment["spec"]["template"]["spec"]
    return pod


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


def _mounts(container: dict[str, Any]) -> dict[str, str]:
    return {m["name"]: m["mountPath"] for m in container.get("volumeMounts", [])}


@pytest.mark.parametrize("name", ["sqlite", "postgres"])
def test_checkpointd_is_a_native_sidecar_sharing_its_socket(name: str):
    """checkpointd is an init container with restartPolicy Always, probed over gRPC on the
    image's port; the app gets CHECKPOINTD_TARGET for the socket in a shared emptyDir; both
    run as the image's non-root user with a read-only root and no privileges."""
    pod = _pod(variant(name)["Deployment"])
    (sidecar,) = pod["initContainers"]
    (app,) = pod["containers"]
    assert sidecar["restartPolicy"] == "Always"
    assert sidecar["image"].startswith("checkpointd:")
    assert "command" not in sidecar
    assert "args" not in sidecar
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert sidecar[probe]["grpc"] == {"port": int(PORT)}
    assert [p["containerPort"] for p in sidecar["ports"]] == [int(PORT)]

    volumes = {v["name"]: v for v in pod["volumes"]}
    socket_volume = next(n for n, path in _mounts(sidecar).items() if path == SOCKET_DIR)
    assert "emptyDir" in volumes[socket_volume]
    assert _mounts(app)[socket_volume] == SOCKET_DIR
    assert _env(app)["CHECKPOINTD_TARGET"] == TARGET
    # The image listens on 0.0.0.0, which starts only with a token or an explicit opt-in.
    sidecar_env = _env(sidecar)
    assert sidecar_env.get("CHECKPOINTD_INSECURE") == "1" or "CHECKPOINTD_AUTH_TOKEN" in sidecar_env

    uid, gid = image_user()
    security = pod["securityContext"]
    assert security["runAsNonRoot"] is True
    assert (security["runAsUser"], security["runAsGroup"], security["fsGroup"]) == (uid, gid, gid)
    for container in (sidecar, app):
        context = container["securityContext"]
        assert context["readOnlyRootFilesystem"] is True
        assert context["allowPrivilegeEscalation"] is False
        assert context["capabilities"]["drop"] == ["ALL"]
        assert container["resources"]["requests"]
        assert container["resources"]["limits"]["memory"]


def test_sqlite_variant_keeps_the_file_on_its_claim_with_one_replica():
    """The SQLite store lives in CHECKPOINTD_DATA_DIR on the PersistentVolumeClaim of the
    variant, and the Deployment never runs two pods on it."""
    resources = variant("sqlite")
    deployment, claim = resources["Deployment"], resources["PersistentVolumeClaim"]
    pod = _pod(deployment)
    (sidecar,) = pod["initContainers"]
    final = parse_dockerfile(DOCKERFILE.read_text())[-1]
    data_dir = key_values(" ".join(final.all("ENV")))["CHECKPOINTD_DATA_DIR"]
    assert _env(sidecar).get("CHECKPOINTD_DATA_DIR", data_dir) == data_dir
    assert "CHECKPOINTD_STORE" not in _env(sidecar)
    volumes = {v["name"]: v for v in pod["volumes"]}
    data_volume = next(n for n, path in _mounts(sidecar).items() if path == data_dir)
    assert volumes[data_volume]["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"]
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"]["type"] == "Recreate"


def test_postgres_variant_takes_the_dsn_from_its_secret():
    """CHECKPOINTD_STORE comes from a key of the variant's Secret, which holds a postgresql://
    URL; no volume holds data in the pod."""
    resources = variant("postgres")
    pod = _pod(resources["Deployment"])
    secret = resources["Secret"]
    (sidecar,) = pod["initContainers"]
    ref = _env(sidecar)["CHECKPOINTD_STORE"]["secretKeyRef"]
    assert ref["name"] == secret["metadata"]["name"]
    assert re.fullmatch(r"postgresql://[^@\s]+@[^/\s]+/\w+", secret["stringData"][ref["key"]])
    assert re.fullmatch(r"[A-Za-z_]\w{0,62}", _env(sidecar)["CHECKPOINTD_PG_SCHEMA"])
    assert all("emptyDir" in v for v in pod["volumes"])
    assert resources["Deployment"]["spec"]["replicas"] > 1


def test_postgres_variant_goes_through_a_transaction_pooler_with_small_pools():
    """The example is sized for many pods: the DSN names PgBouncer with transaction pooling
    declared, a pool of a few connections per pod, and LISTEN over a direct URL only when
    the Secret has one (optional key); otherwise the sidecar polls."""
    resources = variant("postgres")
    (sidecar,) = _pod(resources["Deployment"])["initContainers"]
    env = _env(sidecar)
    assert env["CHECKPOINTD_PG_POOLER"] == "transaction"
    assert 1 <= int(env["CHECKPOINTD_PG_POOL_MAX"]) <= 4
    listen = env["CHECKPOINTD_PG_LISTEN_DSN"]["secretKeyRef"]
    assert listen["name"] == resources["Secret"]["metadata"]["name"]
    assert listen["optional"] is True
    store_key = env["CHECKPOINTD_STORE"]["secretKeyRef"]["key"]
    assert ":6432/" in resources["Secret"]["stringData"][store_key]
