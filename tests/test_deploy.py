"""deploy/ agrees with the code: every file parses, and the names and numbers that must match
across the Dockerfile, compose.yaml, k8s/, prometheus.yml, the alert rules, the Grafana
provisioning and dashboard, scrapyd.conf and scrapy.cfg do.

Each check returns a list of problems (strings). The real deploy/ must have none; a broken
copy of it (one edit each, in tmp_path) must get the problem reported, so every check is seen
to fail when it should.
"""

from __future__ import annotations

import configparser
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from urllib.parse import urlsplit

import pytest
import yaml

from tests.conftest import ROOT

#: Metrics Prometheus itself gives every target.
BUILTIN_METRICS = {"up"}
#: Labels Prometheus adds to every scraped series.
TARGET_LABELS = {"instance", "job"}
#: PromQL words that are neither metrics nor functions.
PROMQL_KEYWORDS = {
    "and",
    "or",
    "unless",
    "bool",
    "offset",
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "inf",
    "nan",
    "atan2",
}


# ---------------------------------------------------------------------------------------------
# What the code offers


def code_env_names(package: Path = ROOT / "scrapy_frontier") -> set[str]:
    """Environment variables the package reads: the settings it takes from the environment
    (``scrapy_frontier.defaults.FROM_ENVIRONMENT``) and any ``os.environ.get("X")``,
    ``os.environ["X"]``, ``os.getenv("X")`` or ``"X" in os.environ`` found in its source."""
    from scrapy_frontier.defaults import FROM_ENVIRONMENT

    pattern = re.compile(
        r"""os\.(?:environ\.get|getenv)\(\s*["']([A-Za-z_]\w*)["']|os\.environ\[\s*["']([A-Za-z_]\w*)["']\s*\]|["']([A-Za-z_]\w*)["']\s+in\s+os\.environ"""
    )
    names = set(FROM_ENVIRONMENT)
    for path in package.rglob("*.py"):
        for match in pattern.finditer(path.read_text()):
            names.add(next(g for g in match.groups() if g))
    return names


@dataclass(frozen=True)
class CodeFacts:
    env: frozenset[str]
    metrics: frozenset[str]
    histograms: frozenset[str]
    labels: frozenset[str]
    spiders: frozenset[str]
    schema_sql: str


def code_facts() -> CodeFacts:
    from scrapy.utils.misc import walk_modules_iter
    from scrapy.utils.spider import iter_spider_classes

    import crawler.items
    import scrapy_frontier.observability.metrics
    from scrapy_frontier.storage.ddl import schema_sql

    specs = getattr(scrapy_frontier.observability.metrics, "METRICS", ())
    return CodeFacts(
        env=frozenset(code_env_names()),
        metrics=frozenset(scrapy_frontier.observability.metrics.METRIC_NAMES),
        histograms=frozenset(s.name for s in specs if s.kind.__name__ == "Histogram"),
        labels=frozenset(label for s in specs for label in s.labels),
        spiders=frozenset(
            cls.name for module in walk_modules_iter("crawler.spiders") for cls in iter_spider_classes(module)
        ),
        schema_sql=schema_sql(crawler.items),
    )


@pytest.fixture(scope="module")
def facts() -> CodeFacts:
    return code_facts()


# ---------------------------------------------------------------------------------------------
# Reading deploy/


def parse_dockerfile(text: str) -> list[tuple[str, str]]:
    """``[(INSTRUCTION, arguments), ...]``: continuation lines joined, comments dropped."""
    instructions: list[tuple[str, str]] = []
    pending = ""
    for line in text.splitlines():
        stripped = line.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if pending and stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        full = pending + stripped
        pending = ""
        word, _, rest = full.partition(" ")
        if not re.fullmatch(r"[A-Za-z]+", word):
            raise ValueError(f"Dockerfile: not an instruction: {full!r}")
        instructions.append((word.upper(), rest.strip()))
    if pending:
        raise ValueError("Dockerfile ends with a continuation line")
    return instructions


def dockerfile_env(instructions: list[tuple[str, str]]) -> dict[str, str]:
    env: dict[str, str] = {}
    for word, args in instructions:
        if word != "ENV":
            continue
        parts = shlex.split(args)
        if parts and "=" not in parts[0]:  # legacy form: ENV NAME value
            env[parts[0]] = " ".join(parts[1:])
        else:
            env.update(p.split("=", 1) for p in parts)
    return env


def compose_env(service: dict) -> dict[str, str]:
    """A compose service's ``environment``, given as a mapping or as a list of NAME=value."""
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(e.split("=", 1) if "=" in e else (e, "") for e in env)
    return {k: "" if v is None else str(v) for k, v in env.items()}


def command_text(command) -> str:
    return " ".join(command) if isinstance(command, list) else str(command or "")


@dataclass
class Deployment:
    """Everything under ``<context>/deploy``, parsed; ``context`` is the image's build context
    (the repository root), where scrapy.cfg and requirements*.txt are."""

    context: Path
    files: dict[str, object] = field(default_factory=dict)  # path relative to deploy/ -> parsed content

    @property
    def root(self) -> Path:
        return self.context / "deploy"

    @classmethod
    def load(cls, context: Path) -> Deployment:
        d = cls(context)
        for path in sorted(p for p in d.root.rglob("*") if p.is_file()):
            rel = path.relative_to(d.root).as_posix()
            text = path.read_text()
            if path.name in ("Dockerfile", "Containerfile"):
                d.files[rel] = parse_dockerfile(text)
            elif path.suffix == ".sh":
                d.files[rel] = text
            elif path.suffix in (".yaml", ".yml"):
                d.files[rel] = list(yaml.safe_load_all(text))
            elif path.suffix == ".json":
                d.files[rel] = json.loads(text)
            elif path.suffix == ".conf":
                cp = configparser.ConfigParser()
                cp.read_string(text)
                d.files[rel] = cp
            elif path.suffix == ".sql":
                d.files[rel] = text
            else:
                raise ValueError(f"deploy/{rel}: no parser for this kind of file")
        return d

    # -- the pieces ---------------------------------------------------------------------------

    @property
    def dockerfile(self) -> list[tuple[str, str]]:
        return self.files["Dockerfile"]

    @property
    def compose(self) -> dict:
        return self.files["compose.yaml"][0]

    @property
    def services(self) -> dict[str, dict]:
        return self.compose["services"]

    def k8s_docs(self) -> list[tuple[str, dict]]:
        return [(rel, doc) for rel, docs in self.files.items() if rel.startswith("k8s/") for doc in docs if doc]

    def k8s_kind(self, kind: str) -> list[dict]:
        return [doc for _, doc in self.k8s_docs() if doc.get("kind") == kind]

    def worker_services(self) -> dict[str, dict]:
        """Compose services built from deploy/Dockerfile."""
        found = {}
        for name, svc in self.services.items():
            build = svc.get("build")
            if isinstance(build, dict):
                context = (self.root / build.get("context", ".")).resolve()
                if (context / build.get("dockerfile", "Dockerfile")).resolve() == (self.root / "Dockerfile").resolve():
                    found[name] = svc
        return found

    def k8s_worker_containers(self) -> list[tuple[dict, dict]]:
        """``(pod template, container)`` of every Deployment/StatefulSet container."""
        out = []
        for kind in ("Deployment", "StatefulSet", "DaemonSet"):
            for doc in self.k8s_kind(kind):
                template = doc["spec"]["template"]
                out += [(template, c) for c in template["spec"]["containers"]]
        return out

    def mounts(self, service: dict) -> dict[str, Path]:
        """Bind mounts of a compose service: container path -> host path."""
        found = {}
        for volume in service.get("volumes", []):
            if isinstance(volume, dict):
                source, target = volume.get("source", ""), volume.get("target", "")
            else:
                source, target = (volume.split(":") + [""])[:2]
            if source.startswith((".", "/")):
                found[target] = (self.root / source).resolve()
        return found

    def host_path(self, service: dict, container_path: str) -> Path | None:
        """Where ``container_path`` comes from on the host, through the service's bind mounts."""
        target = PurePosixPath(container_path)
        for mounted, host in self.mounts(service).items():
            mounted = PurePosixPath(mounted)
            if target == mounted or mounted in target.parents:
                return host / target.relative_to(mounted)
        return None

    def parsed(self, host_path: Path | None):
        if host_path is None:
            return None
        try:
            return self.files.get(host_path.resolve().relative_to(self.root.resolve()).as_posix())
        except ValueError:
            return None

    def service_with_image(self, prefix: str) -> tuple[str, dict] | None:
        for name, svc in self.services.items():
            if str(svc.get("image", "")).split("/")[-1].startswith(prefix):
                return name, svc
        return None

    def prometheus_config(self) -> dict:
        _, svc = self.service_with_image("prometheus")
        return self.parsed(self.host_path(svc, "/etc/prometheus/prometheus.yml"))[0]

    def alert_rules(self) -> list[dict]:
        _, svc = self.service_with_image("prometheus")
        rules = []
        for rule_file in self.prometheus_config().get("rule_files", []):
            docs = self.parsed(self.host_path(svc, rule_file))
            if docs is None:
                raise ValueError(f"prometheus rule file {rule_file} is not a file of deploy/")
            rules += [rule for group in docs[0]["groups"] for rule in group["rules"]]
        return rules

    def dashboards(self) -> dict[str, dict]:
        """Dashboards Grafana's file providers load: deploy/ path -> dashboard."""
        _, svc = self.service_with_image("grafana")
        found = {}
        for rel, docs in self.files.items():
            if rel.startswith("grafana/") and "/dashboards/" in f"/{rel}" and rel.endswith((".yml", ".yaml")):
                for provider in docs[0].get("providers", []):
                    path = provider["options"]["path"]
                    for target, host in self.mounts(svc).items():
                        if PurePosixPath(path) in PurePosixPath(target).parents and host.suffix == ".json":
                            found[host.relative_to(self.root.resolve()).as_posix()] = self.parsed(host)
        return found

    def datasources(self) -> list[dict]:
        _, svc = self.service_with_image("grafana")
        provisioning = self.host_path(svc, "/etc/grafana/provisioning/datasources")
        out = []
        for rel, docs in self.files.items():
            if provisioning and (self.root / rel).resolve().parent == provisioning.resolve():
                out += docs[0].get("datasources", [])
        return out


# ---------------------------------------------------------------------------------------------
# PromQL


def promql_names(expr: str) -> tuple[set[str], set[str]]:
    """``(metric names, label names)`` used in a PromQL expression (Grafana variables allowed)."""
    labels: set[str] = set()
    text = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'', '""', expr)  # strings
    text = re.sub(r"\[[^\]]*\]", " ", text)  # range selectors, subqueries
    text = re.sub(r"\$\{?\w+\}?", " ", text)  # Grafana variables outside strings

    def matchers(m: re.Match) -> str:
        labels.update(re.findall(r"([A-Za-z_]\w*)\s*(?:=~|!~|!=|=)", m.group(1)))
        return " "

    text = re.sub(r"\{([^}]*)\}", matchers, text)

    def grouping(m: re.Match) -> str:
        labels.update(re.findall(r"[A-Za-z_]\w*", m.group(2)))
        return " "

    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)", grouping, text)
    metrics = set()
    for m in re.finditer(r"(?<![\w.])([A-Za-z_:][\w:]*)(\s*\()?", text):
        name, call = m.group(1), m.group(2)
        if call or name.lower() in PROMQL_KEYWORDS:
            continue
        metrics.add(name)
    return metrics, labels


def grafana_queries(dashboard: dict) -> list[str]:
    """PromQL of every panel target, and the metric selector of ``label_values()`` variables."""
    exprs = []

    def panels(items):
        for panel in items:
            yield panel
            yield from panels(panel.get("panels", []))

    for panel in panels(dashboard.get("panels", [])):
        exprs += [t["expr"] for t in panel.get("targets", []) if t.get("expr")]
    for var in dashboard.get("templating", {}).get("list", []):
        query = var.get("query")
        query = query.get("query") if isinstance(query, dict) else query
        if var.get("type") != "query" or not query:
            continue
        m = re.fullmatch(r"\s*label_values\(\s*(?:(.+?)\s*,\s*)?(\w+)\s*\)\s*", query)
        if m:
            exprs.append(f"count by ({m.group(2)}) ({m.group(1) or 'up'})")
        else:
            exprs.append(re.sub(r"^\s*query_result\((.*)\)\s*$", r"\1", query))
    return exprs


# ---------------------------------------------------------------------------------------------
# The checks


def check_env(d: Deployment, facts: CodeFacts) -> list[str]:
    """Every environment variable set for a worker is one the code reads."""
    problems = []
    named: list[tuple[str, str]] = [("deploy/Dockerfile ENV", n) for n in dockerfile_env(d.dockerfile)]
    for name, svc in d.worker_services().items():
        named += [(f"compose service {name}", k) for k in compose_env(svc)]
    secrets = {s["metadata"]["name"]: s for s in d.k8s_kind("Secret")}
    for _, container in d.k8s_worker_containers():
        where = f"k8s container {container['name']}"
        named += [(where, e["name"]) for e in container.get("env", [])]
        for source in container.get("envFrom", []):
            ref = source.get("secretRef", {}).get("name")
            if ref not in secrets:
                problems.append(f"{where} reads Secret {ref!r}, which deploy/k8s/ does not define")
                continue
            keys = {**secrets[ref].get("data", {}), **secrets[ref].get("stringData", {})}
            named += [(f"{where} (Secret {ref})", k) for k in keys]
    if not named:
        problems.append("no worker environment variables found at all")
    problems += [f"{where} sets {name}, which the code does not read" for where, name in named if name not in facts.env]
    return problems


def check_metrics(d: Deployment, facts: CodeFacts) -> list[str]:
    """PromQL in the dashboards and alert rules uses only exposed metrics and labels; the main
    dashboard shows every metric."""
    problems = []
    known = set(facts.metrics) | BUILTIN_METRICS
    for name in facts.histograms:
        known |= {f"{name}_bucket", f"{name}_sum", f"{name}_count"}
    known_labels = set(facts.labels) | TARGET_LABELS | ({"le"} if facts.histograms else set())
    dashboards = d.dashboards()
    if "grafana/dashboard.json" not in dashboards:
        problems.append("grafana/dashboard.json is not loaded by any Grafana dashboard provider")
    sources = [(f"dashboard {rel}", e) for rel, dash in dashboards.items() for e in grafana_queries(dash)]
    sources += [(f"alert {r.get('alert') or r.get('record')}", r["expr"]) for r in d.alert_rules()]
    used = set()
    for where, expr in sources:
        metrics, labels = promql_names(expr)
        if not metrics:
            problems.append(f"{where}: no metric in {expr!r}")
        used |= metrics
        problems += [
            f"{where}: metric {m} is not exposed by scrapy_frontier.observability.metrics"
            for m in sorted(metrics - known)
        ]
        if facts.labels:
            problems += [f"{where}: label {label} is on no exposed metric" for label in sorted(labels - known_labels)]
    main = dashboards.get("grafana/dashboard.json", {})
    on_main = set().union(*(promql_names(e)[0] for e in grafana_queries(main))) if main else set()
    for name in sorted(facts.metrics):
        if not ({name} | {f"{name}_{s}" for s in ("bucket", "sum", "count")}) & on_main:
            problems.append(f"grafana/dashboard.json has no panel for {name}")
    return problems


def _port_number(value, container: dict) -> int | None:
    if isinstance(value, int):
        return value
    for port in container.get("ports", []):
        if port.get("name") == value:
            return port["containerPort"]
    return int(value) if str(value).isdigit() else None


def check_ports(d: Deployment) -> list[str]:
    """The metrics port is one number everywhere: Dockerfile ENV/EXPOSE, compose, Prometheus
    targets, k8s containerPort, Service and prometheus.io annotations; and it listens on all
    interfaces."""
    problems = []
    env = dockerfile_env(d.dockerfile)
    raw = env.get("METRICS_PORT", "")
    if not raw.isdigit():
        return [f"deploy/Dockerfile: ENV METRICS_PORT={raw!r} must be one fixed port"]
    port = int(raw)
    if env.get("METRICS_HOST") != "0.0.0.0":
        problems.append(f"deploy/Dockerfile: ENV METRICS_HOST={env.get('METRICS_HOST')!r}, not 0.0.0.0")
    exposed = {int(p.split("/")[0]) for word, args in d.dockerfile if word == "EXPOSE" for p in args.split()}
    if port not in exposed:
        problems.append(f"deploy/Dockerfile: EXPOSE {sorted(exposed)} lacks METRICS_PORT {port}")

    workers = d.worker_services()
    if not workers:
        problems.append("compose.yaml: no service is built from deploy/Dockerfile")
    for name, svc in workers.items():
        wenv = {**env, **compose_env(svc)}
        if str(wenv.get("METRICS_PORT")) != str(port):
            problems.append(
                f"compose service {name}: METRICS_PORT={wenv.get('METRICS_PORT')} but the image exposes {port}"
            )
        if wenv.get("METRICS_HOST") != "0.0.0.0":
            problems.append(
                f"compose service {name}: METRICS_HOST={wenv.get('METRICS_HOST')} is not reachable from Prometheus"
            )

    targets = [
        t
        for job in d.prometheus_config().get("scrape_configs", [])
        for sc in job.get("static_configs", [])
        for t in sc.get("targets", [])
    ]
    scraped = set()
    for target in targets:
        host, _, tport = target.rpartition(":")
        if host in workers:
            scraped.add(host)
            if tport != str(port):
                problems.append(f"prometheus.yml: target {target} is not the metrics port {port}")
        elif host in d.services:
            problems.append(f"prometheus.yml: target {target} is not a worker")
    problems += [f"prometheus.yml: {name} is not scraped" for name in sorted(set(workers) - scraped)]

    pods = d.k8s_worker_containers()
    if not pods:
        problems.append("k8s: no worker Deployment")
    for template, container in pods:
        where = f"k8s container {container['name']}"
        cenv = {**env, **{e["name"]: e.get("value") for e in container.get("env", []) if "value" in e}}
        if str(cenv.get("METRICS_PORT")) != str(port):
            problems.append(f"{where}: METRICS_PORT={cenv.get('METRICS_PORT')} but the image exposes {port}")
        if cenv.get("METRICS_HOST") != "0.0.0.0":
            problems.append(f"{where}: METRICS_HOST={cenv.get('METRICS_HOST')} is not reachable from Prometheus")
        container_port = _port_number("metrics", container)
        if container_port != int(cenv.get("METRICS_PORT") or 0):
            problems.append(
                f"{where}: containerPort 'metrics' is {container_port}, METRICS_PORT is {cenv.get('METRICS_PORT')}"
            )
        annotations = template.get("metadata", {}).get("annotations", {})
        if (
            annotations.get("prometheus.io/port") != str(container_port)
            or annotations.get("prometheus.io/scrape") != "true"
        ):
            problems.append(
                f"{where}: pod annotations prometheus.io/port={annotations.get('prometheus.io/port')!r}, "
                f"scrape={annotations.get('prometheus.io/scrape')!r}; metrics port {container_port}"
            )
        pod_labels = template.get("metadata", {}).get("labels", {})
        services = [
            s
            for s in d.k8s_kind("Service")
            if s["spec"].get("selector") and s["spec"]["selector"].items() <= pod_labels.items()
        ]
        if not services:
            problems.append(f"{where}: no Service selects the worker pods")
        for svc in services:
            sname = f"k8s Service {svc['metadata']['name']}"
            sports = svc["spec"].get("ports", [])
            if not any(_port_number(p.get("targetPort", p.get("port")), container) == container_port for p in sports):
                problems.append(f"{sname}: no port targets the metrics port {container_port}")
            ann = svc["metadata"].get("annotations", {})
            if ann.get("prometheus.io/scrape") != "true" or ann.get("prometheus.io/port") not in {
                str(p["port"])
                for p in sports
                if _port_number(p.get("targetPort", p.get("port")), container) == container_port
            }:
                problems.append(
                    f"{sname}: annotations prometheus.io/port={ann.get('prometheus.io/port')!r}, "
                    f"scrape={ann.get('prometheus.io/scrape')!r} do not point at the metrics port"
                )
    return problems


def check_storage(d: Deployment, facts: CodeFacts) -> list[str]:
    """MariaDB is initialised with deploy/schema.sql, which is what the code generates; the
    workers' REDIS_URL and MYSQL_URL name the compose services, database and user."""
    problems = []
    if d.files.get("schema.sql") != facts.schema_sql:
        problems.append(
            "deploy/schema.sql differs from scrapy_frontier.storage.ddl.schema_sql(crawler.items) (it is generated: "
            "do not edit it)"
        )
    found = d.service_with_image("mariadb") or d.service_with_image("mysql")
    if not found:
        return problems + ["compose.yaml: no mariadb service"]
    db_name, db = found
    init = {t: h for t, h in d.mounts(db).items() if t.startswith("/docker-entrypoint-initdb.d")}
    if not init or any(h != (d.root / "schema.sql").resolve() for h in init.values()):
        problems.append(
            f"compose service {db_name}: /docker-entrypoint-initdb.d mounts {sorted(map(str, init.values()))}, not "
            "deploy/schema.sql"
        )
    db_env = compose_env(db)
    redis_name = (d.service_with_image("redis") or ("?", {}))[0]
    for name, svc in d.worker_services().items():
        env = compose_env(svc)
        mysql = urlsplit(env.get("MYSQL_URL", ""))
        want = (db_name, db_env.get("MARIADB_DATABASE"), db_env.get("MARIADB_USER"), db_env.get("MARIADB_PASSWORD"))
        have = (mysql.hostname, mysql.path.lstrip("/"), mysql.username, mysql.password)
        if have != want:
            problems.append(
                f"compose service {name}: MYSQL_URL host/database/user/password {have} != the {db_name} service's "
                f"{want}"
            )
        if urlsplit(env.get("REDIS_URL", "")).hostname != redis_name:
            problems.append(f"compose service {name}: REDIS_URL does not name the redis service {redis_name!r}")
    return problems


def requirement_pins(context: Path) -> dict[str, str]:
    pins = {}
    for path in context.glob("requirements*.txt"):
        for line in path.read_text().splitlines():
            m = re.match(r"\s*([A-Za-z0-9_.-]+)\s*==\s*([^\s#;]+)", line)
            if m:
                pins[m.group(1).lower().replace("_", "-")] = m.group(2)
    return pins


def check_project(d: Deployment, facts: CodeFacts) -> list[str]:
    """The project name of scrapy.cfg's deploy target is the egg's and the one compose schedules;
    the spiders started exist; the image's scrapyd.conf and pins agree with the repository."""
    problems = []
    cfg = configparser.ConfigParser()
    cfg.read(d.context / "scrapy.cfg")
    project = cfg.get("deploy", "project", fallback=None)
    if not project:
        return ["scrapy.cfg: no [deploy] project"]

    # The image: files copied, egg built where scrapyd.conf's eggs_dir says, pins.
    copies = {}
    workdir = PurePosixPath("/")
    for word, args in d.dockerfile:
        if word == "WORKDIR":
            workdir = workdir / args
        elif word == "COPY" and not args.startswith("--"):
            *sources, dest = shlex.split(args)
            for source in sources:
                if not (d.context / source).exists():
                    problems.append(f"deploy/Dockerfile: COPY {source}: no such file in the build context")
                target = workdir / dest
                copies[source.rstrip("/")] = (
                    target / Path(source).name if dest.endswith("/") and not source.endswith("/") else target
                )
    conf_target = copies.get("deploy/scrapyd.conf")
    if conf_target != PurePosixPath("/etc/scrapyd/scrapyd.conf"):
        problems.append(
            f"deploy/Dockerfile: deploy/scrapyd.conf is copied to {conf_target}, not /etc/scrapyd/scrapyd.conf"
        )
    conf = d.files.get("scrapyd.conf")
    eggs_dir = PurePosixPath(conf.get("scrapyd", "eggs_dir")) if conf else None
    if conf and conf.getint("scrapyd", "max_proc", fallback=0) != 1:
        problems.append(
            "deploy/scrapyd.conf: max_proc must be 1 (a second job could not bind the container's METRICS_PORT)"
        )
    runs = " && ".join(args for word, args in d.dockerfile if word == "RUN")
    eggs = [PurePosixPath(p) for p in re.findall(r"scrapyd-deploy\s+--build-egg\s+(\S+)", runs)]
    if not eggs:
        problems.append("deploy/Dockerfile: builds no egg with scrapyd-deploy --build-egg")
    for egg in eggs:
        if egg.parent != (eggs_dir or PurePosixPath("?")) / project:
            problems.append(
                f"deploy/Dockerfile: egg {egg} is not in scrapyd.conf's eggs_dir {eggs_dir}/<project {project}>/"
            )
    pins = requirement_pins(d.context)
    for name, version in re.findall(r"(?<![\w.-])([A-Za-z0-9_.-]+)==([^\s&;]+)", runs):
        key = name.lower().replace("_", "-")
        if key in pins and pins[key] != version:
            problems.append(f"deploy/Dockerfile installs {name}=={version}, the requirements pin {pins[key]}")
    if "scrapyd" not in " ".join(args for word, args in d.dockerfile if word in ("CMD", "ENTRYPOINT")):
        problems.append("deploy/Dockerfile: the main entry is not scrapyd")

    # compose: the schedule.json calls.
    workers = set(d.worker_services())
    scheduled_hosts: set[str] = set()
    calls = 0
    for name, svc in d.services.items():
        text = command_text(svc.get("entrypoint")) + " " + command_text(svc.get("command"))
        if "schedule.json" not in text:
            continue
        calls += 1
        projects = re.findall(r"\bproject=([\w.-]+)", text)
        spiders = re.findall(r"\bspider=([\w.-]+)", text)
        if projects != [project]:
            problems.append(f"compose service {name} schedules project(s) {projects}, scrapy.cfg deploys {project!r}")
        if not spiders or set(spiders) - facts.spiders:
            problems.append(
                f"compose service {name} schedules spider(s) {spiders}; the project has {sorted(facts.spiders)}"
            )
        scheduled_hosts |= set(re.findall(r"[\w-]+", text)) & (set(d.services) - {name})
    if not calls:
        problems.append("compose.yaml: nothing calls schedule.json")
    if scheduled_hosts != workers:
        problems.append(
            f"compose.yaml: schedule.json is called on {sorted(scheduled_hosts)}, the scrapyd workers are "
            f"{sorted(workers)}"
        )

    # k8s: plain `scrapy crawl <spider>` workers, run next to scrapy.cfg.
    cfg_dir = copies.get("scrapy.cfg", PurePosixPath("?")).parent
    for _, container in d.k8s_worker_containers():
        words = [*container.get("command", []), *container.get("args", [])]
        where = f"k8s container {container['name']}"
        if words[:2] != ["scrapy", "crawl"] or len(words) < 3 or words[2] not in facts.spiders:
            problems.append(f"{where} runs {words}; the project's spiders are {sorted(facts.spiders)}")
        if PurePosixPath(container.get("workingDir", "/")) != cfg_dir:
            problems.append(
                f"{where}: workingDir {container.get('workingDir')} is not where the image has scrapy.cfg ({cfg_dir})"
            )
    return problems


def check_wiring(d: Deployment) -> list[str]:
    """Grafana's data source is the Prometheus service the dashboards use; Prometheus loads
    deploy/prometheus.yml; kustomization lists every k8s file."""
    problems = []
    prom = d.service_with_image("prometheus")
    if not prom or d.host_path(prom[1], "/etc/prometheus/prometheus.yml") != (d.root / "prometheus.yml").resolve():
        problems.append("compose.yaml: the prometheus service does not load deploy/prometheus.yml")
    sources = {s["uid"]: s for s in d.datasources()}
    if not sources:
        problems.append("grafana: no provisioned data source")
    for uid, source in sources.items():
        url = urlsplit(source.get("url", ""))
        if source.get("type") != "prometheus" or not prom or url.hostname != prom[0] or url.port != 9090:
            problems.append(
                f"grafana data source {uid}: {source.get('url')} is not the prometheus service on port 9090"
            )
    for rel, dash in d.dashboards().items():
        used = set()

        def walk(node, used=used):
            if isinstance(node, dict):
                if isinstance(node.get("datasource"), dict):
                    used.add(node["datasource"].get("uid"))
                for value in node.values():
                    walk(value)
            elif isinstance(node, list):
                for value in node:
                    walk(value)

        walk(dash)
        problems += [
            f"{rel}: data source uid {uid!r} is not provisioned" for uid in sorted(used - set(sources), key=str)
        ]
    kustomization = d.files.get("k8s/kustomization.yaml")
    manifests = {rel.removeprefix("k8s/") for rel, _ in d.k8s_docs()} - {"kustomization.yaml"}
    if kustomization and set(kustomization[0].get("resources", [])) != manifests:
        problems.append(
            f"k8s/kustomization.yaml lists {sorted(kustomization[0].get('resources', []))}, the files are "
            f"{sorted(manifests)}"
        )
    return problems


def check_podman(d: Deployment) -> list[str]:
    """deploy/compose.podman.yaml (deploy/smoke.sh's override) changes services compose.yaml has
    (and adds only ``docs``), gives the workers the image smoke.sh builds and every service one
    that smoke.sh builds locally (never pulled); smoke.sh starts services that exist."""
    override = d.files.get("compose.podman.yaml")
    script = d.files.get("smoke.sh", "")
    if not override:
        return ["deploy/compose.podman.yaml is missing"]
    problems = []
    services = override[0].get("services", {})
    problems += [
        f"compose.podman.yaml: service {name} is not in compose.yaml"
        for name in sorted(set(services) - set(d.services) - {"docs"})
    ]
    worker_image = re.search(r"^WORKER_IMAGE=(\S+)", script, re.M)
    for name in d.worker_services():
        image = services.get(name, {}).get("image")
        if not worker_image or image != worker_image.group(1):
            problems.append(f"compose.podman.yaml: {name} runs {image}, not the image smoke.sh builds")
    for name, svc in services.items():
        if not str(svc.get("image", "")).startswith("localhost/") or svc.get("pull_policy") != "never":
            problems.append(f"compose.podman.yaml: {name} is not a local image with pull_policy: never")
    started = re.search(r"compose up -d --no-build ([\w ]+)", script)
    for name in started.group(1).split() if started else ["(none)"]:
        if name not in d.services and name not in services:
            problems.append(f"smoke.sh starts service {name}, which neither compose file defines")
    return problems


def all_problems(context: Path, facts: CodeFacts) -> list[str]:
    d = Deployment.load(context)
    return (
        check_env(d, facts)
        + check_metrics(d, facts)
        + check_ports(d)
        + check_storage(d, facts)
        + check_project(d, facts)
        + check_wiring(d)
        + check_podman(d)
    )


# ---------------------------------------------------------------------------------------------
# Tests


def test_every_deploy_file_parses_and_the_pieces_are_there():
    d = Deployment.load(ROOT)
    kinds = {rel: type(v).__name__ for rel, v in d.files.items()}
    for rel in (
        "Dockerfile",
        "compose.yaml",
        "prometheus.yml",
        "alerts.yml",
        "scrapyd.conf",
        "schema.sql",
        "grafana/dashboard.json",
        "k8s/worker.yaml",
        "k8s/secret.yaml",
        "k8s/service.yaml",
    ):
        assert rel in kinds, rel
    assert d.dockerfile[0] == ("FROM", "python:3.11-slim")
    assert set(d.worker_services()) == {"worker1", "worker2"}
    assert [doc["kind"] for _, doc in d.k8s_docs()].count("Deployment") == 1
    assert len(d.alert_rules()) >= 3
    assert len(d.dashboards()["grafana/dashboard.json"]["panels"]) >= 11


def test_code_facts_are_not_empty(facts):
    """The sets the checks compare against are real (a wrong regex would make them vacuous)."""
    assert {"REDIS_URL", "MYSQL_URL", "LOG_JSON", "METRICS_ENABLED", "METRICS_HOST", "METRICS_PORT"} <= facts.env
    assert {"crawler_pages_total", "crawler_download_latency_seconds", "crawler_frontier_depth"} <= facts.metrics
    assert "crawler_download_latency_seconds" in facts.histograms
    assert {"spider", "status", "reason", "kind"} <= facts.labels
    assert facts.spiders == {"site", "modules"}


def test_promql_names():
    expr = (
        'histogram_quantile(0.99, sum by (le) (rate(crawler_download_latency_seconds_bucket{spider=~"$spider", '
        'x="a{b}"}[$__rate_interval]))) > on (spider) group_left 1e3 * up offset 5m'
    )
    assert promql_names(expr) == ({"crawler_download_latency_seconds_bucket", "up"}, {"le", "spider", "x"})


def test_deploy_is_consistent_with_the_code(facts):
    assert all_problems(ROOT, facts) == []


def test_worker_environment_reaches_the_scrapy_settings():
    """What the manifests set for a worker is what a crawl's settings hold: the project's settings
    once the add-on has applied (it reads the environment)."""
    d = Deployment.load(ROOT)
    image_env = dockerfile_env(d.dockerfile)
    secrets = {s["metadata"]["name"]: s.get("stringData", {}) for s in d.k8s_kind("Secret")}
    envs = [(f"compose {n}", {**image_env, **compose_env(svc)}) for n, svc in d.worker_services().items()]
    for _, container in d.k8s_worker_containers():
        env = dict(image_env)
        for source in container.get("envFrom", []):
            env.update(secrets[source["secretRef"]["name"]])
        env.update({e["name"]: e["value"] for e in container.get("env", [])})
        envs.append((f"k8s {container['name']}", env))
    script = (
        "import json; from scrapy.utils.project import get_project_settings; from scrapy_frontier.addon import "
        "DistributedAddon; "
        "s = get_project_settings(); DistributedAddon().update_settings(s); print(json.dumps({k: s.get(k) for k in "
        "json.loads(input())}))"
    )
    base = {
        k: v for k, v in os.environ.items() if k not in {"SCRAPY_SETTINGS_MODULE"} | {n for _, e in envs for n in e}
    }
    for where, env in envs:
        env = {k: str(v) for k, v in env.items()}
        done = subprocess.run(
            [sys.executable, "-c", script],
            input=json.dumps(sorted(env)),
            cwd=ROOT,
            env={**base, "PYTHONPATH": str(ROOT), **env},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        assert {k: str(v) for k, v in json.loads(done.stdout).items()} == env, where


@pytest.fixture
def broken(tmp_path, facts):
    """``broken(file, old, new) -> problems``: the checks run on a copy of the repository's
    deploy/ (with scrapy.cfg and the requirements) where ``old`` is replaced by ``new`` in ``file``."""

    def run(rel: str, old: str, new: str) -> list[str]:
        context = tmp_path / "repo"
        shutil.rmtree(context, ignore_errors=True)
        shutil.copytree(ROOT / "deploy", context / "deploy")
        for name in ("scrapy.cfg", "setup.py", "requirements.txt", "requirements-test.txt"):
            shutil.copy(ROOT / name, context / name)
        (context / "crawler").symlink_to(ROOT / "crawler")
        path = context / rel
        text = path.read_text()
        assert old in text, f"{old!r} not in {rel}"
        path.write_text(text.replace(old, new))
        return all_problems(context, facts)

    return run


@pytest.mark.parametrize(
    ("rel", "old", "new", "reported"),
    [
        # environment variable names
        (
            "deploy/compose.yaml",
            'LOG_JSON: "1"',
            'LOG_JSONN: "1"',
            "compose service worker1 sets LOG_JSONN, which the code does not read",
        ),
        ("deploy/k8s/worker.yaml", "name: LOG_JSON", "name: LOG_FORMAT", "k8s container worker sets LOG_FORMAT"),
        (
            "deploy/k8s/secret.yaml",
            "REDIS_URL: redis://",
            "REDIS_ADDR: redis://",
            "(Secret crawler-connections) sets REDIS_ADDR",
        ),
        (
            "deploy/k8s/secret.yaml",
            "name: crawler-connections",
            "name: connections",
            "reads Secret 'crawler-connections', which deploy/k8s/ does not define",
        ),
        (
            "deploy/Dockerfile",
            "ENV METRICS_HOST=0.0.0.0",
            "ENV METRIC_HOST=0.0.0.0",
            "deploy/Dockerfile ENV sets METRIC_HOST",
        ),
        # metric and label names
        (
            "deploy/grafana/dashboard.json",
            "max(crawler_frontier_depth{",
            "max(crawler_frontier_size{",
            "metric crawler_frontier_size is not exposed",
        ),
        ("deploy/grafana/dashboard.json", "sum by (status)", "sum by (code)", "label code is on no exposed metric"),
        (
            "deploy/grafana/dashboard.json",
            "crawler_download_latency_seconds_count",
            "crawler_download_latency_count",
            "metric crawler_download_latency_count is not exposed",
        ),
        (
            "deploy/grafana/dashboard.json",
            "label_values(crawler_pages_total, spider)",
            "label_values(crawler_page_total, spider)",
            "metric crawler_page_total is not exposed",
        ),
        (
            "deploy/grafana/dashboard.json",
            "crawler_throttled_hosts",
            "crawler_frontier_depth",
            "no panel for crawler_throttled_hosts",
        ),
        (
            "deploy/alerts.yml",
            "crawler_pages_total[10m]",
            "crawler_pages[10m]",
            "alert CrawlerFrontierStalled: metric crawler_pages is not exposed",
        ),
        # the metrics port
        ("deploy/prometheus.yml", "worker2:9410", "worker2:9411", "target worker2:9411 is not the metrics port 9410"),
        ("deploy/prometheus.yml", "- worker2:9410\n", "", "worker2 is not scraped"),
        ("deploy/Dockerfile", "EXPOSE 6800 9410", "EXPOSE 6800 9411", "lacks METRICS_PORT 9410"),
        ("deploy/Dockerfile", "METRICS_PORT=9410", "METRICS_PORT=9410-9429", "must be one fixed port"),
        (
            "deploy/compose.yaml",
            'METRICS_PORT: "9410"',
            'METRICS_PORT: "9420"',
            "compose service worker2: METRICS_PORT=9420",
        ),
        (
            "deploy/compose.yaml",
            "METRICS_HOST: 0.0.0.0",
            "METRICS_HOST: 127.0.0.1",
            "METRICS_HOST=127.0.0.1 is not reachable",
        ),
        ("deploy/k8s/worker.yaml", "containerPort: 9410", "containerPort: 9420", "containerPort 'metrics' is 9420"),
        ("deploy/k8s/worker.yaml", 'value: "9410"', 'value: "9420"', "k8s container worker: METRICS_PORT=9420"),
        (
            "deploy/k8s/service.yaml",
            'prometheus.io/port: "9410"',
            'prometheus.io/port: "80"',
            "k8s Service crawler-metrics: annotations prometheus.io/port='80'",
        ),
        ("deploy/k8s/service.yaml", "targetPort: metrics", "targetPort: 8080", "no port targets the metrics port 9410"),
        (
            "deploy/k8s/service.yaml",
            "app.kubernetes.io/component: worker",
            "app.kubernetes.io/component: web",
            "no Service selects the worker pods",
        ),
        # schema and storage URLs
        (
            "deploy/compose.yaml",
            "./schema.sql:/docker-entrypoint-initdb.d/",
            "./alerts.yml:/docker-entrypoint-initdb.d/",
            "not deploy/schema.sql",
        ),
        ("deploy/schema.sql", "ENGINE=InnoDB", "ENGINE=MyISAM", "deploy/schema.sql differs"),
        (
            "deploy/compose.yaml",
            "@mariadb:3306/crawl",
            "@mariadb:3306/crawler",
            "MYSQL_URL host/database/user/password",
        ),
        (
            "deploy/compose.yaml",
            "redis://redis:6379/0",
            "redis://cache:6379/0",
            "REDIS_URL does not name the redis service",
        ),
        # project, spiders, image
        ("scrapy.cfg", "project = crawler", "project = crawl", "scrapy.cfg deploys 'crawl'"),
        ("deploy/compose.yaml", "-d spider=site", "-d spider=sites", "schedules spider(s) ['sites']"),
        (
            "deploy/compose.yaml",
            "for worker in worker1 worker2;",
            "for worker in worker1;",
            "schedule.json is called on ['worker1']",
        ),
        (
            "deploy/k8s/worker.yaml",
            '["scrapy", "crawl", "site"]',
            '["scrapy", "crawl", "sites"]',
            "runs ['scrapy', 'crawl', 'sites']",
        ),
        (
            "deploy/k8s/worker.yaml",
            "workingDir: /app",
            "workingDir: /srv",
            "workingDir /srv is not where the image has scrapy.cfg",
        ),
        ("deploy/Dockerfile", "eggs/crawler/0.egg", "eggs/crawl/0.egg", "is not in scrapyd.conf's eggs_dir"),
        (
            "deploy/Dockerfile",
            "scrapyd==1.6.0",
            "scrapyd==1.5.0",
            "installs scrapyd==1.5.0, the requirements pin 1.6.0",
        ),
        (
            "deploy/Dockerfile",
            "COPY deploy/scrapyd.conf",
            "COPY deploy/scrapyd.cfg",
            "COPY deploy/scrapyd.cfg: no such file",
        ),
        ("deploy/scrapyd.conf", "max_proc = 1", "max_proc = 4", "max_proc must be 1"),
        # wiring
        (
            "deploy/grafana/provisioning/datasources/prometheus.yml",
            "uid: prometheus",
            "uid: prom",
            "data source uid 'prometheus' is not provisioned",
        ),
        (
            "deploy/grafana/provisioning/datasources/prometheus.yml",
            "http://prometheus:9090",
            "http://prometheus:9091",
            "is not the prometheus service on port 9090",
        ),
        (
            "deploy/compose.yaml",
            "./grafana/dashboard.json:/var/lib/grafana/dashboards/",
            "./grafana/dashboard.json:/var/lib/grafana/other/",
            "grafana/dashboard.json is not loaded",
        ),
        (
            "deploy/compose.yaml",
            "./prometheus.yml:/etc/prometheus/prometheus.yml",
            "./alerts.yml:/etc/prometheus/prometheus.yml",
            "does not load deploy/prometheus.yml",
        ),
        ("deploy/k8s/kustomization.yaml", "  - service.yaml\n", "", "k8s/kustomization.yaml lists"),
        # the podman override (deploy/smoke.sh)
        (
            "deploy/compose.podman.yaml",
            "  prometheus:\n",
            "  prometheus2:\n",
            "service prometheus2 is not in compose.yaml",
        ),
        (
            "deploy/compose.podman.yaml",
            "image: localhost/crawler-worker:smoke",
            "image: crawler-worker",
            "worker1 runs crawler-worker, not the image smoke.sh builds",
        ),
        (
            "deploy/compose.podman.yaml",
            "image: localhost/crawler-smoke-redis:bookworm",
            "image: redis:7.4",
            "redis is not a local image",
        ),
        ("deploy/smoke.sh", "worker2 prometheus docs", "worker2 prometheus docs web", "smoke.sh starts service web"),
    ],
)
def test_a_broken_deploy_is_reported(broken, rel, old, new, reported):
    problems = broken(rel, old, new)
    assert any(reported in p for p in problems), problems
