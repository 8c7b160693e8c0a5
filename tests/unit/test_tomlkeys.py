"""storekit.tomlkeys: a file's value read with the typed reader an option of the same kind uses, the
error naming the file and the key; one helper where the layout and the tier policies had a copy each."""

from __future__ import annotations

from pathlib import Path

import pytest

from storekit.config import parse_config
from storekit.errors import ConfigError
from storekit.layout.spec import parse_layout
from storekit.policies import ACTIONS, parse_policies
from storekit.readers import read_duration
from storekit.tomlkeys import get_choice, get_read


def test_get_read_reads_with_the_reader_and_names_the_key() -> None:
    body = {"ttl": "14d", "other": 1}
    assert get_read(body, "ttl", read_duration, "f.toml", "areas.a") == 14 * 86400
    assert get_read(body, "missing", read_duration, "f.toml", "areas.a") is None
    with pytest.raises(ConfigError) as info:
        get_read({"ttl": "soon"}, "ttl", read_duration, "f.toml", "areas.a")
    assert (
        str(info.value)
        == "f.toml: areas.a.ttl: 'soon' is not a duration; expected e.g. 90s, 15m, 12h, 14d, 2w"
    )


def test_get_choice_gives_the_default_or_one_of_the_choices() -> None:
    assert get_choice({}, "role", "f.toml", "tiers.a.role", ("plain", "burst"), default="plain") == "plain"
    assert get_choice({"role": "burst"}, "role", "f.toml", "tiers.a.role", ("plain", "burst")) == "burst"
    with pytest.raises(ConfigError) as info:
        get_choice({"role": "fast"}, "role", "f.toml", "tiers.a.role", ("plain", "burst"))
    assert str(info.value) == "f.toml: tiers.a.role: expected one of plain, burst, got 'fast'"
    with pytest.raises(ConfigError, match="is required"):
        get_choice({}, "action", "f.toml", "policies.p.action", ACTIONS)


def test_a_bad_value_has_the_same_words_in_a_layout_a_policy_and_a_tier() -> None:
    """`ttl`/`older_than` (durations) and a tier's role / a policy's action (choices) go through the
    same helpers: the words differ only by where."""
    layout = b'[layout]\nname = "l"\n[areas.scratch]\nttl = "soon"\n'
    with pytest.raises(ConfigError) as area:
        parse_layout(layout, source="l.toml")
    with pytest.raises(ConfigError) as policy:
        parse_policies({"p": {"action": "archive", "older_than": "soon"}}, "s.toml")
    assert str(area.value).split(": ", 2)[2] == str(policy.value).split(": ", 2)[2]
    with pytest.raises(ConfigError) as action:
        parse_policies({"p": {"action": "shred"}}, "s.toml")
    assert (
        str(action.value)
        == "s.toml: policies.p.action: expected one of drain, archive, recall, purge, got 'shred'"
    )
    with pytest.raises(ConfigError) as role:
        parse_config(b'[tiers.a]\nurl = "/x"\nrole = "fast"\n', source="c.toml", base_dir=Path("/"))
    assert str(role.value).startswith("c.toml: tiers.a.role: expected one of ")
    assert str(role.value).endswith(", got 'fast'")
