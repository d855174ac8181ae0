"""Pure parts of ``strom share-groups`` and ``strom configs --entity-type groups``: argument
shapes and kafka-share-groups.sh's rules (one action, --group needs, reset modes)."""

from __future__ import annotations

import argparse

import pytest

from strom.cli import configs as cc
from strom.cli import share_groups as sg
from strom.cli.commands import CommandError
from strom.cli.main import build_parser


def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["share-groups", *argv])


@pytest.mark.parametrize(
    ("argv", "action"),
    [
        (["list"], "list"),
        (["--list", "--state"], "list"),
        (["describe", "--group", "g", "--members"], "describe"),
        (["--delete", "--group", "g"], "delete"),
        (["reset-offsets", "--group", "g", "--topic", "t", "--to-earliest"], "reset-offsets"),
        (["delete-offsets", "--group", "g", "--topic", "t"], "delete-offsets"),
    ],
)
def test_actions(argv: list[str], action: str) -> None:
    assert sg._action(parse(*argv)) == action


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["list", "--describe"],
        ["describe"],
        ["reset-offsets", "--group", "g", "--topic", "t"],
        ["reset-offsets", "--group", "g", "--to-latest"],
        ["reset-offsets", "--group", "g", "--group", "h", "--topic", "t", "--to-latest"],
        ["reset-offsets", "--group", "g", "--topic", "t", "--to-latest", "--to-earliest"],
        ["delete-offsets", "--group", "g"],
    ],
)
def test_bad_arguments(argv: list[str]) -> None:
    with pytest.raises(CommandError) as e:
        sg._action(parse(*argv))
    assert e.value.exit_code == 2


def test_configs_groups_entity() -> None:
    ns = build_parser().parse_args(["configs", "describe", "--entity-type", "groups", "--entity-name", "g"])
    t = cc.target_from_args(ns)  # type: ignore[arg-type]
    assert (t.entity_type, t.name, t.resource_type) == ("groups", "g", 32)
    assert t.header(False) == "Dynamic configs for group g are:"
    assert t.done() == "Completed updating config for group g."
