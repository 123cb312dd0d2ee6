#!/usr/bin/env bash
# Install everything the tests use (Debian packages when missing, the project with its
# test extras, KafkaJS and Apache Kafka's Java client) and run the whole suite.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v kcat >/dev/null 2>&1 || need+=(kcat)
command -v prometheus >/dev/null 2>&1 || need+=(prometheus)
command -v systemd-analyze >/dev/null 2>&1 || need+=(systemd)
command -v npm >/dev/null 2>&1 || need+=(nodejs npm)
command -v go >/dev/null 2>&1 || need+=(golang-go)
command -v gcc >/dev/null 2>&1 || need+=(gcc)  # cgo: Sarama's zstd codec
command -v javac >/dev/null 2>&1 || need+=(default-jdk-headless)  # Apache Kafka's Java client
[ -f /usr/include/stdio.h ] || need+=(libc6-dev)
[ -d /usr/share/gocode/src/github.com/Shopify/sarama ] || need+=(golang-github-shopify-sarama-dev)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

python3 -m pip install -q -e '.[test]'
bash scripts/java-client.sh
npm ci --prefix tests/clients/kafkajs --no-audit --no-fund --loglevel=error
exec python3 -m pytest "$@"
