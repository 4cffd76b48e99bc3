"""Scripts that run with an engine environment's Python (which has torch and
transformers), not with specrig's own. Each is a standalone file that imports
nothing from specrig, so it can run from any interpreter given its path."""
