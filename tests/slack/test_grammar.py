"""The `/tau` grammar, one table of accepted inputs and one of refused ones."""

from __future__ import annotations

import pytest

from workers.contracts.grammar import (
    USAGE,
    CommandError,
    HelpCommand,
    LogsCommand,
    NodesValidateCommand,
    StatusCommand,
    TopologyValidateCommand,
    WorkspaceConnectionCommand,
    WorkspaceStatusCommand,
    help_lines,
    parse,
)

ACCEPTED = [
    ("status r", StatusCommand(run="r")),
    ("status llama-ft-7b", StatusCommand(run="llama-ft-7b")),
    ("  status   llama-ft-7b  ", StatusCommand(run="llama-ft-7b")),
    ("status\u00a0llama-ft-7b", StatusCommand(run="llama-ft-7b")),  # Slack's no-break space
    ("STATUS r", StatusCommand(run="r")),
    ("status r --watch", StatusCommand(run="r", watch=True)),
    ("status --watch r", StatusCommand(run="r", watch=True)),
    ("status r --run-profile", StatusCommand(run="r", run_profile=True)),
    ("status r --workspace vision", StatusCommand(run="r", workspace="vision")),
    ("status r --workspace=vision", StatusCommand(run="r", workspace="vision")),
    ("status r --watch --interval 30", StatusCommand(run="r", watch=True, interval=30)),
    ("status r --interval=5 --watch", StatusCommand(run="r", watch=True, interval=5)),
    (
        "status r --watch --run-profile --workspace vision --interval 60",
        StatusCommand(run="r", watch=True, run_profile=True, workspace="vision", interval=60),
    ),
    ("", HelpCommand()),
    ("help", HelpCommand()),
    ("--help", HelpCommand()),
    ("help status", HelpCommand(topic="status")),
    ("help /tau logs", HelpCommand(topic="logs")),
    ("help workspace", HelpCommand(topic="workspace")),
    ("help cluster", HelpCommand(topic="cluster validate")),
    ("help cluster validate nodes", HelpCommand(topic="cluster validate nodes")),
    ("workspace connection", WorkspaceConnectionCommand()),
    ("workspace connection --workspace vision", WorkspaceConnectionCommand(workspace="vision")),
    ("workspace status vision", WorkspaceStatusCommand(workspace="vision")),
    ("logs r", LogsCommand(run="r")),
    ("cluster validate topology --profile a100-8x", TopologyValidateCommand(profile="a100-8x")),
    ("cluster validate nodes --gpu-class NVIDIA-A100-SXM4-80GB --min-healthy 2 --timeout 5m",
     NodesValidateCommand(selector="nvidia.com/gpu.product=NVIDIA-A100-SXM4-80GB", min_healthy=2, timeout_seconds=300)),
    ("cluster validate nodes --selector agentpool=a100", NodesValidateCommand(selector="agentpool=a100")),
    ("logs r --tail 500 --previous --workspace vision",
     LogsCommand(run="r", tail=500, previous=True, workspace="vision")),
]


@pytest.mark.parametrize(("text", "expected"), ACCEPTED, ids=[t or "<empty>" for t, _ in ACCEPTED])
def test_accepted(text: str, expected: object) -> None:
    assert parse(text) == expected


REFUSED = [
    # (text, words the message must contain, verb whose usage is shown)
    ("status", "missing run name", "status"),
    ("status Llama", "invalid run name 'Llama'", "status"),
    ("status my_run", "invalid run name 'my_run'", "status"),
    ("status -r", "unknown option '-r'", "status"),
    ("status r-", "invalid run name 'r-'", "status"),
    ("status " + "a" * 64, "invalid run name", "status"),
    ("status <!channel>", "invalid run name '<!channel>'", "status"),
    ("status a b", "unexpected argument 'b'", "status"),
    ("status r --follow", "unknown option '--follow'", "status"),
    ("status r --watch=yes", "--watch takes no value", "status"),
    ("status r --workspace", "--workspace needs a value", "status"),
    ("status r --workspace --watch", "--workspace needs a value", "status"),
    ("status r --workspace Vision", "invalid workspace name 'Vision'", "status"),
    ("status r --watch --watch", "--watch given twice", "status"),
    ("status r --interval 30", "--interval only applies with --watch", "status"),
    ("status r --watch --interval soon", "invalid --interval 'soon'", "status"),
    ("status r --watch --interval 2", "invalid --interval 2", "status"),
    ("status r --watch --interval 100000", "invalid --interval 100000", "status"),
    ("logs", "missing run name", "logs"),
    ("cluster validate nodes", "give exactly one of --gpu-class C or --selector S", "cluster validate nodes"),
    ("cluster validate nodes --selector a=b;rm", "invalid selector 'a=b;rm'", "cluster validate nodes"),
    ("cluster validate nodes --selector a=b --timeout soon", "invalid --timeout 'soon'", "cluster validate nodes"),
    ("logs r --tail 0", "invalid --tail 0: between 1 and 5000 lines", "logs"),
    ("logs r --tail lots", "invalid --tail 'lots'", "logs"),
    ("logs r --watch", "unknown option '--watch' for `/tau logs`: `--watch` is a flag of `/tau status`", "logs"),
    ("stauts r", "unknown command 'stauts': did you mean `/tau status`?", "status"),
    ("statsu r", "unknown command 'statsu': did you mean `/tau status`?", "status"),
    ("lgos r", "did you mean `/tau logs`?", "logs"),
    ("clustr validate nodes", "did you mean `/tau cluster`?", "cluster validate"),
    ("frobnicate r", "unknown command 'frobnicate'", None),
    ("status r --wach", "unknown option '--wach' for `/tau status`: did you mean `--watch`?", "status"),
    ("status r --run-proflie", "did you mean `--run-profile`?", "status"),
    ("logs r --tial 5", "did you mean `--tail`?", "logs"),
    ("help me", "no command 'me' to explain", "help"),
    ("help statsu", "did you mean `/tau help status`?", "help"),
    ("workspace", "needs `connection` or `status <workspace>`", "workspace"),
    ("workspace delete vision", "unknown workspace command 'delete'", "workspace"),
    ("workspace conection", "did you mean `/tau workspace connection`?", "workspace connection"),
    ("cluster validate topolgy", "did you mean `/tau cluster validate topology`?", "cluster validate topology"),
    ("workspace status", "missing workspace name", "workspace status"),
    ("workspace status a b", "unexpected argument 'b'", "workspace status"),
    ("workspace connection extra", "unexpected argument 'extra'", "workspace connection"),
    ("workspace connection --watch", "unknown option '--watch'", "workspace connection"),
]


@pytest.mark.parametrize(("text", "message", "verb"), REFUSED, ids=[t for t, _, _ in REFUSED])
def test_refused(text: str, message: str, verb: str | None) -> None:
    with pytest.raises(CommandError) as caught:
        parse(text)
    assert message in str(caught.value)
    usage = caught.value.usage
    if verb in USAGE:
        assert usage == [USAGE[verb]]
    elif verb == "workspace":
        assert usage == [USAGE["workspace connection"], USAGE["workspace status"]]
    elif verb == "cluster validate":
        assert usage == [USAGE["cluster validate topology"], USAGE["cluster validate nodes"]]
    else:
        assert usage == []  # unclear: the reply names the commands in one line


def test_help_lists_only_commands_that_parse() -> None:
    """Every usage line in the help must itself be accepted (with placeholders filled in)."""
    for usage, _ in help_lines():
        example = (usage.removeprefix("/tau ").replace("<run>", "r").replace("<workspace>", "vision")
                   .replace("[--workspace W]", "--workspace vision").replace("[--watch [--interval N]]",
                   "--watch --interval 30").replace("[--run-profile]", "--run-profile")
                   .replace("[--tail N]", "--tail 500").replace("[--previous]", "--previous")
                   .replace("[--profile P]", "--profile a100").replace("--gpu-class C | --selector S",
                   "--gpu-class A100").replace("[--min-healthy N]", "--min-healthy 2")
                   .replace("[--timeout 2m]", "--timeout 2m").replace("[<command>]", "status")
                   .replace("[--all]", "--all").replace("[--stuck]", "--stuck")
                   .replace("<manifest in a code block> | <link to a file shared here>", "```kind: Job```"))
        parse(example)
    assert any(usage.startswith("/tau logs") for usage, _ in help_lines())


def test_commands_round_trip_through_json() -> None:
    """Commands travel through Redis inside the job payload."""
    command = parse("status r --watch --interval 30 --workspace vision")
    assert StatusCommand.model_validate_json(command.model_dump_json()) == command
    assert command.display() == "/tau status r --workspace vision --watch --interval 30"


def test_validate_takes_a_code_block_the_next_lines_one_line_of_json_or_a_file() -> None:
    from workers.contracts.commands import ValidateCommand

    fenced = parse("validate --workspace vision ```yaml\napiVersion: batch/v1\nkind: Job\n```")
    assert fenced == ValidateCommand(workspace="vision", manifest="apiVersion: batch/v1\nkind: Job\n")
    assert parse("validate\nkind: Job").manifest == "kind: Job"  # type: ignore[union-attr]
    one_line = parse('validate --workspace vision {"apiVersion": "batch/v1", "kind": "Job"}')
    assert one_line.manifest == '{"apiVersion": "batch/v1", "kind": "Job"}'  # type: ignore[union-attr]
    assert one_line.workspace == "vision"  # type: ignore[union-attr]
    linked = parse("validate <https://taugrid.slack.com/files/U012ALICE/F07ABCDEF12/job.yaml|job.yaml>")
    assert linked == ValidateCommand(file_id="F07ABCDEF12")
    with pytest.raises(CommandError, match="give the manifest once"):
        parse("validate F07ABCDEF12 ```kind: Job```")
    with pytest.raises(CommandError, match="the pasted manifest is 300 KiB"):
        parse("validate ```" + "a: b\n" * 61440 + "```")


def test_every_command_has_help_with_its_flags_and_an_example_that_parses() -> None:
    """`/tau help <command>` (SPEC §7): every flag the grammar takes is explained, and every
    example is itself accepted."""
    from workers.contracts.grammar import _BOOL_FLAGS, _VALUE_FLAGS, help_topic

    for verb in USAGE:
        [(usage, _, flags, examples)] = help_topic(verb)
        assert usage == USAGE[verb] and examples
        named = {flag.split()[0] for flag, _ in flags}
        assert _VALUE_FLAGS[verb] | _BOOL_FLAGS[verb] <= named, verb
        for example in examples:
            if verb != "validate":
                assert parse(example.removeprefix("/tau ")).verb == verb  # type: ignore[union-attr]
    assert [u for u, *_ in help_topic("workspace")] == [USAGE["workspace connection"], USAGE["workspace status"]]
