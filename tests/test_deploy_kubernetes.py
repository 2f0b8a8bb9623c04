"""deploy/kubernetes/z2jh-values.yaml (docs/jupyterhub.md): valid YAML that says what the docs say."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from jupyter_gpu.server import JupyterGpuServer

VALUES = Path(__file__).resolve().parent.parent / "deploy" / "kubernetes" / "z2jh-values.yaml"


def test_the_zero_to_jupyterhub_values_parse_and_hold_the_documented_pieces() -> None:
    values = yaml.safe_load(VALUES.read_text())
    singleuser = values["singleuser"]
    # GPU profiles ask the device plugin for whole GPUs
    limits = [
        p["kubespawner_override"]["extra_resource_limits"]["nvidia.com/gpu"]
        for p in singleuser["profileList"]
        if "kubespawner_override" in p
    ]
    assert limits == ["1", "2"]
    # kernels report their own memory (host PIDs in pods), from the file kernels read
    autoload = singleuser["extraFiles"]["jupyter-gpu-kernel-autoload"]
    assert autoload["mountPath"].endswith("/ipython_kernel_config.py")
    assert 'c.InteractiveShellApp.extensions = ["jupyter_gpu"]' in autoload["stringData"]
    # the culling settings are real traits of the server extension, with valid values
    server = singleuser["extraFiles"]["jupyter-gpu-server-config"]
    settings = json.loads(json.dumps(server["data"]))["JupyterGpuServer"]
    assert set(settings) <= set(JupyterGpuServer.class_trait_names(config=True))
    config = JupyterGpuServer(**settings)
    assert config.cull_idle_after_s == 7200 and config.cull_warn_s == 600
    # the node's name is the host label; hostPID stays off
    assert singleuser["extraEnv"]["JUPYTER_GPU_HOST"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert "extraPodConfig" not in singleuser
    # Prometheus' service and role: the hub's /hub/metrics only, never access to a user's server
    assert values["hub"]["loadRoles"]["prometheus"]["scopes"] == ["read:metrics"]


def test_the_user_pods_serve_metrics_without_a_token_and_prometheus_sends_them_none() -> None:
    """Issue 27: no credential Prometheus holds reaches a user pod. The pods' /metrics is public
    (jupyter_server's PrometheusMetricsHandler: 403 only while authenticate_prometheus is True and
    the request is not logged in) and the scrape job carries no credential."""
    from jupyter_server.serverapp import ServerApp

    values = yaml.safe_load(VALUES.read_text())
    data = values["singleuser"]["extraFiles"]["jupyter-gpu-server-config"]["data"]
    assert data["ServerApp"] == {"authenticate_prometheus": False}
    assert set(data["ServerApp"]) <= set(ServerApp.class_trait_names(config=True))
    job = next(
        job for job in yaml.safe_load(SCRAPE.read_text())["scrape_configs"] if job["job_name"] == "jupyter-user-pods"
    )
    assert not {"authorization", "basic_auth", "oauth2", "bearer_token", "bearer_token_file"} & set(job)
    # a pod's answer is its user's word: bounded
    assert job["sample_limit"] > 0 and job["body_size_limit"]


SCRAPE = VALUES.parent.parent / "prometheus" / "kubernetes" / "prometheus.yml"


def test_the_values_admit_prometheus_to_the_port_the_scrape_config_scrapes() -> None:
    values = yaml.safe_load(VALUES.read_text())
    job = next(
        job for job in yaml.safe_load(SCRAPE.read_text())["scrape_configs"] if job["job_name"] == "jupyter-user-pods"
    )
    kept_port = next(
        rule["regex"]
        for rule in job["relabel_configs"]
        if rule.get("source_labels") == ["__meta_kubernetes_pod_container_port_name"]
    )
    # Z2JH's NetworkPolicy admits only its own labelled pods to the user pods (templates/singleuser/
    # netpol.yaml); the extra rule opens the port Prometheus scrapes (KubeSpawner's notebook-port) ...
    [rule] = values["singleuser"]["networkPolicy"]["ingress"]
    assert kept_port == "notebook-port" and rule["ports"] == [{"port": kept_port}]
    # ... to Prometheus's pods in its namespace only: one peer holding both selectors (AND); two peers
    # would admit every pod of that namespace and every pod so labelled in the hub's namespace (OR)
    [peer] = rule["from"]
    assert peer == {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
        "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}},
    }
    # the scrape config discovers the namespace the values are installed into, and its paths assume
    # the hub's default base URL
    [sd] = job["kubernetes_sd_configs"]
    assert sd["namespaces"]["names"] == ["jhub"] and " -n jhub " in VALUES.read_text()
    assert values["hub"].get("baseUrl", "/") == "/"
    assert {
        rule["replacement"] for rule in job["relabel_configs"] if rule.get("target_label") == "__metrics_path__"
    } == {"/user/${1}/metrics", "/user/${1}/${2}/metrics"}


def test_the_values_admit_prometheus_to_the_hub_port_the_hub_job_scrapes() -> None:
    values = yaml.safe_load(VALUES.read_text())
    job = next(job for job in yaml.safe_load(SCRAPE.read_text())["scrape_configs"] if job["job_name"] == "jupyterhub")
    # the chart's hub pod: component=hub, container port "http" (templates/hub/deployment.yaml)
    assert job["relabel_configs"][0]["regex"] == "hub;http" and job["metrics_path"] == "/hub/metrics"
    [rule] = values["hub"]["networkPolicy"]["ingress"]
    assert rule["ports"] == [{"port": "http"}]
    assert rule["from"] == values["singleuser"]["networkPolicy"]["ingress"][0]["from"]  # the same Prometheus
    assert "read:metrics" in values["hub"]["loadRoles"]["prometheus"]["scopes"]  # JupyterHub's metrics_authentication
