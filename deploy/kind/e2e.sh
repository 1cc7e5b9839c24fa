#!/usr/bin/env bash
# plegd in a real cluster: create a kind cluster, build and load plegd's image, deploy it as a
# DaemonSet beside the kubelets, run test pods, and check plegd's events and conditions with kubectl.
# Needs docker, kind and kubectl (and network access for the base images). Deletes the cluster at the end.
#
#   bash deploy/kind/e2e.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
CLUSTER=${CLUSTER:-plegd-e2e}
NS=plegd-e2e
for tool in docker kind kubectl; do
  command -v "$tool" >/dev/null || { echo "e2e.sh: $tool is needed" >&2; exit 1; }
done

kind create cluster --name "$CLUSTER" --config deploy/kind/cluster.yaml --wait 180s
trap 'kind delete cluster --name "$CLUSTER"' EXIT
docker build -f deploy/Containerfile -t plegd:dev .
kind load docker-image plegd:dev --name "$CLUSTER"
kubectl apply -k deploy/conditions
kubectl -n plegd-system rollout status ds/plegd --timeout=180s

kubectl create namespace "$NS"
# Follow the events of the plegd on the worker before anything runs there.
worker=$(kubectl get nodes -l '!node-role.kubernetes.io/control-plane' -o jsonpath='{.items[0].metadata.name}')
plegd_pod=$(kubectl -n plegd-system get pods -l app.kubernetes.io/name=plegd --field-selector "spec.nodeName=$worker" -o name)
events=$(mktemp)
kubectl -n plegd-system exec "$plegd_pod" -- plegd events --namespace "$NS" --output json >"$events" &
follower=$!

overrides='{"spec":{"nodeName":"'"$worker"'"}}'
kubectl -n "$NS" run sleeper --image=busybox:1.36 --restart=Never --overrides="$overrides" -- sleep 3600
kubectl -n "$NS" run failer --image=busybox:1.36 --restart=Never --overrides="$overrides" -- sh -c 'sleep 5; exit 3'

kubectl -n "$NS" wait pod/sleeper --for=condition=plegd.io/ContainersRunning=True --timeout=180s
kubectl -n "$NS" wait pod/failer --for=condition=plegd.io/ContainersRunning=False --timeout=180s
message=$(kubectl -n "$NS" get pod failer -o jsonpath='{.status.conditions[?(@.type=="plegd.io/ContainersRunning")].message}')
[[ "$message" == *"exited with code 3"* ]] || { echo "e2e.sh: unexpected condition message: $message" >&2; exit 1; }
# The kubelet's own status is untouched by plegd in conditions mode.
kubectl -n "$NS" wait pod/failer --for=jsonpath='{.status.phase}'=Failed --timeout=60s

sleep 2
kill "$follower" 2>/dev/null || true
grep -q '"type":"ContainerDied".*"pod":"failer".*"exit_code":3' "$events" \
  || { echo "e2e.sh: no ContainerDied for failer in plegd events:" >&2; cat "$events" >&2; exit 1; }
grep -q '"type":"ContainerStarted".*"pod":"sleeper"' "$events" \
  || { echo "e2e.sh: no ContainerStarted for sleeper" >&2; cat "$events" >&2; exit 1; }
echo "e2e.sh: plegd events and conditions as expected"
