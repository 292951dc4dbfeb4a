#!/usr/bin/env bash
# Runs a client against a server started in the background:
#   with_server.sh PREFIX SERVER ARGS... -- CLIENT ARGS...
# The server's stdout and stderr go to PREFIX.out and PREFIX.err; its port
# is read from "llmc: serving ... on http://HOST:PORT" on stdout and given
# to the client as --port PORT. Afterwards the server gets SIGTERM and must
# exit 0 (a clean shutdown); a trap kills it if anything fails first.
set -euo pipefail
prefix=$1
shift
server=()
while (($#)) && [[ $1 != -- ]]; do server+=("$1"); shift; done
shift
: > "$prefix.out"
"${server[@]}" > "$prefix.out" 2> "$prefix.err" &
pid=$!
trap 'kill -9 $pid 2>/dev/null || true' EXIT
port=
for _ in $(seq 600); do
  port=$(sed -n 's|.*serving .* on http://[^:]*:\([0-9]*\).*|\1|p' "$prefix.out")
  [[ -n $port ]] && break
  if ! kill -0 $pid 2>/dev/null; then
    echo "with_server.sh: the server exited before serving:" >&2
    cat "$prefix.err" >&2
    exit 1
  fi
  sleep 0.2
done
if [[ -z $port ]]; then
  echo "with_server.sh: no port line from the server in 120 s" >&2
  exit 1
fi
"$@" --port "$port"
kill -TERM $pid
status=0
wait $pid || status=$?
trap - EXIT
if ((status != 0)); then
  echo "with_server.sh: the server exited with status $status after SIGTERM" >&2
  cat "$prefix.err" >&2
  exit 1
fi
