#!/usr/bin/env bash
# The post-renderer plugin's command: bash with the arguments helm passes on (--post-renderer-args).
set -euo pipefail
[ $# -gt 0 ] || { echo "plegd-test-post-render: no script given (--post-renderer-args SCRIPT ...)" >&2; exit 2; }
exec bash "$@"
