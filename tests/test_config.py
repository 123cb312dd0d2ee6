"""Unusable settings stop `rafka` before it starts anything, naming the flag."""

from __future__ import annotations

import pytest

from rafka.cli import main


@pytest.mark.parametrize(("argv", "message"), [
    (["--log-retention-check-interval-ms", "0"], "--log-retention-check-interval-ms must be positive, not 0"),
    (["--shards", "-1"], "--shards must be positive, not -1"),
    (["--fsync", "sometimes"], "--fsync must be always, batch or never, not 'sometimes'"),
    (["--idle-poll-us", "-1"], "--idle-poll-us must be 0 or more, not -1"),
])
@pytest.mark.parametrize("command", [["serve"], ["gateway"], ["shard", "--id", "0"]])
def test_a_bad_setting_exits_2_with_the_flag_named(command: list[str], argv: list[str], message: str,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main([*command, *argv])
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err
