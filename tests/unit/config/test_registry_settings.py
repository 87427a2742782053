"""The registry settings say what they need (pure: settings only, no registry)."""

from __future__ import annotations

import pytest

from router.config import RegistrySettings, load_settings
from router.errors import ConfigError


def test_the_registry_is_off_by_default_and_its_url_loses_a_trailing_slash() -> None:
    assert load_settings().registry.url is None
    s = load_settings(registry={"url": "http://127.0.0.1:8081/apis/ccompat/v7/"})
    assert s.registry.url == "http://127.0.0.1:8081/apis/ccompat/v7"


@pytest.mark.parametrize(
    ("overrides", "says"),
    [
        ({"registry": {"url": "ftp://x"}}, "http:// or https://"),
        ({"registry": {"url": "http://u:p@host:8081"}}, "may not hold credentials"),
        ({"registry": {"frame_events": True}}, "frame_events needs registry.url"),
        ({"registry": {"url": "http://h", "password": "p"}}, "needs registry.username"),
        ({"registry": {"url": "http://h", "tls_cert_file": "c.pem"}}, "go together"),
        ({"routing": {"subject_by_type": {"order": "orders-value"}}}, "needs registry.url"),
        (
            {
                "registry": {"url": "http://h"},
                "routing": {
                    "schema_by_type": {"order": "router.demo.OrderEvent"},
                    "subject_by_type": {"order": "orders-value"},
                },
            },
            "both name ['order']",
        ),
    ],
)
def test_contradictions_are_refused(overrides: dict[str, object], says: str) -> None:
    with pytest.raises(ConfigError, match=None) as caught:
        load_settings(**overrides)
    assert says in str(caught.value)


def test_the_password_is_secret() -> None:
    s = RegistrySettings(url="https://h", username="router", password="s3cret")
    assert "s3cret" not in repr(s) and s.secret() == "s3cret"
