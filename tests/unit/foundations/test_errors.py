"""Errors a user can cause (``recsys_dist/errors.py``): how a config error names its file,
line and key, and the exit code of each family, as the console reports them."""

from __future__ import annotations

import pytest

from recsys_dist.console import reporting_errors
from recsys_dist.errors import ClusterLost, ConfigError, DataError, RecsysError


@pytest.mark.parametrize(
    "args, text",
    [
        (("m.yaml", "model.name", "got 'x'", 7), "m.yaml:7: model.name: got 'x'"),
        (("m.yaml", "model.name", "got 'x'"), "m.yaml: model.name: got 'x'"),
        (("m.yaml", "", "config file not found"), "m.yaml: config file not found"),
        (("--set a=1", "a", "bad", None), "--set a=1: a: bad"),
    ],
)
def test_a_config_error_names_file_line_and_key(args, text):
    error = ConfigError(*args)
    assert str(error) == text
    assert (error.file, error.path, error.line) == (args[0], args[1], (args + (None,))[3])


def test_a_config_file_given_as_a_path_is_named_as_text(tmp_path):
    error = ConfigError(tmp_path / "m.yaml", "x", "bad", 3)
    assert error.file == str(tmp_path / "m.yaml") and str(error).startswith(f"{tmp_path}/m.yaml:3:")


def test_each_family_has_its_exit_code_and_is_reported_as_one_line(capsys):
    for error, code in [
        (RecsysError("plain"), 2),
        (ConfigError("f", "k", "bad"), 2),
        (DataError("no rows"), 3),
        (ClusterLost("ps lost"), 4),
    ]:
        assert isinstance(error, RecsysError) and error.exit_code == code

        def fail(error=error):
            raise error

        assert reporting_errors(fail) == code
        assert capsys.readouterr().err == f"error: {error}\n"
