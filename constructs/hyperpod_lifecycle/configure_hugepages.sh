#!/usr/bin/env bash
# Reserve 2 MiB hugepages for libfabric/EFA and persist the setting across reboots.
set -euo pipefail

ROOT="${LLM_INFRA_ROOT:-}"
PAGES="${HUGEPAGES_2MIB:-5120}"
CONF="$ROOT/etc/sysctl.d/90-llm-infra-hugepages.conf"

if ! [[ "$PAGES" =~ ^[0-9]+$ ]]; then
  echo "configure_hugepages: HUGEPAGES_2MIB must be a non-negative integer, got '$PAGES'" >&2
  exit 2
fi
mkdir -p "$(dirname "$CONF")"
echo "vm.nr_hugepages = $PAGES" > "$CONF"
sysctl -w "vm.nr_hugepages=$PAGES"
echo "configure_hugepages: vm.nr_hugepages=$PAGES"
