#!/usr/bin/env bash
# Installs the Debian packages the integration tests and benchmarks need:
# ActiveMQ (the real JMS broker, with the jars its STOMP transformations need), a Java runtime (ActiveMQ, the JMS client through JPype, Spark)
# Chromium with its driver (the admin console's browser tests) and systemd's systemd-analyze (the unit's test).
set -euo pipefail
need=()
dpkg -s activemq >/dev/null 2>&1 || need+=(activemq)
# ActiveMQ's STOMP "transformation" header (jms-map-json …) needs XStream and Jettison (only recommended).
dpkg -s libxstream-java >/dev/null 2>&1 || need+=(libxstream-java)
dpkg -s libjettison-java >/dev/null 2>&1 || need+=(libjettison-java)
command -v java >/dev/null 2>&1 || need+=(default-jre-headless)
# systemd-analyze: tests/integration/test_operations_systemd.py verifies contrib/jmsgateway.service with it.
command -v systemd-analyze >/dev/null 2>&1 || need+=(systemd)
# The admin console's browser tests: headless Chromium driven by Selenium through Debian's chromedriver.
dpkg -s chromium >/dev/null 2>&1 || need+=(chromium)
dpkg -s chromium-driver >/dev/null 2>&1 || need+=(chromium-driver)
# Node and npm: the @stomp/stompjs WebSocket client of tests/integration/test_ha_stompjs.py (issue 35).
command -v node >/dev/null 2>&1 || need+=(nodejs)
command -v npm >/dev/null 2>&1 || need+=(npm)
if [ ${#need[@]} -ne 0 ]; then
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}"
fi
# the JavaScript clients the tests drive, at the versions of tests/js/package-lock.json
js="$(dirname "$0")/../tests/js"
[ -d "$js/node_modules/@stomp/stompjs" ] || npm ci --prefix "$js" --no-audit --no-fund --silent
