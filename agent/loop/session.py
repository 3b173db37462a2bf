"""The live objects of one agent session, and the one thing the agent needs of an evaluator.

A session's `Session` (the model, the evaluator with its problem loaded, the workspace's
repository, the tool schemas) is rebuilt on resume and never checkpointed: LangGraph passes it to
every node as the run context (agent/loop/graph.py), next to the state, which is JSON data
(agent/loop/state.py). The model is an `agent.model.ModelClient`; the evaluator is anything that is
`Evaluating` (tools.Evaluator in a run; the agent never reaches into it further than this).
"""
from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from agent.loop.judges import Judges

if TYPE_CHECKING:
    from agent.config import AgentConfig
    from agent.loop.ahead import Ahead
    from agent.cost import Price
    from agent.model import ModelClient
    from agent.workspace.root import ProblemRepo
    from tools.problem import ProblemInfo
    from tools.record import Result


class Evaluating(Protocol):
    """What the agent needs from the evaluator: the problem it judges against, the device it runs
    on, one candidate's verdict, and the baseline times (eager, torch.compile) it measured."""

    problem: ProblemInfo
    device: str

    def evaluate(self, source: str) -> Result: ...

    def baseline(self) -> dict[str, Any]: ...


@dataclass
class Session:
    """The live objects of one session (rebuilt on resume; never part of the checkpointed state)."""

    config: AgentConfig
    model: ModelClient
    evaluator: Evaluating
    repo: ProblemRepo
    tools: list[dict[str, Any]]
    gpu: str
    log: Callable[[str], None] = field(default=lambda line: print(line, file=sys.stderr, flush=True))
    mark: float = field(default_factory=time.monotonic)
    price: Price | None = None  # the model's price (agent/cost.py); None: no price, or the built-in policy
    free: bool = False  # the built-in policy: no model, no tokens, $0
    # a wide step's branches (agent/loop/beam.py) commit one at a time
    judging: threading.Lock = field(default_factory=threading.Lock)
    # the evaluators candidates are judged on, one per device, each a candidate at a time (agent/loop/judges.py);
    # None: the one evaluator above
    judges: Judges = None  # type: ignore[assignment]  # set in __post_init__
    # get_ncu_profile's budgeted call (agent/loop/counters.py); None: the tool is not offered
    counters: Callable[[str], tuple[dict[str, Any] | None, str | None]] | None = None
    # requests sent ahead of a wide step's fan-in (agent/loop/ahead.py, config `ahead`); None: not used
    ahead: Ahead | None = None

    def __post_init__(self) -> None:
        if self.judges is None:
            self.judges = Judges([self.evaluator])

    def tick(self) -> float:
        """Seconds since the last tick (or since this session began)."""
        now = time.monotonic()
        elapsed, self.mark = now - self.mark, now
        return elapsed
