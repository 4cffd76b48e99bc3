"""A configuration's identity: which of the recipe's ``[spec.NAME]`` it comes from,
the draft length ``--k`` gave it, the drafter ``--drafter`` swapped in, the engine
that serves it, and whether its server runs eager (``--acceptance-check``'s twin).
It is made once, in the plan, and carried to the summary; the name
(``eagle3-n1000-k2``, ``eagle3-k1-eager``) is only for display and is never parsed back."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

__all__ = ["ConfigId", "ServerFacts"]


class ConfigId(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    spec: str | None = None
    """The recipe's ``[spec.NAME]`` (its method, options and gates); None: the baseline."""
    k: int | None = None
    """Draft tokens a step when ``--k`` set them (None: the recipe's)."""
    drafter: str | None = None
    """The ``--drafter`` label (``n1000``, ``trained-shifted``, a folder's name); None: the recipe's."""
    engine: str | None = None
    eager: bool = False
    """Served with the engine's eager flag added (``--acceptance-check``'s twin of the same
    configuration on the compiled path; the name ends ``-eager``)."""

    @property
    def is_baseline(self) -> bool:
        return self.spec is None

    @property
    def name(self) -> str:
        if self.spec is None:
            return "baseline"
        name = self.spec + (f"-{self.drafter}" if self.drafter else "") + (f"-k{self.k}" if self.k is not None else "")
        return name + ("-eager" if self.eager else "")

    def compiled(self) -> ConfigId:
        """The configuration an eager twin is the twin of (itself when not a twin)."""
        return self.model_copy(update={"eager": False})


class ServerFacts(BaseModel):
    """What a configuration's server said about itself once ready (the lab records it, the
    summary reads it): its command line (key redacted), its start time, how many servers
    started with it, and the aux layer ids it logged (EAGLE-3; None: not logged)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    argv: list[str] = []
    ready_after_s: float | None = None
    started_together: int = 1
    aux_layers: list[int] | None = None
