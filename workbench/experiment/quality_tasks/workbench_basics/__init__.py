"""The workbench_basics task: its YAML, its items (workbench_basics.jsonl), scoring.py and examples.py."""
