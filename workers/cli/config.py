"""`taubot config init`: the chart's values file and the Slack app manifest from a few answers.

Why a command and not a page of instructions: the first install is where a
newcomer meets every name at once (image, Slack ids, namespaces, who may be
impersonated). This asks for the few that have no default — from flags, and
by prompting for what is missing when standard input is a terminal (or with
`--ask`) — and writes two files:

* `taubot-values.yaml`, for `helm install -f`, checked against the chart's own
  `values.schema.json` with the `jsonschema` library (the schema Helm applies
  at install, on the chart's defaults merged with these values, as Helm
  merges them), and its workspace descriptor and identity map loaded by
  taubot's own loaders, so a typo fails here rather than in a pod;
* `slack-app-manifest.yaml`, the mode's own manifest: `deploy/slack-app-manifest-http.yaml`
  with the Ingress host in its request URLs, or `deploy/slack-app-manifest-socket.yaml`, which
  has none (Slack takes no request URL from a Socket Mode app); scopes, events and the Home tab
  are the templates', untouched (edited as text, so their comments stay).

The chart and the template are read from the source tree (or `--chart`): the
command is meant for a clone of the repository, where `helm install` runs.
"""

from __future__ import annotations

import argparse
import ipaddress
import re
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from .errors import UsageError
from .registry import subcommand

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_CHART = ROOT / "deploy" / "helm" / "taubot"
MANIFEST_TEMPLATES = {mode: ROOT / "deploy" / f"slack-app-manifest-{mode}.yaml"
                      for mode in ("http", "socket")}
TEMPLATE_HOST = "taubot.example.com"
_USER = re.compile(r"^(?P<slack>[UW][A-Z0-9]{2,})=(?P<user>[^:\s]+)(?::(?P<groups>[^\s]+))?$")
_CHANNEL = re.compile(r"^[CG][A-Z0-9]{2,}$")
_REDIS_URL = re.compile(r"^rediss?://\S+$")
BUTTON_KEY = "button-signing-key"
DEFAULT_INGRESS_NAMESPACE = "ingress-nginx"  # the chart's networkPolicy.botFrom default
_NAMESPACE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


class _Literal(yaml.SafeDumper):
    """PyYAML dumper that writes multi-line strings (the descriptor) as `|` blocks."""


_Literal.add_representer(str, lambda dumper, text: dumper.represent_scalar(
    "tag:yaml.org,2002:str", text, style="|" if "\n" in text else None))


Checker = Callable[[str], str | None]  # the problem with an answer, or None when it will do
ASK_AGAIN = 3  # a typo costs one more prompt, not every answer given before it


def _ask(args: argparse.Namespace, read: Callable[[str], str]) -> Callable[..., str]:
    """A prompt for one answer: the flag's value when given; else, interactively, the typed
    line (empty: the default); else the default, or a usage error naming the flag. A typed answer
    that ``check`` refuses is asked again (the problem said on stderr), so the answers before it
    are kept; a flag's bad value is a usage error, as there is nobody to ask."""
    interactive = args.ask or sys.stdin.isatty()

    def ask(attr: str, question: str, default: str | None, check: Checker | None = None) -> str:
        flag = f"--{attr.replace('_', '-')}"
        given = getattr(args, attr)
        if given not in (None, ""):
            problem = check(str(given)) if check else None
            if problem:
                raise UsageError(f"{flag} {given!r}: {problem}")
            return str(given)
        for _ in range(ASK_AGAIN if interactive else 0):
            shown = f" [{default}]" if default else ""
            try:
                answer = read(f"{question}{shown}: ").strip() or (default or "")
            except EOFError:
                break
            if not answer:
                continue
            problem = check(answer) if check else None
            if not problem:
                return answer
            print(f"  {answer!r}: {problem} — try again", file=sys.stderr)
        if default is None or (check and check(default)):
            raise UsageError(f"{flag} is needed ({question})")
        return default

    return ask


def _channel_problem(answer: str) -> str | None:
    """A channel id, not its name: `#ml-vision` is explained (the id is one click away in Slack)."""
    if _CHANNEL.match(answer):
        return None
    if answer.startswith("#") or not answer[:1].isupper():
        name = answer if answer.startswith("#") else f"#{answer}"
        return (f"that is a channel name; give its id (C…): in Slack open {name} → its name at the top → "
                "About → the Channel ID at the bottom")
    return "a Slack channel id such as C012ABCDEF"


def _mode_problem(answer: str) -> str | None:
    return None if answer in ("socket", "http") else "socket or http"


def _redis_problem(answer: str) -> str | None:
    if answer == "bundled" or _REDIS_URL.match(answer):
        return None
    return "'bundled', or a redis:// or rediss:// URL"


def _cidr_problem(answer: str) -> str | None:
    try:
        ipaddress.ip_network(answer, strict=False)
    except ValueError:
        return "an address range such as 10.20.0.5/32"
    return None if "/" in answer else "an address range such as 10.20.0.5/32 (with its /prefix)"


def _namespace_problem(answer: str) -> str | None:
    return None if _NAMESPACE.match(answer) else "a namespace name (lower-case letters, digits and -)"


def _user_problem(answer: str) -> str | None:
    return None if _USER.match(answer) else ("give SLACKID=kubernetes-user[:group,group], e.g. "
                                             "U012ABCDEF=alice@example.com:team-vision")


def _users(entries: list[str]) -> dict[str, dict[str, Any]]:
    users: dict[str, dict[str, Any]] = {}
    for entry in entries:
        match = _USER.match(entry.strip())
        if match is None:
            raise UsageError(f"--user {entry!r}: give SLACKID=kubernetes-user[:group,group], "
                             "e.g. U012ABCDEF=alice@example.com:team-vision")
        groups = [g for g in (match.group("groups") or "").split(",") if g]
        users[match.group("slack")] = {"user": match.group("user"), **({"groups": groups} if groups else {})}
    return users


def _descriptor(name: str, namespace: str, queue: str, channel: str, context: str | None) -> str:
    cluster = f"{{context: {context}}}" if context else "{server: https://kubernetes.default.svc}"
    return (f"apiVersion: taugrid.io/v1alpha1\nkind: WorkspaceConnection\nmetadata: {{name: {name}}}\n"
            f"spec:\n  cluster: {cluster}\n  namespace: {namespace}\n  workspace: {name}\n"
            f"  localQueue: {queue}\n  slack: {{channels: [{channel}]}}\n")


def build_values(args: argparse.Namespace, read: Callable[[str], str] = input) -> dict[str, Any]:
    """The values file's content from flags and answers (no I/O besides the prompts)."""
    ask = _ask(args, read)
    image = ask("image", "Image repository (built from the Dockerfile), e.g. registry.example.com/taubot",
                None)
    repository, _, tag = image.rpartition(":") if ":" in image.rsplit("/", 1)[-1] else (image, "", "")
    mode = ask("mode", "Slack connection: socket (no public endpoint) or http (behind an Ingress)", "socket",
               _mode_problem)
    values: dict[str, Any] = {"image": {"repository": repository, **({"tag": tag} if tag else {})},
                              "bot": {"mode": mode}}
    if mode == "http":
        host = ask("host", "Public host name Slack will call (the Ingress host)", None)
        ingress: dict[str, Any] = {"enabled": True, "host": host,
                                   "tls": {"secretName": ask("tls_secret", "TLS Secret for that host",
                                                             f"{host.split('.')[0]}-tls")}}
        if klass := ask("ingress_class", "IngressClass (empty: the cluster's default)", ""):
            ingress["className"] = klass
        values["ingress"] = ingress
        # The NetworkPolicy admits the bot's port from the Ingress controller's namespace only.
        controller = ask("ingress_namespace", "Namespace of the Ingress controller (the NetworkPolicy lets "
                         "only it reach the bot)", DEFAULT_INGRESS_NAMESPACE, _namespace_problem)
        if controller != DEFAULT_INGRESS_NAMESPACE:
            values.setdefault("networkPolicy", {})["botFrom"] = [{"namespaceSelector": {"matchLabels": {
                "kubernetes.io/metadata.name": controller}}}]
    else:
        values["ingress"] = {"enabled": False}
    redis = ask("redis", "Redis: bundled, or the URL of the platform's", "bundled", _redis_problem)
    if redis == "bundled":
        values["redis"] = {"enabled": True}
    else:
        # The NetworkPolicies name every destination: the bundled Redis by its pods' labels, the
        # platform's by where it is.
        cidr = ask("redis_cidr", "Where that Redis is, for the NetworkPolicy: a CIDR such as 10.20.0.5/32",
                   None, _cidr_problem)
        values["redis"] = {"enabled": False, "url": redis}
        values.setdefault("networkPolicy", {})["egress"] = {"redis": {"peers": [{"ipBlock": {"cidr": cidr}}]}}
    workspace = ask("workspace", "Workspace name users type (the descriptor's metadata.name)", None)
    namespace = ask("namespace", "Its namespace", f"team-{workspace}")
    queue = ask("local_queue", "Its Kueue LocalQueue", f"{workspace}-default")
    channel = ask("channel", "Slack channel id it answers in (C…)", None, _channel_problem)
    descriptor = _descriptor(workspace, namespace, queue, channel, args.context)
    values["workspaces"] = {f"{workspace}.yaml": descriptor}
    entries = list(args.user or [])
    if not entries and not args.map_by_email:
        entries = [ask("user", "First user, SLACKID=kubernetes-user[:group,group]", None, _user_problem)]
    values["identity"] = {"users": _users(entries), "map_by_email": bool(args.map_by_email)}
    # Buttons are signed in every mode: Socket Mode has no signing secret to fall back on, and a card
    # without a key would carry no buttons at all. The key is one more entry of the Slack Secret,
    # which the chart hands the processes as TAUBOT_BUTTON_SIGNING_KEY_FILE.
    values["slack"] = {"buttonSigningKeyKey": BUTTON_KEY}
    if args.unbounded_impersonation:
        values["rbac"] = {"impersonate": {"unbounded": True}}
    return values


def _merged(defaults: Any, values: Any) -> Any:
    """Helm's merge of user values over the chart's: maps merge key by key, the rest replaces."""
    if isinstance(defaults, dict) and isinstance(values, dict):
        return {k: _merged(defaults.get(k), values[k]) if k in values else defaults[k]
                for k in dict.fromkeys([*defaults, *values])}
    return values


def check_values(values: dict[str, Any], chart: Path) -> list[str]:
    """Every problem Helm's schema (and taubot's own loaders) would find, one line each."""
    import jsonschema

    schema = yaml.safe_load((chart / "values.schema.json").read_text())  # JSON is YAML
    merged = _merged(yaml.safe_load((chart / "values.yaml").read_text()), values)
    validator = jsonschema.Draft7Validator(schema)
    errors = sorted(validator.iter_errors(merged), key=lambda e: list(e.absolute_path))
    problems = [_problem(error) for error in errors]
    impersonate = merged.get("rbac", {}).get("impersonate", {})
    named = impersonate.get("users") or [u.get("user") for u in merged["identity"].get("users", {}).values()]
    if not named and not impersonate.get("unbounded"):
        problems.append("no user to impersonate is named: give --user, or --unbounded-impersonation to let "
                        "the worker impersonate anyone (the chart refuses the install otherwise)")
    return problems + _load_in_taubot(values)


def _problem(error: Any) -> str:
    """One line per schema error, at the path it names. An `anyOf` (e.g. name a user in
    rbac.impersonate.users or in identity.users) lists each alternative's own problem, not the
    whole merged values the error is about."""
    where = f"at '/{'/'.join(str(p) for p in error.absolute_path)}'"
    if error.context:
        return f"{where}: one of: " + "; ".join(_problem(e) for e in error.context)
    return f"{where}: {error.message}"


def _load_in_taubot(values: dict[str, Any]) -> list[str]:
    """The descriptors and identity map through taubot's own loaders (unknown fields are errors)."""
    from bot.identity import IdentityConfigError, load_identity_map
    from workers.config.workspaces import load_descriptors

    problems = []
    with tempfile.TemporaryDirectory(prefix="taubot-config-") as tmp:
        (Path(tmp) / "ws").mkdir()
        for name, text in values.get("workspaces", {}).items():
            (Path(tmp) / "ws" / name).write_text(text)
        problems += [f"workspace descriptor {p.path.name}: {p.message}"
                     for p in load_descriptors(Path(tmp) / "ws").problems]
        (Path(tmp) / "identity.yaml").write_text(yaml.safe_dump(values.get("identity", {})))
        try:
            load_identity_map(Path(tmp) / "identity.yaml")
        except IdentityConfigError as exc:
            problems.append(f"identity: {exc}")
    return problems


def slack_manifest(mode: str, host: str | None) -> str:
    """The mode's manifest: HTTP's with its request URLs (slash command, interactivity, events such
    as `app_home_opened` for the Home tab) on ``host``; Socket Mode's as it is, with none."""
    text = MANIFEST_TEMPLATES[mode].read_text()
    if mode == "http" and host:
        text = text.replace(f"https://{TEMPLATE_HOST}/", f"https://{host}/")
    return text


def _write(path: Path, text: str, force: bool) -> None:
    if path.exists() and not force:
        raise UsageError(f"{path} exists: pass --force to overwrite it")
    try:
        path.write_text(text)
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None


def next_steps(values: dict[str, Any], chart: Path, values_path: Path, manifest_path: Path) -> list[str]:
    """Every command from the written files to an answering bot, in order: each one a step the
    install needs (the workspace's namespace holds the monitor's RoleBinding, so it must exist
    before `helm install`; http mode's Ingress needs its certificate's Secret)."""
    mode = values["bot"]["mode"]
    namespace = next(iter(yaml.safe_load(d)["spec"]["namespace"] for d in values["workspaces"].values()))
    app = (f"create the Slack app from {manifest_path.name} (api.slack.com/apps → Create New App → From an "
           "app manifest) and install it to the workspace; copy the Bot User OAuth Token (xoxb-…)")
    if mode == "socket":
        app += ", and under Basic Information → App-Level Tokens create one with connections:write (xapp-…)"
        secret = "--from-literal=bot-token=xoxb-… --from-literal=app-token=xapp-…"
    else:
        app += " and the Signing Secret"
        secret = "--from-literal=bot-token=xoxb-… --from-literal=signing-secret=…"
    secret += f" --from-literal={BUTTON_KEY}=$(openssl rand -hex 32)"
    steps = [app,
             f"kubectl get namespace {namespace}   (the workspace's namespace must exist: the monitor "
             "reads it)",
             "kubectl create namespace taubot",
             f"kubectl -n taubot create secret generic taubot-slack {secret}"]
    ingress = values.get("ingress", {})
    if mode == "http" and (tls := ingress.get("tls", {}).get("secretName")):
        steps.append(f"kubectl -n taubot create secret tls {tls} --cert=… --key=…   (the certificate of "
                     f"{ingress['host']}; or let cert-manager make it: ingress.annotations)")
    steps += [f"helm lint --strict {chart} -f {values_path} && "
              f"helm install taubot {chart} -n taubot -f {values_path}",
              "invite the app to its channel (/invite @taubot) and ask it /tau workspace connection there"]
    return steps


def cmd_config_init(args: argparse.Namespace) -> int:
    chart = Path(args.chart)
    missing = [p.name for p in MANIFEST_TEMPLATES.values() if not p.is_file()]
    if not (chart / "values.schema.json").is_file() or missing:
        raise UsageError(f"no chart at {chart} (values.schema.json) or no {', '.join(missing) or 'manifest'}"
                         ": run this from a clone of the taubot repository, or pass --chart DIR")
    values = build_values(args)
    problems = check_values(values, chart)
    if problems:
        raise UsageError("the values do not pass the chart's schema:\n  " + "\n  ".join(problems))
    out = Path(args.out_dir)
    values_path, manifest_path = out / "taubot-values.yaml", out / "slack-app-manifest.yaml"
    header = ("# taubot chart values, written by `taubot config init` and checked against the chart's\n"
              "# values.schema.json. Install: helm install taubot deploy/helm/taubot -n taubot -f "
              f"{values_path.name}\n")
    _write(values_path, header + yaml.dump(values, Dumper=_Literal, sort_keys=False), args.force)
    mode = values["bot"]["mode"]
    _write(manifest_path, slack_manifest(mode, values.get("ingress", {}).get("host")), args.force)
    print(f"wrote {values_path} and {manifest_path}\nnext:")
    for number, step in enumerate(next_steps(values, chart, values_path, manifest_path), 1):
        print(f"  {number}. {step}")
    return 0


@subcommand
def add_config_commands(sub: Any) -> None:
    """Add `config init` to the `taubot` subcommand parser ``sub``."""
    config = sub.add_parser("config", help="write the chart's values and the Slack app manifest")
    actions = config.add_subparsers(dest="action", required=True, parser_class=type(config))
    init = actions.add_parser("init", help="from a few answers (flags; prompts for the rest on a terminal)")
    init.add_argument("--image", help="image repository[:tag] built from the Dockerfile")
    init.add_argument("--mode", choices=("socket", "http"), help="Slack connection (default socket)")
    init.add_argument("--host", help="http mode: the Ingress host Slack calls")
    init.add_argument("--ingress-class", help="http mode: the IngressClass")
    init.add_argument("--tls-secret", help="http mode: the Secret with the host's TLS certificate")
    init.add_argument("--ingress-namespace", help="http mode: the Ingress controller's namespace, the one "
                      f"the NetworkPolicy lets reach the bot (default {DEFAULT_INGRESS_NAMESPACE})")
    init.add_argument("--redis", help="'bundled' (default) or the platform's redis:// URL")
    init.add_argument("--redis-cidr", help="with --redis URL: where that Redis is (a CIDR), for the "
                      "NetworkPolicy")
    init.add_argument("--workspace", help="workspace name (the descriptor's metadata.name)")
    init.add_argument("--namespace", help="the workspace's namespace (default team-<workspace>)")
    init.add_argument("--local-queue", help="its Kueue LocalQueue (default <workspace>-default)")
    init.add_argument("--channel", help="the Slack channel id it answers in (C…)")
    init.add_argument("--context", help="a kubeconfig context for the descriptor (default: in-cluster)")
    init.add_argument("--user", action="append", metavar="SLACKID=USER[:G,G]",
                      help="a Slack user and the Kubernetes identity taubot impersonates for them "
                      "(repeatable)")
    init.add_argument("--map-by-email", action="store_true", help="map users by their Slack profile email")
    init.add_argument("--unbounded-impersonation", action="store_true",
                      help="let the worker impersonate anyone (needed with --map-by-email and no --user)")
    init.add_argument("--out-dir", default=".", help="where to write the two files (default .)")
    init.add_argument("--chart", default=str(DEFAULT_CHART), help="the chart whose schema checks the values")
    init.add_argument("--force", action="store_true", help="overwrite existing files")
    init.add_argument("--ask", action="store_true",
                      help="prompt for what the flags leave out, even off a terminal")
    init.set_defaults(func=cmd_config_init)


__all__ = ["add_config_commands", "build_values", "check_values", "cmd_config_init", "slack_manifest"]
