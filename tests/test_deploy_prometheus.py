"""deploy/prometheus/: the shipped scrape configs and rules pass ``promtool``, and a real Prometheus
(Debian's binary, on loopback) scrapes two real Jupyter servers on simulated GPUs and returns both
servers' kernel series with their ``user`` labels.

promtool and prometheus come with Debian's ``prometheus`` package (``scripts/test.sh`` installs it
when run as root); without them these tests are skipped with that reason.
"""

from __future__ import annotations

import http.server
import json
import re
import shutil
import subprocess
import threading
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from live_processes import PROMETHEUS, LiveServer, get_json, start_prometheus, stop, wait_for

REPO = Path(__file__).resolve().parent.parent
DEPLOY = REPO / "deploy" / "prometheus"
TOKEN_PATH = "/etc/prometheus/jupyterhub-token"

PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None,
    reason="promtool is not installed (Debian: apt-get install prometheus; "
    "scripts/test.sh installs it when run as root)",
)
needs_prometheus = pytest.mark.skipif(
    PROMETHEUS is None,
    reason="prometheus is not installed (Debian: apt-get install prometheus; "
    "scripts/test.sh installs it when run as root)",
)


def promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run([PROMTOOL, *args], cwd=cwd, capture_output=True, text=True, timeout=60)


@pytest.fixture
def deploy_copy(tmp_path: Path) -> Path:
    """deploy/prometheus with the token path pointing at a real file (promtool checks it exists)."""
    target = tmp_path / "prometheus"
    shutil.copytree(DEPLOY, target)
    token = tmp_path / "jupyterhub-token"
    token.write_text("not-a-real-token\n")
    for config in target.rglob("*.yml"):
        config.write_text(config.read_text().replace(TOKEN_PATH, str(token)))
    return target


# Every way a scrape job can send a credential (Prometheus's <scrape_config> and its HTTP client
# config): none of them may reach a user server.
CREDENTIAL_FIELDS = ("authorization", "basic_auth", "oauth2", "bearer_token", "bearer_token_file", "tls_config")


def scrapes_user_servers(job: dict[str, Any]) -> bool:
    """Whether ``job`` scrapes a user server (a path under JupyterHub's /user/, static or relabelled,
    or a target list of users): a process its user's code runs in."""
    paths = [job.get("metrics_path", "/metrics")] + [
        str(rule.get("replacement", ""))
        for rule in job.get("relabel_configs", [])
        if rule.get("target_label") == "__metrics_path__"
    ]
    return any("/user/" in path for path in paths) or "file_sd_configs" in job


def credentials_sent(job: dict[str, Any]) -> list[str]:
    """The credential-carrying fields of ``job`` (tls_config only with a client certificate), and any
    token in its URL parameters or extra headers."""
    found = [key for key in CREDENTIAL_FIELDS if key in job and (key != "tls_config" or "cert_file" in job[key])]
    found += [f"params.{key}" for key in job.get("params", {}) if "token" in key.lower()]
    found += [f"http_headers.{key}" for key in job.get("http_headers", {})]
    return found


SCRAPE_CONFIGS = ("prometheus.yml", "kubernetes/prometheus.yml")


def test_no_shipped_scrape_job_sends_a_credential_to_a_user_server() -> None:
    """Issue 27: a user server runs its user's code, which can record the Authorization header of
    every request; the shipped configs used to scrape every user server with one hub token holding
    access:servers, which opened every other user's server. No job may send one there."""
    checked = 0
    for name in SCRAPE_CONFIGS:
        for job in yaml.safe_load((DEPLOY / name).read_text())["scrape_configs"]:
            if scrapes_user_servers(job):
                checked += 1
                assert credentials_sent(job) == [], (name, job["job_name"])
    assert checked == 1  # the Kubernetes user pods; on one host no user server is scraped at all


def test_the_check_finds_the_old_shared_token_jobs() -> None:
    """The check above fails on the configs as they were (the jupyter-user-servers job)."""
    old = {
        "job_name": "jupyter-user-servers",
        "authorization": {"type": "Bearer", "credentials_file": TOKEN_PATH},
        "file_sd_configs": [{"files": ["users.yml"]}],
        "relabel_configs": [
            {
                "source_labels": ["jupyterhub_user"],
                "target_label": "__metrics_path__",
                "replacement": "/user/${1}/metrics",
            }
        ],
    }
    assert scrapes_user_servers(old) and credentials_sent(old) == ["authorization"]
    assert credentials_sent({"params": {"token": ["x"]}, "http_headers": {"Authorization": {}}}) == [
        "params.token",
        "http_headers.Authorization",
    ]


def test_every_shipped_file_is_yaml_and_the_token_goes_to_the_service_and_the_hub_only() -> None:
    for path in DEPLOY.rglob("*.yml"):
        yaml.safe_load(path.read_text())  # raises on a syntax error
    paths = {}
    for name in SCRAPE_CONFIGS:
        for job in yaml.safe_load((DEPLOY / name).read_text())["scrape_configs"]:
            if "authorization" in job:
                assert job["authorization"] == {"type": "Bearer", "credentials_file": TOKEN_PATH}, job["job_name"]
                paths[name, job["job_name"]] = job["metrics_path"]
    # the hub service's and the hub's own metrics: processes of the hub's admin, not of a user
    assert paths == {
        ("prometheus.yml", "jupyter-gpu-service"): "/services/jupyter-gpu/metrics",
        ("kubernetes/prometheus.yml", "jupyterhub"): "/hub/metrics",
    }


def test_the_one_host_config_scrapes_the_service_only_with_its_access_scope_alone() -> None:
    text = (DEPLOY / "prometheus.yml").read_text()
    [job] = yaml.safe_load(text)["scrape_configs"]
    assert job["job_name"] == "jupyter-gpu-service"
    [role] = [line for line in text.splitlines() if '"scopes":' in line]
    assert role.split('"scopes":')[1].strip() == '["access:services!service=jupyter-gpu"],'
    assert '"access:servers"' not in text and not (DEPLOY / "users.yml").exists()


@needs_promtool
def test_promtool_accepts_the_scrape_config_and_its_rule_files(deploy_copy: Path) -> None:
    result = promtool("check", "config", "prometheus.yml", cwd=deploy_copy)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 2 rule files found" in result.stdout + result.stderr


@needs_promtool
def test_promtool_accepts_the_kubernetes_scrape_config(deploy_copy: Path) -> None:
    result = promtool("check", "config", "kubernetes/prometheus.yml", cwd=deploy_copy)
    output = result.stdout + result.stderr
    if "field kubernetes_sd_configs not found" in output:
        # Debian builds Prometheus without Kubernetes discovery; the syntax of the rest was read.
        pytest.skip("this promtool was built without Kubernetes service discovery (Debian's is)")
    assert result.returncode == 0, output


@needs_promtool
def test_promtool_rule_unit_tests_pass() -> None:
    result = promtool("test", "rules", "tests/jupyter_gpu.rules_test.yml", cwd=DEPLOY)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


# -- integration: a real Prometheus scrapes two real Jupyter servers


@pytest.fixture
def servers(tmp_path: Path, scenario: Any) -> Iterator[list[LiveServer]]:
    """Two real servers for two simulated hub users (alice, bob) on the simulated GPUs."""
    started: list[LiveServer] = []
    try:
        for user in ("alice", "bob"):
            started.append(
                LiveServer(
                    tmp_path / user,
                    user,
                    f"token-of-{user}",
                    {"interval_s": 0.5, "linger_s": 30, "host_label": "sim-host"},
                )
            )
        yield started
    finally:
        for server in started:
            stop(server.process)


@needs_prometheus
def test_a_real_prometheus_scrapes_two_servers_kernel_series_with_their_users(tmp_path, scenario, servers):
    # Given two users' servers whose kernels hold memory on the two simulated GPUs
    for gpu, server in enumerate(servers):
        pid = server.start_kernel()
        scenario.update(
            lambda data, gpu=gpu, pid=pid: (
                data["gpus"][gpu].setdefault("processes", []).append({"pid": pid, "memory_mib": 1024 * (gpu + 1)})
            )
        )
    # and a Prometheus scraping both every second, each with that server's own token from a file
    # (what a server exports; the shipped configs send no token to a user server: the tests above)
    jobs = []
    for server in servers:
        token_file = tmp_path / f"{server.user}.token"
        token_file.write_text(server.token)
        jobs.append(
            {
                "job_name": f"jupyter-{server.user}",
                "scrape_interval": "1s",
                "authorization": {"type": "Bearer", "credentials_file": str(token_file)},
                "static_configs": [{"targets": [f"127.0.0.1:{server.port}"]}],
            }
        )
    config = tmp_path / "prometheus.yml"
    config.write_text(yaml.safe_dump({"global": {"scrape_interval": "1s"}, "scrape_configs": jobs}))
    prometheus, url, log = start_prometheus(config, tmp_path)
    try:
        api = f"{url}/api/v1/query?query="

        def series(query: str) -> list[dict[str, Any]]:
            return get_json(api + urllib.parse.quote(query))["data"]["result"]

        # When Prometheus has scraped them, its API returns both servers' kernel series with users
        found = wait_for(
            "both kernels in Prometheus",
            lambda: (lambda r: r if len(r) == 2 else None)(series("jupyter_gpu_kernel_memory_used_bytes")),
            60,
            prometheus,
            log,
        )
        by_user = {s["metric"]["user"]: s for s in found}
        assert sorted(by_user) == ["alice", "bob"]
        uuids = [gpu["uuid"] for gpu in get_json(servers[0].url + "jupyter-gpu/snapshot", servers[0].token)["gpus"]]
        assert by_user["alice"]["metric"]["UUID"] == uuids[0] and float(by_user["alice"]["value"][1]) == 1024 * 2**20
        assert by_user["bob"]["metric"]["UUID"] == uuids[1] and float(by_user["bob"]["value"][1]) == 2048 * 2**20
        assert by_user["alice"]["metric"]["notebook"] == "alice.ipynb"
        # and the GPU info series joins by UUID, with the host
        info = series('jupyter_gpu_gpu_info{job="jupyter-alice"}')
        assert {s["metric"]["UUID"] for s in info} == set(uuids) and {s["metric"]["host"] for s in info} == {"sim-host"}
        joined = series(
            "sum by (user, host) (jupyter_gpu_kernel_memory_used_bytes * on (UUID) "
            "group_left (host) max by (UUID, host) (jupyter_gpu_gpu_info))"
        )  # docs/prometheus.md
        assert {(s["metric"]["user"], s["metric"]["host"]) for s in joined} == {
            ("alice", "sim-host"),
            ("bob", "sim-host"),
        }
    finally:
        stop(prometheus)


# -- Kubernetes (deploy/prometheus/kubernetes/prometheus.yml) -----------------------------------
#
# Debian's promtool and prometheus are built without Kubernetes discovery, so the discovery block
# is checked against Prometheus's documented fields (below), and everything after it by the real
# tools: each `kubernetes_sd_configs` is replaced by a `file_sd_configs` whose target groups carry
# the labels Prometheus's pod role sets (docs/configuration/configuration.md, "pod"; the code:
# discovery/kubernetes/pod.go, buildPod and podLabels, v2.42.0). Every discovery mechanism hands
# its target groups to the same scrape.TargetsFromGroup, which merges group and target labels and
# relabels them, so a file-discovered target with those labels is relabelled as a discovered pod.

K8S_CONFIG = DEPLOY / "kubernetes" / "prometheus.yml"

# <kubernetes_sd_config> as documented for Prometheus 2.42 (Debian's) and still in 3.x:
# https://prometheus.io/docs/prometheus/latest/configuration/configuration/#kubernetes_sd_config
# (and v2.42.0's discovery/kubernetes/kubernetes.go, SDConfig.UnmarshalYAML).
K8S_SD_FIELDS = {
    "api_server",
    "role",
    "kubeconfig_file",
    "basic_auth",
    "authorization",
    "oauth2",
    "proxy_url",
    "proxy_connect_header",
    "follow_redirects",
    "enable_http2",
    "tls_config",
    "namespaces",
    "selectors",
    "attach_metadata",
}
K8S_SD_ROLES = {"node", "service", "pod", "endpoints", "endpointslice", "ingress"}
K8S_SELECTOR_ROLES = {
    "pod": {"pod"},
    "service": {"service"},
    "node": {"node"},
    "ingress": {"ingress"},
    "endpoints": {"pod", "service", "endpoints"},
    "endpointslice": {"pod", "service", "endpointslice"},
}
# The pod role's meta labels (same page, "pod"); <name> is the label or annotation name with every
# character outside [a-zA-Z0-9_] replaced by "_" (strutil.SanitizeLabelName).
POD_ROLE_META = {"__meta_kubernetes_namespace"} | {
    f"__meta_kubernetes_pod_{name}"
    for name in (
        "name",
        "ip",
        "container_init",
        "container_name",
        "container_id",
        "container_image",
        "container_port_name",
        "container_port_number",
        "container_port_protocol",
        "ready",
        "phase",
        "node_name",
        "host_ip",
        "uid",
        "controller_kind",
        "controller_name",
    )
}
POD_ROLE_META_PREFIXES = tuple(
    f"__meta_kubernetes_pod_{kind}_" for kind in ("label", "labelpresent", "annotation", "annotationpresent")
)


def kubernetes_sd_problems(sd: dict[str, Any]) -> list[str]:
    """What is wrong with one ``kubernetes_sd_configs`` entry, by the documented fields."""
    problems = [f"unknown field {key!r}" for key in sorted(set(sd) - K8S_SD_FIELDS)]
    role = sd.get("role")
    if role not in K8S_SD_ROLES:
        problems.append(f"role {role!r} is not one of {sorted(K8S_SD_ROLES)}")
    if "api_server" in sd and "kubeconfig_file" in sd:
        problems.append("api_server and kubeconfig_file are mutually exclusive")
    namespaces = sd.get("namespaces", {})
    if not isinstance(namespaces, dict) or set(namespaces) - {"own_namespace", "names"}:
        problems.append(f"namespaces takes own_namespace and names only: {namespaces!r}")
    else:
        names = namespaces.get("names", [])
        if not isinstance(names, list) or not all(isinstance(name, str) and name for name in names):
            problems.append(f"namespaces.names must be a list of names: {names!r}")
        if not isinstance(namespaces.get("own_namespace", False), bool):
            problems.append("namespaces.own_namespace must be true or false")
        if namespaces.get("own_namespace") and ("api_server" in sd or "kubeconfig_file" in sd):
            problems.append("namespaces.own_namespace works only inside the cluster")
    seen: set[str] = set()
    for selector in sd.get("selectors", []):
        if set(selector) - {"role", "label", "field"}:
            problems.append(f"a selector takes role, label and field only: {selector!r}")
        if selector.get("role") in seen:
            problems.append(f"duplicated selector role {selector.get('role')!r}")
        seen.add(selector.get("role"))
        if role in K8S_SELECTOR_ROLES and selector.get("role") not in K8S_SELECTOR_ROLES[role]:
            problems.append(f"role {role} supports only {sorted(K8S_SELECTOR_ROLES[role])} selectors")
    if set(sd.get("attach_metadata", {})) - {"node"}:
        problems.append("attach_metadata takes node only (in 2.42)")
    return problems


def undocumented_meta_labels(job: dict[str, Any]) -> list[str]:
    """The ``__meta_kubernetes_*`` labels a pod-role job relabels by that the pod role never sets."""
    used = {label for rule in job.get("relabel_configs", []) for label in rule.get("source_labels", [])}
    return sorted(
        label
        for label in used
        if label.startswith("__meta_kubernetes_")
        and label not in POD_ROLE_META
        and not label.startswith(POD_ROLE_META_PREFIXES)
    )


def test_the_kubernetes_discovery_blocks_use_only_documented_fields_roles_and_meta_labels() -> None:
    config = yaml.safe_load(K8S_CONFIG.read_text())
    discovered = {job["job_name"]: job for job in config["scrape_configs"] if "kubernetes_sd_configs" in job}
    assert set(discovered) == {"jupyter-user-pods", "jupyterhub", "nvidia-dcgm-exporter"}
    for name, job in discovered.items():
        for sd in job["kubernetes_sd_configs"]:
            assert kubernetes_sd_problems(sd) == [], name
            assert sd["role"] == "pod" and sd["namespaces"]["names"], name
        assert undocumented_meta_labels(job) == [], name
    # the checks can fail: what a typo or a misremembered field looks like
    assert kubernetes_sd_problems({"role": "pods"}) == [
        "role 'pods' is not one of ['endpoints', 'endpointslice', 'ingress', 'node', 'pod', 'service']"
    ]
    assert kubernetes_sd_problems({"role": "pod", "namespace": {"names": ["jhub"]}}) == ["unknown field 'namespace'"]
    assert kubernetes_sd_problems({"role": "pod", "namespaces": {"names": "jhub"}}) == [
        "namespaces.names must be a list of names: 'jhub'"
    ]
    assert kubernetes_sd_problems({"role": "pod", "selectors": [{"role": "service", "label": "a=b"}]}) == [
        "role pod supports only ['pod'] selectors"
    ]
    assert undocumented_meta_labels(
        {
            "relabel_configs": [
                {"source_labels": ["__meta_kubernetes_pod_annotations_hub_jupyter_org_username"]},
                {"source_labels": ["__meta_kubernetes_pod_container_port"]},
            ]
        }
    ) == ["__meta_kubernetes_pod_annotations_hub_jupyter_org_username", "__meta_kubernetes_pod_container_port"]


def sanitize_label_name(name: str) -> str:
    """Prometheus's strutil.SanitizeLabelName: every character outside [a-zA-Z0-9_] becomes "_"."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", name)


def pod_role_target_groups(pod: dict[str, Any]) -> list[dict[str, Any]]:
    """What Prometheus's Kubernetes discovery (role: pod) makes of one Pod object, as file_sd target
    groups: one target per declared container port and one (the pod IP alone) per container
    without ports, init containers included; nothing for a pod without an IP (v2.42.0
    discovery/kubernetes/pod.go). One group per target, since file_sd has no per-target labels."""
    status, meta, spec = pod["status"], pod["metadata"], pod["spec"]
    if not status.get("podIP"):
        return []
    ip = status["podIP"]
    common = {
        "__meta_kubernetes_namespace": meta["namespace"],
        "__meta_kubernetes_pod_name": meta["name"],
        "__meta_kubernetes_pod_ip": ip,
        "__meta_kubernetes_pod_ready": status.get("ready", "unknown"),
        "__meta_kubernetes_pod_phase": status["phase"],
        "__meta_kubernetes_pod_node_name": spec["nodeName"],
        "__meta_kubernetes_pod_host_ip": status["hostIP"],
        "__meta_kubernetes_pod_uid": meta["uid"],
    }
    if "controller" in meta:
        common["__meta_kubernetes_pod_controller_kind"], common["__meta_kubernetes_pod_controller_name"] = meta[
            "controller"
        ]
    for kind, values in (("label", meta.get("labels", {})), ("annotation", meta.get("annotations", {}))):
        for key, value in values.items():
            common[f"__meta_kubernetes_pod_{kind}_{sanitize_label_name(key)}"] = value
            common[f"__meta_kubernetes_pod_{kind}present_{sanitize_label_name(key)}"] = "true"
    groups = []
    containers = [(c, False) for c in spec["containers"]] + [(c, True) for c in spec.get("initContainers", [])]
    for container, init in containers:
        labels = {
            **common,
            "__meta_kubernetes_pod_container_name": container["name"],
            "__meta_kubernetes_pod_container_image": container["image"],
            "__meta_kubernetes_pod_container_init": "true" if init else "false",
        }
        if not container.get("ports"):
            groups.append({"targets": [ip], "labels": labels})
        for port in container.get("ports", []):
            groups.append(
                {
                    "targets": [f"{ip}:{port['containerPort']}"],
                    "labels": {
                        **labels,
                        "__meta_kubernetes_pod_container_port_name": port.get("name", ""),
                        "__meta_kubernetes_pod_container_port_number": str(port["containerPort"]),
                        "__meta_kubernetes_pod_container_port_protocol": "TCP",
                    },
                }
            )
    return groups


def with_file_discovery(config_path: Path, pods: list[dict[str, Any]], folder: Path) -> dict[str, Any]:
    """The config with each ``kubernetes_sd_configs`` replaced by ``file_sd_configs`` listing what the
    pod role would discover of ``pods``: the pods of the listed namespaces (all when none are)."""
    config = yaml.safe_load(config_path.read_text())
    for job in config["scrape_configs"]:
        sds = job.pop("kubernetes_sd_configs", None)
        if sds is None:
            continue
        groups = []
        for sd in sds:
            assert sd["role"] == "pod", "only the pod role is simulated"
            names = sd.get("namespaces", {}).get("names")
            groups += [
                group
                for pod in pods
                if names is None or pod["metadata"]["namespace"] in names
                for group in pod_role_target_groups(pod)
            ]
        targets = folder / f"{job['job_name']}.targets.json"
        targets.write_text(json.dumps(groups, indent=1))
        job["file_sd_configs"] = [{"files": [str(targets)]}]
    return config


def k8s_pod(
    name: str,
    namespace: str,
    ip: str | None,
    node: str,
    *,
    labels: dict[str, str],
    annotations: dict[str, str] | None = None,
    containers: list[dict[str, Any]],
    init_containers: list[dict[str, Any]] | None = None,
    phase: str = "Running",
    controller: tuple[str, str] | None = None,
) -> dict[str, Any]:
    """The fields of a Kubernetes Pod object that the pod role reads."""
    meta: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "uid": f"uid-{name}",
        "labels": labels,
        "annotations": annotations or {},
    }
    if controller:
        meta["controller"] = controller
    return {
        "metadata": meta,
        "spec": {"nodeName": node, "containers": containers, "initContainers": init_containers or []},
        "status": {
            "podIP": ip,
            "hostIP": "192.0.2.200",
            "phase": phase,
            "ready": "true" if phase == "Running" else "false",
        },
    }


def z2jh_user_pod(
    user: str,
    escaped: str,
    ip: str | None,
    node: str,
    port: int = 8888,
    server: str = "",
    phase: str = "Running",
    namespace: str = "jhub",
) -> dict[str, Any]:
    """A user pod as KubeSpawner 7 (Z2JH 4) makes it: labels component=singleuser-server and the
    escaped user name, annotations with the raw user (and server) name, the notebook container's
    port named notebook-port, and the chart's block-cloud-metadata init container (no ports).
    Sources: kubespawner/spawner.py (_build_pod_labels, _build_common_annotations, _get_pod_port),
    kubespawner/objects.py (make_pod), z2jh jupyterhub/values.yaml (singleuser.cloudMetadata)."""
    annotations = {"hub.jupyter.org/username": user, "hub.jupyter.org/kubespawner-version": "7.0.0"}
    if server:
        annotations["hub.jupyter.org/servername"] = server
    slug = escaped + (f"--{server}" if server else "")
    return k8s_pod(
        f"jupyter-{slug}",
        namespace,
        ip,
        node,
        phase=phase,
        annotations=annotations,
        labels={
            "component": "singleuser-server",
            "app.kubernetes.io/component": "singleuser-server",
            "app": "jupyterhub",
            "release": "jhub",
            "hub.jupyter.org/username": escaped,
            "hub.jupyter.org/servername": server,
            "hub.jupyter.org/network-access-hub": "true",
        },
        containers=[
            {
                "name": "notebook",
                "image": "registry.example.org/jupyter-gpu-notebook:2026.11",
                "ports": [{"name": "notebook-port", "containerPort": port}],
            }
        ],
        init_containers=[{"name": "block-cloud-metadata", "image": "quay.io/jupyterhub/k8s-network-tools:4.0.0"}],
    )


def dcgm_exporter_pod(name: str, ip: str, node: str, port: int, labels: dict[str, str]) -> dict[str, Any]:
    """NVIDIA's DCGM exporter as GPU Operator deploys it (assets/state-dcgm-exporter/0800_daemonset.yaml:
    pod label app=nvidia-dcgm-exporter, container port "metrics" 9400, init container toolkit-validation)."""
    return k8s_pod(
        name,
        "gpu-operator",
        ip,
        node,
        labels=labels,
        controller=("DaemonSet", "nvidia-dcgm-exporter"),
        containers=[
            {
                "name": "nvidia-dcgm-exporter",
                "image": "nvcr.io/nvidia/k8s/dcgm-exporter:4.2.3",
                "ports": [{"name": "metrics", "containerPort": port}],
            }
        ],
        init_containers=[{"name": "toolkit-validation", "image": "nvcr.io/nvidia/cloud-native/gpu-operator-validator"}],
    )


def hub_server_prefix(user: str, server: str = "") -> str:
    """The URL prefix JupyterHub gives a user's server (hub base_url "/"): /user/<name>/[<server>/],
    each part escaped by jupyterhub.utils.url_escape_path (quote(value, safe="@~"))."""
    prefix = "/user/" + urllib.parse.quote(user, safe="@~") + "/"
    return prefix + (urllib.parse.quote(server, safe="@~") + "/" if server else "")


@needs_promtool
def test_promtool_accepts_the_kubernetes_config_with_its_discovery_replaced_by_files(deploy_copy: Path) -> None:
    pods = [
        z2jh_user_pod("alice", "alice", "10.1.0.5", "gpu-node-1"),
        dcgm_exporter_pod(
            "nvidia-dcgm-exporter-x7k2p", "10.1.0.9", "gpu-node-1", 9400, {"app": "nvidia-dcgm-exporter"}
        ),
    ]
    config = with_file_discovery(deploy_copy / "kubernetes" / "prometheus.yml", pods, deploy_copy)
    checked = deploy_copy / "kubernetes" / "prometheus.file-sd.yml"
    checked.write_text(yaml.safe_dump(config))
    result = promtool("check", "config", "kubernetes/prometheus.file-sd.yml", cwd=deploy_copy)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "SUCCESS: 2 rule files found" in output


DCGM_LABELS = (
    'gpu="0",UUID="{uuid}",pci_bus_id="00000000:07:00.0",device="nvidia0",'
    'modelName="NVIDIA A100-SXM4-80GB",Hostname="gpu-node-1",container="notebook",namespace="jhub",'
    'pod="jupyter-alice"'
)
DCGM_SERIES = "".join(
    f"# HELP {name} {text}\n# TYPE {name} gauge\n{name}{{{DCGM_LABELS}}} {value}\n"
    for name, text, value in (
        ("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", 37),
        ("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", 1536),
        ("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).", 80384),
    )
)


class DcgmStandIn:
    """An HTTP endpoint serving series shaped like dcgm-exporter's (its text template in
    internal/pkg/rendermetrics/render_metrics.go, with GPU Operator's Kubernetes pod mapping), for the
    GPU with ``uuid``. A stand-in: there is no DCGM here; the point is the scrape job and the join."""

    def __init__(self, uuid: str) -> None:
        body = DCGM_SERIES.replace("{uuid}", uuid).encode()

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                status = 200 if self.path == "/metrics" else 404
                self.send_response(status)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.end_headers()
                self.wfile.write(body if status == 200 else b"")

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def user_pod_server(base: Path, user: str, node: str, token: str) -> LiveServer:
    """A real ``jupyter server`` as it runs in a Z2JH user pod: under the prefix JupyterHub gives it
    (``/user/<name>/``), ``JUPYTERHUB_USER`` set, ``JUPYTER_GPU_HOST`` the node's name (the values
    file's downward API), the values file's ``ServerApp`` settings (``/metrics`` without a token);
    ``token`` is the server's own, for the test's calls (Prometheus has none for it)."""
    values = yaml.safe_load((REPO / "deploy" / "kubernetes" / "z2jh-values.yaml").read_text())
    server_app = values["singleuser"]["extraFiles"]["jupyter-gpu-server-config"]["data"]["ServerApp"]
    return LiveServer(
        base,
        user,
        token,
        {"interval_s": 0.5, "linger_s": 30},
        env={"JUPYTER_GPU_HOST": node},
        base_url=hub_server_prefix(user),
        args=tuple(f"--ServerApp.{key}={value}" for key, value in server_app.items()),
    )


@needs_prometheus
def test_a_real_prometheus_relabels_kubernetes_pods_as_the_config_says(tmp_path, deploy_copy, scenario):
    # Given alice's user pod (a real server under /user/alice/ whose kernel holds 1 GiB of GPU 0)
    alice = user_pod_server(tmp_path / "alice", "alice", "gpu-node-1", "alices-own-token")
    dcgm = None
    prometheus = None
    try:
        pid = alice.start_kernel()
        scenario.update(
            lambda data: data["gpus"][0].setdefault("processes", []).append({"pid": pid, "memory_mib": 1024})
        )
        # (the first sample can take over the snapshot's 2 s on a loaded machine: "no GPU sample yet")
        gpus = wait_for(
            "alice's first GPU sample",
            lambda: get_json(alice.url + "jupyter-gpu/snapshot", alice.token)["gpus"],
            60,
            alice.process,
            alice.log,
        )
        uuid = gpus[0]["uuid"]
        dcgm = DcgmStandIn(uuid)
        # and what discovery sees in the cluster: in jhub, alice's pod (its init container too), a named
        # server of a user whose name needs escaping, a pending user pod, the hub; a user pod in
        # another namespace; an evicted pod without IP; in gpu-operator, GPU Operator's DCGM exporter
        # (a stand-in serving DCGM-shaped series), one of the standalone chart, the device plugin.
        pods = [
            z2jh_user_pod("alice", "alice", "127.0.0.1", "gpu-node-1", port=alice.port),
            z2jh_user_pod(
                "élodie@example.org", "lodie-example-org---049c3d3a", "192.0.2.10", "gpu-node-2", server="gpu-2"
            ),
            z2jh_user_pod("ann+gpu@example.org", "ann-gpu-example-org---9bc2a3f5", "192.0.2.13", "gpu-node-2"),
            z2jh_user_pod("bob", "bob", "192.0.2.11", "gpu-node-2", phase="Pending"),
            z2jh_user_pod("carol", "carol", "192.0.2.12", "gpu-node-2", namespace="staging"),
            z2jh_user_pod("dave", "dave", None, "gpu-node-2", phase="Failed"),
            k8s_pod(
                "hub-7d9c6b5f4-q2w8e",
                "jhub",
                "192.0.2.2",
                "core-node",
                controller=("ReplicaSet", "hub-7d9c6b5f4"),
                labels={"component": "hub", "app": "jupyterhub", "release": "jhub"},
                containers=[
                    {
                        "name": "hub",
                        "image": "quay.io/jupyterhub/k8s-hub:4.0.0",
                        "ports": [{"name": "http", "containerPort": 8081}],
                    }
                ],
            ),
            dcgm_exporter_pod(
                "nvidia-dcgm-exporter-x7k2p",
                "127.0.0.1",
                "gpu-node-1",
                dcgm.port,
                {"app": "nvidia-dcgm-exporter", "controller-revision-hash": "5c9f7d8b6"},
            ),
            dcgm_exporter_pod(
                "dcgm-exporter-m4n5b",
                "192.0.2.21",
                "gpu-node-2",
                9400,
                {"app.kubernetes.io/name": "dcgm-exporter", "app.kubernetes.io/instance": "dcgm"},
            ),
            k8s_pod(
                "nvidia-device-plugin-daemonset-8h2jk",
                "gpu-operator",
                "192.0.2.22",
                "gpu-node-2",
                labels={"app": "nvidia-device-plugin-daemonset"},
                containers=[{"name": "nvidia-device-plugin", "image": "nvcr.io/nvidia/k8s-device-plugin:v0.17.0"}],
            ),
        ]
        # (the shipped config, scraping every second, its discovery replaced by files with those labels)
        config = with_file_discovery(deploy_copy / "kubernetes" / "prometheus.yml", pods, tmp_path)
        config["global"]["scrape_interval"] = "1s"
        config_path = deploy_copy / "kubernetes" / "prometheus.file-sd.yml"
        config_path.write_text(yaml.safe_dump(config))
        prometheus, url, log = start_prometheus(config_path, tmp_path)
        api = f"{url}/api/v1/"

        def series(query: str) -> list[dict[str, Any]]:
            return get_json(api + "query?query=" + urllib.parse.quote(query))["data"]["result"]

        # When Prometheus has tried every target it keeps, and the two that listen (on loopback) are up
        def settled() -> dict[str, Any] | None:
            data = get_json(api + "targets?state=any")["data"]
            tried = data["activeTargets"] and all(
                not t["lastScrape"].startswith("0001-") for t in data["activeTargets"]
            )
            listening = [t for t in data["activeTargets"] if t["scrapeUrl"].startswith("http://127.0.0.1:")]
            return data if tried and listening and all(t["health"] == "up" for t in listening) else None

        try:
            targets = wait_for("every target tried, alice's server and the exporter up", settled, 60, prometheus, log)
        except AssertionError:  # the assertions below say what is wrong
            targets = get_json(api + "targets?state=any")["data"]
        active = {
            (t["labels"]["job"], t["discoveredLabels"]["__meta_kubernetes_pod_name"]): t
            for t in targets["activeTargets"]
        }
        dropped = {
            (
                t["discoveredLabels"]["job"],
                t["discoveredLabels"]["__meta_kubernetes_pod_name"],
                t["discoveredLabels"]["__meta_kubernetes_pod_container_name"],
            )
            for t in targets["droppedTargets"]
            if t["discoveredLabels"]["job"] != "jupyterhub"
        }

        # Then only the running single-user servers are scraped, once per pod, at <pod IP>:<notebook-port>
        # under /user/<name>/[<server>/]metrics (escaped as JupyterHub escapes it), labelled with the node
        elodie = "jupyter-lodie-example-org---049c3d3a--gpu-2"
        ann = "jupyter-ann-gpu-example-org---9bc2a3f5"
        assert set(active) == {
            ("jupyter-user-pods", "jupyter-alice"),
            ("jupyter-user-pods", elodie),
            ("jupyter-user-pods", ann),
            ("jupyterhub", "hub-7d9c6b5f4-q2w8e"),
            ("nvidia-dcgm-exporter", "nvidia-dcgm-exporter-x7k2p"),
            ("nvidia-dcgm-exporter", "dcgm-exporter-m4n5b"),
        }
        alice_target = active["jupyter-user-pods", "jupyter-alice"]
        assert alice_target["scrapeUrl"] == f"http://127.0.0.1:{alice.port}/user/alice/metrics"
        # the real server, scraped without any credential (its /metrics is public, its port Prometheus's)
        assert alice_target["health"] == "up", alice_target["lastError"]
        assert {
            k: v for k, v in alice_target["labels"].items() if k != "__scrape_interval__" and k != "__scrape_timeout__"
        } == {
            "instance": f"127.0.0.1:{alice.port}",
            "job": "jupyter-user-pods",
            "host": "gpu-node-1",
            "namespace": "jhub",
            "pod": "jupyter-alice",
            "jupyterhub_user": "alice",
        }
        assert active["jupyter-user-pods", elodie]["scrapeUrl"] == (
            "http://192.0.2.10:8888" + hub_server_prefix("élodie@example.org", "gpu-2") + "metrics"
        )
        assert active["jupyter-user-pods", elodie]["labels"]["host"] == "gpu-node-2"
        assert active["jupyter-user-pods", elodie]["labels"]["jupyterhub_user"] == "élodie@example.org"  # raw
        # (the documented limit: "+", like $&,:;=, is percent-encoded by JupyterHub but not by Prometheus,
        # so that server answers 404 to Prometheus and its target is down)
        assert (
            active["jupyter-user-pods", ann]["scrapeUrl"] == "http://192.0.2.13:8888/user/ann+gpu@example.org/metrics"
        )
        assert hub_server_prefix("ann+gpu@example.org") == "/user/ann%2Bgpu@example.org/"
        # and dropped: alice's init container, the pending pod, the hub, the device plugin, the DCGM
        # exporters' init containers; the other namespace's pod and the pod without IP are not discovered
        assert dropped == {
            ("jupyter-user-pods", "jupyter-alice", "block-cloud-metadata"),
            ("jupyter-user-pods", "jupyter-bob", "notebook"),
            ("jupyter-user-pods", "jupyter-bob", "block-cloud-metadata"),
            ("jupyter-user-pods", elodie, "block-cloud-metadata"),
            ("jupyter-user-pods", ann, "block-cloud-metadata"),
            ("jupyter-user-pods", "hub-7d9c6b5f4-q2w8e", "hub"),
            ("nvidia-dcgm-exporter", "nvidia-dcgm-exporter-x7k2p", "toolkit-validation"),
            ("nvidia-dcgm-exporter", "dcgm-exporter-m4n5b", "toolkit-validation"),
            ("nvidia-dcgm-exporter", "nvidia-device-plugin-daemonset-8h2jk", "nvidia-device-plugin"),
        }
        # the hub's own metrics, on its http port, with the same token (scope read:metrics)
        assert active["jupyterhub", "hub-7d9c6b5f4-q2w8e"]["scrapeUrl"] == "http://192.0.2.2:8081/hub/metrics"
        dcgm_target = active["nvidia-dcgm-exporter", "nvidia-dcgm-exporter-x7k2p"]
        assert dcgm_target["scrapeUrl"] == f"http://127.0.0.1:{dcgm.port}/metrics"
        assert dcgm_target["labels"]["host"] == "gpu-node-1" and dcgm_target["health"] == "up"

        # and the series: alice's kernel with its user and node; the node the server exports too
        kernels = wait_for(
            "alice's kernel series",
            lambda: series('jupyter_gpu_kernel_memory_used_bytes{job="jupyter-user-pods"}'),
            30,
            prometheus,
            log,
        )
        assert [
            (s["metric"]["user"], s["metric"]["host"], s["metric"]["pod"], s["metric"]["UUID"], s["value"][1])
            for s in kernels
        ] == [("alice", "gpu-node-1", "jupyter-alice", uuid, str(1024 * 2**20))]
        info = series('jupyter_gpu_gpu_info{job="jupyter-user-pods"}')
        assert {(s["metric"]["host"], s["metric"]["exported_host"]) for s in info} == {("gpu-node-1", "gpu-node-1")}
        # and the kernel series join DCGM's by UUID: alice's share of the GPU's framebuffer
        share = wait_for(
            "the join with DCGM's series",
            lambda: series(
                "sum by (UUID, user) (jupyter_gpu_kernel_memory_used_bytes) / on (UUID) group_left () "
                "max by (UUID) ((DCGM_FI_DEV_FB_USED + DCGM_FI_DEV_FB_FREE) * 1024 * 1024)"
            ),
            30,
            prometheus,
            log,
        )
        assert [(s["metric"]["user"], s["metric"]["UUID"], float(s["value"][1])) for s in share] == [
            ("alice", uuid, 1024 / 81920)
        ]
        # (GPU Operator's pod mapping gives a second way in: DCGM's pod and namespace labels)
        by_pod = series(
            "DCGM_FI_DEV_GPU_UTIL * on (namespace, pod) group_left (user) "
            "group by (namespace, pod, user) (jupyter_gpu_kernel_memory_used_bytes)"
        )
        assert [(s["metric"]["user"], s["value"][1]) for s in by_pod] == [("alice", "37")]
    finally:
        if prometheus is not None:
            stop(prometheus)
        if dcgm is not None:
            dcgm.close()
        stop(alice.process)


def test_the_scrape_configs_token_comment_says_what_docs_prometheus_md_says() -> None:
    """Issue 22 item 7: the config's comment suggested `jupyterhub token` (user tokens only) and a
    service without a token; it now carries the docs' snippet and files, line for line."""
    doc = (REPO / "docs" / "prometheus.md").read_text()
    section = doc[doc.index("**The token.**") :]
    documented = [
        line.strip()
        for block in re.findall(r"```(?:python|sh)\n(.*?)```", section[: section.index("**Rules.**")], re.DOTALL)
        for line in block.splitlines()
        if line.strip() and not line.strip().startswith("#")
    ]
    comment = [line.lstrip("#").strip() for line in (DEPLOY / "prometheus.yml").read_text().splitlines()]
    [make] = [line for line in documented if line.startswith("openssl rand -hex 32")]
    [copy] = [line for line in documented if line.startswith("install ")]
    joined = " ".join(comment)
    for line in documented:
        # the comment wraps the role's dict on fewer lines; every call and argument is there
        assert line in comment or line.rstrip(",") in joined, line
    assert TOKEN_PATH in copy and "/etc/jupyterhub/prometheus-token" in make


@needs_promtool
def test_promtool_usage_rule_unit_tests_pass() -> None:
    """The usage accounting rules and the window queries docs/prometheus.md and deploy/grafana/ run."""
    result = promtool("test", "rules", "tests/jupyter_gpu_usage.rules_test.yml", cwd=DEPLOY)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout
