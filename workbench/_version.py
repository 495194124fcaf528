"""The workbench's version, in a module of its own: results record it without importing the package."""

__version__ = "0.1.0"
