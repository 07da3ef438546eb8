"""The `/tau` grammar: slash-command text in, a typed command (or a `CommandError`) out.

Why a hand-written parser and not argparse: argparse prints to stderr, exits
the process and phrases errors for terminals; a Slack user needs one short
line naming *their* mistake followed by the usage of the command they tried.
Why pydantic models: the parsed command is the boundary between the Slack
front end and the RQ job (CONVENTIONS), and it travels through Redis, so it
must round-trip through JSON unchanged.

Rules, all of them pinned by tests:

* Words are split on whitespace; Slack may send no-break spaces and smart
  quotes, and none of our arguments can contain spaces anyway.
* Flags may come anywhere after the verb, as `--flag value` or `--flag=value`;
  boolean flags take no value. A flag given twice is an error (which one was
  meant?), as is an unknown flag, a missing value or a stray word.
* Run and workspace names are DNS-1123 labels, because that is what
  Kubernetes and the workspace descriptors accept; refusing here gives the
  user the rule instead of a "not found" from the cluster.
* `--interval` only makes sense with `--watch`; it is bounded below by the
  watch floor of the settings (each refresh costs a burst of API calls).
* A misspelt command, subcommand or flag gets "did you mean …" (difflib's
  closest match among the words that command takes), and the usage shown is
  the suggested command's, so the user reads one short answer. Run names are
  not guessed here: that needs a LIST under the user's identity, in the job.
"""

from __future__ import annotations

import difflib
import re

from .commands import (
    DEFAULT_LOG_TAIL,
    DESCRIPTIONS,
    DNS1123_LABEL,
    MAX_INTERVAL_SECONDS,
    MAX_LOG_TAIL,
    MAX_MANIFEST_BYTES,
    MIN_INTERVAL_SECONDS,
    SELECTOR,
    SLACK_FILE_ID,
    USAGE,
    Command,
    HelpCommand,
    LogsCommand,
    NodesValidateCommand,
    RunsCommand,
    StatusCommand,
    TopologyValidateCommand,
    ValidateCommand,
    WorkspaceConnectionCommand,
    WorkspaceStatusCommand,
)

_MAX_ECHO = 60  # how much of a bad word is quoted back


class CommandError(ValueError):
    """Bad `/tau` input. `str()` names the mistake; `usage` is what to type instead."""

    def __init__(self, message: str, verb: str | None = None) -> None:
        super().__init__(message)
        self.verb = verb

    @property
    def usage(self) -> list[str]:
        """Usage of the command the user tried (or of its family, e.g. `workspace`); empty when
        that is unclear: the reply then names the commands in one line, not every usage."""
        return family_usage(self.verb)


def family_usage(verb: str | None) -> list[str]:
    """USAGE of ``verb``, or of every command under it (`workspace` → connection and status)."""
    if verb in USAGE:
        return [USAGE[verb]]
    return [usage for name, usage in USAGE.items() if verb and name.startswith(verb + " ")]


def did_you_mean(word: str, choices: list[str] | tuple[str, ...] | set[str]) -> str | None:
    """The closest of ``choices`` to a misspelt ``word`` (difflib's ratio ≥ 0.6), or None."""
    close = difflib.get_close_matches(word.lower(), sorted(choices), n=1, cutoff=0.6)
    return close[0] if close else None


def _echo(word: str) -> str:
    """A user's word quoted back in an error, shortened; the reply escapes it for mrkdwn."""
    return repr(word if len(word) <= _MAX_ECHO else word[: _MAX_ECHO - 1] + "…")


def _check_name(value: str, what: str, verb: str) -> str:
    if not DNS1123_LABEL.match(value):
        raise CommandError(
            f"invalid {what} {_echo(value)}: a {what} is a DNS-1123 label (lowercase letters, "
            "digits and '-', starting and ending with a letter or digit, at most 63 characters)",
            verb,
        )
    return value


def _split(text: str) -> list[str]:
    """Whitespace words; `str.split` also splits on Slack's no-break spaces."""
    return text.replace("\u201c", '"').replace("\u201d", '"').split()


_VALUE_FLAGS = {"status": {"--workspace", "--interval"}, "runs": {"--workspace"},
                "workspace connection": {"--workspace"},
                "workspace status": set(), "help": set(), "logs": {"--tail", "--workspace"},
                "cluster validate topology": {"--profile", "--workspace"},
                "cluster validate nodes": {"--gpu-class", "--selector", "--min-healthy", "--timeout",
                                           "--workspace"}, "validate": {"--workspace"}}
_BOOL_FLAGS = {"status": {"--watch", "--run-profile"}, "runs": {"--all", "--stuck"},
               "workspace connection": set(),
               "workspace status": set(), "help": set(), "logs": {"--previous"},
               "cluster validate topology": set(), "cluster validate nodes": set(), "validate": set()}
GPU_CLASS_LABEL = "nvidia.com/gpu.product"  # GPU feature discovery's label (node-health.md §1.3)


def _options(words: list[str], verb: str) -> tuple[list[str], dict[str, str | bool]]:
    """Split words into positionals and flags for ``verb``, refusing anything it does not take."""
    positionals: list[str] = []
    flags: dict[str, str | bool] = {}
    i = 0
    while i < len(words):
        word = words[i]
        i += 1
        if not word.startswith("-") or word == "-":
            positionals.append(word)
            continue
        name, eq, inline = word.partition("=")
        if name in _BOOL_FLAGS[verb]:
            if eq:
                raise CommandError(f"{name} takes no value", verb)
            value: str | bool = True
        elif name in _VALUE_FLAGS[verb]:
            if eq:
                value = inline
            elif i < len(words) and not words[i].startswith("--"):
                value = words[i]
                i += 1
            else:
                raise CommandError(f"{name} needs a value", verb)
            if not value:
                raise CommandError(f"{name} needs a value", verb)
            if name == "--selector" and i < len(words) and words[i] in ("in", "notin"):
                # A set-based term spans words (`kubernetes.io/hostname in (a, b)`): up to its `)`.
                end = next((j for j in range(i, len(words)) if ")" in words[j]), len(words) - 1)
                value, i = " ".join([str(value), *words[i:end + 1]]), end + 1
        else:
            raise CommandError(_unknown_flag(name, verb), verb)
        if name in flags:
            raise CommandError(f"{name} given twice", verb)
        flags[name] = value
    return positionals, flags


def _unknown_flag(name: str, verb: str) -> str:
    """"unknown option", with the flag the user probably meant: one of this command's, or the
    same flag of the command it belongs to (`/tau logs r --watch` → `/tau status`)."""
    message = f"unknown option {_echo(name)} for `/tau {verb}`"
    close = did_you_mean(name, _VALUE_FLAGS[verb] | _BOOL_FLAGS[verb])
    if close:
        return f"{message}: did you mean `{close}`?"
    owners = [v for v in USAGE if name in _VALUE_FLAGS.get(v, set()) | _BOOL_FLAGS.get(v, set())]
    if owners:
        return f"{message}: `{name}` is a flag of `/tau {owners[0]}`"
    return message


def _interval(text: str) -> int:
    try:
        seconds = int(text)
    except ValueError:
        raise CommandError(f"invalid --interval {_echo(text)}: give whole seconds, e.g. 30",
                           "status") from None
    if not MIN_INTERVAL_SECONDS <= seconds <= MAX_INTERVAL_SECONDS:
        raise CommandError(
            f"invalid --interval {seconds}: between {MIN_INTERVAL_SECONDS} and "
            f"{MAX_INTERVAL_SECONDS} seconds",
            "status",
        )
    return seconds


def _parse_status(words: list[str]) -> StatusCommand:
    positionals, flags = _options(words, "status")
    if not positionals:
        raise CommandError("missing run name", "status")
    if len(positionals) > 1:
        raise CommandError(f"unexpected argument {_echo(positionals[1])}", "status")
    run = _check_name(positionals[0], "run name", "status")
    workspace = flags.get("--workspace")
    interval = flags.get("--interval")
    if interval is not None and not flags.get("--watch"):
        raise CommandError("--interval only applies with --watch", "status")
    return StatusCommand(
        run=run,
        watch=bool(flags.get("--watch")),
        run_profile=bool(flags.get("--run-profile")),
        workspace=_check_name(str(workspace), "workspace name", "status") if workspace else None,
        interval=_interval(str(interval)) if interval is not None else None,
    )


def _parse_runs(words: list[str]) -> RunsCommand:
    positionals, flags = _options(words, "runs")
    if positionals:
        raise CommandError(f"unexpected argument {_echo(positionals[0])}: `/tau status <run>` diagnoses "
                           "one run", "runs")
    workspace = flags.get("--workspace")
    return RunsCommand(workspace=_check_name(str(workspace), "workspace name", "runs") if workspace else None,
                       everyone=bool(flags.get("--all")), stuck=bool(flags.get("--stuck")))


def _parse_workspace(words: list[str]) -> WorkspaceConnectionCommand | WorkspaceStatusCommand:
    if not words:
        raise CommandError("`/tau workspace` needs `connection` or `status <workspace>`", "workspace")
    sub, rest = words[0], words[1:]
    if sub == "connection":
        positionals, flags = _options(rest, "workspace connection")
        if positionals:
            raise CommandError(f"unexpected argument {_echo(positionals[0])}", "workspace connection")
        workspace = flags.get("--workspace")
        return WorkspaceConnectionCommand(
            workspace=_check_name(str(workspace), "workspace name", "workspace connection")
            if workspace
            else None
        )
    if sub == "status":
        positionals, _ = _options(rest, "workspace status")
        if not positionals:
            raise CommandError("missing workspace name", "workspace status")
        if len(positionals) > 1:
            raise CommandError(f"unexpected argument {_echo(positionals[1])}", "workspace status")
        return WorkspaceStatusCommand(
            workspace=_check_name(positionals[0], "workspace name", "workspace status")
        )
    close = did_you_mean(sub, ("connection", "status"))
    hint = f": did you mean `/tau workspace {close}`?" if close else ""
    raise CommandError(f"unknown workspace command {_echo(sub)}{hint}",
                       f"workspace {close}" if close else "workspace")


def parse_duration(text: str, verb: str) -> int:
    """`2m`, `90s`, `120` → seconds (the guide's `--timeout 2m`)."""
    match = re.fullmatch(r"(\d+)([smh]?)", text.strip())
    if match is None:
        raise CommandError(f"invalid --timeout {_echo(text)}: e.g. 2m, 90s", verb)
    return int(match.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600}[match.group(2)]


def _parse_cluster(words: list[str]) -> TopologyValidateCommand | NodesValidateCommand:
    if len(words) < 2 or words[0] != "validate" or words[1] not in ("topology", "nodes"):
        guess = " ".join(words[:2])
        close = did_you_mean(guess, ("validate topology", "validate nodes")) if guess else None
        if close:
            raise CommandError(f"unknown cluster command {_echo(guess)}: "
                               f"did you mean `/tau cluster {close}`?", f"cluster {close}")
        raise CommandError("`/tau cluster` needs `validate topology` or `validate nodes`", "cluster validate")
    verb = f"cluster validate {words[1]}"
    positionals, flags = _options(words[2:], verb)
    if positionals:
        raise CommandError(f"unexpected argument {_echo(positionals[0])}", verb)
    workspace = flags.get("--workspace")
    ws = _check_name(str(workspace), "workspace name", verb) if workspace else None
    if words[1] == "topology":
        profile = flags.get("--profile")
        named = _check_name(str(profile), "profile name", verb) if profile else None
        return TopologyValidateCommand(profile=named, workspace=ws)
    gpu_class, selector = flags.get("--gpu-class"), flags.get("--selector")
    if bool(gpu_class) == bool(selector):
        raise CommandError("give exactly one of --gpu-class C or --selector S", verb)
    chosen = f"{GPU_CLASS_LABEL}={gpu_class}" if gpu_class else str(selector)
    if not SELECTOR.match(chosen):
        raise CommandError(f"invalid selector {_echo(chosen)}: key=value[,key=value] or "
                           "key in (a,b)", verb)
    minimum = flags.get("--min-healthy")
    if minimum is not None and not str(minimum).isdigit():
        raise CommandError(f"invalid --min-healthy {_echo(str(minimum))}: a number of nodes", verb)
    timeout = parse_duration(str(flags["--timeout"]), verb) if "--timeout" in flags else 120
    if not 10 <= timeout <= 1800:
        raise CommandError("--timeout must be between 10s and 30m", verb)
    least = int(str(minimum)) if minimum is not None else None
    return NodesValidateCommand(selector=chosen, min_healthy=least, timeout_seconds=timeout, workspace=ws)


def _parse_logs(words: list[str]) -> LogsCommand:
    positionals, flags = _options(words, "logs")
    if not positionals:
        raise CommandError("missing run name", "logs")
    if len(positionals) > 1:
        raise CommandError(f"unexpected argument {_echo(positionals[1])}", "logs")
    run = _check_name(positionals[0], "run name", "logs")
    tail = DEFAULT_LOG_TAIL
    if (given := flags.get("--tail")) is not None:
        try:
            tail = int(str(given))
        except ValueError:
            raise CommandError(f"invalid --tail {_echo(str(given))}: give a number of lines, e.g. 500",
                               "logs") from None
        if not 1 <= tail <= MAX_LOG_TAIL:
            raise CommandError(f"invalid --tail {tail}: between 1 and {MAX_LOG_TAIL} lines", "logs")
    workspace = flags.get("--workspace")
    return LogsCommand(run=run, tail=tail, previous=bool(flags.get("--previous")),
                       workspace=_check_name(str(workspace), "workspace name", "logs") if workspace else None)


_FILE_LINK = re.compile(r"^<?https://[A-Za-z0-9.-]+\.slack\.com/files/[A-Z0-9]+/(F[A-Z0-9]+)(/[^\s|>]*)?(\|[^>]*)?>?$")
_FENCE = "```"


def _unescape_slack(text: str) -> str:
    """Slack sends `&`, `<` and `>` of slash-command text as entities (its formatting docs)."""
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


def _code_block(text: str) -> str:
    """The inside of a ``` fence, without a `yaml`/`json` language tag on its first line."""
    inner = text.split(_FENCE, 1)[0]
    first, newline, rest = inner.partition("\n")
    if newline and first.strip().lower() in ("yaml", "yml", "json"):
        return rest
    return inner


def _parse_validate(rest: str) -> ValidateCommand:
    """Flags on the first line; then the manifest in a code block (or on the following lines),
    or a link to a shared file (or its id) as the one argument."""
    if _FENCE in rest:
        head, _, tail = rest.partition(_FENCE)
        manifest: str | None = _code_block(tail)
    elif "\n" in rest:
        head, _, manifest = rest.partition("\n")
    elif "{" in rest and _unescape_slack(rest).lstrip().startswith(("{", "--")):
        head, brace, tail = rest.partition("{")  # one line of JSON after the flags
        manifest = brace + tail
    else:
        head, manifest = rest, None
    positionals, flags = _options(_split(head), "validate")
    workspace = flags.get("--workspace")
    ws = _check_name(str(workspace), "workspace name", "validate") if workspace else None
    file_id = None
    if positionals:
        if len(positionals) > 1:
            raise CommandError(f"unexpected argument {_echo(positionals[1])}", "validate")
        word = _unescape_slack(positionals[0])
        link = _FILE_LINK.match(word)
        file_id = link.group(1) if link else word
        if not SLACK_FILE_ID.match(file_id):
            raise CommandError(f"{_echo(positionals[0])} is not a Slack file: paste the manifest in a code "
                               "block after the command, or give the link of a file shared here", "validate")
        if manifest is not None and manifest.strip():
            raise CommandError("give the manifest once: a code block or a file, not both", "validate")
        return ValidateCommand(workspace=ws, file_id=file_id)
    if manifest is None or not manifest.strip():
        raise CommandError("no manifest: paste the Job or RayJob YAML in a code block after the command, "
                           "or give the link of a file shared in this channel", "validate")
    manifest = _unescape_slack(manifest)
    size = len(manifest.encode("utf-8", errors="replace"))
    if size > MAX_MANIFEST_BYTES:
        raise CommandError(f"the pasted manifest is {size // 1024} KiB; the limit is "
                           f"{MAX_MANIFEST_BYTES // 1024} KiB for one Job or RayJob", "validate")
    return ValidateCommand(workspace=ws, manifest=manifest)


def parse(text: str) -> Command:
    """Parse the text after `/tau`; raises `CommandError` for anything it does not understand."""
    stripped = (text or "").lstrip()
    verb_word = stripped.split(None, 1)[0] if stripped else ""
    if verb_word.lower() == "validate":
        return _parse_validate(stripped[len(verb_word):])
    words = _split(text or "")
    if not words or words[0].lower() in ("help", "--help", "-h"):
        return _parse_help(words[1:])
    verb, rest = words[0].lower(), words[1:]
    if verb == "status":
        return _parse_status(rest)
    if verb == "runs":
        return _parse_runs(rest)
    if verb == "workspace":
        return _parse_workspace(rest)
    if verb == "logs":
        return _parse_logs(rest)
    if verb == "cluster":
        return _parse_cluster(rest)
    close = did_you_mean(verb, VERBS)
    if close:
        raise CommandError(f"unknown command {_echo(words[0])}: did you mean `/tau {close}`?",
                           "cluster validate" if close == "cluster" else close)
    raise CommandError(f"unknown command {_echo(words[0])}")


# The first word of every command, in the order help lists them.
VERBS = tuple(dict.fromkeys(v.split()[0] for v in USAGE))
# `/tau help <topic>`: a command, or a family of them (`workspace`, `cluster validate`).
HELP_TOPICS = tuple(dict.fromkeys([*USAGE, "workspace", "cluster", "cluster validate"]))


def _parse_help(words: list[str]) -> HelpCommand:
    if not words:
        return HelpCommand()
    topic = " ".join(w.lower() for w in words).removeprefix("/tau ").strip()
    if topic in HELP_TOPICS:
        return HelpCommand(topic="cluster validate" if topic == "cluster" else topic)
    close = did_you_mean(topic, HELP_TOPICS)
    hint = f": did you mean `/tau help {close}`?" if close else ""
    raise CommandError(f"no command {_echo(topic)} to explain{hint}", "help")


# What each flag means, per command, for `/tau help <command>` (SPEC §7: its flags and an example).
FLAG_HELP: dict[str, dict[str, str]] = {
    "status": {
        "--workspace W": "the workspace to look in (its descriptor's name); needed only where this channel "
                         "answers for several",
        "--watch": "keep the card updated in place until the run settles or times out; each phase change "
                   "adds one thread reply; *Stop watching* ends it",
        "--interval N": "with --watch: seconds between refreshes "
                        f"({MIN_INTERVAL_SECONDS}–{MAX_INTERVAL_SECONDS})",
        "--run-profile": "add the GPU profile of a running run: allocation, utilisation and memory per GPU "
                         "(dcgm-exporter)",
    },
    "runs": {
        "--workspace W": "the workspace whose namespace to list (its descriptor's name)",
        "--all": "everyone's runs in the namespace, not only yours (yours: the taugrid.io/submitted-by "
                 "annotation names your Kubernetes user)",
        "--stuck": "only the runs that are stuck or failed",
    },
    "logs": {
        "--tail N": f"how many of the last lines (default {DEFAULT_LOG_TAIL}, at most {MAX_LOG_TAIL}); about "
                    "20 show in the card, all in the attached snippet",
        "--previous": "the log of the crashed container before its restart",
        "--workspace W": "the workspace to look in (its descriptor's name)",
    },
    "workspace connection": {"--workspace W": "the workspace to check (its descriptor's name)"},
    "workspace status": {},
    "cluster validate topology": {
        "--profile P": "only this TauCluster profile",
        "--workspace W": "the workspace whose cluster to check",
    },
    "cluster validate nodes": {
        "--gpu-class C": f"the nodes whose {GPU_CLASS_LABEL} label is C (or --selector)",
        "--selector S": "the nodes matching the label selector S: key=value[,key=value] or key in (a,b)",
        "--min-healthy N": "fail unless at least N nodes pass",
        "--timeout 2m": "how long the validation pods may run (10s–30m, default 2m)",
        "--workspace W": "the workspace whose cluster to validate",
    },
    "validate": {
        "--workspace W": "the workspace whose namespace and queue to dry-run in",
        "<manifest in a code block>": (
            "the Job or RayJob YAML after the command, between two lines of three backticks as in the "
            "example (or, in `taubot shell`, on the lines after the command); or instead the link of a file "
            "shared in this channel"),
    },
    "help": {"<command>": "one command, e.g. `status`, `logs`, `workspace`, `cluster validate`"},
}
EXAMPLES: dict[str, list[str]] = {
    "status": ["/tau status llama-ft-7b", "/tau status llama-ft-7b --watch --interval 30",
               "/tau status llama-ft-7b --run-profile"],
    "runs": ["/tau runs", "/tau runs --all --stuck --workspace vision"],
    "logs": ["/tau logs llama-ft-7b --tail 500", "/tau logs resnet-ddp --previous"],
    "workspace connection": ["/tau workspace connection --workspace vision"],
    "workspace status": ["/tau workspace status vision"],
    "cluster validate topology": ["/tau cluster validate topology --profile a100-8x"],
    "cluster validate nodes": ["/tau cluster validate nodes --gpu-class NVIDIA-A100-SXM4-80GB "
                               "--min-healthy 2"],
    "validate": ["/tau validate --workspace vision"],
    "help": ["/tau help status"],
}
# The manifest an example is followed by, shown as a real code block under it (`/tau help validate`):
# a code span cannot hold a fence, so the fence is shown as what it is, not as look-alike backticks.
EXAMPLE_MANIFESTS: dict[str, str] = {
    "validate": """\
apiVersion: batch/v1
kind: Job
metadata:
  name: llama-ft-7b
  labels: {kueue.x-k8s.io/queue-name: vision-default}
spec:
  template:
    spec:
      restartPolicy: Never
      containers:
        - name: trainer
          image: nvcr.io/nvidia/pytorch:24.05-py3
          resources: {limits: {nvidia.com/gpu: 8}}
""",
}


def help_lines() -> list[tuple[str, str]]:
    """(usage, description) of every command that works today — and nothing else."""
    return [(USAGE[v], DESCRIPTIONS[v]) for v in USAGE]


def help_topic(topic: str) -> list[tuple[str, str, list[tuple[str, str]], list[str]]]:
    """For `/tau help <topic>`: (usage, description, [(flag, meaning)], examples) of each command
    of the topic (one, or a family such as `workspace`)."""
    verbs = [topic] if topic in USAGE else [v for v in USAGE if v.startswith(topic + " ")]
    return [(USAGE[v], DESCRIPTIONS[v], list(FLAG_HELP[v].items()), EXAMPLES[v]) for v in verbs]


__all__ = [
    "EXAMPLE_MANIFESTS",
    "Command",
    "HelpCommand",
    "RunsCommand",
    "StatusCommand",
    "ValidateCommand",
    "CommandError",
    "WorkspaceConnectionCommand",
    "WorkspaceStatusCommand",
    "did_you_mean",
    "family_usage",
    "help_lines",
    "help_topic",
    "parse",
]
