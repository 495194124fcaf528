"""Kubernetes manifests from the plan (workbench.deploy): every seed configuration in every format
validates offline, the containers run the rendered command token for token, goldens hold the
H200 TP Deployment and the 2-node TEP LeaderWorkerSet, and bad input is refused with the fix."""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from workbench import cli
from workbench.deploy import DeployOptions, ManifestFormat, render_manifests, validate_manifests
from workbench.deploy.helm import engine_command
from workbench.errors import InputError, SelectionError
from workbench.recipes import LaunchPlan, Selection, load_catalog, render
from workbench.recipes.argv import flag_values

FIXTURES = Path(__file__).parent / "fixtures" / "kubernetes"
SCHEMAS = Path(__file__).resolve().parent.parent / "workbench" / "deploy" / "schemas"
NEMOTRON = "nvidia/NVIDIA-Nemotron-3.5-Lightning-30B-A3B-BF16"
# The recipes page's hardware (recipes.vllm.ai's `hardware` parameter for this recipe).
SEED_HARDWARE = ["h100", "h200", "b200", "gb200", "b300", "gb300", "dgx_station_gb300", "dgx_spark_gb10", "rtx_pro_6000"]


@pytest.fixture(scope="module")
def catalog():
    return load_catalog()


def seed_plans(catalog) -> list[tuple[str, LaunchPlan]]:
    """hardware x variant x strategy of the recipes page; multi-node strategies at 2 nodes."""
    recipe = catalog.recipe(NEMOTRON)
    out = []
    for hw, variant, strategy in itertools.product(SEED_HARDWARE, recipe.variants, recipe.compatible_strategies):
        nodes = 2 if catalog.strategies[strategy].multi_node else None
        sel = Selection(recipe=NEMOTRON, hardware=hw, variant=variant, strategy=strategy, nodes=nodes)
        out.append((f"{hw} {variant} {strategy}", render(sel, catalog)))
    return out


def kubelet_expand(text: str, env: dict[str, str]) -> str:
    """What the kubelet does to a container's command and args: $(NAME) from the env, $$ -> $."""
    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
                  lambda m: "$" if m.group(0) == "$$" else env.get(m.group(1), m.group(0)), text)


def container_argv(container: dict, env: dict[str, str], tmp_path: Path) -> list[str]:
    """The argv the container's process gets: command + args after the kubelet's expansion; a
    `/bin/sh -c` command is run by a real shell with a `vllm` on PATH that prints its argv."""
    words = [kubelet_expand(t, env) for t in [*container["command"], *container.get("args", [])]]
    if words[:2] != ["/bin/sh", "-c"]:
        return words
    stub = tmp_path / "vllm"
    stub.write_text("#!/bin/sh\nprintf '%s\\0' vllm \"$@\"\n")
    stub.chmod(0o755)
    out = subprocess.run(words, env={**os.environ, **env, "PATH": f"{tmp_path}:/usr/bin:/bin"},
                         capture_output=True, text=True, check=True).stdout
    return out.split("\0")[:-1]


def test_every_seed_configuration_renders_and_validates_in_all_three_formats(catalog):
    plans = seed_plans(catalog)
    counts = {f: 0 for f in ManifestFormat}
    checks = 0
    problems = []
    for label, plan in plans:
        for fmt in ManifestFormat:
            report = validate_manifests(render_manifests(plan, fmt, catalog=catalog))
            assert report.checked, f"{label} {fmt.value}: nothing was checked"
            counts[fmt] += 1
            checks += len(report.checked)
            problems += [f"{label} {fmt.value}: {p.line()}" for p in report.problems]
    multi = sum(plan.deploy_type == "multi_node" for _, plan in plans)
    print(f"{len(plans)} seed configurations ({multi} multi-node at 2 nodes) x 3 formats: "
          f"{sum(counts.values())} renders, {checks} documents/templates checked, {len(problems)} problems")
    assert not problems, "\n".join(problems[:20])
    assert len(plans) == len(SEED_HARDWARE) * 2 * 6 and multi > 0
    assert set(counts.values()) == {len(plans)}


def test_golden_h200_tp_deployment(catalog):
    plan = render(Selection(hardware="h200"), catalog)
    text = render_manifests(plan, "k8s", catalog=catalog).to_yaml()
    assert text == (FIXTURES / "h200-single-node-tp.k8s.yaml").read_text()


def test_golden_two_node_tep_leaderworkerset(catalog):
    plan = render(Selection(hardware="h200", strategy="multi_node_tep", nodes=2), catalog)
    text = render_manifests(plan, "lws", catalog=catalog).to_yaml()
    assert text == (FIXTURES / "h200-multi-node-tep-2.lws.yaml").read_text()


def _documents(manifests, kind):
    return [d for d in manifests.documents if d["kind"] == kind]


def test_deployment_container_args_are_the_rendered_command_token_for_token(catalog, tmp_path):
    plan = render(Selection(hardware="h200"), catalog)
    (deployment,) = _documents(render_manifests(plan, "k8s", catalog=catalog), "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] + container["args"] == plan.argv
    # and after a YAML round trip, as kubectl reads the file
    text = render_manifests(plan, "k8s", catalog=catalog).to_yaml()
    (loaded,) = [d for d in yaml.safe_load_all(text) if d["kind"] == "Deployment"]
    reread = loaded["spec"]["template"]["spec"]["containers"][0]
    assert reread["command"] + reread["args"] == plan.argv
    assert {e["name"]: e.get("value") for e in reread["env"] if "value" in e} == plan.env
    for label, seed in seed_plans(catalog):  # every one-node seed configuration
        if seed.deploy_type != "multi_node":
            (dep,) = _documents(render_manifests(seed, "k8s", catalog=catalog), "Deployment")
            c = dep["spec"]["template"]["spec"]["containers"][0]
            assert c["command"] + c["args"] == seed.argv, label


@pytest.mark.parametrize("strategy", ["multi_node_tp", "multi_node_tep", "multi_node_tp_dp", "multi_node_dep"])
def test_every_pod_of_a_group_runs_its_nodes_command(catalog, tmp_path, strategy):
    """Leader and workers of a 3-node LWS, after the kubelet fills LWS's variables (and a shell does any
    arithmetic), run exactly the commands `render` gives for those nodes with that head address."""
    address = "nemo-0.nemo.default"
    plan = render(Selection(hardware="h200", strategy=strategy, nodes=3), catalog)
    expected = render(Selection(hardware="h200", strategy=strategy, nodes=3, head_address=address), catalog)
    (lws,) = _documents(render_manifests(plan, "lws", catalog=catalog), "LeaderWorkerSet")
    template = lws["spec"]["leaderWorkerTemplate"]
    assert template["size"] == 3
    leader = template["leaderTemplate"]["spec"]["containers"][0]
    worker = template["workerTemplate"]["spec"]["containers"][0]
    env = {"LWS_LEADER_ADDRESS": address, "LWS_GROUP_SIZE": "3"}
    assert container_argv(leader, {**env, "LWS_WORKER_INDEX": "0"}, tmp_path) == expected.argv
    for rank in (1, 2):
        got = container_argv(worker, {**env, "LWS_WORKER_INDEX": str(rank)}, tmp_path)
        assert got == expected.worker_argvs[rank - 1], rank
    # GPU request: one node's GPUs per pod
    assert leader["resources"]["limits"]["nvidia.com/gpu"] == str(catalog.hardware["h200"].gpu_count)


def test_k8s_multi_node_runs_one_deployment_per_node_with_the_head_service_as_address(catalog):
    plan = render(Selection(hardware="h200", strategy="multi_node_tep", nodes=2), catalog)
    manifests = render_manifests(plan, "k8s", options=DeployOptions(name="nemo"), catalog=catalog)
    deployments = _documents(manifests, "Deployment")
    expected = render(Selection(hardware="h200", strategy="multi_node_tep", nodes=2, head_address="nemo-head"), catalog)
    argvs = [d["spec"]["template"]["spec"]["containers"][0] for d in deployments]
    assert [c["command"] + c["args"] for c in argvs] == [expected.argv, *expected.worker_argvs]
    headless = next(s for s in _documents(manifests, "Service") if s["metadata"]["name"] == "nemo-head")
    assert headless["spec"]["clusterIP"] == "None" and headless["spec"]["publishNotReadyAddresses"] is True
    (claim,) = _documents(manifests, "PersistentVolumeClaim")
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]


def test_helm_values_make_the_chart_run_the_plans_flags(catalog):
    """What the chart's template passes to vllm serve, from these values, holds every flag of the plan with
    its value; the chart adds only --host 0.0.0.0 and the port (and --tensor-parallel-size 1 where the plan
    left vLLM's default)."""
    for label, plan in seed_plans(catalog):
        if plan.deploy_type == "multi_node":
            continue
        (values,) = render_manifests(plan, "helm", catalog=catalog).documents
        command = engine_command(values)
        assert command[:3] == plan.argv[:3], label
        added = {"--host": "0.0.0.0", "--port": str(plan.port)}
        assert flag_values(command) == {**flag_values(plan.argv), **added}, label


def test_helm_multi_node_uses_the_charts_ray_mode_without_vllms_own_node_flags(catalog):
    plan = render(Selection(hardware="h200", strategy="multi_node_tep", nodes=2), catalog)
    (values,) = render_manifests(plan, "helm", catalog=catalog).documents
    model = values["servingEngineSpec"]["modelSpec"][0]
    assert model["raySpec"]["enabled"] is True and model["replicaCount"] == 1  # a head and one worker
    command = engine_command(values)
    flags = flag_values(command)
    assert flags["--distributed-executor-backend"] == "ray" and flags["--tensor-parallel-size"] == "16"
    assert not {"--nnodes", "--node-rank", "--master-addr", "--headless"} & set(flags)
    assert "--enable-expert-parallel" in flags


def test_what_an_operator_would_forget_is_there(catalog):
    plan = render(Selection(hardware="h200", strategy="single_node_tp", extra=["--tensor-parallel-size 4"]), catalog)
    manifests = render_manifests(plan, "k8s", catalog=catalog)
    (deployment,) = _documents(manifests, "Deployment")
    pod = deployment["spec"]["template"]
    container = pod["spec"]["containers"][0]
    assert container["resources"]["limits"] == {"nvidia.com/gpu": "4"}
    assert container["image"] == plan.docker_image == "vllm/vllm-openai:v0.28.0"
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert volumes["dshm"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "4Gi"}
    assert {"name": "dshm", "mountPath": "/dev/shm"} in container["volumeMounts"]
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"] == {"path": "/health", "port": 8000}
    startup = container["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= manifests.sizing.startup_s
    token = next(e for e in container["env"] if e["name"] == "HF_TOKEN")
    assert token == {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "HF_TOKEN",
                                                                        "optional": True}}}
    assert pod["metadata"]["annotations"]["workbench/served-model-name"] == plan.served_model_name
    assert pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"][0]["matchExpressions"][0]["values"] == ["NVIDIA-H200"]
    (service,) = _documents(manifests, "Service")
    assert service["spec"]["ports"][0]["port"] == 8000


def test_the_planners_weight_figure_sizes_the_pods(catalog):
    """With a memory plan, the requests, cache and startup budget follow its weight figure (not the recipe's)."""
    from workbench.planner import plan_memory_from_config, read_model_config

    config = read_model_config("nano", config_path=Path(__file__).parent / "fixtures" / "public-configs"
                               / "nemotron-3-nano-30b-a3b.config.json")
    plan = render(Selection(hardware="h200", variant="bf16"), catalog)
    memory = plan_memory_from_config(plan, catalog, config)
    with_plan = render_manifests(plan, "k8s", memory=memory, catalog=catalog)
    without = render_manifests(plan, "k8s", catalog=catalog)
    weights_gib = memory.weights.bytes / 2**30
    assert with_plan.sizing.weights_gib == pytest.approx(weights_gib)
    assert any("the memory planner" in line for line in with_plan.comments)
    assert without.sizing.weights_gib == pytest.approx(72e9 / 2**30)  # the recipe's vram_minimum_gb for BF16
    size = with_plan.sizing
    assert size.memory_gib == math.ceil(weights_gib) + size.shm_gib + 8
    assert size.startup_s == math.ceil(weights_gib * 12) + 600


def test_known_issues_and_provenance_travel_as_comments_and_annotations(catalog):
    plan = render(Selection(hardware="dgx_spark_gb10"), catalog)
    assert plan.known_issues
    for fmt in ManifestFormat:
        manifests = render_manifests(plan, fmt, catalog=catalog)
        text = manifests.to_yaml()
        for issue in plan.known_issues:
            assert f"# known issue: {issue.title}" in text
        assert f"#   {plan.shell_command(multiline=False)}\n" in text
        assert "workbench/known-issues" in text and "workbench/flag-layers" in text


def test_bad_input_is_refused_with_the_change_to_make(catalog):
    plan = render(Selection(hardware="h200", strategy="multi_node_tep"), catalog)  # no --nodes
    with pytest.raises(SelectionError) as err:
        render_manifests(plan, "lws", catalog=catalog)
    assert "how many" in err.value.message and err.value.settings == {"nodes": 2}
    good = render(Selection(hardware="h200"), catalog)
    for bad in ("Nemotron", "nemo_3", "-nemo", "n" * 41):
        with pytest.raises(InputError) as err:
            render_manifests(good, "k8s", options=DeployOptions(name=bad), catalog=catalog)
        assert "k8s_name" in err.value.settings and err.value.hint
    with pytest.raises(SelectionError):
        render_manifests(good, "yaml", catalog=catalog)
    with pytest.raises(SelectionError) as err:
        render_manifests(render(Selection(preset="trtllm_mtp"), catalog), "k8s", catalog=catalog)
    assert "vLLM" in err.value.message


def test_validation_reports_each_problem_with_its_path(catalog):
    """Negative controls: the validators must catch a wrong type, an unknown field and a typo'd key."""
    plan = render(Selection(hardware="h200", strategy="multi_node_tep", nodes=2), catalog)
    k8s = render_manifests(plan, "k8s", catalog=catalog)
    deployment = _documents(k8s, "Deployment")[0]
    deployment["spec"]["replicas"] = "one"
    deployment["spec"]["template"]["spec"]["containers"][0]["resource"] = {}
    lines = [p.line() for p in validate_manifests(k8s).problems]
    assert any("spec.replicas" in line for line in lines) and any("'resource' was unexpected" in line for line in lines)
    lws = render_manifests(plan, "lws", catalog=catalog)
    spec = _documents(lws, "LeaderWorkerSet")[0]["spec"]["leaderWorkerTemplate"]
    spec["sizee"] = 2
    spec["workerTemplate"]["spec"]["containers"][0]["args"][0] = 1
    lines = [p.line() for p in validate_manifests(lws).problems]
    assert any("leaderWorkerTemplate.sizee" in line for line in lines)
    assert any("workerTemplate.spec.containers.0.args.0" in line for line in lines)
    helm = render_manifests(plan, "helm", catalog=catalog)
    model = copy.deepcopy(helm.documents[0]["servingEngineSpec"]["modelSpec"][0])
    model["requestGpu"], model["requestCPU"] = 1, "4"
    helm.documents[0]["servingEngineSpec"]["modelSpec"][0] = model
    lines = [p.line() for p in validate_manifests(helm).problems]
    assert any("requestGpu" in line for line in lines) and any("requestCPU" in line for line in lines)


def test_shipped_schemas_are_the_published_files_noted_in_sources(catalog):
    sources = (SCHEMAS / "SOURCES.md").read_text()
    for path in sorted(SCHEMAS.glob("*.json")) + sorted(SCHEMAS.glob("*.yaml")):
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        row = next(line for line in sources.splitlines() if f"`{path.name}`" in line)
        assert digest in row and re.search(r"`[0-9a-f]{40}`", row), path.name


def test_cli_render_check_prints_yaml_and_validates(capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    code = cli.main(["render", "--hardware", "h200", "--strategy", "multi_node_tep", "--nodes", "2",
                     "--format", "lws", "--check", "--name", "nemo", "--namespace", "inference"])
    out, err = capsys.readouterr()
    assert code == 0, err
    docs = list(yaml.safe_load_all(out))
    assert [d["kind"] for d in docs] == ["PersistentVolumeClaim", "LeaderWorkerSet", "Service"]
    assert all(d["metadata"]["namespace"] == "inference" for d in docs)
    assert "5 checked, 0 problem(s)" in err
    code = cli.main(["render", "--hardware", "h200", "--format", "k8s", "--name", "Nemo"])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert "python -m workbench render --hardware h200 --format k8s --name nemo" in err
    code = cli.main(["render", "--hardware", "h200", "--strategy", "multi_node_tep", "--format", "helm"])
    out, err = capsys.readouterr()
    assert code == 2 and "--nodes 2" in err


def test_render_check_in_a_fresh_process_exits_zero():
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    proc = subprocess.run([sys.executable, "-m", "workbench", "render", "--hardware", "h200", "--format", "k8s",
                           "--check"], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "3 checked, 0 problem(s)" in proc.stderr
    assert [d["kind"] for d in yaml.safe_load_all(proc.stdout)] == ["PersistentVolumeClaim", "Deployment", "Service"]


@pytest.mark.vllm
def test_vllms_parser_accepts_what_the_chart_will_run(catalog):
    """The command the chart assembles from the values (Ray mode for the multi-node strategies) goes through
    vLLM's own `vllm serve` parser and its checks (the CPU build's), like every rendered command does."""
    pytest.importorskip("vllm", reason="needs the real vLLM CPU build")
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from test_vllm_cli_accepts_renders import CHECKER

    commands = {}
    for label, plan in seed_plans(catalog):
        (values,) = render_manifests(plan, "helm", catalog=catalog).documents
        commands.setdefault(tuple(engine_command(values)[2:]), label)
    control = ["m", "--tensor-parallel-size", "two"]
    proc = subprocess.run([sys.executable, "-c", CHECKER], input=json.dumps([list(c) for c in commands] + [control]),
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(proc.stdout.strip().splitlines()[-1])["results"]
    assert results[-1]["problems"], "the control must fail"
    failures = [(commands[tuple(r["argv"])], r["problems"]) for r in results[:-1] if r["problems"]]
    print(f"{len(commands)} distinct chart commands accepted by vLLM's parser")
    assert not failures, failures[:5]


def test_recipe_tab_panel_shows_each_format_and_its_validation(catalog):
    from workbench.ui.manifests_panel import manifest_outputs

    plan = render(Selection(hardware="h200", strategy="multi_node_tep", nodes=2), catalog)
    status, k8s, lws, helm = manifest_outputs(catalog, plan.to_dict())
    assert status.count("checked offline, valid") == 3, status
    assert [d["kind"] for d in yaml.safe_load_all(lws)] == ["PersistentVolumeClaim", "LeaderWorkerSet", "Service"]
    assert "servingEngineSpec" in yaml.safe_load(helm) and "kind: Deployment" in k8s
    # a strategy that needs nodes, without them: each tab says why instead of a manifest
    status, k8s, lws, helm = manifest_outputs(catalog, render(Selection(hardware="h200", strategy="multi_node_tep"),
                                                              catalog).to_dict())
    assert all(text.startswith("# Cannot render:") for text in (k8s, lws, helm)) and "how many" in status
