"""The KubeRay example (examples/kuberay/): manifests KubeRay accepts, wired to each other.

No package ships KubeRay's CRD schema, so the required fields are checked by a
typed model of them, written from KubeRay's CRDs (ray.io/v1 RayCluster and
RayJob: ``spec.headGroupSpec`` with a pod ``template``; each worker group's
``groupName``, ``minReplicas``, ``maxReplicas`` and ``template``; the enums of
``authOptions.mode`` and ``submissionMode``). Ray's own KubeRay autoscaler code
then reads the RayCluster the way it reads one from the API server, and Ray's
autoscaler schema (``ray-schema.json``) validates what it derived: rayStartParams,
container resources and GPU counts that Ray could not parse fail here.
"""

from __future__ import annotations

import re
import shlex
from typing import Any, Literal

import pytest
import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator
from support.paths import REPO

EXAMPLE = REPO / "examples" / "kuberay"


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)


class Container(_Open):
    name: str
    image: str
    env: list[dict[str, Any]] = Field(default_factory=list)
    volumeMounts: list[dict[str, str]] = Field(default_factory=list)
    resources: dict[str, dict[str, str]] = Field(default_factory=dict)


class PodSpec(_Open):
    containers: list[Container] = Field(min_length=1)
    volumes: list[dict[str, Any]] = Field(default_factory=list)


class PodTemplate(_Open):
    spec: PodSpec


class HeadGroupSpec(_Open):
    template: PodTemplate
    rayStartParams: dict[str, str] = Field(default_factory=dict)


class WorkerGroupSpec(_Open):
    groupName: str = Field(min_length=1)
    minReplicas: int = Field(ge=0)
    maxReplicas: int = Field(ge=0)
    replicas: int | None = None
    template: PodTemplate
    rayStartParams: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _replicas_in_range(self) -> WorkerGroupSpec:
        assert self.minReplicas <= self.maxReplicas, "minReplicas > maxReplicas"
        assert self.replicas is None or self.minReplicas <= self.replicas <= self.maxReplicas
        return self


class AuthOptions(_Open):
    mode: Literal["disabled", "token"] | None = None


class RayClusterSpec(_Open):
    headGroupSpec: HeadGroupSpec
    workerGroupSpecs: list[WorkerGroupSpec] = Field(default_factory=list)
    rayVersion: str | None = None
    authOptions: AuthOptions | None = None


class Metadata(_Open):
    name: str = Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=63)


class RayCluster(_Open):
    apiVersion: Literal["ray.io/v1"]
    kind: Literal["RayCluster"]
    metadata: Metadata
    spec: RayClusterSpec


class RayJobSpec(_Open):
    entrypoint: str = Field(min_length=1)
    clusterSelector: dict[str, str] | None = None
    rayClusterSpec: RayClusterSpec | None = None
    submissionMode: Literal["K8sJobMode", "HTTPMode", "InteractiveMode", "SidecarMode"] = "K8sJobMode"
    runtimeEnvYAML: str | None = None

    @model_validator(mode="after")
    def _a_cluster(self) -> RayJobSpec:
        assert (self.clusterSelector is None) != (self.rayClusterSpec is None), \
            "a RayJob names an existing cluster (clusterSelector) or brings one (rayClusterSpec)"
        return self


class RayJob(_Open):
    apiVersion: Literal["ray.io/v1"]
    kind: Literal["RayJob"]
    metadata: Metadata
    spec: RayJobSpec


def _load(name: str) -> dict[str, Any]:
    (doc,) = list(yaml.safe_load_all((EXAMPLE / name).read_text()))
    return doc


def _pods(cluster: RayCluster) -> list[PodSpec]:
    return [cluster.spec.headGroupSpec.template.spec] + [g.template.spec for g in cluster.spec.workerGroupSpecs]


def test_the_raycluster_has_the_fields_kuberay_requires_and_ray_reads_it():
    doc = _load("raycluster.yaml")
    cluster = RayCluster.model_validate(doc)
    assert cluster.spec.authOptions is not None and cluster.spec.authOptions.mode == "token"
    assert any(g.template.spec.containers[0].resources.get("limits", {}).get("nvidia.com/gpu")
               for g in cluster.spec.workerGroupSpecs), "a GPU suite needs GPU workers"

    autoscaling = pytest.importorskip("ray.autoscaler._private.kuberay.autoscaling_config")
    from ray.autoscaler._private.util import validate_config

    # As the autoscaler reads it from the API server (which adds the namespace).
    config = autoscaling._derive_autoscaling_config_from_ray_cr(
        {**doc, "metadata": {**doc["metadata"], "namespace": "default"}})
    validate_config(config)
    types = config["available_node_types"]
    assert types["headgroup"]["resources"]["GPU"] == 0  # the driver's node runs no engine
    gpu_groups = [t for name, t in types.items() if name != "headgroup"]
    assert gpu_groups and all(t["resources"]["GPU"] >= 1 for t in gpu_groups)


def test_every_ray_pod_mounts_the_shared_volume_at_the_same_path():
    cluster = RayCluster.model_validate(_load("raycluster.yaml"))
    pvc = _load("shared-storage.yaml")
    assert pvc["kind"] == "PersistentVolumeClaim" and "ReadWriteMany" in pvc["spec"]["accessModes"]
    for pod in _pods(cluster):
        claims = {v["name"]: v["persistentVolumeClaim"]["claimName"] for v in pod.volumes
                  if "persistentVolumeClaim" in v}
        mounts = {m["name"]: m["mountPath"] for m in pod.containers[0].volumeMounts}
        shared = [name for name, claim in claims.items() if claim == pvc["metadata"]["name"]]
        assert [mounts.get(n) for n in shared] == ["/shared"], (claims, mounts)
        env = {e["name"]: e.get("value") for e in pod.containers[0].env}
        assert env["SPECBENCH_CACHE"].startswith("/shared/") and env["HF_HOME"].startswith("/shared/")


def test_the_rayjob_runs_a_gpu_suite_on_the_existing_cluster():
    cluster = RayCluster.model_validate(_load("raycluster.yaml"))
    job = RayJob.model_validate(_load("rayjob.yaml"))
    assert job.spec.clusterSelector == {"ray.io/cluster": cluster.metadata.name}
    argv = shlex.split(job.spec.entrypoint)
    assert argv[0] == "bash" and argv[1].startswith("/opt/specbench/")
    script = REPO / argv[1].removeprefix("/opt/specbench/")
    suite = REPO / argv[2]
    assert script.is_file() and suite.is_file()
    assert any("GPU" in (t.get("hardware") or "") for t in yaml.safe_load(suite.read_text())["targets"])
    text = script.read_text()
    assert re.search(r"specbench run .*--executor ray --ray-address auto --out \"\$RESULTS\"", text)
    assert "--db \"$SPECBENCH_HISTORY_URL\"" in text
    env = yaml.safe_load(job.spec.runtimeEnvYAML or "{}")["env_vars"]
    assert env["RESULTS"].startswith("/shared/")  # results on the shared volume
    head_env = {e["name"]: e for e in cluster.spec.headGroupSpec.template.spec.containers[0].env}
    assert head_env["SPECBENCH_HISTORY_URL"]["valueFrom"]["secretKeyRef"]["key"] == "url"


def test_the_model_rejects_what_kuberay_rejects():
    doc = _load("raycluster.yaml")
    broken = {**doc, "spec": {**doc["spec"], "workerGroupSpecs": [
        {k: v for k, v in doc["spec"]["workerGroupSpecs"][0].items() if k != "groupName"}]}}
    with pytest.raises(ValueError, match="groupName"):
        RayCluster.model_validate(broken)
    with pytest.raises(ValueError, match="mode"):
        RayCluster.model_validate({**doc, "spec": {**doc["spec"], "authOptions": {"mode": "password"}}})
    job = _load("rayjob.yaml")
    with pytest.raises(ValueError, match="existing cluster"):
        RayJob.model_validate({**job, "spec": {k: v for k, v in job["spec"].items() if k != "clusterSelector"}})
