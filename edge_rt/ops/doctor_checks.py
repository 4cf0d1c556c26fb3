"""What a doctor check returns, and the GPU it saw (shared by :mod:`edge_rt.ops.doctor` and
:mod:`edge_rt.ops.doctor_pack`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass

__all__ = ["Check", "Gpu", "STATUSES", "blocking"]

STATUSES = ("ok", "info", "warn", "fail")


@dataclass(frozen=True)
class Check:
    name: str
    status: str  # ok | info | warn | fail
    message: str  # what was found and, unless ok, how to fix it

    def __post_init__(self):
        if self.status not in STATUSES:
            raise ValueError(f"check status must be one of {STATUSES}, got {self.status!r}")

    def as_dict(self) -> dict:
        return asdict(self)


def blocking(checks: list[Check]) -> list[Check]:
    return [c for c in checks if c.status == "fail"]


@dataclass(frozen=True)
class Gpu:
    present: bool
    name: str = ""
    driver: str = ""
    compute_capability: str = ""
    jetson: bool = False
    how: str = ""  # which probe found it
