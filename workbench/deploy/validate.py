"""Offline validation of rendered manifests, every problem reported with its path.

    Kubernetes objects   the official OpenAPI schemas as `kubernetes-validate` ships them
                         (strict: a field Kubernetes does not know is an error), version 1.33
    LeaderWorkerSet      the CRD's own openAPIV3Schema (schemas/, LWS v0.10.0), and its pod
                         templates against Kubernetes' PodTemplateSpec (strict)
    Helm values          production-stack's values.schema.json (schemas/, vllm-stack 0.1.12)

Neither shipped schema forbids unknown keys (the API server prunes them, Helm ignores
them), so a key that a schema with `properties` does not list is reported too: a typo
there would be dropped without a word. Where each schema file comes from: schemas/SOURCES.md.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import jsonschema
import yaml
from referencing import Registry, Resource

from workbench.deploy.manifests import ManifestFormat, Manifests

__all__ = ["KUBERNETES_VERSION", "LWS_CRD", "PRODUCTION_STACK_SCHEMA", "Problem", "ValidationReport",
           "validate_manifests"]

KUBERNETES_VERSION = "1.33.0"
LWS_CRD = "leaderworkerset.x-k8s.io_leaderworkersets.yaml"
PRODUCTION_STACK_SCHEMA = "production-stack-values.schema.json"


@dataclass(frozen=True)
class Problem:
    document: str
    path: str
    message: str

    def line(self) -> str:
        return f"{self.document}: {self.path or '(top)'}: {self.message}"


@dataclass
class ValidationReport:
    format: ManifestFormat
    checked: list[str] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def summary(self) -> str:
        verdict = "valid" if self.ok else f"{len(self.problems)} problem(s)"
        return f"{len(self.checked)} check(s), {verdict}: " + "; ".join(self.checked)


def _schema_text(filename: str) -> str:
    return resources.files("workbench.deploy").joinpath("schemas", filename).read_text(encoding="utf-8")


@functools.lru_cache(maxsize=None)
def _lws_schema() -> dict[str, Any]:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # the CRD is 1.3 MB of YAML
    crd = yaml.load(_schema_text(LWS_CRD), Loader=loader)
    version = next(v for v in crd["spec"]["versions"] if v["name"] == "v1")
    return dict(version["schema"]["openAPIV3Schema"])


@functools.lru_cache(maxsize=None)
def _values_schema() -> dict[str, Any]:
    return dict(json.loads(_schema_text(PRODUCTION_STACK_SCHEMA)))


def _kubernetes_schemas() -> Any:
    # Imported when a manifest is validated, not with the CLI: it takes about 2 s (108 MB of schemas),
    # and the GPU machines' environments need not have it to serve.
    from kubernetes_validate import utils

    return utils


@functools.lru_cache(maxsize=None)
def _kubernetes_validator(filename: str) -> jsonschema.protocols.Validator:
    kubernetes_schemas = _kubernetes_schemas()
    folder = f"kubernetes-json-schema/v{KUBERNETES_VERSION}-local-strict"
    schema = kubernetes_schemas.schema_contents(f"{folder}/{filename}", KUBERNETES_VERSION)
    definitions = kubernetes_schemas.schema_contents(f"{folder}/_definitions.json", KUBERNETES_VERSION)
    registry: Registry[Any] = Resource.from_contents(definitions) @ (Resource.from_contents(schema) @ Registry())
    return jsonschema.Draft202012Validator(schema, registry=registry)


def _kubernetes_file(doc: Mapping[str, Any]) -> str:
    group_version = str(doc.get("apiVersion", ""))
    group, _, version = group_version.rpartition("/")
    api = f"{group.split('.')[0]}-{version}" if group else version
    return f"{str(doc.get('kind', '')).lower()}-{api}.json"


def _path(parts: Any) -> str:
    return ".".join(str(p) for p in parts)


def _errors(validator: jsonschema.protocols.Validator, data: Any, document: str, prefix: str = "") -> list[Problem]:
    out = []
    for err in sorted(validator.iter_errors(data), key=lambda e: list(map(str, e.absolute_path))):
        path = _path(err.absolute_path)
        out.append(Problem(document, f"{prefix}.{path}".strip(".") if prefix else path, err.message))
    return out


def unknown_keys(data: Any, schema: Mapping[str, Any], path: tuple[Any, ...] = ()) -> Iterator[tuple[str, str]]:
    """(path, message) for each key that a schema with `properties` (and no `additionalProperties`) does not list."""
    if isinstance(data, Mapping):
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        open_ended = extra is not None or schema.get("x-kubernetes-preserve-unknown-fields")
        for key, value in data.items():
            sub = (props or {}).get(key)
            if sub is None and isinstance(extra, Mapping):
                sub = extra
            if props is not None and not open_ended and key not in props:
                yield _path((*path, key)), f"{key!r} is not a field of this schema (it would be dropped)"
            elif isinstance(sub, Mapping):
                yield from unknown_keys(value, sub, (*path, key))
    elif isinstance(data, list) and isinstance(schema.get("items"), Mapping):
        for i, item in enumerate(data):
            yield from unknown_keys(item, schema["items"], (*path, i))


def _name(doc: Mapping[str, Any]) -> str:
    return f"{doc.get('kind', 'values')}/{(doc.get('metadata') or {}).get('name', '')}".rstrip("/")


def _check_lws(doc: Mapping[str, Any], report: ValidationReport) -> None:
    name = _name(doc)
    schema = _lws_schema()
    report.problems += _errors(jsonschema.Draft202012Validator(schema), doc, name)
    report.problems += [Problem(name, p, m) for p, m in unknown_keys(doc, schema)]
    report.checked.append(f"{name} against the LeaderWorkerSet CRD (LWS v0.10.0)")
    pod_template = _kubernetes_validator("podtemplatespec-v1.json")
    templates = doc.get("spec", {}).get("leaderWorkerTemplate", {})
    for key in ("leaderTemplate", "workerTemplate"):
        if key in templates:
            report.problems += _errors(pod_template, templates[key], name, f"spec.leaderWorkerTemplate.{key}")
            report.checked.append(f"{name} {key} against Kubernetes {KUBERNETES_VERSION} PodTemplateSpec (strict)")


def validate_manifests(manifests: Manifests) -> ValidationReport:
    """Check every document of `manifests` offline; the report lists what was checked and every problem."""
    report = ValidationReport(manifests.format)
    if manifests.format is ManifestFormat.HELM:
        for doc in manifests.documents:
            schema = _values_schema()
            report.problems += _errors(jsonschema.Draft202012Validator(schema), doc, "values")
            report.problems += [Problem("values", p, m) for p, m in unknown_keys(doc, schema)]
            report.checked.append("values against production-stack's values.schema.json (vllm-stack 0.1.12)")
        return report
    for doc in manifests.documents:
        if doc.get("kind") == "LeaderWorkerSet":
            _check_lws(doc, report)
            continue
        name = _name(doc)
        try:
            validator = _kubernetes_validator(_kubernetes_file(doc))
        except (_kubernetes_schemas().SchemaNotFoundError, FileNotFoundError):
            report.problems.append(Problem(name, "", f"no Kubernetes {KUBERNETES_VERSION} schema for "
                                                     f"{doc.get('apiVersion')} {doc.get('kind')}"))
            continue
        report.problems += _errors(validator, doc, name)
        report.checked.append(f"{name} against Kubernetes {KUBERNETES_VERSION} (strict)")
    return report
