"""Recipes: the YAML catalog, and rendering a Selection to a LaunchPlan.

    catalog.py   the catalog as data (hardware, strategies, presets, recipes)
    loading.py   reading and validating the files (every problem reported together)
    argv.py      argv as flags and values: the one pairing rule, de-dupe, shell quoting
    plan.py      Selection (what was asked) and LaunchPlan (what it renders to)
    resolve.py   choices resolved for a recipe and machine, with fallbacks
    render.py    the layers in upstream's order -> LaunchPlan (pure)
    choices.py   what a picker offers, and the plan summary both UIs show

The catalog uses the vllm-project/recipes schema (`recipes/models/<org>/<repo>.yaml`,
`recipes/strategies/*.yaml`, `recipes/taxonomy.yaml`), so an upstream recipe file
loads unchanged; workbench additions are extra keys (a `workbench:` block with
presets and explanations, `model.workbench_local_build`, gates on `dependencies`).
"""

from workbench.recipes.argv import dedupe_args, shell_quote
from workbench.recipes.catalog import (
    DEFAULT_RECIPE,
    RECIPES_DIR_ENV,
    Catalog,
    HardwareProfile,
    Preset,
    Recipe,
    Strategy,
    default_recipes_dir,
)
from workbench.recipes.loading import load_catalog, load_recipe
from workbench.recipes.plan import DEFAULT_PORT, Fallback, LaunchPlan, Selection, provenance_rows
from workbench.recipes.render import render
from workbench.recipes.resolve import recipe_for_hardware

__all__ = [
    "DEFAULT_PORT",
    "DEFAULT_RECIPE",
    "RECIPES_DIR_ENV",
    "Catalog",
    "Fallback",
    "HardwareProfile",
    "LaunchPlan",
    "Preset",
    "Recipe",
    "Selection",
    "Strategy",
    "dedupe_args",
    "default_recipes_dir",
    "load_catalog",
    "load_recipe",
    "provenance_rows",
    "recipe_for_hardware",
    "render",
    "shell_quote",
]
