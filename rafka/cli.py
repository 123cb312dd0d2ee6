"""The `rafka` command: serve | gateway | shard, and the operator tools group | topic."""

from __future__ import annotations

import argparse
import sys

from rafka import logs
from rafka.config import add_arguments, config_path, from_args, load_file, problems


def build_parser(file_values: dict[str, object] | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rafka", description="A Kafka-compatible consumer-group broker.")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run a gateway and N shards on this machine")
    add_arguments(serve, file_values=file_values)
    gw = sub.add_parser("gateway", help="run one gateway process")
    add_arguments(gw, file_values=file_values)
    gw.add_argument("--supervised", action="store_true", help=argparse.SUPPRESS)
    shard = sub.add_parser("shard", help="run one shard process")
    add_arguments(shard, file_values=file_values)
    shard.add_argument("--id", type=int, required=True, help="the shard's index")
    shard.add_argument("--supervised", action="store_true", help=argparse.SUPPRESS)
    from rafka.admin.commands import add_admin_parsers

    add_admin_parsers(sub)
    return parser


ADMIN_COMMANDS = ("group", "topic")


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    # the operator tools take no broker config file (and `topic create --config` means a topic config)
    file_values = {} if args and args[0] in ADMIN_COMMANDS else load_file(config_path(args))
    ns = build_parser(file_values).parse_args(args)
    if ns.command in ADMIN_COMMANDS:
        from rafka.admin.commands import run as admin_run

        return admin_run(ns)
    cfg = from_args(ns)
    bad = problems(cfg)
    if bad:
        build_parser(file_values).error("; ".join(bad))
    if getattr(ns, "supervised", False):
        from rafka.loops import die_with_parent

        die_with_parent()
    if ns.command == "serve":
        logs.setup("rafka-serve", cfg.log_level)
        from rafka.metrics_http import enable_admin_api
        from rafka.supervisor import main as serve_main

        enable_admin_api(cfg)  # the REST admin API on the supervisor's metrics port
        return serve_main(cfg)
    if ns.command == "gateway":
        logs.setup("rafka-gateway", cfg.log_level)
        from rafka.gateway.main import main as gateway_main

        if not ns.supervised:
            from rafka.metrics_http import enable_admin_api

            enable_admin_api(cfg)  # the REST admin API on this gateway's metrics port
        gateway_main(cfg, standalone_metrics=not ns.supervised)
        return 0
    if ns.command == "shard":
        logs.setup(f"rafka-shard-{ns.id}", cfg.log_level)
        from rafka.shard.main import main as shard_main

        shard_main(cfg, ns.id, standalone_metrics=not ns.supervised)
        return 0
    return 2


if __name__ == "__main__":
    sys.exit(main())
