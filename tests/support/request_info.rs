//! What RBAC authorizes a request as, from its method, path and query, by the apiserver's
//! request-info rules: for the request logs of both test apiservers (apiserver.rs here, and the
//! bench's Rust apiserver, tests/bench/fake_apiserver.rs).

/// `group/resource[/subresource]:verb` ("" is the core group): GET of a collection is list, or
/// watch with `watch=true`; GET of one object get; POST create; PUT update; PATCH patch; DELETE
/// delete. None for non-resource paths (discovery, /version), which every authenticated user may
/// read.
pub fn authorization(method: &str, path: &str, query: &str) -> Option<String> {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, rest) = match parts.as_slice() {
        ["api", "v1", rest @ ..] => ("", rest),
        ["apis", group, _version, rest @ ..] => (*group, rest),
        _ => return None,
    };
    let rest = match rest {
        ["namespaces", _ns, rest @ ..] if !rest.is_empty() => rest,
        rest => rest,
    };
    let (resource, named) = match rest {
        [resource] => (resource.to_string(), false),
        [resource, _name] => (resource.to_string(), true),
        [resource, _name, sub] => (format!("{resource}/{sub}"), true),
        _ => return None,
    };
    let watch = query.split('&').any(|p| p == "watch=true" || p == "watch=1");
    let verb = match (method, named) {
        ("GET", false) if watch => "watch",
        ("GET", false) => "list",
        ("GET", true) => "get",
        ("POST", _) => "create",
        ("PUT", _) => "update",
        ("PATCH", _) => "patch",
        ("DELETE", true) => "delete",
        ("DELETE", false) => "deletecollection",
        _ => return None,
    };
    Some(format!("{group}/{resource}:{verb}"))
}
