//! What a remote-cluster Secret's kubeconfig may say. Whoever can write
//! such a Secret must not thereby run a command in the gateway (`exec`,
//! auth providers), make it read its own files (`tokenFile` naming the
//! gateway's ServiceAccount token, key and CA paths), send its requests
//! through a proxy or in plain text, or turn off the server's
//! authentication. A Secret's kubeconfig holds an `https` server, its CA
//! inline and inline credentials (a bearer token, or a client certificate
//! and key): anything else is refused, naming the field.

use kube::config::Kubeconfig;

/// A kubeconfig field a Secret may not use, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct UnsafeKubeconfig {
    /// Where, as kubectl spells it: `clusters[0].cluster.server`.
    pub field: String,
    pub reason: &'static str,
}

fn refuse(field: String, reason: &'static str) -> Result<(), UnsafeKubeconfig> {
    Err(UnsafeKubeconfig { field, reason })
}

/// Checks every cluster and user of a Secret's kubeconfig, not only the
/// current context's: a later edit of `current-context` alone must not
/// bring an unchecked entry into use.
pub(crate) fn check_secret_kubeconfig(kubeconfig: &Kubeconfig) -> Result<(), UnsafeKubeconfig> {
    for (index, named) in kubeconfig.clusters.iter().enumerate() {
        let at = |field: &str| format!("clusters[{index}].cluster.{field}");
        let Some(cluster) = &named.cluster else {
            return refuse(format!("clusters[{index}].cluster"), "is missing");
        };
        match cluster.server.as_deref().map(http::Uri::try_from) {
            Some(Ok(uri)) if uri.scheme_str() == Some("https") && uri.host().is_some() => {}
            Some(_) => return refuse(at("server"), "must be an https:// URL"),
            None => return refuse(at("server"), "is missing"),
        }
        if cluster.insecure_skip_tls_verify == Some(true) {
            return refuse(
                at("insecure-skip-tls-verify"),
                "the remote API server must be authenticated; give its CA as certificate-authority-data",
            );
        }
        if cluster.certificate_authority.is_some() {
            return refuse(
                at("certificate-authority"),
                "a Secret may not name a file of the gateway; inline the CA as certificate-authority-data",
            );
        }
        if cluster.certificate_authority_data.is_none() {
            return refuse(
                at("certificate-authority-data"),
                "is missing: the remote API server is authenticated against this CA",
            );
        }
        if cluster.proxy_url.is_some() {
            return refuse(
                at("proxy-url"),
                "a Secret may not send the gateway's requests through a proxy",
            );
        }
    }
    for (index, named) in kubeconfig.auth_infos.iter().enumerate() {
        let at = |field: &str| format!("users[{index}].user.{field}");
        let Some(user) = &named.auth_info else {
            return refuse(format!("users[{index}].user"), "is missing");
        };
        if user.exec.is_some() {
            return refuse(at("exec"), "a Secret may not run a command in the gateway");
        }
        if user.auth_provider.is_some() {
            return refuse(
                at("auth-provider"),
                "auth providers are not used from a Secret; give a token or a client certificate",
            );
        }
        let files = [
            ("tokenFile", user.token_file.is_some()),
            ("client-certificate", user.client_certificate.is_some()),
            ("client-key", user.client_key.is_some()),
        ];
        if let Some((field, _)) = files.iter().find(|(_, set)| *set) {
            return refuse(
                at(field),
                "a Secret may not name a file of the gateway; inline the credential (token, client-certificate-data, client-key-data)",
            );
        }
        if user.username.is_some() || user.password.is_some() {
            return refuse(
                at("username"),
                "basic authentication is not accepted; give a token or a client certificate",
            );
        }
        if user.impersonate.is_some()
            || user.impersonate_uid.is_some()
            || user.impersonate_groups.is_some()
            || user.impersonate_user_extra.is_some()
        {
            return refuse(
                at("as"),
                "impersonation is not accepted; give the credentials of the identity itself",
            );
        }
        let certificate = user.client_certificate_data.is_some();
        let key = user.client_key_data.is_some();
        if certificate != key {
            return refuse(
                at(if certificate {
                    "client-key-data"
                } else {
                    "client-certificate-data"
                }),
                "is missing: a client certificate needs its key, inline",
            );
        }
        if user.token.is_none() && !certificate {
            return refuse(
                at("token"),
                "is missing: a remote cluster's user needs a token or client-certificate-data and client-key-data",
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const CA: &str = "LS0tLS1CRUdJTi0tLS0t";

    fn kubeconfig(cluster: &str, user: &str) -> Kubeconfig {
        let text = format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: c\ncontexts: [{{name: c, context: {{cluster: r, user: u}}}}]\nclusters: [{{name: r, cluster: {{{cluster}}}}}]\nusers: [{{name: u, user: {{{user}}}}}]\n"
        );
        Kubeconfig::from_yaml(&text).expect("a kubeconfig")
    }

    fn refusal(cluster: &str, user: &str) -> UnsafeKubeconfig {
        check_secret_kubeconfig(&kubeconfig(cluster, user)).expect_err("refused")
    }

    const SERVER: &str =
        "server: \"https://203.0.113.5:6443\", certificate-authority-data: LS0tLS1CRUdJTi0tLS0t";

    #[test]
    fn a_server_its_ca_and_inline_credentials_are_accepted() {
        assert_eq!(
            check_secret_kubeconfig(&kubeconfig(SERVER, "token: abc")),
            Ok(())
        );
        let certificate = "client-certificate-data: LS0t, client-key-data: LS0t";
        assert_eq!(
            check_secret_kubeconfig(&kubeconfig(SERVER, certificate)),
            Ok(())
        );
        let named = format!("{SERVER}, tls-server-name: api.remote");
        assert_eq!(
            check_secret_kubeconfig(&kubeconfig(&named, "token: abc")),
            Ok(())
        );
    }

    #[test]
    fn every_unsafe_field_is_refused_by_name() {
        let ca = format!("certificate-authority-data: {CA}");
        let cases: Vec<(String, &str, &str)> = vec![
            (
                format!("server: \"http://203.0.113.5:8080\", {ca}"),
                "token: abc",
                "clusters[0].cluster.server",
            ),
            (ca.clone(), "token: abc", "clusters[0].cluster.server"),
            (
                format!("{SERVER}, insecure-skip-tls-verify: true"),
                "token: abc",
                "clusters[0].cluster.insecure-skip-tls-verify",
            ),
            (
                "server: \"https://203.0.113.5:6443\"".to_owned(),
                "token: abc",
                "clusters[0].cluster.certificate-authority-data",
            ),
            (
                format!("{SERVER}, certificate-authority: /etc/ssl/ca.pem"),
                "token: abc",
                "clusters[0].cluster.certificate-authority",
            ),
            (
                format!("{SERVER}, proxy-url: \"http://198.51.100.1:3128\""),
                "token: abc",
                "clusters[0].cluster.proxy-url",
            ),
            (
                SERVER.to_owned(),
                "exec: {apiVersion: client.authentication.k8s.io/v1, command: /bin/sh, args: [-c, id]}",
                "users[0].user.exec",
            ),
            (
                SERVER.to_owned(),
                "auth-provider: {name: oidc}",
                "users[0].user.auth-provider",
            ),
            (
                SERVER.to_owned(),
                "tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token",
                "users[0].user.tokenFile",
            ),
            (
                SERVER.to_owned(),
                "client-certificate: /tls/tls.crt, client-key-data: LS0t",
                "users[0].user.client-certificate",
            ),
            (
                SERVER.to_owned(),
                "client-certificate-data: LS0t, client-key: /tls/tls.key",
                "users[0].user.client-key",
            ),
            (
                SERVER.to_owned(),
                "username: admin, password: hunter2",
                "users[0].user.username",
            ),
            (
                SERVER.to_owned(),
                "token: abc, as: system:admin",
                "users[0].user.as",
            ),
            (
                SERVER.to_owned(),
                "client-certificate-data: LS0t",
                "users[0].user.client-key-data",
            ),
            (SERVER.to_owned(), "", "users[0].user.token"),
        ];
        for (cluster, user, field) in cases {
            let refused = refusal(&cluster, user);
            assert_eq!(refused.field, field, "{cluster} / {user}: {refused}");
        }
    }
}
