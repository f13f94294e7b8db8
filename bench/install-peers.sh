#!/bin/sh
# Installs the peer allocators the replay compares against, from Debian: jemalloc, mimalloc and tcmalloc
# (gperftools' minimal build). glibc malloc needs nothing. And sqlite3, which bench/programs.ts runs beside
# python3, gzip, xz and node. Needs root (or sudo).
#   usage: sh bench/install-peers.sh
set -eu
case "${1-}" in -h|--help) exec sh "$(dirname "$0")/../scripts/usage.sh" "$0" ;; esac
packages="libjemalloc2 libmimalloc2.0 libtcmalloc-minimal4 sqlite3"
if [ "$(id -u)" -ne 0 ]; then sudo=sudo; else sudo=; fi
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq $packages
echo "installed: $packages"
