"""specrig: reproducible LLM-serving stacks, measured."""

__version__ = "0.1.0"
