"""HiCache harness: benchmark and regression runs of SGLang's hierarchical KV cache."""

__version__ = "0.1.0"
