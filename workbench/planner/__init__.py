"""The memory planner: how many sequences fit at what context, before pressing Launch.

    config.py        reading config.json: --config PATH, the local build, the HF cache, the Hub
    architecture.py  config.json -> layer kinds, attention and Mamba-2 dimensions
    weights.py       weight bytes for the variant's quantization
    settings.py      a rendered command -> cache settings, with vLLM's defaults
    memory.py        vLLM 0.32.0's KV arithmetic: pages, hybrid alignment, groups, pool, capacity
    budget.py        memory for the KV cache: exact (VLLM_CPU_KVCACHE_SPACE) or estimated (GPU)
    recommend.py     concurrency against context, the recommended flags, the Mamba-blocks limit
    planning.py      plan_memory(plan): the above in order (the only I/O: reading config.json)
    startup_log.py   what vLLM logged: "KV cache size: N tokens, Maximum concurrency ..."

Rendering stays pure: the planner reads files after render, never inside it.
"""

from workbench.planner.config import ModelConfigFile, read_model_config
from workbench.planner.planning import MemoryPlan, plan_command_memory, plan_memory, plan_memory_from_config
from workbench.planner.startup_log import StartupCapacity, startup_capacity

__all__ = ["MemoryPlan", "ModelConfigFile", "StartupCapacity", "plan_command_memory", "plan_memory", "plan_memory_from_config",
           "read_model_config", "startup_capacity"]
