"""storekit: the storage tool for self-hosted LLM training clusters."""

__version__ = "0.1.0"
