"""logwatch: watch LLM inference servers (SGLang, vLLM) start up and serve, from their logs."""

__version__ = "0.1.0"
