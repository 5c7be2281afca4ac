//! TLS for the HTTP listener (rustls), with optional client certificates (mTLS) for the
//! operator API. Client certificates are optional at the TLS layer so that boot routes
//! stay reachable without one; a certificate that is presented must chain to
//! `client_ca` and be valid now, or the handshake fails. A request on a connection with
//! a verified client certificate passes the operator API without a token.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;

use crate::config::{HttpSettings, TlsFiles};
use crate::http::Serves;

/// A TLS file that cannot be used; names the config key.
#[derive(Debug, thiserror::Error)]
#[error("{key} {path}: {reason}")]
pub struct TlsError {
    /// The config key.
    pub key: &'static str,
    /// The file.
    pub path: PathBuf,
    /// What is wrong.
    pub reason: String,
}

/// Marks a request whose connection presented a client certificate that verified.
#[derive(Debug, Clone, Copy)]
pub struct ClientCertVerified;

fn certs(key: &'static str, path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let err = |reason: String| TlsError {
        key,
        path: path.to_path_buf(),
        reason,
    };
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| err(e.to_string()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| err(e.to_string()))?;
    if certs.is_empty() {
        return Err(err("no PEM certificate in the file".into()));
    }
    Ok(certs)
}

/// Builds the acceptor; every failure names its key and file.
pub fn acceptor(files: &TlsFiles) -> Result<TlsAcceptor, TlsError> {
    let chain = certs("http.tls_cert", &files.cert)?;
    let key = PrivateKeyDer::from_pem_file(&files.key).map_err(|e| TlsError {
        key: "http.tls_key",
        path: files.key.clone(),
        reason: e.to_string(),
    })?;
    let builder = rustls::ServerConfig::builder();
    let builder = match &files.client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            for c in certs("http.client_ca", ca)? {
                roots.add(c).map_err(|e| TlsError {
                    key: "http.client_ca",
                    path: ca.clone(),
                    reason: e.to_string(),
                })?;
            }
            let verifier = rustls::server::WebPkiClientVerifier::builder(Arc::new(roots))
                .allow_unauthenticated()
                .build()
                .map_err(|e| TlsError {
                    key: "http.client_ca",
                    path: ca.clone(),
                    reason: e.to_string(),
                })?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder.with_single_cert(chain, key).map_err(|e| TlsError {
        key: "http.tls_key",
        path: files.key.clone(),
        reason: format!("does not match http.tls_cert: {e}"),
    })?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// Which listeners `[http]` asks for: (address, routes, TLS). TLS goes to the operator
/// listener and to `tls_listen`; `listen` stays plain HTTP, which every firmware
/// speaks, unless it is the only listener. With `tls_listen` and no operator listener,
/// the operator API is on the TLS listener, never on the plain one.
pub fn listener_plan(
    http: &HttpSettings,
    tls: Option<TlsAcceptor>,
) -> Vec<(std::net::SocketAddr, Serves, Option<TlsAcceptor>)> {
    let plain_boot = if http.plain_boot {
        Serves::Boot
    } else {
        Serves::Health
    };
    let mut plan = Vec::new();
    match (http.operator_listen, http.tls_listen) {
        (None, None) => plan.push((http.listen, Serves::Everything, tls)),
        (Some(op), tls_listen) => {
            plan.push((http.listen, plain_boot, None));
            if let Some(t) = tls_listen {
                plan.push((t, Serves::Boot, tls.clone()));
            }
            plan.push((op, Serves::Operator, tls));
        }
        (None, Some(t)) => {
            plan.push((http.listen, plain_boot, None));
            plan.push((t, Serves::Everything, tls));
        }
    }
    plan
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(http: &str) -> Vec<(String, Serves, bool)> {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = (dir.path().join("c.pem"), dir.path().join("k.pem"));
        std::fs::write(&cert, "x").unwrap();
        std::fs::write(&key, "x").unwrap();
        let toml = format!(
            "[http]\ntls_cert = \"{}\"\ntls_key = \"{}\"\n{http}",
            cert.display(),
            key.display()
        );
        let c = crate::config::Config::from_toml_with_overrides(&toml, &[]).unwrap();
        // Any acceptor stands for "TLS" here; only its presence is looked at.
        let acceptor = test_acceptor();
        listener_plan(&c.http, Some(acceptor))
            .into_iter()
            .map(|(a, s, t)| (a.to_string(), s, t.is_some()))
            .collect()
    }

    fn test_acceptor() -> TlsAcceptor {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["localhost".into()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let config = rustls::ServerConfig::builder()
            .with_no_client_auth()
            .with_single_cert(
                vec![cert.der().clone()],
                PrivateKeyDer::try_from(key.serialize_der()).unwrap(),
            )
            .unwrap();
        TlsAcceptor::from(Arc::new(config))
    }

    #[test]
    fn the_tls_boot_listener_keeps_plain_http_beside_it_and_the_api_off_it() {
        let one = |a: &str, s, t| (a.to_string(), s, t);
        assert_eq!(plan(""), [one("0.0.0.0:8080", Serves::Everything, true)]);
        assert_eq!(
            plan("tls_listen = \"0.0.0.0:8084\""),
            [
                one("0.0.0.0:8080", Serves::Boot, false),
                one("0.0.0.0:8084", Serves::Everything, true)
            ]
        );
        assert_eq!(
            plan("tls_listen = \"0.0.0.0:8084\"\nplain_boot = false"),
            [
                one("0.0.0.0:8080", Serves::Health, false),
                one("0.0.0.0:8084", Serves::Everything, true)
            ]
        );
        assert_eq!(
            plan("tls_listen = \"0.0.0.0:8084\"\noperator_listen = \"127.0.0.1:8443\""),
            [
                one("0.0.0.0:8080", Serves::Boot, false),
                one("0.0.0.0:8084", Serves::Boot, true),
                one("127.0.0.1:8443", Serves::Operator, true)
            ]
        );
    }
}
