"""`taubot cluster validate topology|nodes` (SPEC §9): layer 6, under `--as`."""

from __future__ import annotations

import asyncio
from typing import Any

from .errors import UsageError
from .registry import Parser, subcommand


def cmd_cluster(args: Any) -> int:
    from workers.config.settings import SettingsError, load_settings
    from workers.contracts.commands import SELECTOR
    from workers.contracts.grammar import GPU_CLASS_LABEL, CommandError, parse_duration
    from workers.validation.cluster import validate_nodes, validate_topology

    from .live import identity_from, registry_from, render_report

    identity = identity_from(args)
    if identity is None:
        raise UsageError("cluster validate needs --as USER [--as-group G]… (it runs as you, never as taubot)")
    if args.what == "topology":
        report = asyncio.run(validate_topology(registry_from(args), identity=identity,
                                               workspace=args.workspace, profile=args.profile))
    else:
        if bool(args.gpu_class) == bool(args.selector):
            raise UsageError("give exactly one of --gpu-class C or --selector S")
        selector = f"{GPU_CLASS_LABEL}={args.gpu_class}" if args.gpu_class else args.selector
        if not SELECTOR.match(selector):
            raise UsageError(f"invalid selector {selector!r}: key=value[,key=value]")
        try:
            timeout = parse_duration(args.timeout, "cluster validate nodes")
            settings = load_settings()
        except (CommandError, SettingsError) as exc:
            raise UsageError(str(exc)) from None
        report = asyncio.run(validate_nodes(registry_from(args), identity=identity, selector=selector,
                                            namespace=settings.validation_namespace, workspace=args.workspace,
                                            min_healthy=args.min_healthy, timeout=timeout,
                                            image=settings.validation_image,
                                            command=settings.validation_command))
    print(report.model_dump_json(indent=2) if args.format == "json" else render_report(report))
    return 0 if report.ok else 1


@subcommand
def add(sub: Any) -> None:
    cluster = sub.add_parser("cluster", help="layer 6: validate topology (read-only) or GPU nodes")
    validate = cluster.add_subparsers(dest="cluster_command", required=True, parser_class=Parser)
    v = validate.add_parser("validate", help="validate topology or nodes")
    what = v.add_subparsers(dest="what", required=True, parser_class=Parser)
    topo = what.add_parser("topology", help="each ready profile's ResourceFlavors have matching Ready nodes")
    topo.add_argument("--profile", help="one TauCluster profile (default: every ready one)")
    nodes = what.add_parser("nodes", help="operator-only: validation pods on the selected GPU nodes, as you")
    nodes.add_argument("--gpu-class", help="GPU product, as nvidia.com/gpu.product labels it")
    nodes.add_argument("--selector", help="a node label selector instead")
    nodes.add_argument("--min-healthy", type=int, help="fail when fewer nodes are healthy (default: all)")
    nodes.add_argument("--timeout", default="2m", help="per validation (default 2m)")
    for p in (topo, nodes):
        p.add_argument("--workspace", help="the workspace whose cluster to validate")
        p.add_argument("--workspaces-dir", help="directory of WorkspaceConnection descriptors")
        p.add_argument("--as", dest="as_user", metavar="USER", help="impersonate USER")
        p.add_argument("--as-group", dest="as_groups", action="append", default=[], metavar="GROUP")
        p.add_argument("--format", choices=("text", "json"), default="text")
        p.set_defaults(func=cmd_cluster)


__all__ = ["add"]
