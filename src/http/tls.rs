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

use crate::config::TlsFiles;

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
