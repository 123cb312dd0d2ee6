"""Operator tools: the `rafka group` / `rafka topic` commands and the REST admin API.

* ``commands`` — the CLI, over the Kafka protocol (confluent-kafka's AdminClient),
  with tables for people and ``--json`` for scripts.
* ``rest`` — ``GET /v1/orgs/{org}/consumer-groups[/{group}]`` on the metrics port,
  answered by asking the shards directly over ZeroMQ (``shards``), so it sees what
  the Kafka protocol cannot carry: a group's ``cgp_`` id and RRL.
"""
