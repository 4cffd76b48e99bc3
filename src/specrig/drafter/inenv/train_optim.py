"""The trainer's optimiser (``optimizer`` in specrig's drafter settings): AdamW over every weight,
or speculators' default, Muon, which orthogonalises the update of each weight matrix of the layer
(torch's ``torch.optim.Muon``, its update scaled to AdamW's RMS), with AdamW for what is not such
a matrix (the norms) or is a vocabulary matrix (``lm_head``), as Muon's authors advise.

Each parameter group keeps its base rate in ``base_lr``: the trainer's schedule scales that.
Runs inside the recipe's train environment (torch only)."""

from __future__ import annotations

import torch
from torch import nn

ADAMW_BETAS = (0.9, 0.95)
MUON_MOMENTUM = 0.95
MUON_WEIGHT_DECAY = 0.1  # torch's and speculators' default for the Muon group


class Optimizers:
    """One or two torch optimisers stepped together, seen by the trainer as one (its groups, its
    state for the between-epoch checkpoint)."""

    def __init__(self, parts: list[torch.optim.Optimizer]) -> None:
        self.parts = parts
        for opt in parts:
            for group in opt.param_groups:
                group.setdefault("base_lr", group["lr"])

    @property
    def param_groups(self) -> list[dict]:
        return [g for opt in self.parts for g in opt.param_groups]

    def set_lr(self, factor: float) -> None:
        for group in self.param_groups:
            group["lr"] = group["base_lr"] * factor

    def zero_grad(self) -> None:
        for opt in self.parts:
            opt.zero_grad(set_to_none=True)

    def step(self) -> None:
        for opt in self.parts:
            opt.step()

    def state_dict(self) -> dict:
        return {str(n): opt.state_dict() for n, opt in enumerate(self.parts)}

    def load_state_dict(self, state: dict) -> None:
        for n, opt in enumerate(self.parts):
            opt.load_state_dict(state[str(n)])


def muon_split(model: nn.Module) -> tuple[list[nn.Parameter], list[nn.Parameter]]:
    """(Muon's, AdamW's): trainable matrices other than ``lm_head``, and everything else."""
    muon, adamw = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        (muon if p.ndim == 2 and min(p.shape) > 1 and not name.startswith("lm_head") else adamw).append(p)
    return muon, adamw


def build(model: nn.Module, kind: str, lr: float, weight_decay: float) -> Optimizers:
    if kind == "adamw":
        return Optimizers([torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay, betas=ADAMW_BETAS)])
    if kind != "muon":
        raise ValueError(f"unknown optimizer {kind!r} (adamw or muon)")
    muon, adamw = muon_split(model)
    return Optimizers(
        [
            torch.optim.Muon(
                muon,
                lr=lr,
                momentum=MUON_MOMENTUM,
                weight_decay=MUON_WEIGHT_DECAY,
                adjust_lr_fn="match_rms_adamw",
            ),
            torch.optim.AdamW(adamw, lr=lr, weight_decay=weight_decay, betas=ADAMW_BETAS),
        ]
    )
