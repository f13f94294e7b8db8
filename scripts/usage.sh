#!/bin/sh
# Prints the comment at the top of a shell script (after its #! line): its usage, for the scripts' --help.
#
#   usage: sh scripts/usage.sh SCRIPT        (--help: this text)
set -eu
script=${1:?usage: sh scripts/usage.sh SCRIPT}
case "$script" in -h|--help) script=$0 ;; esac
sed -n '2,/^[^#]/{/^#/{s/^# \{0,1\}//;p;};}' "$script"
