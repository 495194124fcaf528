"""The configurations an experiment compares: a label and a recipe Selection (extra flags included).

    configs_from_specs("off,ngram", Selection(hardware="cpu"), catalog)   # the short form
    parse_config_text("ngram8:ngram:--max-num-seqs 8", base, catalog)    # LABEL:SPEC[:EXTRA FLAGS]

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

__all__ = ["OFF", "ExperimentConfig", "configs_from_specs", "parse_config_text", "render_config"]

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
