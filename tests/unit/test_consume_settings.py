"""The properties files of ``binlog-bridge consume --consumer-config / --schema-registry-config``."""

from __future__ import annotations

from pathlib import Path

import pytest

from bridge.apps.consume.settings import consumer_settings, read_properties, registry_settings
from bridge.errors import UserError


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "client.properties"
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_key_value_lines_comments_colons_and_environment_references(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "# a comment\n! another\n\n"
        "security.protocol = SASL_SSL\n"
        "sasl.mechanisms: PLAIN\n"
        "sasl.username=reader\n"
        "sasl.password=${KAFKA_PASSWORD}\n"
        "ssl.ca.location = /etc/ssl/ca=1.pem\n",
    )
    settings = consumer_settings(path, environ={"KAFKA_PASSWORD": "s3=cret"})
    assert settings == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanisms": "PLAIN",
        "sasl.username": "reader",
        "sasl.password": "s3=cret",
        "ssl.ca.location": "/etc/ssl/ca=1.pem",  # the first = or : splits; the rest is the value
    }


def test_no_file_means_no_settings() -> None:
    assert consumer_settings(None) == {} and registry_settings(None) == {}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("just words\n", "line 1: expected key=value"),
        ("a=1\n\na=2\n", "line 3: a is set twice"),
        ("two words=1\n", "'two words' is not a setting name"),
        ("sasl.password=${NOT_SET}\n", "line 1: sasl.password refers to ${NOT_SET}, which is not set"),
    ],
)
def test_malformed_files_name_the_option_file_and_line(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(UserError, match="--consumer-config") as raised:
        consumer_settings(path, environ={})
    assert message in str(raised.value) and path in str(raised.value)


def test_an_unset_variable_does_not_show_other_values(tmp_path: Path) -> None:
    path = write(tmp_path, "sasl.password=${MISSING}\n")
    with pytest.raises(UserError) as raised:
        read_properties(path, "--consumer-config", environ={"OTHER": "hunter2"})
    assert "hunter2" not in str(raised.value)


@pytest.mark.parametrize("key", ["bootstrap.servers", "enable.auto.commit", "auto.offset.reset"])
def test_settings_the_reader_owns_are_refused_with_the_reason(tmp_path: Path, key: str) -> None:
    with pytest.raises(UserError, match=f"{key} cannot be set here"):
        consumer_settings(write(tmp_path, f"{key}=x\n"))


def test_the_registry_file_takes_client_settings_but_not_its_url(tmp_path: Path) -> None:
    good = write(tmp_path, "basic.auth.user.info=${REGISTRY_AUTH}\n")
    assert registry_settings(good, environ={"REGISTRY_AUTH": "u:p"}) == {"basic.auth.user.info": "u:p"}
    with pytest.raises(UserError, match=r"--schema-registry-config .*url cannot be set here"):
        registry_settings(write(tmp_path, "url=http://x\n"))


def test_a_missing_file_is_a_user_error(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="cannot read it"):
        consumer_settings(str(tmp_path / "nope.properties"))
