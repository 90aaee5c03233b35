"""Host names and URLs the resolver cannot take are bad input: exit 2 with the reason, before
anything connects. ``a..b`` (an empty label) and a label over 63 characters made the IDNA codec
raise UnicodeError from getaddrinfo; now every command taking a host or a URL says why."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from ascend_serve.cli.main import app
from ascend_serve.cli.options import host_problem, url_problem
from ascend_serve.exitcodes import EXIT_BAD_INPUT

runner = CliRunner()
LONG = "x" * 64


@pytest.mark.parametrize(("host", "why"), [
    ("a..b", "empty label"),
    (".a", "empty label"),
    (f"{LONG}.example", "label of 64 characters"),
    ("a" * 254, "longer than 253"),
    ("bad_host!", "may hold only letters"),
    ("-a.example", "may hold only letters"),
    ("", "empty host name"),
])
def test_bad_host_names(host: str, why: str) -> None:
    problem = host_problem(host)
    assert problem is not None and why in problem


@pytest.mark.parametrize("host", ["node-1", "a2-node-0.example.com", "192.0.2.11", "::1",
                                  "[fe80::1]", "localhost", "example.com.", "x" * 63,
                                  "bücher.example"])
def test_good_host_names(host: str) -> None:
    assert host_problem(host) is None


@pytest.mark.parametrize(("url", "why"), [
    ("http://a..b:8000", "empty label"),
    (f"http://{LONG}.example:8000", "label of 64 characters"),
    ("ftp://127.0.0.1:8000", "scheme must be http or https"),
    ("127.0.0.1:8000", "scheme must be http or https"),
    ("http://:8000", "no host"),
    ("http://127.0.0.1:99999", "invalid URL"),
])
def test_bad_urls(url: str, why: str) -> None:
    problem = url_problem(url)
    assert problem is not None and why in problem


def test_good_urls() -> None:
    for url in ("http://127.0.0.1:8000", "https://serve.example/v1", "http://[::1]:8000"):
        assert url_problem(url) is None


def _refused(args: list[str], why: str) -> None:
    result = runner.invoke(app, args)
    assert result.exit_code == EXIT_BAD_INPUT, result.output
    assert why in result.output
    assert "Traceback" not in result.output and "UnicodeError" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


@pytest.mark.parametrize("host", ["a..b", f"ops@{LONG}.example", f"{LONG}.example:2222"])
def test_doctor_refuses_a_bad_host(host: str) -> None:
    _refused(["doctor", host], "host name")


@pytest.mark.parametrize("command", [["validate"], ["bench", "--num-prompts", "1"]])
@pytest.mark.parametrize("url", ["http://a..b:8000", f"http://{LONG}.example:8000"])
def test_url_commands_refuse_a_bad_host(command: list[str], url: str) -> None:
    _refused([*command, url], "host name")


@pytest.mark.parametrize("command", [["serve", "tiny-deepseek-v3", "--dry-run"],
                                     ["tune", "tiny-deepseek-v3"]])
def test_listen_host_is_checked(command: list[str]) -> None:
    _refused([*command, "--host", "a..b"], "host name")
