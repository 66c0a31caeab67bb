"""The built-in deterministic proposer: the ``koi.default_proposer`` plugin.

A thin adapter over :class:`koi.candidates.CandidateGenerator`, which holds the logic
(screening, sizing, placement, the backward-query focus) that the planner and the baselines
share.
"""

from __future__ import annotations

from koi.candidates import CandidateGenerator, ProposalContext, ProposerConfig
from koi.plugins._markers import hookimpl
from koi.surrogate import Surrogate
from koi.types import Job, Ladder

__all__ = ["DEFAULT_PROPOSER", "DefaultProposer"]

#: The plugin name the planner registers the built-in proposer under.
DEFAULT_PROPOSER = "koi.default_proposer"


class DefaultProposer:
    """Deterministic ladder proposals; register an instance as a koi plugin."""

    def __init__(
        self,
        surrogate: Surrogate | None = None,
        *,
        cfg: ProposerConfig | None = None,
        generator: CandidateGenerator | None = None,
    ) -> None:
        if generator is None:
            if surrogate is None:
                raise TypeError("DefaultProposer: give a surrogate or a generator")
            generator = CandidateGenerator(surrogate, cfg)
        self.generator = generator

    @hookimpl
    def koi_propose_ladders(self, job: Job, context: ProposalContext) -> list[Ladder]:
        return self.generator.propose(job, context)
