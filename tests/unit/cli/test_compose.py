"""docker-compose.yml and the Dockerfile against the code, without a Docker engine.

What can be checked with no container running: the compose file parses; every command a
router container runs is a real `router` command (its `--help`, in-process, exits 0 under
that service's environment); every ROUTER_* variable is a real setting (it changes that
setting) or a real CLI variable; the image's entrypoint is the console script of
pyproject.toml; every `depends_on` waits for a healthcheck or a one-shot's success; the
image runs as a non-root user on a pinned Python. Each check is a function returning its
problems: run on the real files (no problems) and on a broken copy (the problem found).
Pure: reads files, imports the CLI; `docker compose config` only where the plugin exists.
"""

from __future__ import annotations

import copy
import fnmatch
import importlib
import json
import os
import re
import shlex
import subprocess
import sys
import tomllib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click
import pytest
import yaml
from click.testing import CliRunner
from pydantic import BaseModel

from router.cli import cli
from router.config import RouterSettings
from tests.fixtures.paths import ROOT

Compose = dict[str, Any]

# ---------------------------------------------------------------------- the Dockerfile


@dataclass
class Stage:
    name: str
    base: str  # the FROM image, global ARGs substituted, or an earlier stage's name
    instructions: list[tuple[str, str]] = field(default_factory=list)


def parse_dockerfile(text: str) -> list[Stage]:
    """Stages with their instructions (continuations joined, comments dropped)."""
    lines: list[str] = []
    pending = ""
    for raw in text.splitlines():
        stripped = raw.strip()
        if stripped.startswith("#") or (not stripped and not pending):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        lines.append(pending + stripped)
        pending = ""
    args: dict[str, str] = {}
    stages: list[Stage] = []
    for line in lines:
        word, _, rest = line.partition(" ")
        word, rest = word.upper(), rest.strip()
        if word == "ARG" and not stages:
            name, _, default = rest.partition("=")
            args[name] = default
        elif word == "FROM":
            parts = [p for p in rest.split() if not p.startswith("--")]
            image = re.sub(r"\$\{?(\w+)\}?", lambda m: args.get(m.group(1), m.group(0)), parts[0])
            name = parts[2] if len(parts) > 2 and parts[1].upper() == "AS" else str(len(stages))
            stages.append(Stage(name, image))
        elif stages:
            stages[-1].instructions.append((word, rest))
    return stages


def exec_form(value: str) -> list[str] | None:
    """ENTRYPOINT/CMD in exec form (a JSON array), else None (shell form)."""
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError:
        return None
    return parsed if isinstance(parsed, list) else None


def effective(stages: list[Stage], target: str) -> dict[str, Any]:
    """USER, ENTRYPOINT and CMD of a target, inherited through its FROM chain."""
    by_name = {s.name: s for s in stages}
    stage = by_name[target]
    out: dict[str, Any] = (
        effective(stages, stage.base)
        if stage.base in by_name
        else {"USER": None, "ENTRYPOINT": None, "CMD": None}
    )
    out = dict(out)
    for word, rest in stage.instructions:
        if word == "USER":
            out["USER"] = rest
        elif word == "ENTRYPOINT":
            out["ENTRYPOINT"], out["CMD"] = exec_form(rest) or ["/bin/sh", "-c", rest], None
        elif word == "CMD":
            out["CMD"] = exec_form(rest) or ["/bin/sh", "-c", rest]
    return out


# ---------------------------------------------------------------------- the project


def load_compose() -> Compose:
    data: Compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return data


def load_stages() -> list[Stage]:
    return parse_dockerfile((ROOT / "Dockerfile").read_text())


def pyproject() -> dict[str, Any]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def console_script() -> tuple[str, str]:
    ((name, target),) = pyproject()["project"]["scripts"].items()
    return name, target


def cli_envvars() -> set[str]:
    """Variables the CLI itself reads (ROUTER_CONFIG, ROUTER_LOG_LEVEL): not settings."""
    found: set[str] = set()

    def walk(command: click.Command) -> None:
        for param in command.params:
            envvar = getattr(param, "envvar", None)
            found.update([envvar] if isinstance(envvar, str) else envvar or [])
        for sub in getattr(command, "commands", {}).values():
            walk(sub)

    walk(cli)
    return found


@contextmanager
def environment(values: dict[str, str]) -> Iterator[None]:
    """Exactly these ROUTER_* variables (the test runner's own are set aside)."""
    saved = {k: v for k, v in os.environ.items() if k.startswith("ROUTER_")}
    for key in saved:
        del os.environ[key]
    os.environ.update(values)
    try:
        yield
    finally:
        for key in values:
            os.environ.pop(key, None)
        os.environ.update(saved)


def service_env(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {str(k): str(v) for k, v in env.items()}


def service_argv(service: dict[str, Any], stages: list[Stage]) -> list[str] | None:
    """What the container runs: entrypoint + command, from compose or the image target;
    None for a service that runs someone else's image (Kafka, Redis)."""
    build = service.get("build")
    if build is None:
        return None
    target = build.get("target", stages[-1].name) if isinstance(build, dict) else stages[-1].name
    image = effective(stages, target)
    entrypoint = service.get("entrypoint", image["ENTRYPOINT"]) or []
    command = service.get("command", image["CMD"] if "entrypoint" not in service else None)
    if isinstance(command, str):
        command = shlex.split(command)
    return [*entrypoint, *(command or [])]


# ---------------------------------------------------------------------- the checks


def router_command_problems(argv: list[str], env: dict[str, str]) -> list[str]:
    """`argv` (after `router`) names a command, not a group, and its --help exits 0 with
    these ROUTER_* variables (the CLI loads the settings before any command)."""
    command: click.Command = cli
    path = []
    for token in argv:
        if token.startswith("-") or not isinstance(command, click.Group):
            break
        sub = command.commands.get(token)
        if sub is None:
            return [f"`router {' '.join(argv)}`: no command {token!r} in `router {' '.join(path)}`"]
        command, path = sub, [*path, token]
    if isinstance(command, click.Group):
        return [f"`router {' '.join(argv)}` names the group `{' '.join(path)}`, not a command"]
    with environment(env):
        result = CliRunner().invoke(cli, [*argv, "--help"], prog_name="router")
    if result.exit_code != 0 or f"Usage: router {' '.join(path)}" not in result.output:
        return [f"`router {' '.join(argv)} --help` exited {result.exit_code}: {result.output}"]
    return []


def module_command_problems(module: str, argv: list[str]) -> list[str]:
    """`python -m module argv`: the module exists and its argument parser takes argv."""
    try:
        parser = importlib.import_module(module).parser()
    except (ImportError, AttributeError) as exc:
        return [f"`python -m {module}`: {exc}"]
    try:
        parser.parse_args(argv)
    except SystemExit:
        return [f"`python -m {module} {' '.join(argv)}`: refused by its argument parser"]
    return []


def command_problems(compose: Compose, stages: list[Stage]) -> list[str]:
    script, _ = console_script()
    problems = []
    for name, service in compose["services"].items():
        argv = service_argv(service, stages)
        if argv is None:
            continue
        env = service_env(service)
        if argv[:1] == [script]:
            problems += [f"{name}: {p}" for p in router_command_problems(argv[1:], env)]
        elif argv[:2] == ["python", "-m"] and len(argv) > 2:
            problems += [f"{name}: {p}" for p in module_command_problems(argv[2], argv[3:])]
        else:
            problems.append(f"{name}: runs {argv}, neither `{script}` nor `python -m`")
        test = (service.get("healthcheck") or {}).get("test") or []
        shell = test[1] if test[:1] == ["CMD-SHELL"] else shlex.join(test[1:])
        for segment in re.split(r"\|\||&&|[|;]", shell):
            words = shlex.split(segment)
            if words[:1] == [script]:
                problems += [
                    f"{name} healthcheck: {p}" for p in router_command_problems(words[1:], env)
                ]
    return problems


def setting_problems(compose: Compose) -> list[str]:
    """Every ROUTER_* variable is a CLI variable, or ROUTER_<SECTION>__<KEY> of a real
    setting that it changes from its default (a misspelt one is silently ignored)."""
    allowed = cli_envvars()
    default = RouterSettings()
    problems = []
    for name, service in compose["services"].items():
        for key, value in service_env(service).items():
            if not key.startswith("ROUTER_") or key in allowed:
                continue
            section, sep, field_name = key.removeprefix("ROUTER_").lower().partition("__")
            model = RouterSettings.model_fields.get(section)
            sub = model.annotation if model else None
            if not sep or not (
                isinstance(sub, type)
                and issubclass(sub, BaseModel)
                and field_name in sub.model_fields
            ):
                problems.append(f"{name}: {key} is not a setting (docs/reference/configuration.md)")
                continue
            try:
                with environment({key: value}):
                    parsed = RouterSettings()
            except ValueError as exc:
                problems.append(f"{name}: {key}={value!r} is refused: {exc}")
                continue
            if getattr(getattr(parsed, section), field_name) == getattr(
                getattr(default, section), field_name
            ):
                problems.append(f"{name}: {key}={value!r} leaves {section}.{field_name} unchanged")
    return problems


def secret_problems(compose: Compose) -> list[str]:
    problems = []
    for name, service in compose["services"].items():
        for key, value in service_env(service).items():
            if re.search(r"PASSWORD|SECRET|TOKEN|CREDENTIAL", key):
                problems.append(f"{name}: {key} is a secret; keep it out of docker-compose.yml")
            if re.search(r"://[^/@\s]*:[^/@\s]+@", value):
                problems.append(f"{name}: {key} carries a password in its URL")
    return problems


def one_shot(service: dict[str, Any]) -> bool:
    """A task that runs once and exits: marked by an explicit `restart: "no"`."""
    return service.get("restart") == "no"


def dependency_problems(compose: Compose) -> list[str]:
    """Every `depends_on` waits for a healthy service or a one-shot's exit 0, and every
    service but a one-shot has a healthcheck."""
    services = compose["services"]
    problems = []
    for name, service in services.items():
        check = (service.get("healthcheck") or {}).get("test")
        if not one_shot(service) and (not check or check == ["NONE"]):
            problems.append(f'{name}: not a one-shot (restart: "no"), and no healthcheck')
        deps = service.get("depends_on") or {}
        if isinstance(deps, list):
            problems.append(f"{name}: depends_on without conditions waits for nothing")
            continue
        for dep, spec in deps.items():
            target = services.get(dep)
            condition = (spec or {}).get("condition")
            if target is None:
                problems.append(f"{name}: depends on {dep!r}, which is not a service")
            elif condition == "service_healthy":
                test = (target.get("healthcheck") or {}).get("test")
                if not test or test == ["NONE"]:
                    problems.append(f"{name}: waits for {dep} to be healthy; it has no healthcheck")
            elif condition == "service_completed_successfully":
                if not one_shot(target):
                    problems.append(f"{name}: waits for {dep} to complete; not a one-shot")
            else:
                problems.append(f"{name}: depends on {dep} with condition {condition!r}")
    return problems


LONG_RUNNING = ("send-unit", "receive-unit", "sweeper")


def healthcheck_role_problems(compose: Compose) -> list[str]:
    """A long-running router process (send unit, receive unit, sweeper) serves its metrics
    port and is checked by `router health` (its own /healthz); Prometheus scrapes each of
    them, by name, on that port (ops/prometheus/compose.yml)."""
    problems = []
    scrape = yaml.safe_load((ROOT / "ops" / "prometheus" / "compose.yml").read_text())
    (sd,) = [c for job in scrape["scrape_configs"] for c in job.get("dns_sd_configs", [])]
    for name, service in compose["services"].items():
        command = service.get("command") or []
        if "build" not in service or command[:1] != [name] or name not in LONG_RUNNING:
            continue
        test = (service.get("healthcheck") or {}).get("test") or []
        if test != ["CMD", "router", "health"]:
            problems.append(f"{name}: its healthcheck is {test}, not `router health`")
        port = service_env(service).get("ROUTER_METRICS__PORT")
        if port is None or int(port) != sd["port"]:
            problems.append(f"{name}: metrics port {port}, Prometheus scrapes {sd['port']}")
        if name not in sd["names"]:
            problems.append(f"{name}: Prometheus does not scrape it")
    return problems


def scaling_problems(compose: Compose) -> list[str]:
    """Router services scale with `--scale`: no fixed container names or host ports."""
    return [
        f"{name}: {key} prevents `docker compose up --scale {name}=N`"
        for name, service in compose["services"].items()
        if "build" in service
        for key in ("container_name", "ports")
        if key in service
    ]


def image_problems(stages: list[Stage], compose: Compose) -> list[str]:
    """Pinned Python of the project's version, non-root, the console script as entrypoint
    (exec form, so SIGTERM reaches the router), the wheel built and installed."""
    script, target = console_script()
    python = pyproject()["tool"]["mypy"]["python_version"]
    pinned = re.compile(
        rf"^python:{re.escape(python)}\.\d+-slim(-[a-z]+)?(@sha256:[0-9a-f]{{64}})?$"
    )
    names = {s.name for s in stages}
    problems = [
        f"stage {s.name}: FROM {s.base} is not python:{python}.<patch>-slim pinned"
        for s in stages
        if s.base not in names and not pinned.match(s.base)
    ]
    targets = {stages[-1].name}
    for service in compose["services"].values():
        build = service.get("build")
        if isinstance(build, dict) and "target" in build:
            targets.add(build["target"])
    for name in sorted(targets):
        if name not in names:
            problems.append(f"docker-compose.yml builds target {name!r}: no such stage")
            continue
        user = effective(stages, name)["USER"]
        if user is None or user.split(":")[0] in ("root", "0"):
            problems.append(f"target {name}: runs as {user or 'root (no USER)'}")
    router = effective(stages, stages[-1].name)
    if router["ENTRYPOINT"] != [script]:
        problems.append(f"default target: ENTRYPOINT {router['ENTRYPOINT']}, not [{script!r}]")
    module, _, func = target.partition(":")
    if not callable(getattr(importlib.import_module(module), func, None)):
        problems.append(f"console script {script} = {target}: not a callable")
    runs = [rest for s in stages for word, rest in s.instructions if word == "RUN"]
    if not any(re.search(r"pip wheel|-m build", r) for r in runs):
        problems.append("no stage builds the wheel (pip wheel / python -m build)")
    if not any("from=build" in r and ".whl" in r and "pip install" in r for r in runs):
        problems.append("no stage installs the wheel from the build stage")
    return problems


def dockerignore_problems(stages: list[Stage]) -> list[str]:
    """What the Dockerfile COPYs from the context exists and is not excluded."""
    patterns = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]

    def ignored(path: str) -> bool:
        result = False
        for pattern in patterns:
            negated = pattern.startswith("!")
            if fnmatch.fnmatch(path, pattern.lstrip("!").rstrip("/")):
                result = not negated
        return result

    problems = []
    for stage in stages:
        for word, rest in stage.instructions:
            if word != "COPY" or "--from=" in rest:
                continue
            for source in [w for w in rest.split() if not w.startswith("--")][:-1]:
                path = source.rstrip("/")
                if not (ROOT / path).exists():
                    problems.append(f"COPY {source}: not in the repository")
                elif ignored(path):
                    problems.append(f"COPY {source}: excluded by .dockerignore")
    return problems


# ---------------------------------------------------------------------- the tests

CHECKS: dict[str, Callable[[Compose, list[Stage]], list[str]]] = {
    "commands": command_problems,
    "settings": lambda c, _: setting_problems(c),
    "secrets": lambda c, _: secret_problems(c),
    "dependencies": lambda c, _: dependency_problems(c),
    "healthcheck roles": lambda c, _: healthcheck_role_problems(c),
    "scaling": lambda c, _: scaling_problems(c),
    "image": lambda c, s: image_problems(s, c),
    "dockerignore": lambda _, s: dockerignore_problems(s),
}


def test_the_compose_file_runs_the_whole_system() -> None:
    services = load_compose()["services"]
    assert {
        "kafka",
        "redis",
        "topics",
        "send-unit",
        "receive-unit",
        "sweeper",
        "prometheus",
        "demo",
    } <= set(services)
    assert services["kafka"]["image"].startswith("apache/kafka:")
    assert "--appendonly" in services["redis"]["command"]
    assert services["demo"]["profiles"] == ["demo"]


@pytest.mark.parametrize("check", CHECKS)
def test_the_files_match_the_code(check: str) -> None:
    assert CHECKS[check](load_compose(), load_stages()) == []


def _set(path: str, value: Any) -> Callable[[Compose, list[Stage]], None]:
    def apply(compose: Compose, _: list[Stage]) -> None:
        *parents, last = path.split(".")
        node = compose
        for key in parents:
            node = node[key]
        node[last] = value

    return apply


def _instruction(stage: str, word: str, value: str | None) -> Callable[..., None]:
    def apply(_: Compose, stages: list[Stage]) -> None:
        (s,) = [s for s in stages if s.name == stage]
        kept = [(w, r) for w, r in s.instructions if w != word]
        s.instructions = kept + ([(word, value)] if value is not None else [])

    return apply


def _base(stage: str, image: str) -> Callable[..., None]:
    def apply(_: Compose, stages: list[Stage]) -> None:
        (s,) = [s for s in stages if s.name == stage]
        s.base = image

    return apply


BROKEN = {
    "a command that does not exist": ("commands", _set("services.sweeper.command", ["sweep"])),
    "a group, not a command": ("commands", _set("services.topics.command", ["topics"])),
    "an option the command lacks": (
        "commands",
        _set("services.send-unit.command", ["send-unit", "--side", "send"]),
    ),
    "an invalid setting value": (
        "commands",
        _set("services.sweeper.environment", {"ROUTER_TOPOLOGY__NAME": "bad name"}),
    ),
    "a healthcheck calling no command": (
        "commands",
        _set("services.sweeper.healthcheck.test", ["CMD-SHELL", "router metric | grep -q x"]),
    ),
    "a demo option the demo lacks": ("commands", _set("services.demo.command", ["--fast"])),
    "a misspelt setting (single underscore)": (
        "settings",
        _set("services.sweeper.environment", {"ROUTER_KAFKA_BOOTSTRAP_SERVERS": "kafka:19092"}),
    ),
    "a setting that does not exist": (
        "settings",
        _set("services.sweeper.environment", {"ROUTER_SWEEPER__INTERVAL": "5"}),
    ),
    "a setting left at its default": (
        "settings",
        _set("services.sweeper.environment", {"ROUTER_TOPOLOGY__NAME": "router"}),
    ),
    "a password": (
        "secrets",
        _set("services.sweeper.environment", {"ROUTER_REDIS__PASSWORD": "hunter2"}),
    ),
    "a password in a URL": (
        "secrets",
        _set("services.sweeper.environment", {"ROUTER_REDIS__URL": "redis://:pw@redis:6379/0"}),
    ),
    "waiting for a service without a healthcheck": (
        "dependencies",
        _set("services.demo.depends_on", {"topics": {"condition": "service_healthy"}}),
    ),
    "waiting for a server to complete": (
        "dependencies",
        _set(
            "services.demo.depends_on", {"kafka": {"condition": "service_completed_successfully"}}
        ),
    ),
    "waiting for a mere start": (
        "dependencies",
        _set("services.demo.depends_on", {"kafka": {"condition": "service_started"}}),
    ),
    "depends_on without conditions": ("dependencies", _set("services.demo.depends_on", ["kafka"])),
    "a service without a healthcheck": (
        "dependencies",
        _set("services.sweeper.healthcheck", None),
    ),
    "a unit checked by something else than its /healthz": (
        "healthcheck roles",
        _set("services.receive-unit.healthcheck.test", ["CMD", "router", "metrics"]),
    ),
    "a unit on another port than Prometheus scrapes": (
        "healthcheck roles",
        _set("services.sweeper.environment", {"ROUTER_METRICS__PORT": "9401"}),
    ),
    "a fixed container name": (
        "scaling",
        _set("services.send-unit.container_name", "send-unit"),
    ),
    "root": ("image", _instruction("router-base", "USER", "root")),
    "no USER": ("image", _instruction("router-base", "USER", None)),
    "an unpinned Python": ("image", _base("router-base", "python:3.11-slim")),
    "another Python": ("image", _base("build", "python:3.12.8-slim-bookworm")),
    "an entrypoint other than the console script": (
        "image",
        _instruction("router-base", "ENTRYPOINT", '["python", "-m", "router"]'),
    ),
    "a shell-form entrypoint": ("image", _instruction("router-base", "ENTRYPOINT", "router")),
    "no wheel installed": ("image", _instruction("router-base", "RUN", "pip install ./")),
    "a target that does not exist": ("image", _set("services.demo.build.target", "dmeo")),
    "a COPY of something not in the repository": (
        "dockerignore",
        _instruction("demo", "COPY", "tools/ /opt/tools/"),
    ),
}


@pytest.mark.parametrize("case", BROKEN)
def test_each_check_finds_what_it_is_for(case: str) -> None:
    check, breaks = BROKEN[case]
    compose, stages = copy.deepcopy(load_compose()), load_stages()
    breaks(compose, stages)
    assert CHECKS[check](compose, stages), f"{check} missed: {case}"


def test_an_excluded_copy_source_is_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / ".dockerignore").write_text("*\n!pyproject.toml\n")
    (tmp_path / "router").mkdir()
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    stages = [Stage("build", "python:3.11.13-slim", [("COPY", "router/ router/")])]
    assert dockerignore_problems(stages) == ["COPY router/: excluded by .dockerignore"]


def _compose_plugin() -> bool:
    try:
        done = subprocess.run(
            ["docker", "compose", "version"], capture_output=True, timeout=20, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


@pytest.mark.skipif(not _compose_plugin(), reason="no `docker compose` plugin on this machine")
def test_docker_compose_accepts_the_file() -> None:
    for profile in ([], ["--profile", "demo"]):
        done = subprocess.run(
            ["docker", "compose", *profile, "-f", str(ROOT / "docker-compose.yml"), "config", "-q"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr
