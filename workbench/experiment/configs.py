"""The configurations an experiment compares: a label and a recipe Selection (extra flags included).

    configs_from_specs("off,ngram", Selection(hardware="cpu"), catalog)   # the short form
    parse_config_text("ngram8:ngram:--max-num-seqs 8", base, catalog)    # LABEL:SPEC[:EXTRA FLAGS]
    vary_configs("mtp", ["ssm32=--mamba-ssm-cache-dtype float32",         # the same configuration but for
                         "ssm16=--mamba-ssm-cache-dtype float16"], base, catalog)  # its flags (x each spec mode)

A configuration is checked by rendering it: a spec mode the recipe lacks is refused
with the valid list, and so is one the recipe has but cannot use here (it would
otherwise fall back to another mode and the result would carry the wrong name).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from workbench.errors import InputError, SelectionError
from workbench.recipes import Catalog, LaunchPlan, Selection, render

__all__ = ["OFF", "ExperimentConfig", "configs_from_specs", "parse_config_text", "render_config", "vary_configs"]

# Words that mean "no speculative decoding" in --spec.
OFF = "off"
_OFF_WORDS = frozenset({"off", "none", "no"})


@dataclass
class ExperimentConfig:
    """One configuration: what it is called in every table, and the selection it renders from."""

    label: str
    selection: Selection

    @property
    def spec(self) -> str | None:
        return self.selection.spec

    def to_dict(self) -> dict[str, Any]:
        return {"label": self.label, "selection": self.selection.to_dict()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ExperimentConfig:
        return cls(label=str(data["label"]), selection=Selection.from_dict(data.get("selection") or {}))


def _spec_modes(base: Selection, catalog: Catalog) -> list[str]:
    plan = render(dataclasses.replace(base, spec=None), catalog)
    return list(catalog.recipe(plan.recipe_id).spec_modes)


def _with_spec(base: Selection, spec: str | None) -> Selection:
    features = [f for f in (base.features or []) if f != "spec_decoding"]
    if spec is not None:
        features.append("spec_decoding")
    return dataclasses.replace(base, spec=spec, features=features if (base.features is not None or spec) else None,
                               extra=list(base.extra))


def render_config(config: ExperimentConfig, catalog: Catalog) -> LaunchPlan:
    """The configuration's plan, or a SelectionError when it would not be what its label says."""
    plan = render(config.selection, catalog)
    asked = config.selection.spec
    if asked is not None and plan.spec_mode != asked:
        why = "; ".join(fb.reason for fb in plan.fallbacks if fb.choice == "spec") or "it falls back to another mode"
        raise SelectionError(f"Configuration {config.label!r}: speculative decoding {asked!r} cannot run here: {why}.",
                             hint="Choose another speculative decoding mode, variant or hardware.",
                             settings=("spec", "variant", "hardware"))
    if asked is None and plan.spec_mode is not None:
        raise SelectionError(f"Configuration {config.label!r} asked for no speculative decoding, "
                             f"but the plan uses {plan.spec_mode}.", hint="Leave the spec_decoding feature out.",
                             settings=("features",))
    return plan


def configs_from_specs(specs: str | Sequence[str], base: Selection, catalog: Catalog) -> list[ExperimentConfig]:
    """`off,ngram` (or a list) -> one configuration per spec mode, each labelled by its mode."""
    words = [w.strip() for w in (specs.split(",") if isinstance(specs, str) else specs) if w.strip()]
    if not words:
        raise InputError("The speculative decoding modes name no configuration.", hint="Write e.g. off,ngram.",
                         settings=("spec",))
    valid = _spec_modes(base, catalog)
    configs: list[ExperimentConfig] = []
    for word in words:
        spec = None if word.lower() in _OFF_WORDS else word
        if spec is not None and spec not in valid:
            raise SelectionError(
                f"Speculative decoding mode {word!r} is not in this recipe.",
                hint="Valid modes here: " + ", ".join([OFF, *valid]) + ".",
                settings=("spec",),
            )
        label = OFF if spec is None else spec
        if any(c.label == label for c in configs):
            raise InputError(f"The speculative decoding modes name {label!r} twice.", hint="Give each mode once.",
                             settings=("spec",))
        config = ExperimentConfig(label, _with_spec(base, spec))
        render_config(config, catalog)
        configs.append(config)
    return configs


def parse_config_text(text: str, base: Selection, catalog: Catalog) -> ExperimentConfig:
    """`LABEL:SPEC[:EXTRA FLAGS]`, e.g. `ngram-8seqs:ngram:--max-num-seqs 8` (SPEC `off` for none)."""
    parts = text.split(":", 2)
    if len(parts) < 2 or not parts[0].strip():
        raise InputError(f"--config {text!r} is not LABEL:SPEC[:EXTRA FLAGS].",
                         hint="For example --config 'ngram-8seqs:ngram:--max-num-seqs 8' or --config 'plain:off'.")
    label, spec_word = parts[0].strip(), parts[1].strip()
    spec = None if spec_word.lower() in _OFF_WORDS or not spec_word else spec_word
    valid = _spec_modes(base, catalog)
    if spec is not None and spec not in valid:
        raise SelectionError(f"Configuration {label!r}: speculative decoding mode {spec_word!r} is not in this recipe.",
                             hint="Valid SPEC values here: " + ", ".join([OFF, *valid]) + ".")
    selection = _with_spec(base, spec)
    if len(parts) == 3 and parts[2].strip():
        selection.extra = [*selection.extra, parts[2].strip()]
    config = ExperimentConfig(label, selection)
    render_config(config, catalog)
    return config


def _variant(text: str) -> tuple[str, str]:
    label, sep, flags = text.partition("=")
    if not sep or not label.strip() or not flags.strip():
        raise InputError(f"The variant {text!r} is not LABEL=FLAGS.",
                         hint="Write a label, an equals sign and the extra vllm serve flags, e.g. "
                         "ssm16=--mamba-ssm-cache-dtype float16.", settings=("vary",))
    return label.strip(), flags.strip()


def vary_configs(specs: str | Sequence[str] | None, variants: Sequence[str], base: Selection,
                 catalog: Catalog) -> list[ExperimentConfig]:
    """Configurations that differ only by extra flags: one per `LABEL=FLAGS` in `variants`, each
    the base selection plus FLAGS, for each spec mode in `specs` (none: no speculative decoding).
    Labelled LABEL, or MODE+LABEL when several spec modes are given."""
    modes = configs_from_specs(specs, base, catalog) if specs else [ExperimentConfig(OFF, _with_spec(base, None))]
    parsed = [_variant(v) for v in variants]
    labels = [label for label, _ in parsed]
    if len(set(labels)) != len(labels):
        raise InputError(f"The variants name a label twice: {', '.join(labels)}.",
                         hint="Give each variant its own label.", settings=("vary",))
    configs = []
    for mode in modes:
        for label, flags in parsed:
            selection = dataclasses.replace(mode.selection, extra=[*mode.selection.extra, flags])
            config = ExperimentConfig(label if len(modes) == 1 else f"{mode.label}+{label}", selection)
            render_config(config, catalog)
            configs.append(config)
    return configs
