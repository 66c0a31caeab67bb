"""``koi.memo.Memo`` keeps what the last two generations used, and the surrogate's memos,
aged once per tick, forget what two ticks did not ask for (a long-running planner's memory
follows the fleet, not the run's length) while giving the same predictions."""

from __future__ import annotations

import pytest

from koi.errors import InvalidInput
from koi.memo import Memo
from koi.surrogate import Surrogate
from koi.types import (
    Chain,
    Config,
    Ladder,
    Rank,
)
from tests._support.specs import H100_NODE, chat_job, gpus, models


def test_a_memo_forgets_what_a_whole_generation_did_not_use() -> None:
    memo: Memo[str, int | None] = Memo(limit=10)
    memo.put("used", 1)
    memo.put("idle", 2)
    memo.put("none", None)
    memo.age()
    assert memo.get("used") == 1  # moved back to the new generation
    assert "none" in memo
    assert memo.get("none", 7) is None
    memo.age()
    assert memo.get("used") == 1
    assert "none" in memo
    assert "idle" not in memo
    assert memo.get("idle") is None
    assert len(memo) == 2


def test_a_memo_never_aged_stays_within_two_generations_of_its_limit() -> None:
    memo: Memo[int, int] = Memo(limit=3)
    for k in range(100):
        memo.put(k, k)
        assert len(memo) <= 6
    assert memo.get(99) == 99
    assert memo.get(0) is None


@pytest.mark.parametrize("limit", [0, -1, True, 2.5])
def test_a_memo_limit_must_be_a_positive_integer(limit: object) -> None:
    with pytest.raises(InvalidInput, match="limit"):
        Memo(limit)  # type: ignore[arg-type]


def test_the_surrogates_memos_forget_what_two_ticks_did_not_ask_for() -> None:
    sur = Surrogate(gpus(), models())
    ladder = Ladder((Rank(Chain("Llama-3.1-8B", H100_NODE, Config(tp=1)), 2),))
    kept, dropped = chat_job(4.0, prompt=1500), chat_job(9.0, prompt=1500)
    first = {j.workload.rate_rps: sur.screen(j, ladder) for j in (kept, dropped)}
    misses = sur.misses
    for _ in range(3):  # three ticks that ask only for the kept job's screen
        sur.age()
        assert sur.screen(kept, ladder) is first[4.0]
    assert sur.misses == misses
    again = sur.screen(dropped, ladder)
    assert sur.misses == misses + 1  # forgotten, recomputed: the same prediction
    assert again == first[9.0]
    assert again is not first[9.0]
