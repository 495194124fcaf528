"""The memory planner: how many sequences fit at what context, before pressing Launch.

    config.py        reading config.json: --config PATH, the local build, the HF cache, the Hub
    architecture.py  config.json -> layer kinds, attention and Mamba-2 dimensions
    weights.py       weight bytes for the variant's quantization
    settings.py      a rendered command -> cache settings, with vLLM's defaults
    memory.py        vLLM 0.32.0's KV arithmetic: pages, hybrid alignment, groups, pool, capacity
    budget.py        memory for the KV cache: exact (VLLM_CPU_KVCACHE_SPACE) or estimated (GPU)
    recommend.py     concurrency against context, the recommended flags, the Mamba-blocks limit
    planning.py      plan_memory(plan): the above in order (the only I/O: reading config.json)
    startup_log.py   what vLLM logged: "KV cache size: N tokens, Maximum concurrency ...", memory lines
    versions.py      where vLLM releases differ (0.26.0 on the lent GPUs, 0.32.0 on CPUs)
    gpu_overhead.py  measured GPU figures: totals, CUDA context, cuBLAS, vLLM's non-torch and graphs
    log_comparison.py  planner_vs_log: the planner against a start-up log, with % differences

Rendering stays pure: the planner reads files after render, never inside it.
"""

from workbench.planner.config import ModelConfigFile, read_model_config
from workbench.planner.log_comparison import Figure, LogComparison, compare_with_log, planner_vs_log
from workbench.planner.planning import MemoryPlan, plan_command_memory, plan_memory, plan_memory_from_config
from workbench.planner.startup_log import StartupCapacity, StartupMemory, startup_capacity, startup_memory

__all__ = ["Figure", "LogComparison", "MemoryPlan", "ModelConfigFile", "StartupCapacity", "StartupMemory",
           "compare_with_log", "plan_command_memory", "plan_memory", "plan_memory_from_config", "planner_vs_log",
           "read_model_config", "startup_capacity", "startup_memory"]
