"""The secured local stack (ops/secure.sh) from Python: start and stop it, and make users.

Redis: TLS only, ACL users (an admin; router users made with `router.security.redis`'s rule).
Kafka: SASL_SSL with SCRAM-SHA-512 and the StandardAuthorizer (an admin super user; role
users made through the Admin API, their ACLs by `router.security.acls`). Passwords live in files
(mode 600) under the stack's folder and reach clients through settings, never a command
line. The tests start one on free ports in a temporary folder.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from ops.harness.stack.localstack import free_port
from router.backends.kafka import clients
from router.backends.redis.client import RedisClient, redis_client
from router.config import KafkaSettings, RedisSettings
from router.security.redis import acl_rule


@dataclass
class SecureStack:
    script: Path  # ops/secure.sh
    stack_dir: Path
    redis_port: int = 6380
    kafka_port: int = 9192
    controller_port: int = 9193

    @classmethod
    def private(cls, script: Path, stack_dir: Path) -> SecureStack:
        return cls(script, stack_dir, free_port(), free_port(), free_port())

    # ------------------------------------------------------------------ lifecycle

    def _run(self, *args: str) -> str:
        env = {
            **os.environ,
            "ROUTER_SECURE_DIR": str(self.stack_dir),
            "ROUTER_SECURE_REDIS_PORT": str(self.redis_port),
            "ROUTER_SECURE_KAFKA_PORT": str(self.kafka_port),
            "ROUTER_SECURE_KAFKA_CONTROLLER_PORT": str(self.controller_port),
        }
        done = subprocess.run(
            [str(self.script), *args], env=env, capture_output=True, text=True, check=False
        )
        if done.returncode != 0:
            raise RuntimeError(
                f"ops/secure.sh {' '.join(args)} failed:\n{done.stdout}{done.stderr}"
            )
        return done.stdout

    def up(self, *parts: str) -> None:
        """Both servers, or the parts named ("redis-up", "kafka-up")."""
        for part in parts or ("up",):
            self._run(part)

    def down(self) -> None:
        self._run("down")

    # ------------------------------------------------------------------ files

    @property
    def ca_file(self) -> Path:
        return self.stack_dir / "pki" / "ca.pem"

    @property
    def client_cert(self) -> tuple[Path, Path]:
        return self.stack_dir / "pki" / "client.pem", self.stack_dir / "pki" / "client.key"

    def secret_file(self, name: str) -> Path:
        return self.stack_dir / "secrets" / f"{name}.password"

    def new_secret(self, name: str) -> Path:
        """A fresh password in a file of mode 600 (the way an operator mounts one)."""
        path = self.secret_file(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(16) + "\n")
        return path

    # ------------------------------------------------------------------ redis

    @property
    def redis_url(self) -> str:
        return f"rediss://127.0.0.1:{self.redis_port}/0"

    def redis_settings(self, user: str, password_file: Path | None, **extra: Any) -> RedisSettings:
        return RedisSettings(
            url=self.redis_url,
            username=user,
            password_file=password_file,
            tls_ca_file=self.ca_file,
            **extra,
        )

    def redis_admin(self) -> RedisClient:
        return redis_client(self.redis_settings("admin", self.secret_file("redis-admin")))

    def redis_user(self, user: str, rule: list[str]) -> Path:
        """Create (or reset) an ACL user with `rule` (see `router.security.redis.acl_rule`) and
        a fresh password; returns the password's file."""
        path = self.new_secret(f"redis-{user}")
        password = path.read_text().strip()
        admin: Any = self.redis_admin()  # redis-py leaves execute_command untyped
        try:
            admin.execute_command("ACL", "SETUSER", user, "reset", "on", f">{password}", *rule)
        finally:
            admin.close()
        return path

    def router_redis_user(self, user: str, settings: Any) -> Path:
        return self.redis_user(user, acl_rule(settings))

    # ------------------------------------------------------------------ kafka

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.kafka_port}"

    def kafka_settings(self, user: str, password_file: Path, **extra: Any) -> KafkaSettings:
        return KafkaSettings(
            bootstrap_servers=self.bootstrap,
            client_config={
                "security.protocol": "SASL_SSL",
                "sasl.mechanism": "SCRAM-SHA-512",
                "sasl.username": user,
                "ssl.ca.location": str(self.ca_file),
            },
            sasl_password_file=password_file,
            **extra,
        )

    def client_env(
        self, kafka_user: str, kafka_password: Path, redis_user: str, redis_password: Path
    ) -> dict[str, str]:
        """ROUTER_* variables for a router process of these users: addresses, users, the
        CA and the password *files* (a process never gets a password in its environment
        or on its command line here)."""
        k = self.kafka_settings(kafka_user, kafka_password)
        return {
            "ROUTER_KAFKA__BOOTSTRAP_SERVERS": self.bootstrap,
            "ROUTER_KAFKA__CLIENT_CONFIG": json.dumps(k.client_config),
            "ROUTER_KAFKA__SASL_PASSWORD_FILE": str(kafka_password),
            "ROUTER_REDIS__URL": self.redis_url,
            "ROUTER_REDIS__USERNAME": redis_user,
            "ROUTER_REDIS__PASSWORD_FILE": str(redis_password),
            "ROUTER_REDIS__TLS_CA_FILE": str(self.ca_file),
        }

    def admin_env(self) -> dict[str, str]:
        return self.client_env(
            "admin", self.secret_file("kafka-admin"), "admin", self.secret_file("redis-admin")
        )

    def kafka_admin_settings(self) -> KafkaSettings:
        return self.kafka_settings("admin", self.secret_file("kafka-admin"))

    def kafka_admin(self) -> AdminClient:
        return AdminClient(clients.admin_config(self.kafka_admin_settings()))

    def kafka_user(self, admin: AdminClient, user: str, timeout: float = 30.0) -> Path:
        """Create (or reset) a SCRAM-SHA-512 user with a fresh password; returns its file."""
        path = self.new_secret(f"kafka-{user}")
        info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192)
        upsert = UserScramCredentialUpsertion(user, info, path.read_text().strip().encode())
        for future in admin.alter_user_scram_credentials([upsert]).values():
            future.result(timeout=timeout)
        return path
