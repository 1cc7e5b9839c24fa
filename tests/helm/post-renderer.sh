# shellcheck shell=bash
# Sourced by the scripts that run helm with a post-renderer (tests/cluster/cluster.sh,
# deploy/kind/e2e.sh). helm_post_renderer HELM sets POST_RENDERER to the flags that make that helm
# run `bash ARGS...` (ARGS from --post-renderer-args) on its rendered objects: Helm 4 takes only a
# post-renderer plugin's name — the tests' own, installed by tests/helm/helm.sh plugins, whose
# directory is exported as HELM_PLUGINS —, Helm 3 an executable.
helm_post_renderer() {
  local version
  version=$("$1" version --template '{{.Version}}') || return 1
  case "$version" in
    v3.*) POST_RENDERER=(--post-renderer bash) ;;
    *)
      HELM_PLUGINS=$(bash "$(dirname "${BASH_SOURCE[0]}")/helm.sh" plugins) || return 1
      export HELM_PLUGINS
      POST_RENDERER=(--post-renderer plegd-test-post-render)
      ;;
  esac
}
