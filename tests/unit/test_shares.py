"""A key's share of what all keys share: the budget's arithmetic and the settings that set
the shares (the broker's answers are in tests/adversarial/test_key_shares.py)."""

from __future__ import annotations

import pytest

from interpreter.api.connections import key_share
from interpreter.cli_settings import SettingsError, load
from interpreter.shares import SharedBudget


def test_a_budget_refuses_the_service_first_then_the_key_over_its_share() -> None:
    budget = SharedBudget()
    assert budget.refusal("a", 2, most=4, share=2) is None
    budget.take("a", 2)
    assert budget.refusal("a", 1, most=4, share=2) == "key"
    assert budget.refusal("b", 2, most=4, share=2) is None
    budget.take("b", 2)
    # Full in all: everyone waits, the key over its share too.
    assert budget.refusal("c", 1, most=4, share=2) == "service"
    assert budget.refusal("a", 1, most=4, share=2) == "service"
    budget.give_back("b", 2)
    assert (budget.held, budget.of("a"), budget.of("b")) == (2, 2, 0)
    assert budget.refusal("a", 1, most=4, share=2) == "key"
    budget.give_back("a", 1)
    assert budget.refusal("a", 1, most=4, share=2) is None


def test_a_key_share_is_lowered_with_the_connection_cap() -> None:
    assert key_share(128, 512, 512) == 128
    assert key_share(128, 512, 256) == 64  # the descriptor limit halved the cap
    assert key_share(8, 512, 8) == 1
    assert key_share(20, 20, 20) == 20


@pytest.mark.parametrize(
    ("share", "whole", "value"),
    [
        ("max_connections_per_key", "max_connections", 64),
        ("max_concurrent_uploads_per_key", "max_concurrent_uploads", 4),
        ("max_large_bodies_bytes_per_key", "max_large_bodies_bytes", 8 << 20),
    ],
)
def test_a_key_share_follows_a_smaller_whole_and_is_never_above_it(
    share: str, whole: str, value: int
) -> None:
    assert getattr(load({whole: value}), share) == value
    with pytest.raises(SettingsError) as given:
        load({whole: value, share: value + 1})
    assert "a key's share cannot be more than the whole" in str(given.value)


def test_one_notebook_body_must_fit_in_a_key_share_of_large_bodies() -> None:
    assert load({"max_large_bodies_bytes_per_key": 8 << 20}).max_notebook_body_bytes == 8 << 20
    with pytest.raises(SettingsError) as given:
        load({"max_large_bodies_bytes_per_key": 8 << 20, "max_notebook_body_bytes": 9 << 20})
    text = str(given.value)
    assert text.startswith("--max-notebook-body-bytes=9437184 is above ")
    assert "--max-large-bodies-bytes-per-key=8388608" in text
